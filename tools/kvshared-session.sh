#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Run a command against a private kvshared: start $BUILD/kvshared in
# socket mode on a socket in a fresh temporary directory, wait until it is
# ready, run COMMAND with KVSHARE_ARBITER naming the socket (libkv, kvctl
# and kvserve pick it up from there), then stop the daemon with SIGTERM.
# The exit status is COMMAND's, or 1 if the daemon did not start or did
# not exit cleanly.
#
# Usage: tools/kvshared-session.sh [KVSHARED-OPTION...] -- COMMAND [ARG...]
set -euo pipefail

build=${BUILD:-build}
opts=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
	opts+=("$1")
	shift
done
if [ $# -lt 2 ]; then
	echo "usage: $0 [KVSHARED-OPTION...] -- COMMAND [ARG...]" >&2
	exit 2
fi
shift

dir=$(mktemp -d)
log=$dir/kvshared.log
pid=

cleanup() {
	local st=$?

	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		if ! wait "$pid"; then
			echo "kvshared-session.sh: kvshared exited with status $?" >&2
			[ "$st" -ne 0 ] || st=1
		fi
	fi
	rm -rf "$dir"
	exit "$st"
}
trap cleanup EXIT

"$build/kvshared" --mode socket --socket "$dir/sock" "${opts[@]}" 2>"$log" &
pid=$!
for _ in $(seq 100); do
	grep -q '^kvshared: ready' "$log" && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
if ! grep -q '^kvshared: ready' "$log"; then
	echo "kvshared-session.sh: kvshared did not start:" >&2
	cat "$log" >&2
	exit 1
fi

KVSHARE_ARBITER=$dir/sock "$@"
