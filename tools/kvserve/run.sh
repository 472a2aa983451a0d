#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The main job on the embedded default: no module, no GPU.  kvshared
# arbitrates from user space and owns a host-memory (memfd) pool; kvserve's
# worker processes share prefix pages through it; kvctl shows the pool.
# Usage: tools/kvserve/run.sh [kvserve options...]
set -euo pipefail

build=${BUILD:-build}
# 4096 pages of 16 tokens x 2 layers x 2 KV heads x head dim 64, bf16:
# 16 KiB a page, 64 MiB of host memory.
exec "$(dirname "$0")/../kvshared-session.sh" \
	--pool "kvserve:pages=4096,layers=2,kv_heads=2,head_dim=64,tokens_per_page=16,dtype=bf16,mode=0600,memory=host" \
	-- bash -c '"$1/kvserve" --pool kvserve "${@:2}" && echo && "$1/kvctl" stats kvserve --check' \
	_ "$build" "$@"
