#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The GPU bundle (make gpu-bundle, tools/gpu/gpu-bundle.mk) is what a GPU
# machine gets: check that it can go there.  TAP:
#   1. no file in it holds this build directory's path (strings)
#   2. every library its binaries load is in its lib/ or a system one
#   3. it is at most MAX_MIB MiB
#   4-5. unpacked from its .tar.gz somewhere else, its gpu_pool_test (which
#      must find the bundle's kvshared next to itself) and cuda_vmm_test pass
#      on the CUDA driver stand-in
#   6. there, its copy bench runs as gpu-checks.sh runs it, on the stand-in:
#      tools/gpu/build-pyext.sh builds the extension for this python
#      (Debian's; the GPU machine's is another), then vllm_bench.py
#      --device standin with the bundle's kvshared and vLLM peer files
#
# Usage: gpu_bundle_test.sh BUNDLE_DIR STUB_DIR MAX_MIB   (from the repository root)
set -uo pipefail

bundle=$1 stub=$(cd "$2" && pwd) max_mib=$3
root=$(pwd -P)
n=0 failed=0

tap() {	# OK DESCRIPTION
	n=$((n + 1))
	if [ "$1" = 0 ]; then
		echo "ok $n $2"
	else
		echo "not ok $n $2"
		failed=1
	fi
}

echo "TAP version 13"
echo "1..6"
log=$(tools/gpu/pack-bundle.sh --check --out "$bundle" --build-dir "$root" --max-mib "$max_mib" 2>&1)
echo "$log" | sed 's/^/# /'
! echo "$log" | grep -q "holds the build directory's path"
tap $? "gpu_bundle: no file holds the build directory's path ($root)"
! echo "$log" | grep -q "needs libraries outside the bundle"
tap $? "gpu_bundle: every library is in lib/ or the system's"
! echo "$log" | grep -q "MiB, more than"
tap $? "gpu_bundle: at most $max_mib MiB ($(du -sh "$bundle" | cut -f1))"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu-bundle-test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
chmod 0755 "$tmp"	# the suites' unprivileged children reach the daemon's socket
tar -C "$tmp" -xzf "$bundle.tar.gz"
b=$tmp/$(basename "$bundle")
for s in gpu_pool_test cuda_vmm_test; do
	out=$(cd "$tmp" && env -u KVSHARED LD_LIBRARY_PATH="$stub" "$b/bin/$s" 2>&1)
	st=$?
	echo "$out" | grep -E '^(not ok|# Totals)' | sed 's/^/# /'
	tap $st "gpu_bundle: $s unpacked in $tmp passes on the stand-in (exit $st)"
done
py=${PYTHON:-/usr/bin/python3}
out=$(cd "$tmp" && pypath=$("$b/tools/gpu/build-pyext.sh" "$py") &&
	env -u PYTHONPATH LD_LIBRARY_PATH="$stub" KVSHARED="$b/bin/kvshared" KVS_PEERS="$b/peers" \
	PYTHONPATH="$pypath" "$py" "$b/tools/kvbench/vllm_bench.py" --device standin \
	--blocks 2 --reps 1 2>&1)
st=$?
echo "$out" | tail -n 4 | sed 's/^/# /'
[ $st = 0 ] && echo "$out" | grep -q '^goal copy save'
tap $? "gpu_bundle: its copy bench builds its extension and runs there on the stand-in (exit $st)"
exit $failed
