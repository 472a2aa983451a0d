#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# kvbench daemon against a kvshared of its own, through its shared ring and
# its socket alone, beside the native core.  Three times where there are
# two CPUs or more: as the scheduler places the two processes, then with
# kvshared on a CPU of its own (the last) and kvbench on another (the
# first), as a deployment that gives the daemon a core would run, then
# with both on the first CPU, where a busy machine often puts them.  The
# ring is fast while the two run on different CPUs (kvshared polls, the
# client spins); on one CPU every call is two context switches, woken by
# the ring's doorbells.
# tools/kvbench/ab-daemon.sh runs this against two kvshared builds,
# alternated, for a before/after comparison.
# Usage: tools/kvbench/bench-daemon.sh [kvbench options...]
set -euo pipefail

build=${BUILD:-build}
session=$(dirname "$0")/../kvshared-session.sh
run='"$1/kvbench" daemon --device "$KVSHARE_ARBITER" "${@:3}"'

"$session" -- bash -c "$run" _ "$build" - "$@"
ncpu=$(nproc)
if [ "$ncpu" -ge 2 ] && command -v taskset > /dev/null; then
	last=$((ncpu - 1))
	echo "# the same with kvshared pinned to CPU $last and kvbench to CPU 0 (taskset)"
	taskset -c "$last" "$session" -- \
		taskset -c 0 bash -c "$run" _ "$build" - "$@"
	echo "# the same with kvshared and kvbench both on CPU 0 (taskset)"
	taskset -c 0 "$session" -- \
		taskset -c 0 bash -c "$run" _ "$build" - "$@"
fi
