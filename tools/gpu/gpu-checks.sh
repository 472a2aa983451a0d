#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The one command a session with a GPU runs: the suites `make test` runs on
# the CPU stand-ins, here against the real CUDA driver and kernels, the
# kernels under compute-sanitizer, then the figures, ending with ONE table.
# Nothing is installed (the GPU machine is bare and offline).
#
# Two ways to run it:
#   from a bundle (make gpu-bundle here, carry build/gpu-bundle.tar.gz):
#       tar xzf gpu-bundle.tar.gz && gpu-bundle/tools/gpu/gpu-checks.sh
#     runs the bundle's bin/ as built (sm_80 + sm_90), builds nothing;
#   from a checkout with the CUDA toolkit: tools/gpu/gpu-checks.sh builds
#     what it runs for this GPU's architecture (--no-build: as built).
#
# Logs go to $OUT (default gpu-out in the bundle, or build/gpu-out):
#   env.txt          machine, driver, toolchain, nvidia-smi
#   build.log        make (checkout only)
#   suites.log       every suite on the real driver (list below)
#   sanitizer.log    attn_cuda_test under compute-sanitizer memcheck,
#                    racecheck and synccheck
#   kvserve.txt      kvserve (the CUDA build) --memory cuda on a kvshared
#                    memory=cuda pool: workers share device pages through the
#                    CUDA kernels, every request checked against the C
#                    reference (fails on a mismatch)
#   kvbench_attn.txt kvbench attn --gpu: decode against the read-only kernel
#                    and a D2D copy, extend TFLOP/s
#   attn_torch.txt   tools/kvbench/attn_torch.py --extend: torch SDPA on the
#                    same shapes
#   pyext.log        the kvshare extension built for the torch python
#                    (bundle: tools/gpu/build-pyext.sh; checkout: the same
#                    script's commands through make's objects)
#   copies.txt       tools/kvbench/vllm_bench.py --device cuda: the vLLM
#                    connector's load and save of 128 blocks of 2 MiB (32
#                    layers) between a host pool and CUDA kv_caches, a pinned
#                    copy of the same bytes and torch's pageable copy_
#   table.txt        tools/gpu/gpu_table.py: the one table of decode and
#                    extend figures against the read kernel, the copy and
#                    torch, the engine copies beside them, and the goals of
#                    issues 20 and 25 met or not; printed last
#   summary.txt      one line a step
#
# The suites (kselftest TAP; each must pass, and none may skip with a GPU):
#   attn_cuda_test       CUDA kernels vs the C reference
#   cuda_vmm_test        the driver's VMM calls as the stand-in
#                        (tests/gpu/cudastub) claims they behave: a failure
#                        is a difference to fix there, with a test (the rule)
#   gpu_pool_test        GPU pools through kvshared, two processes, daemon
#                        death (its stand-in-only cases skip; module mode
#                        runs as root with kvshare.ko loaded)
# (attn_cuda_test holds the cases tests/simt runs on the kernel stand-in.)
# Under racecheck and synccheck, which instrument every shared-memory access,
# attn_cuda_test runs with KV_SANITIZER=1: the test's switch to shapes that
# fit the harness's per-test limit (tests/gpu/kv_sanitizer.h).
#
# Usage: tools/gpu/gpu-checks.sh [--budget SECONDS] [--steps LIST] [--no-build]
#   --budget   seconds for the whole run (default 450: within the 8 minutes a
#              GPU session gives the bundle, with room for a machine start);
#              a step that no longer fits is skipped
#   --steps    which of suites,figures,copies,kvserve,sanitizer to run, in
#              that order (default all): the figures come early so that the
#              table exists even when the sanitizers use up the budget; a
#              second run with --steps sanitizer finishes them
# Environment: OUT, BUILD, CUDA_HOME, PYTHON (a python3 with torch).
# Exit status: 0 all passed; 1 a step failed (any mismatch); 77 no GPU.
set -uo pipefail

