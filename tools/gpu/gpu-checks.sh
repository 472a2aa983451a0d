#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Everything a session with a GPU machine should check, as one command:
# build the CUDA test and kvbench, then run, each under its own timeout and
# each logged under $OUT (default build/gpu-out):
#
#   env.txt             machine, toolchain, nvidia-smi (before and after)
#   build.log           the make run(s)
#   attn_cuda_test.log  build/tests/attn_cuda_test (CUDA kernels vs the C reference)
#   sanitizer.log       the same test under compute-sanitizer: memcheck,
#                       racecheck, synccheck, initcheck (as time allows)
#   kvbench_attn.txt    build/kvbench attn --gpu (decode TB/s vs a D2D copy)
#   attn_torch.txt      tools/kvbench/attn_torch.py: torch SDPA on the same shapes
#   summary.txt         one line per step; also printed last, with both tables
#
# Seven files: the device tool brings back at most eight.  The GPU machine
# is bare and offline, so nothing here installs anything: no `make test`,
# no scripts/setup.sh (it apt-gets).  What it needs that may be missing:
#
#   * the kselftest harness headers, which make extracts from Debian's
#     linux-source-6.1 tarball: carry build/kselftest (extracted on the
#     development machine by `make kselftest-headers`); without them the
#     CUDA test cannot be built and says so;
#   * liburing, OpenSSL and xxHash headers, which the full kvbench links
#     (libkv): without them an attn-only kvbench is linked from the same
#     bench_attn.o (bench_attn.c needs only libc and the attention libraries),
#     so `kvbench attn --gpu` runs either way;
#
# Usage: tools/gpu/gpu-checks.sh [--budget SECONDS] [--steps LIST] [--no-build]
#   --budget   wall-clock seconds for the whole run (default 540, so that it
#              ends inside the device tool's 600 s per command); each step
#              gets its own cap, cut to what is left, and a step that no
#              longer fits is reported as skipped
#   --steps    comma list of env,build,test,kvbench,torch,memcheck,racecheck,
#              synccheck,initcheck (default: all of them, in that order)
#   --no-build use the binaries already under $BUILD (e.g. carried ones)
# Environment: OUT, BUILD (default build), CUDA_HOME, PYTHON (a python3 with
# torch), LINUX_SOURCE_TAR (as in the Makefile), GPU_CHECKS_MAKE_ARGS (extra
# make arguments, split on spaces).
#
# Exit status: 0 every step that ran passed; 1 a step failed; 77 nothing
# failed but there is no GPU, so the GPU steps were skipped (the build, the
# test's argument checks and the tools' no-GPU paths still ran).
set -uo pipefail

usage() {
	sed -n '3,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

budget=540
steps=env,build,test,kvbench,torch,memcheck,racecheck,synccheck,initcheck
do_build=1
while [ $# -gt 0 ]; do
	case "$1" in
	--budget)
		[[ "${2:-}" =~ ^[0-9]+$ ]] || { echo "gpu-checks.sh: --budget needs seconds" >&2; exit 2; }
		budget=$2
		shift 2
		;;
	--steps)
		[ -n "${2:-}" ] || { echo "gpu-checks.sh: --steps needs a list" >&2; exit 2; }
		steps=$2
		shift 2
		;;
	--no-build)
		do_build=0
		shift
		;;
	-h | --help)
		usage
		exit 0
		;;
	*)
		echo "gpu-checks.sh: unknown argument '$1'" >&2
		usage >&2
		exit 2
		;;
	esac
done

# Everything below uses paths relative to the repository root, as make does.
cd "$(dirname "$0")/../.." || exit 1
t_start=$SECONDS
deadline=$((t_start + budget))
OUT=${OUT:-build/gpu-out}
BUILD=${BUILD:-build}
mkdir -p "$OUT" || exit 1
SUMMARY=$OUT/summary.txt
ENVLOG=$OUT/env.txt
BUILDLOG=$OUT/build.log
TESTLOG=$OUT/attn_cuda_test.log
SANLOG=$OUT/sanitizer.log
BENCHLOG=$OUT/kvbench_attn.txt
TORCHLOG=$OUT/attn_torch.txt
: >"$SUMMARY"
JOBS=$(nproc 2>/dev/null || echo 4)

