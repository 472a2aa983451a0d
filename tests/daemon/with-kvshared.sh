#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Run one test suite against a private kvshared daemon.
#
# Usage: tests/daemon/with-kvshared.sh [--kvshared PATH] [--max-pools N] [--] SUITE [ARG...]
#
#   1. starts PATH (default: $KVSHARED, else build/san/kvshared of this
#      checkout, the ASan/UBSan build) in socket mode on a socket in a fresh temporary
#      directory, its log (stdout and stderr) in that directory;
#   2. waits for the log line "kvshared: ready" ($KVS_READY_TIMEOUT
#      seconds at most, default 30);
#   3. runs SUITE ARG... with KVSHARE_ARBITER set to the socket (the
#      suites create their own pools over it);
#   4. stops the daemon with SIGTERM ($KVS_STOP_TIMEOUT seconds, default
#      30, then SIGKILL) and checks that it exited 0, removed its socket,
#      and that its log holds no sanitizer report.
#
# stdout is the suite's TAP.  If the daemon failed any check of step 4 (or
# never became ready), one "not ok" line is appended, with the reason and
# the log's relevant lines as "#" comments, and the exit status is 1 when
# the suite's own was 0; otherwise it is the suite's.  On failure the
# temporary directory (log included) is kept, and its path printed.
#
# --max-pools defaults to 64, the module's max_pools default, so that the
# suites' ENOSPC case runs the same against both arbiters.
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
kvshared=${KVSHARED:-$here/../../build/san/kvshared}
max_pools=64

while [ $# -gt 0 ]; do
	case "$1" in
	--kvshared) kvshared=$2; shift 2 ;;
	--max-pools) max_pools=$2; shift 2 ;;
	--) shift; break ;;
	-*) echo "with-kvshared.sh: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
done
if [ $# -lt 1 ]; then
	echo "usage: $0 [--kvshared PATH] [--max-pools N] [--] SUITE [ARG...]" >&2
	exit 2
fi
suite=$1
shift
name=$(basename "$suite")
ready_timeout=${KVS_READY_TIMEOUT:-30}
stop_timeout=${KVS_STOP_TIMEOUT:-30}

# The suites' unprivileged children (uid 65534) connect too: the directory
# must be searchable by them (the socket itself is 0666).
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvshared-$name.XXXXXX") || exit 1
chmod 0755 "$tmp"
sock=$tmp/kvshared.sock
log=$tmp/kvshared.log
dpid=
keep=0

cleanup() {
	if [ -n "$dpid" ] && kill -0 "$dpid" 2>/dev/null; then
		kill -KILL "$dpid" 2>/dev/null
		wait "$dpid" 2>/dev/null
	fi
	if [ "$keep" = 0 ]; then
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# Lines of the log worth showing: sanitizer reports first, else its end.
show_log() {
	local lines
	lines=$(grep -m 40 -E -A 12 'ERROR: (Address|Leak|Thread)Sanitizer|runtime error:|UndefinedBehaviorSanitizer' "$log" 2>/dev/null)
	[ -n "$lines" ] || lines=$(tail -n 20 "$log" 2>/dev/null)
	[ -z "$lines" ] || printf '%s\n' "$lines" | head -n 60 | sed 's/^/#   /'
}

# $1: what went wrong; $2: 1 to keep the directory (the daemon's log).
fail_start() {
	printf 'TAP version 13\n1..1\nnot ok 1 %s: kvshared %s\n' "$name" "$1"
	if [ "${2:-1}" = 1 ]; then
		keep=1
		show_log
		echo "# kept $tmp"
	fi
	exit 1
}

[ -x "$kvshared" ] || fail_start "not built ($kvshared)" 0
[ -x "$suite" ] || fail_start "suite not built ($suite)" 0

"$kvshared" --socket "$sock" --mode socket --max-pools "$max_pools" \
	</dev/null >"$log" 2>&1 &
dpid=$!

deadline=$((SECONDS + ready_timeout))
until grep -q '^kvshared: ready$' "$log" 2>/dev/null; do
	if ! kill -0 "$dpid" 2>/dev/null; then
		wait "$dpid"
		st=$?
		dpid=
		fail_start "exited with status $st before it was ready"
	fi
	[ "$SECONDS" -lt "$deadline" ] || fail_start "not ready after ${ready_timeout}s"
	sleep 0.05
done

KVSHARE_ARBITER=$sock "$suite" "$@" | tee "$tmp/suite.tap"
st=${PIPESTATUS[0]}

problems=()
kill -TERM "$dpid" 2>/dev/null
deadline=$((SECONDS + stop_timeout))
while kill -0 "$dpid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
	sleep 0.05
done
if kill -0 "$dpid" 2>/dev/null; then
	kill -KILL "$dpid" 2>/dev/null
	problems+=("did not exit within ${stop_timeout}s of SIGTERM")
fi
wait "$dpid"
dst=$?
dpid=
[ "$dst" = 0 ] || problems+=("exit status $dst after SIGTERM")
[ ! -e "$sock" ] || problems+=("left its socket behind")
if grep -q -E 'ERROR: (Address|Leak|Thread)Sanitizer|runtime error:|UndefinedBehaviorSanitizer' "$log"; then
	problems+=("sanitizer report in its log")
fi

if [ ${#problems[@]} -gt 0 ]; then
	keep=1
	n=$(grep -c -E '^(not )?ok ' "$tmp/suite.tap")
	msg=$(IFS=';'; echo "${problems[*]}")
	echo "not ok $((n + 1)) $name: kvshared: ${msg//;/; }"
	show_log
	echo "# kept $tmp"
	[ "$st" = 0 ] && st=1
fi
exit "$st"