budget=450 do_build=1 steps=suites,figures,copies,kvserve,sanitizer
while [ $# -gt 0 ]; do
	case "$1" in
	--budget) budget=${2:?--budget needs seconds}; shift 2 ;;
	--steps) steps=${2:?--steps needs a list}; shift 2 ;;
	--no-build) do_build=0; shift ;;
	-h | --help) sed -n '3,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "gpu-checks.sh: unknown argument '$1'" >&2; exit 2 ;;
	esac
done

for st in ${steps//,/ }; do
	case "$st" in
	suites | figures | copies | kvserve | sanitizer) ;;
	*) echo "gpu-checks.sh: --steps: unknown step '$st'" >&2; exit 2 ;;
	esac
done
want() { case ",$steps," in *,"$1",*) return 0 ;; esac; return 1; }

cd "$(dirname "$0")/../.." || exit 1
if [ -f MANIFEST ] && [ -d bin ]; then
	# A bundle (tools/gpu/gpu-bundle.mk): its bin/ as built.
	bundle=1 do_build=0
	export BUILD=$PWD/bin	# kvshared-session.sh takes $BUILD/kvshared
	OUT=${OUT:-$PWD/gpu-out}
	BIN=$PWD/bin
	SUITES=("$BIN/attn_cuda_test" "$BIN/cuda_vmm_test" "$BIN/gpu_pool_test")
	KVBENCH=$BIN/kvbench KVSERVE=$BIN/kvserve
else
	bundle=0
	export BUILD=${BUILD:-build}	# kvshared-session.sh reads it too
	OUT=${OUT:-$BUILD/gpu-out}
	SUITES=("$BUILD/tests/attn_cuda_test" "$BUILD/tests/gpu/cuda_vmm_test"
		"$BUILD/tests/gpu/gpu_pool_test")
	KVBENCH=$BUILD/kvbench KVSERVE=$BUILD/kvserve-cuda
fi
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH=$CUDA_HOME/bin:$PATH
mkdir -p "$OUT" || exit 1
: >"$OUT/summary.txt"
end=$((SECONDS + budget))
fails=0

record() {	# STEP STATE DETAIL
	printf '%-10s %-5s %s\n' "$1" "$2" "$3" | tee -a "$OUT/summary.txt"
	[ "$2" = FAIL ] && fails=$((fails + 1))
	return 0
}

# Seconds for a step: its cap, or what is left less 15 s; 0 when none.
left() {
	local l=$((end - SECONDS - 15))
	[ $l -lt 20 ] && { echo 0; return; }
	[ $l -lt "$1" ] && echo $l || echo "$1"
}

# TAP totals of a log: "pass:N fail:N ... skip:N".
totals() { grep -a '^# Totals:' "$1" | tail -n 1 | sed 's/^# Totals: //'; }

have_gpu=0
nvidia-smi -L 2>/dev/null | grep -q '^GPU' && have_gpu=1

{
	date -u; uname -a
	nvidia-smi 2>&1 | head -n 20
	"$CUDA_HOME/bin/nvcc" --version 2>&1 | tail -n 2
	ls -l /usr/lib/x86_64-linux-gnu/libcuda.so.1 2>&1
	[ $bundle = 1 ] && cat MANIFEST
} >"$OUT/env.txt"
record env ok "GPU: $([ $have_gpu = 1 ] && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1 || echo none)"

# ---- build: this GPU's architecture only, when nvidia-smi names it ----
if [ $do_build = 1 ]; then
	args=(-k -j"$(nproc)")
	cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
	[[ "$cc" =~ ^[0-9]+$ ]] && args+=(NVCC_ARCHS="-gencode arch=compute_$cc,code=sm_$cc")
	state=ok
	timeout "$(left 300)" make "${args[@]}" "${SUITES[@]}" "$KVBENCH" \
		"$KVSERVE" "$BUILD/kvshared" "$BUILD/kvctl" >"$OUT/build.log" 2>&1 ||
		state=WARN
	record build $state "make -k (see build.log; a suite not built fails below)"
fi

# The python with torch (figures, copies).
PY=${PYTHON:-}
for p in /opt/torch/.venv/bin/python3 python3; do
	[ -z "$PY" ] && "$p" -c 'import torch' >/dev/null 2>&1 && PY=$p