want() {
	case ",$steps," in *",$1,"*) return 0 ;; esac
	return 1
}

note() {
	printf '[%4ds] %s\n' $((SECONDS - t_start)) "$*"
}

# ---- results: one row per step, printed at the end ----
names=() states=() secs=() details=()
n_fail=0 n_skip_gpu=0 n_warn=0

record() {	# NAME STATE SECONDS DETAIL; STATE: ok FAIL WARN SKIP SKIP-GPU
	names+=("$1")
	states+=("${2/SKIP-GPU/SKIP}")
	secs+=("$3")
	details+=("$4")
	case "$2" in
	FAIL) n_fail=$((n_fail + 1)) ;;
	WARN) n_warn=$((n_warn + 1)) ;;
	SKIP-GPU) n_skip_gpu=$((n_skip_gpu + 1)) ;;
	esac
	note "$1: ${2/SKIP-GPU/SKIP} ${4:+- $4}"
}

# Seconds a step may take: its cap, cut to what the budget has left (less a
# margin for the summary).  Prints 0 when fewer than 20 s would be left.
step_time() {
	local left=$((deadline - SECONDS - 10))

	if [ "$left" -lt 20 ]; then
		echo 0
	elif [ "$1" -lt "$left" ]; then
		echo "$1"
	else
		echo "$left"
	fi
}

# run_logged LOG SECONDS CMD...: append a header, the command's output and
# its status to LOG; return the status (124 or 137: timed out).  --kill-after
# because a CUDA program stuck in a kernel may ignore SIGTERM.
run_logged() {
	local log=$1 lim=$2 st t0=$SECONDS
	shift 2
	{
		echo "=== $(date -u '+%F %T') UTC: $* (timeout ${lim}s)"
	} >>"$log"
	timeout --kill-after=10 "$lim" "$@" >>"$log" 2>&1
	st=$?
	echo "=== exit status $st after $((SECONDS - t0)) s" >>"$log"
	return "$st"
}

timed_out() {
	[ "$1" = 124 ] || [ "$1" = 137 ]
}

# ---- the machine ----
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ ! -x "$CUDA_HOME/bin/nvcc" ] && command -v nvcc >/dev/null 2>&1; then
	CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
fi
NVCC=$CUDA_HOME/bin/nvcc
# make's default $(CC) is cc; an image with gcc but no cc link gets CC=gcc.
CC_BIN=cc
command -v cc >/dev/null 2>&1 || ! command -v gcc >/dev/null 2>&1 || CC_BIN=gcc
SANITIZER=$(command -v compute-sanitizer 2>/dev/null)
for s in "$CUDA_HOME/bin/compute-sanitizer" "$CUDA_HOME/compute-sanitizer/compute-sanitizer"; do
	[ -z "$SANITIZER" ] && [ -x "$s" ] && SANITIZER=$s
done

# A GPU is "there" when nvidia-smi lists one; the binaries also find out for
# themselves, and a GPU listed here that they cannot use is a failure.
gpu_why=
if ! command -v nvidia-smi >/dev/null 2>&1; then
	gpu_why="no nvidia-smi"
elif ! smi_l=$(timeout 30 nvidia-smi -L 2>&1); then
	gpu_why="nvidia-smi -L failed: $(echo "$smi_l" | head -n 1)"
elif ! grep -q '^GPU ' <<<"$smi_l"; then
	gpu_why="nvidia-smi lists no GPU"
fi
have_gpu=0
[ -z "$gpu_why" ] && have_gpu=1

# The python with torch: the GPU image's venv first.
PY=${PYTHON:-}
if [ -z "$PY" ]; then
	for p in /opt/torch/.venv/bin/python3 python3 /usr/bin/python3; do
		command -v "$p" >/dev/null 2>&1 || continue
		[ -n "$PY" ] || PY=$p
		if "$p" -c 'import torch' >/dev/null 2>&1; then
			PY=$p
			break
		fi
	done
