#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# kvserve_gpu_test: the main job on a GPU pool (kvshared memory=cuda,
# kvserve --memory cuda), on the CUDA driver stand-in, as TAP.  kvshared
# allocates and exports the pool through the stand-in; each worker imports
# and maps it through libkv; attention is the C reference on that mapping
# (host memory underneath: the CUDA kernels cannot run on the stand-in), and
# every request is recomputed from scratch and compared to the bit.
set -uo pipefail

build=${BUILD:-build}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
export LD_LIBRARY_PATH="$(cd "$build/tests/gpu" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

echo "TAP version 13"
echo "1..3"
BUILD=$build tools/kvshared-session.sh \
	--pool "kvserve:pages=1024,layers=2,kv_heads=2,head_dim=64,tokens_per_page=16,dtype=bf16,mode=0600,memory=cuda" \
	-- bash -c '"$1/kvserve" --pool kvserve --memory cuda "${@:2}" && echo && "$1/kvctl" stats kvserve --check' \
	_ "$build" --workers 3 --requests 4 --system-tokens 256 --doc-tokens 256 --docs 2 \
	--question-tokens 20 --verify 1 >"$out" 2>&1
st=$?
sed 's/^/# /' "$out"

if [ "$st" -eq 0 ]; then
	echo "ok 1 kvserve --memory cuda: every request equal to a recompute, invariants hold"
else
	echo "not ok 1 kvserve --memory cuda: exit status $st"
fi
ver=$(sed -n 's/.*verified *\([0-9]*\) requests recomputed.*/\1/p' "$out")
# Another process's pages: found through the arbiter, or swapped in at
# PUBLISH for a page computed twice in a race (then read from the cache).
remote=$(sed -n 's/.*tree, \([0-9]*\) found through the arbiter.*/\1/p' "$out")
dup=$(sed -n 's/.*(+\([0-9]*\) computed twice in a race.*/\1/p' "$out")
if [ "$ver" = 12 ] && [ $(( ${remote:-0} + ${dup:-0} )) -gt 0 ]; then
	echo "ok 2 kvserve --memory cuda: 12 requests verified; pages of another worker: $remote looked up, $dup swapped in"
else
	echo "not ok 2 kvserve --memory cuda: verified '$ver' (want 12), pages of another worker: '$remote' + '$dup' (want > 0)"
fi
if grep -q 'CUDA driver STAND-IN' "$out" && grep -q 'not the CUDA kernels' "$out"; then
	echo "ok 3 kvserve --memory cuda: says it ran on the stand-in, with the C reference"
else
	echo "not ok 3 kvserve --memory cuda: no word of the stand-in in its report"
fi
[ "$st" -eq 0 ]