done

if want suites; then
# ---- the suites, on the real driver (no stand-in in LD_LIBRARY_PATH) ----
# The driver maps memory where ASan keeps its shadow gap; LeakSanitizer
# would report the driver's own allocations (the suites are ASan builds).
export ASAN_OPTIONS=${ASAN_OPTIONS:-protect_shadow_gap=0:detect_leaks=0}
: >"$OUT/suites.log"
for s in "${SUITES[@]}"; do
	name=$(basename "$s") log=$OUT/.suite.log
	lim=$(left 180)
	if [ ! -x "$s" ]; then record "$name" FAIL "not built"; continue; fi
	if [ "$lim" = 0 ]; then record "$name" SKIP "no time left"; continue; fi
	timeout -k 10 "$lim" "$s" >"$log" 2>&1
	st=$? t=$(totals "$log") skips=$(totals "$log" | sed -n 's/.*skip:\([0-9]*\).*/\1/p')
	fail=$(grep -a '^not ok' "$log" | head -n 5 | tr '\n' ' ')
	{ echo "=== $s: exit $st"; cat "$log"; } >>"$OUT/suites.log"
	rm -f "$log"
	if [ $st != 0 ]; then record "$name" FAIL "exit $st; $t; $fail"
	elif [ $have_gpu = 0 ]; then record "$name" SKIP "no GPU; $t"
	# gpu_pool_test's failure injection and leak counts need the stand-in.
	elif [ "${skips:-0}" != 0 ] && [ "$name" != gpu_pool_test ]; then
		record "$name" FAIL "skipped on a machine with a GPU: $t"
	else record "$name" ok "$t"; fi
done
fi

if want figures; then
# ---- figures: kernel bandwidth vs a device copy, and torch SDPA ----
lim=$(left 120)
if [ $have_gpu = 1 ] && [ "$lim" != 0 ] && [ -x "$KVBENCH" ]; then
	timeout -k 10 "$lim" "$KVBENCH" attn --gpu >"$OUT/kvbench_attn.txt" 2>&1
	st=$?
	record kvbench "$([ $st = 0 ] && echo ok || echo FAIL)" \
		"exit $st; $(grep -a '^goal' "$OUT/kvbench_attn.txt" | head -n 1)"
fi
lim=$(left 150)
if [ $have_gpu = 1 ] && [ -n "$PY" ] && [ "$lim" != 0 ]; then
	PYTHONUNBUFFERED=1 timeout -k 10 "$lim" "$PY" tools/kvbench/attn_torch.py \
		--gqa auto,fold --eager --extend >"$OUT/attn_torch.txt" 2>&1
	st=$?
	record torch "$([ $st = 0 ] && echo ok || echo FAIL)" "exit $st (torch SDPA decode and prefill, same shapes)"
fi
fi

if want copies; then
# ---- the engine copy paths: a CUDA engine's kv_caches and a host pool ----
lim=$(left 120)
if [ $have_gpu = 1 ] && [ -n "$PY" ] && [ "$lim" != 0 ]; then
	if [ $bundle = 1 ]; then
		pypath=$(tools/gpu/build-pyext.sh "$PY" 2>"$OUT/pyext.log")
		peers=$PWD/peers kvsd=$BIN/kvshared
	else
		pypath=$(bash -c 'make -s python PYTHON="$1" >&2 && echo "$2/python"' _ "$PY" \
			"$BUILD" 2>"$OUT/pyext.log")
		peers=${KVS_PEERS:-} kvsd=$BUILD/kvshared
	fi
	if [ -z "$pypath" ]; then
		record copies FAIL "the kvshare extension did not build for $PY (see pyext.log)"
	else
		PYTHONUNBUFFERED=1 KVSHARED=$kvsd ${peers:+KVS_PEERS=$peers} PYTHONPATH=$pypath \
			timeout -k 10 "$(left 120)" "$PY" tools/kvbench/vllm_bench.py --device cuda \
			--blocks 128 --reps 5 >"$OUT/copies.txt" 2>&1
		st=$?
		record copies "$([ $st = 0 ] && echo ok || echo FAIL)" \
			"exit $st; $(grep -a '^goal' "$OUT/copies.txt" | sed 's/ >= 80% of [a-z_0-9]*//' | tr '\n' ' ')"
	fi
