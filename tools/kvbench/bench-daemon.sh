#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# kvbench daemon against a kvshared of its own: start build/kvshared in
# socket mode on a private socket, wait until it is ready, run the
# benchmark through the socket beside the native core, stop the daemon.
# Usage: tools/kvbench/bench-daemon.sh [kvbench options...]
set -euo pipefail

build=${BUILD:-build}
dir=$(mktemp -d)
log=$dir/kvshared.log
pid=

cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		wait "$pid" || echo "bench-daemon.sh: kvshared exited with status $?" >&2
	fi
	rm -rf "$dir"
}
trap cleanup EXIT

"$build/kvshared" --mode socket --socket "$dir/sock" 2>"$log" &
pid=$!
for _ in $(seq 100); do
	grep -q '^kvshared: ready' "$log" && break
	kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
	sleep 0.1
done
grep -q '^kvshared: ready' "$log" || { echo "bench-daemon.sh: kvshared never got ready" >&2; cat "$log" >&2; exit 1; }

"$build/kvbench" daemon --device "$dir/sock" "$@"
