#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# kvserve_gpu_test: the main job on a GPU pool (kvshared memory=cuda,
# kvserve --memory cuda) with its attention on the CUDA kernels, all on the
# CPU stand-ins, as TAP.  kvshared allocates and exports the pool through
# the driver stand-in (tests/gpu/cudastub); each worker of
# build/tests/gpu/kvserve-simt imports and maps it through libkv and runs
# the exact .cu kernels compiled for tests/simt (race and illegal-address
# checks on) on that mapping: pages one worker's kernels wrote are read by
# another's.  Every request is recomputed from scratch by the C reference
# and compared within tests/attn's tolerances.  The same run with the
# extend kernel broken on purpose must fail, and build/kvserve,
# which has no kernels, must refuse and say why.
set -uo pipefail

build=${BUILD:-build}
fail=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT
export LD_LIBRARY_PATH="$(cd "$build/tests/gpu" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
pool="kvserve:pages=1024,layers=2,kv_heads=2,head_dim=64,tokens_per_page=16,dtype=bf16,mode=0600,memory=cuda"
# Three workers, four requests each; the in-flight wait makes the later
# workers read the first one's pages rather than compute them again.
args=(--workers 3 --requests 4 --system-tokens 256 --doc-tokens 256 --docs 2
      --question-tokens 20 --verify 1 --inflight-wait 60000)

# serve BINARY ARG...: kvserve --memory cuda, then the pool's invariants, into $out.
serve() {
	BUILD=$build tools/kvshared-session.sh --pool "$pool" \
		-- bash -c '"$1" --pool kvserve --memory cuda "${@:3}" && echo &&
			"$2/kvctl" stats kvserve --check' _ "$1" "$build" "${@:2}" >"$out" 2>&1
}

echo "TAP version 13"
echo "1..6"
serve "$build/tests/gpu/kvserve-simt" "${args[@]}"
st=$?
sed 's/^/# /' "$out"

if [ "$st" -eq 0 ] && grep -q '^invariants *ok' "$out"; then
	echo "ok 1 kvserve --memory cuda: served, verified, invariants hold"
else
	fail=1
	echo "not ok 1 kvserve --memory cuda: exit status $st"
fi
ver=$(sed -n 's/.*verified *\([0-9]*\) requests recomputed.*/\1/p' "$out")
if [ "$ver" = 12 ] && grep -q "within tests/attn's bf16 tolerance" "$out" &&
   ! grep -q 'differs from scratch' "$out"; then
	echo "ok 2 kvserve --memory cuda: 12 requests verified within tolerance"
else
	fail=1
	echo "not ok 2 kvserve --memory cuda: verified '$ver' (want 12) within tolerance"
fi
remote=$(sed -n 's/.*tree, \([0-9]*\) found through the arbiter.*/\1/p' "$out")
if [ "${remote:-0}" -gt 0 ]; then
	echo "ok 3 kvserve --memory cuda: $remote pages another worker's kernels wrote"
else
	fail=1
	echo "not ok 3 kvserve --memory cuda: no page of another worker read ('$remote')"
fi
if grep -q 'attention on the pool *CUDA kernels on the CPU STAND-IN tests/simt' "$out" &&
   grep -q 'CUDA driver STAND-IN' "$out"; then
	echo "ok 4 kvserve --memory cuda: says it ran the CUDA kernels on the stand-ins"
else
	fail=1
	echo "not ok 4 kvserve --memory cuda: no word of the kernels' stand-in in its report"
fi

# The extend kernel kvserve runs (tensor cores: head dim 64, 16-token pages)
# with two blocks of a V fragment swapped (KV_MUTATE=5): the verification
# must see it (in the first request: one is enough).  A mutant of a kernel
# kvserve does not reach would prove nothing: the check names the one it runs.
serve "$build/tests/gpu/kvserve-simt-mutate5" "${args[@]}" --workers 1 --requests 1
st=$?
if [ "$st" -ne 0 ] && grep -q 'requests differ from a recompute' "$out"; then
	echo "ok 5 a broken extend kernel (KV_MUTATE=5) fails the verification"
else
	sed 's/^/# /' "$out"
	fail=1
	echo "not ok 5 a broken extend kernel (KV_MUTATE=5): exit status $st, no mismatch"
fi

serve "$build/kvserve" "${args[@]}"
st=$?
if [ "$st" -ne 0 ] && grep -q 'no CUDA kernels to run.*kvserve-cuda' "$out"; then
	echo "ok 6 build/kvserve --memory cuda: refuses, built without the kernels"
else
	sed 's/^/# /' "$out"
	fail=1
	echo "not ok 6 build/kvserve --memory cuda: exit status $st, no clear refusal"
fi
exit $fail