fi
fi

if want kvserve; then
# ---- kvserve on a GPU pool: kernels of several processes on shared pages ----
lim=$(left 120)
if [ $have_gpu = 1 ] && [ "$lim" != 0 ]; then
	timeout -k 10 "$lim" tools/kvshared-session.sh --pool \
		"kvserve:pages=4096,layers=4,kv_heads=2,head_dim=128,tokens_per_page=16,dtype=bf16,memory=cuda" \
		-- "$KVSERVE" --pool kvserve --memory cuda --workers 4 --requests 8 \
		--system-tokens 512 --doc-tokens 1024 --docs 2 --verify 1 --inflight-wait 60000 \
		>"$OUT/kvserve.txt" 2>&1
	st=$? ver=$(sed -n 's/.*verified *\([0-9]*\) requests recomputed.*/\1/p' "$OUT/kvserve.txt")
	record kvserve "$([ $st = 0 ] && [ "${ver:-0}" -gt 0 ] && echo ok || echo FAIL)" \
		"exit $st; ${ver:-0} requests verified against the C reference"
fi
fi

if want sanitizer; then
# ---- compute-sanitizer on the kernels ----
# memcheck on the test's own shapes; racecheck and synccheck (every shared
# access instrumented) with KV_SANITIZER=1, the test's smaller shapes.
SAN=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
if [ $have_gpu = 1 ] && [ -x "$SAN" ]; then
	: >"$OUT/sanitizer.log"
	for tool in memcheck racecheck synccheck; do
		lim=$(left 150)
		[ "$lim" = 0 ] && { record "$tool" SKIP "no time left"; continue; }
		small=$([ $tool = memcheck ] && echo 0 || echo 1)
		echo "=== $tool (KV_SANITIZER=$small)" >>"$OUT/sanitizer.log"
		KV_SANITIZER=$small timeout -k 10 "$lim" "$SAN" --tool "$tool" \
			--target-processes all --error-exitcode 99 "${SUITES[0]}" \
			>>"$OUT/sanitizer.log" 2>&1
		st=$?
		case $st in
		0) record "$tool" ok "attn_cuda_test$([ $small = 1 ] && echo ', KV_SANITIZER=1 shapes')" ;;
		124 | 137) record "$tool" WARN "timed out (nothing found in what ran)" ;;
		*) record "$tool" FAIL "exit $st (see sanitizer.log)" ;;
		esac
	done
elif [ $have_gpu = 1 ]; then
	record sanitizer WARN "compute-sanitizer not found ($SAN)"
fi
fi

# ---- the one table: ours against the read kernel, the copy and torch ----
TPY=${PY:-}
for p in python3 /usr/bin/python3; do
	[ -z "$TPY" ] && command -v "$p" >/dev/null && TPY=$p
done
if { [ -s "$OUT/kvbench_attn.txt" ] || [ -s "$OUT/copies.txt" ]; } && [ -n "$TPY" ]; then
	"$TPY" tools/gpu/gpu_table.py "$OUT/kvbench_attn.txt" "$OUT/attn_torch.txt" \
		"$OUT/copies.txt" >"$OUT/table.txt" 2>&1
elif [ -s "$OUT/kvbench_attn.txt" ]; then
	{ echo "(no python3 for tools/gpu/gpu_table.py: kvbench's own table)"
	  grep -a -E '^(#|decode|extend|goal)' "$OUT/kvbench_attn.txt"; } >"$OUT/table.txt"
fi

echo
grep -a -E 'attention on|verified|throughput|FAILED' "$OUT/kvserve.txt" 2>/dev/null
echo "== summary ($OUT/summary.txt)"
cat "$OUT/summary.txt"
if [ -s "$OUT/table.txt" ]; then
	echo
	cat "$OUT/table.txt"
fi
[ $fails -gt 0 ] && exit 1
[ $have_gpu = 0 ] && exit 77
exit 0