fi

note "gpu-checks: budget ${budget}s, logs in $OUT, build in $BUILD;" \
	"GPU: $([ $have_gpu = 1 ] && echo yes || echo "none ($gpu_why)")"

# ---- env ----
if want env; then
	t0=$SECONDS
	{
		echo "=== gpu-checks.sh $(date -u '+%F %T') UTC, budget ${budget}s"
		echo "--- machine"
		uname -a
		grep -h '^PRETTY_NAME' /etc/os-release 2>/dev/null
		echo "cpus: $(nproc 2>/dev/null)"
		free -g 2>/dev/null | head -n 2
		df -h . 2>/dev/null | tail -n 1
		echo "--- source"
		if command -v git >/dev/null 2>&1 && git rev-parse --git-dir >/dev/null 2>&1; then
			git log -1 --format='%H %s' 2>&1
			git status --short 2>&1 | head -n 30
		else
			echo "no git repository here (a copied tree)"
		fi
		echo "--- toolchain"
		for c in "$CC_BIN" make; do
			printf '%s: ' "$c"
			{ "$c" --version 2>/dev/null || echo "not found"; } | head -n 1
		done
		printf 'nvcc (%s): ' "$NVCC"
		{ "$NVCC" --version 2>/dev/null || echo "not found"; } | tail -n 1
		printf 'compute-sanitizer: %s ' "${SANITIZER:-not found}"
		[ -n "$SANITIZER" ] && "$SANITIZER" --version 2>/dev/null | tail -n 1
		echo
		printf 'python: %s; torch: ' "${PY:-not found}"
		if [ -n "$PY" ]; then
			timeout 120 "$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -n 1
		else
			echo "-"
		fi
		printf 'kselftest headers from:'
		for f in "$BUILD"/kselftest/kselftest_harness.h build/kselftest/kselftest_harness.h \
			"${LINUX_SOURCE_TAR:-/usr/src/linux-source-6.1.tar.xz}"; do
			[ -e "$f" ] && printf ' %s' "$f"
		done | tr ' ' '\n' | awk 'NF && !seen[$0]++ { printf " %s", $0 }'
		echo
	} >"$ENVLOG" 2>&1
	if command -v nvidia-smi >/dev/null 2>&1; then
		# Read-only queries: the card's settings are left as they are.
		run_logged "$ENVLOG" 30 nvidia-smi
		run_logged "$ENVLOG" 30 nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv
		run_logged "$ENVLOG" 30 nvidia-smi -q
	fi
	if [ $have_gpu = 1 ]; then
		record nvidia-smi ok $((SECONDS - t0)) "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)"
	else
		record nvidia-smi SKIP-GPU $((SECONDS - t0)) "$gpu_why"
	fi
fi

# ---- build ----
TEST_BIN=$BUILD/tests/attn_cuda_test
KVBENCH=$BUILD/kvbench
KSFT_DIR=$BUILD/kselftest
# A carried build/kselftest serves any $BUILD; else make extracts it.
if [ ! -f "$KSFT_DIR/kselftest_harness.h" ] && [ -f build/kselftest/kselftest_harness.h ]; then
	KSFT_DIR=build/kselftest
fi
LINUX_SOURCE_TAR=${LINUX_SOURCE_TAR:-/usr/src/linux-source-6.1.tar.xz}
ksft_ok=1
if [ ! -f "$KSFT_DIR/kselftest_harness.h" ] && [ ! -f "$LINUX_SOURCE_TAR" ]; then
	ksft_ok=0
fi

# Build for this GPU only when nvidia-smi names its architecture: half the
# nvcc time of CI's sm_80 + sm_90, and the same machine code for this GPU.
make_args=(BUILD="$BUILD" CUDA_HOME="$CUDA_HOME" KSFT_DIR="$KSFT_DIR" LINUX_SOURCE_TAR="$LINUX_SOURCE_TAR")
[ "$CC_BIN" = cc ] || make_args+=(CC="$CC_BIN")
cc_arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
if [[ "$cc_arch" =~ ^[0-9]+$ ]]; then
	make_args+=(NVCC_ARCHS="-gencode arch=compute_$cc_arch,code=sm_$cc_arch")
