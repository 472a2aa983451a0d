#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The main job on the embedded default: no module, no GPU.  kvshared
# arbitrates from user space and owns a host-memory (memfd) pool; kvserve's
# worker processes share prefix pages through it; kvctl shows the pool.
# Usage: tools/kvserve/run.sh [kvserve options...]
set -euo pipefail

build=${BUILD:-build}
dir=$(mktemp -d)
pid=

cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		wait "$pid" || echo "run.sh: kvshared exited with status $?" >&2
	fi
	rm -rf "$dir"
}
trap cleanup EXIT

# 4096 pages of 16 tokens x 2 layers x 2 KV heads x head dim 64, bf16:
# 16 KiB a page, 64 MiB of host memory.
"$build/kvshared" --mode socket --socket "$dir/sock" \
	--pool "kvserve:pages=4096,layers=2,kv_heads=2,head_dim=64,tokens_per_page=16,dtype=bf16,mode=0600,memory=host" \
	2>"$dir/kvshared.log" &
pid=$!
for _ in $(seq 100); do
	grep -q '^kvshared: ready' "$dir/kvshared.log" && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
if ! grep -q '^kvshared: ready' "$dir/kvshared.log"; then
	echo "run.sh: kvshared did not start:" >&2
	cat "$dir/kvshared.log" >&2
	exit 1
fi

"$build/kvserve" --arbiter "$dir/sock" --pool kvserve "$@"
echo
"$build/kvctl" --device "$dir/sock" stats kvserve --check
