#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The CUDA kernels on the CPU stand-in (tests/simt), as one kselftest TAP
# suite (installed as build/tests/attn_simt next to the binaries it runs):
#
#   - attn_simt_test (tests/attn/attn_cuda_test.c and smaller versions of
#     its heavy cases) once per scheduling seed in KV_SIMT_SEEDS; by
#     default 0 (threads in order) and a random seed (printed, so that a
#     failure can be replayed with KV_SIMT_SEEDS=<seed>), and seed 1 on the
#     quick tests only (~45 s of CPU time per full run); KV_SIMT_JOBS (2)
#     runs at a time;
#   - the builds broken on purpose, which must FAIL, each for its reason:
#     drop_barrier (cuda_extend.cu without its "tile consumed" barrier) with
#     a shared-memory race report, bad_shuffle (one wrong shuffle offset)
#     with a mismatch against the C reference; and the tensor-core decode
#     broken three ways (KV_MUTATE, libkv/attn/cuda_decode_tc.cuh):
#     mutate1 without the barrier that frees a stage before its refill
#     (a race report), mutate2 with cp.async.wait_group one short (a read
#     of a copy still in flight), mutate3 with two registers of P's A
#     fragment swapped (a mismatch); and the tensor-core extend broken two
#     ways: mutate4 without the barrier after a tile's wait_group (a race
#     or a read of a copy in flight), mutate5 with two 8x8 blocks of a V
#     ldmatrix swapped (a mismatch).  ok when they fail so, not ok when
#     they pass.
#
# Each run's own TAP is shown as diagnostics ("# ...").  Exit status 0 only
# when every line is ok.
set -u

dir=$(cd "$(dirname "$0")" && pwd)
seeds=${KV_SIMT_SEEDS:-"0 $(( (RANDOM << 15 | RANDOM) + 2 ))"}
quick=write_matches_reference,write_prefill_then_decode,decode_splits_small,shared_prefix_pages_small,decode_tensor_cores
jobs=${KV_SIMT_JOBS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# name|command|expectation (pass, race, inflight, hazard: either, mismatch, dmismatch)
runs=()
for s in $seeds; do
	runs+=("attn_simt_test seed=$s|env KV_SIMT_SEED=$s $dir/attn_simt_test|pass")
done
if [ -z "${KV_SIMT_SEEDS:-}" ]; then
	runs+=("attn_simt_test seed=1, quick tests|env KV_SIMT_SEED=1 KV_SIMT_ONLY=$quick $dir/attn_simt_test|pass")
fi
# One test suffices for each broken build: one that reaches the kernel broken.
only=cuda_core_paths
runs+=("drop_barrier must fail with a race report|env KV_SIMT_SEED=0 KV_SIMT_ONLY=$only $dir/attn_simt_test-drop_barrier|race")
runs+=("bad_shuffle must fail with a mismatch|env KV_SIMT_SEED=0 KV_SIMT_ONLY=$only $dir/attn_simt_test-bad_shuffle|mismatch")
only=decode_tensor_cores
runs+=("mutate1 (no stage barrier) must fail with a race report|env KV_SIMT_SEED=0 KV_SIMT_ONLY=$only $dir/attn_simt_test-mutate1|race")
runs+=("mutate2 (wait_group one short) must fail reading a copy in flight|env KV_SIMT_SEED=0 KV_SIMT_ONLY=$only $dir/attn_simt_test-mutate2|inflight")
runs+=("mutate3 (wrong fragment register) must fail with a mismatch|env KV_SIMT_SEED=0 KV_SIMT_ONLY=$only $dir/attn_simt_test-mutate3|dmismatch")
only=shared_prefix_pages_small
runs+=("mutate4 (extend: no barrier after the wait) must fail with a hazard report|env KV_SIMT_SEED=0 KV_SIMT_ONLY=$only $dir/attn_simt_test-mutate4|hazard")
runs+=("mutate5 (extend: wrong V fragment registers) must fail with a mismatch|env KV_SIMT_SEED=0 KV_SIMT_ONLY=$only $dir/attn_simt_test-mutate5|mismatch")

start() {
	local i=$1 cmd
	cmd=$(cut -d'|' -f2 <<< "${runs[$i]}")
	( SECONDS=0; $cmd > "$tmp/$i.out" 2>&1; echo "$? $SECONDS" > "$tmp/$i.rc" ) &
}

# At most $jobs at a time: the machines these run on have few cores.
n=${#runs[@]}
for ((i = 0; i < n; i++)); do
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
		wait -n
	done
	start "$i"
done
wait

echo "TAP version 13"
echo "1..$n"
fail=0
for ((i = 0; i < n; i++)); do
	name=$(cut -d'|' -f1 <<< "${runs[$i]}")
	want=$(cut -d'|' -f3 <<< "${runs[$i]}")
	read -r rc secs < "$tmp/$i.rc"
	echo "# === $name: $(cut -d'|' -f2 <<< "${runs[$i]}" | sed "s|$dir/||") (${secs} s, exit $rc)"
	sed 's/^/# /' "$tmp/$i.out"
	case "$want" in
	pass)
		ok=$([ "$rc" = 0 ] && echo 1) ;;
	race)
		ok=$([ "$rc" != 0 ] && grep -q 'shared-memory race on' "$tmp/$i.out" && echo 1) ;;
	hazard)
		ok=$([ "$rc" != 0 ] && grep -qE 'shared-memory race on|a cp.async not yet waited for' \
			"$tmp/$i.out" && echo 1) ;;
	inflight)
		ok=$([ "$rc" != 0 ] && grep -q 'a cp.async not yet waited for' "$tmp/$i.out" && echo 1) ;;
	mismatch|dmismatch)
		# A wrong result, not a crash or a race: check_cuda's comparison line.
		what=$([ "$want" = mismatch ] && echo extend || echo decode)
		ok=$([ "$rc" != 0 ] && grep -q "$what .* rel .* not finite" "$tmp/$i.out" &&
		     ! grep -q 'simt:' "$tmp/$i.out" && echo 1) ;;
	esac
	if [ -n "$ok" ]; then
		echo "ok $((i + 1)) $name"
	else
		echo "not ok $((i + 1)) $name"
		fail=1
	fi
done
exit $fail