fi
if [ -n "${GPU_CHECKS_MAKE_ARGS:-}" ]; then
	read -ra extra <<<"$GPU_CHECKS_MAKE_ARGS"
	make_args+=("${extra[@]}")
fi

# kvbench with nothing but its attn command: bench_attn.o and bench_util.o
# need only libc, so this links where liburing/OpenSSL/xxHash are missing.
link_attn_only() {
	mkdir -p "$BUILD/gpu"
	printf '%s\n' 'int bench_attn_main(int argc, char **argv);' \
		'int main(int argc, char **argv) { return bench_attn_main(argc, argv); }' |
		"$CC_BIN" -O2 -Wall -o "$BUILD/gpu/kvbench-attn" -x c - -x none \
			"$BUILD/tools/kvbench/bench_attn.o" "$BUILD/tools/kvbench/bench_util.o" "$@" \
			-L"$CUDA_HOME/lib64" -lcudart_static -ldl -lrt -pthread -lstdc++ -lm &&
		KVBENCH=$BUILD/gpu/kvbench-attn
}

if want build && [ $do_build = 1 ]; then
	t0=$SECONDS
	lim=$(step_time 300)
	: >"$BUILDLOG"
	bdetail=() bstate=ok
	[ $ksft_ok = 1 ] || {
		echo "kselftest headers missing: no $KSFT_DIR/kselftest_harness.h and no" \
			"$LINUX_SOURCE_TAR; carry build/kselftest (run 'make" \
			"kselftest-headers' on the development machine first)" | tee -a "$BUILDLOG" >&2
	}
	if [ "$lim" = 0 ]; then
		record build SKIP 0 "no time left in the budget"
	elif ! command -v "$CC_BIN" >/dev/null 2>&1 || [ ! -x "$NVCC" ]; then
		echo "cc: $(command -v "$CC_BIN" || echo missing); nvcc: $NVCC $([ -x "$NVCC" ] || echo missing)" >>"$BUILDLOG"
		record build FAIL $((SECONDS - t0)) "no C compiler or no nvcc (see build.log)"
	elif command -v make >/dev/null 2>&1; then
		# First what needs no library beyond libc and CUDA (-k: the test
		# failing to build must not stop the attn objects), then the full
		# kvbench, whose libkv wants liburing, OpenSSL and xxHash.
		targets=("$BUILD/tools/kvbench/bench_attn.o" "$BUILD/tools/kvbench/bench_util.o"
			"$BUILD/libkv_attn.a" "$BUILD/libkv_cuda.a")
		[ $ksft_ok = 1 ] && targets+=("$TEST_BIN")
		run_logged "$BUILDLOG" "$lim" make -k -j"$JOBS" "${make_args[@]}" "${targets[@]}"
		st=$?
		timed_out $st && bdetail+=("make timed out")
		if [ $ksft_ok = 1 ] && [ $st = 0 ]; then
			bdetail+=("attn_cuda_test")
		else
			bstate=FAIL
			bdetail+=("attn_cuda_test NOT built$([ $ksft_ok = 1 ] || echo ": kselftest headers missing, carry build/kselftest")")
		fi
		lim=$(step_time 120)
		if [ "$lim" != 0 ] && run_logged "$BUILDLOG" "$lim" make -j"$JOBS" "${make_args[@]}" "$KVBENCH"; then
			bdetail+=("kvbench")
		elif [ -f "$BUILD/libkv_cuda.a" ] && [ -f "$BUILD/libkv_attn.a" ] &&
			echo "=== the full kvbench did not build: linking $BUILD/gpu/kvbench-attn" >>"$BUILDLOG" &&
			link_attn_only "$BUILD/libkv_attn.a" "$BUILD/libkv_cuda.a" >>"$BUILDLOG" 2>&1; then
			bdetail+=("kvbench attn-only ($KVBENCH: the full one did not build, see build.log; liburing/OpenSSL/xxHash headers missing?)")
		else
			bstate=FAIL
			bdetail+=("kvbench NOT built")
		fi
		d=$(printf '%s; ' "${bdetail[@]}")
		record build "$bstate" $((SECONDS - t0)) "${d%; }"
	else
		record build FAIL $((SECONDS - t0)) "make not found"
	fi
elif [ $do_build = 0 ]; then
	[ -x "$KVBENCH" ] || KVBENCH=$BUILD/gpu/kvbench-attn
	note "build: not run (--no-build): using $TEST_BIN and $KVBENCH"
fi

# ---- the CUDA test ----
# Status of a run of attn_cuda_test (plain or under a sanitizer) from its log
# section: sets t_state and t_detail.
judge_test() {	# LOG STATUS
	local log=$1 st=$2 totals nots tmo skips
	totals=$(grep -a '^# Totals:' "$log" | tail -n 1 | sed 's/^# Totals: //')
	nots=$(grep -a '^not ok' "$log" | sed 's/^not ok [0-9]* //' | tr '\n' ' ')
	tmo=$(grep -ac 'Test terminated by timeout' "$log")
	skips=$(sed -n 's/.*skip:\([0-9]*\).*/\1/p' <<<"$totals")
	t_detail="${totals:-no totals line}"
	if timed_out "$st"; then
		t_state=FAIL
		t_detail="timed out; $t_detail"
	elif [ "$st" != 0 ]; then
		t_state=FAIL
		t_detail="exit $st; $t_detail; failed: ${nots:-?}"
		[ "$tmo" -gt 0 ] && t_detail="$t_detail; $tmo hit the harness's 30 s per-test timeout"
	elif [ "${skips:-0}" != 0 ] && [ $have_gpu = 1 ]; then
		t_state=FAIL
		t_detail="$t_detail: tests skipped on a machine with a GPU ($(grep -a -m1 'SKIP' "$log" | sed 's/^.*SKIP *//'))"
	elif [ "${skips:-0}" != 0 ]; then
		t_state=SKIP-GPU
		t_detail="no GPU: $t_detail (the argument checks ran)"
	else
		t_state=ok
	fi
}

if want test; then
	t0=$SECONDS
	lim=$(step_time 180)
	: >"$TESTLOG"
	if [ ! -x "$TEST_BIN" ]; then
		record test FAIL 0 "$TEST_BIN was not built"
	elif [ "$lim" = 0 ]; then
		record test SKIP 0 "no time left in the budget"
	else
		run_logged "$TESTLOG" "$lim" "$TEST_BIN"
		judge_test "$TESTLOG" $?
		record test "$t_state" $((SECONDS - t0)) "$t_detail"
	fi
fi

# ---- kvbench attn --gpu ----
if want kvbench; then
	t0=$SECONDS
	lim=$(step_time 150)
	: >"$BENCHLOG"
	if [ ! -x "$KVBENCH" ]; then
		record kvbench FAIL 0 "no kvbench was built"
	elif [ "$lim" = 0 ]; then
		record kvbench SKIP 0 "no time left in the budget"
	else
		run_logged "$BENCHLOG" "$lim" "$KVBENCH" attn --gpu
		st=$?
		rows=$(grep -cE '^ *[0-9]+ +[0-9]+ +[0-9]+ ' "$BENCHLOG")
		if [ $st != 0 ]; then
			record kvbench FAIL $((SECONDS - t0)) "exit $st after $rows rows$(timed_out $st && echo ' (timed out)')"
		elif grep -q 'no GPU' "$BENCHLOG"; then
			if [ $have_gpu = 1 ]; then
				record kvbench FAIL $((SECONDS - t0)) "$(grep -m1 'no GPU' "$BENCHLOG")"
			else
				record kvbench SKIP-GPU $((SECONDS - t0)) "no GPU (kvbench said so and exited 0)"
			fi
		else
			record kvbench ok $((SECONDS - t0)) "$rows rows"
		fi
	fi
fi

# ---- the torch peer ----
if want torch; then
	t0=$SECONDS
	lim=$(step_time 180)
	: >"$TORCHLOG"
	if [ -z "$PY" ]; then
		record torch SKIP 0 "no python3"
	elif [ "$lim" = 0 ]; then
		record torch SKIP 0 "no time left in the budget"
	else
		# enable_gqa (or the fallback torch would use), and q folded onto the
		# KV heads: the second reads K/V once with any backend.
		PYTHONUNBUFFERED=1 run_logged "$TORCHLOG" "$lim" "$PY" tools/kvbench/attn_torch.py --gqa auto,fold --eager
		st=$?
		why=$(grep -m1 'skipped' "$TORCHLOG" | sed 's/^# *//')
		if [ $st = 0 ]; then
			record torch ok $((SECONDS - t0)) "$(grep -cE '^ *[0-9]+ +[0-9]+ +[0-9]+ ' "$TORCHLOG") rows"
		elif [ $st = 77 ] && [ $have_gpu = 0 ]; then
			# No GPU: at least show that the script runs, on the CPU.
			lim=$(step_time 120)
			if [ "$lim" != 0 ] && grep -q 'no CUDA device' "$TORCHLOG" &&
				PYTHONUNBUFFERED=1 run_logged "$TORCHLOG" "$lim" "$PY" tools/kvbench/attn_torch.py --device cpu --quick; then
				record torch SKIP-GPU $((SECONDS - t0)) "$why; CPU smoke test (--device cpu --quick) passed"
			elif grep -q 'no CUDA device' "$TORCHLOG"; then
				record torch FAIL $((SECONDS - t0)) "$why; CPU smoke test failed (see attn_torch.txt)"
			else
				record torch SKIP-GPU $((SECONDS - t0)) "$why"
			fi
		elif [ $st = 77 ] && grep -q 'cannot import torch' "$TORCHLOG"; then
			record torch SKIP $((SECONDS - t0)) "$why"
		else
			record torch FAIL $((SECONDS - t0)) "exit $st${why:+: $why}$(timed_out $st && echo ' (timed out)')"
		fi
	fi
fi

# ---- compute-sanitizer ----
# The test has no filter or quick mode (the 6.1 kselftest harness takes no
# options), so each tool runs the whole suite; every test runs in its own
# forked process (tracked with --target-processes all) under the harness's
# fixed 30 s per-test alarm.  A test killed by that alarm under a slow tool
# is a WARN, not a failure: the tool found nothing in what it saw.
sanitize() {	# TOOL CAP [TOOL-OPTIONS...]
	local tool=$1 cap=$2 t0=$SECONDS lim st tmp errs hz_err hz_warn
	shift 2
	lim=$(step_time "$cap")
	if [ $have_gpu = 0 ]; then
		record "$tool" SKIP-GPU 0 "no GPU"
		return
	elif [ -z "$SANITIZER" ]; then
		record "$tool" SKIP 0 "compute-sanitizer not found"
		return
	elif [ ! -x "$TEST_BIN" ]; then
		record "$tool" FAIL 0 "$TEST_BIN was not built"
		return
	elif [ "$lim" = 0 ]; then
		record "$tool" SKIP 0 "no time left in the budget"
		return
	fi
	# Outside $OUT, so that a run cut short leaves no ninth file there.
	tmp=$(mktemp "${TMPDIR:-/tmp}/gpu-checks-$tool.XXXXXX") || return
	run_logged "$tmp" "$lim" "$SANITIZER" --tool "$tool" --target-processes all "$@" "$TEST_BIN"
	st=$?
	cat "$tmp" >>"$SANLOG"
	errs=$(grep -a 'ERROR SUMMARY:' "$tmp" | sed 's/.*ERROR SUMMARY: *\([0-9]*\).*/\1/' | awk '{ s += $1 } END { print s + 0 }')
	hz_err=$(grep -a 'RACECHECK SUMMARY' "$tmp" | sed -n 's/.*(\([0-9]*\) error.*/\1/p' | awk '{ s += $1 } END { print s + 0 }')
	hz_warn=$(grep -a 'RACECHECK SUMMARY' "$tmp" | sed -n 's/.*, \([0-9]*\) warning.*/\1/p' | awk '{ s += $1 } END { print s + 0 }')
	judge_test "$tmp" "$st"
	if grep -aqi 'device not supported' "$tmp"; then
		record "$tool" SKIP $((SECONDS - t0)) "compute-sanitizer: device not supported on this runtime"
	elif [ "$errs" -gt 0 ] || [ "$hz_err" -gt 0 ]; then
		record "$tool" FAIL $((SECONDS - t0)) "$errs errors$([ "$tool" = racecheck ] && echo ", $hz_err hazards (error), $hz_warn (warning)"); test: $t_detail"
	elif [ "$t_state" = FAIL ] && grep -aq 'Test terminated by timeout' "$tmp" &&
		! timed_out "$st" && [ "$(grep -ac '^not ok' "$tmp")" = "$(grep -ac 'Test terminated by timeout' "$tmp")" ]; then
		record "$tool" WARN $((SECONDS - t0)) "0 errors; only harness timeouts: $t_detail"
	elif [ "$t_state" = FAIL ]; then
		record "$tool" FAIL $((SECONDS - t0)) "0 errors reported, but: $t_detail"
	elif [ "$hz_warn" -gt 0 ]; then
		record "$tool" WARN $((SECONDS - t0)) "0 errors, $hz_warn racecheck warnings; test: $t_detail"
	else
		record "$tool" ok $((SECONDS - t0)) "0 errors; test: $t_detail"
	fi
	rm -f "$tmp"
}

if want memcheck || want racecheck || want initcheck || want synccheck; then
	: >"$SANLOG"
	# Most telling first: the budget may run out before the last ones.
	want memcheck && sanitize memcheck 200
	want racecheck && sanitize racecheck 150
	want synccheck && sanitize synccheck 90
	want initcheck && sanitize initcheck 120
fi

# ---- the end ----
if want env && [ $have_gpu = 1 ]; then
	run_logged "$ENVLOG" 20 nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_event_reasons.active --format=csv
fi

# The device tool brings back files of at most 16 MiB: keep the head and
# the tail of anything bigger.
for f in "$OUT"/*; do
	[ -f "$f" ] || continue
	size=$(stat -c %s "$f")
	if [ "$size" -gt $((15 << 20)) ]; then
		{ head -c $((7 << 20)) "$f"; printf '\n\n[... %s bytes cut by gpu-checks.sh ...]\n\n' "$size"; tail -c $((7 << 20)) "$f"; } >"$f.cut" &&
			mv -f "$f.cut" "$f"
	fi
done

if [ $n_fail -gt 0 ]; then
	status=1
elif [ $n_skip_gpu -gt 0 ] && [ $have_gpu = 0 ]; then
	status=77
else
	status=0
fi
{
	printf '%-11s %-5s %5s  %s\n' step state secs detail
	for i in "${!names[@]}"; do
		printf '%-11s %-5s %5s  %s\n' "${names[$i]}" "${states[$i]}" "${secs[$i]}" "${details[$i]}"
	done
	echo "gpu-checks: $n_fail failed, $n_warn warned$([ $have_gpu = 1 ] || echo ", no GPU ($gpu_why): GPU steps skipped") in $((SECONDS - t_start)) s; exit $status" \
		"(0 ok, 1 failed, 77 no GPU); logs: $OUT"
} >"$SUMMARY"

# Last on stdout, where the device tool's output tail keeps it: the tables,
# the failing tests' lines, then the summary.
for f in "$BENCHLOG" "$TORCHLOG"; do
	[ -s "$f" ] || continue
	echo "=== $(basename "$f")"
	grep -av '^===' "$f" | head -n 80
done
if [ -s "$TESTLOG" ] && grep -aq '^not ok\|# FAIL\|Test terminated' "$TESTLOG"; then
	echo "=== attn_cuda_test.log: failures"
	grep -a '^not ok\|FAIL\|Test terminated\|: rel \|CUDA failed\|reference failed\|Expected' "$TESTLOG" | head -n 40
fi
echo "=== summary.txt"
cat "$SUMMARY"
exit $status
