#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Pack the GPU bundle (tools/gpu/gpu-bundle.mk runs this after building):
#
#   OUT/bin/      attn_cuda_test gpu_pool_test cuda_vmm_test kvshared
#                 kvserve (the CUDA build, kvserve-cuda) kvbench kvctl:
#                 debug info stripped, RPATH $ORIGIN/../lib
#   OUT/lib/      every shared library they load that is not part of glibc,
#                 libstdc++ or libgcc (liburing, libxxhash, libcrypto, the
#                 sanitizer runtimes); never libcuda: the driver is the GPU
#                 machine's, and the test stand-in is not a driver
#   OUT/tools/    gpu/gpu-checks.sh gpu/gpu_table.py kvshared-session.sh
#                 kvbench/attn_torch.py (+ bench_attn.c, which it reads),
#                 kvbench/vllm_bench.py and gpu/build-pyext.sh (the copy bench)
#   OUT/py/       the Python package's sources (kvshare/, include/, VERSION):
#                 build-pyext.sh builds its extension there for the GPU
#                 machine's python, linking OUT/lib/libkv-pic.a (libkv, -fPIC)
#   OUT/peers/vllm, OUT/tests/python/vllm_peers.py
#                 vLLM's interface files the copy bench loads (KVS_PEERS)
#   OUT/MANIFEST  what was built from what, and the sizes
#   OUT.tar.gz    the same, one file
#
# Then the checks (alone with --check): no file of OUT holds the build
# directory's path (strings(1), so a moved bundle cannot depend on it), no
# binary needs a library that is neither in OUT/lib nor a system one, and
# OUT is at most --max-mib MiB.
#
# Usage: pack-bundle.sh --obj DIR --out DIR --build-dir PATH [--max-mib N]
#        pack-bundle.sh --check --out DIR --build-dir PATH [--max-mib N]
set -euo pipefail

obj= out= build_dir= max_mib=48 check_only=0
while [ $# -gt 0 ]; do
	case "$1" in
	--obj) obj=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--build-dir) build_dir=$2; shift 2 ;;
	--max-mib) max_mib=$2; shift 2 ;;
	--check) check_only=1; shift ;;
	*) echo "pack-bundle.sh: unknown argument '$1'" >&2; exit 2 ;;
	esac
done
[ -n "$out" ] && [ -n "$build_dir" ] || { echo "pack-bundle.sh: --out and --build-dir are needed" >&2; exit 2; }
[ $check_only = 1 ] || [ -n "$obj" ] || { echo "pack-bundle.sh: --obj is needed" >&2; exit 2; }

# Libraries a GPU machine with a driver always has (glibc, the C++ runtime).
is_system_lib() {
	case "$1" in
	linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libdl.so.* | \
		libpthread.so.* | librt.so.* | libgcc_s.so.* | libstdc++.so.*) return 0 ;;
	esac
	return 1
}

# The bundle's binaries: name in bin/ <- path in the build tree.
BINS=(attn_cuda_test:tests/attn_cuda_test gpu_pool_test:tests/gpu/gpu_pool_test
	cuda_vmm_test:tests/gpu/cuda_vmm_test kvshared:kvshared kvserve:kvserve-cuda
	kvbench:kvbench kvctl:kvctl)
TOOLS=(tools/gpu/gpu-checks.sh tools/gpu/gpu_table.py tools/kvshared-session.sh
	tools/kvbench/attn_torch.py tools/kvbench/bench_attn.c tools/kvbench/vllm_bench.py
	tools/gpu/build-pyext.sh tests/python/vllm_peers.py)
# The copy bench's Python side: the package's sources and vLLM's peer files.
# Those are vLLM's own interface files, kept outside the repository in
# ../shared/peers beside the checkout (KVS_PEERS elsewhere): a bench that
# loads the engines' interface files is the one place outside tests/ that
# may refer there.
PEERS=${KVS_PEERS:-$(dirname "$0")/../../../shared/peers}
# The libraries the extension links (build-pyext.sh), besides the binaries'.
PYEXT_LIBS=(liburing libcrypto libxxhash)

pack() {
	local b name src lib n
	rm -rf "$out" "$out.tar.gz"
	mkdir -p "$out/bin" "$out/lib" "$out/tools/gpu" "$out/tools/kvbench" \
		"$out/tests/python" "$out/py/kvshare" "$out/py/include/uapi/linux" "$out/peers"
	for b in "${BINS[@]}"; do
		name=${b%%:*} src=$obj/${b#*:}
		[ -x "$src" ] || { echo "pack-bundle.sh: $src was not built" >&2; exit 1; }
		strip --strip-debug -o "$out/bin/$name" "$src"
		chmod 0755 "$out/bin/$name"
	done
	# Shared libraries, resolved here (ldd), copied once each.
	for b in "$out"/bin/*; do
		ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
	done | sort -u | while read -r n lib; do
		is_system_lib "$n" && continue
		case "$n" in libcuda.so*) continue ;; esac
		cp -L "$lib" "$out/lib/$n"
		strip --strip-debug "$out/lib/$n"
	done
	for n in "${PYEXT_LIBS[@]}"; do
		lib=$(realpath "$(${CC:-cc} -print-file-name="$n.so")")
		n=$(objdump -p "$lib" | awk '$1 == "SONAME" { print $2 }')
		[ -n "$n" ] || { echo "pack-bundle.sh: no $lib to link the extension with" >&2; exit 1; }
		[ -f "$out/lib/$n" ] || { cp -L "$lib" "$out/lib/$n"; strip --strip-debug "$out/lib/$n"; }
	done
	[ -f "$obj/pic/libkv.a" ] || { echo "pack-bundle.sh: $obj/pic/libkv.a was not built" >&2; exit 1; }
	strip --strip-debug -o "$out/lib/libkv-pic.a" "$obj/pic/libkv.a"
	for b in "$out"/bin/*; do
		patchelf --set-rpath '$ORIGIN/../lib' "$b"
	done
	for t in "${TOOLS[@]}"; do
		cp "$t" "$out/$t"
	done
	cp python/kvshare/*.py python/kvshare/*.c python/kvshare/*.h "$out/py/kvshare/"
	cp -r include/kvshare "$out/py/include/"
	cp include/uapi/linux/kvshare.h "$out/py/include/uapi/linux/"
	cp dist/VERSION "$out/py/VERSION"
	[ -d "$PEERS/vllm/vllm" ] || { echo "pack-bundle.sh: no vLLM peer files at $PEERS/vllm" >&2; exit 1; }
	cp -r "$PEERS/vllm" "$out/peers/vllm"
	{
		echo "kvshare GPU bundle (make gpu-bundle): run tools/gpu/gpu-checks.sh from here"
		echo "built    $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
		echo "commit   $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
		echo "nvcc     $("${NVCC:-/usr/local/cuda/bin/nvcc}" --version 2>/dev/null | tail -n 1)"
		echo "archs    sm_80 sm_90 (SASS only)"
		(cd "$out" && find bin lib tools py tests -type f -printf '%-40p %10s\n' | sort)
		echo "peers    $(cd "$out" && find peers -type f | wc -l) files of vLLM's interface (peers/vllm)"
	} >"$out/MANIFEST"
	tar -C "$(dirname "$out")" -czf "$out.tar.gz" "$(basename "$out")"
}

check() {
	local bad=0 f size mib missing packed
	[ -d "$out/bin" ] || { echo "pack-bundle.sh: no bundle at $out" >&2; exit 1; }
	# The build directory's path, in any file (binaries, libraries, scripts).
	while IFS= read -r -d '' f; do
		if strings -a "$f" | grep -F "$build_dir" >/dev/null; then
			echo "pack-bundle.sh: $f holds the build directory's path ($build_dir):" >&2
			strings -a "$f" | grep -F "$build_dir" | sort | uniq -c | head -n 5 >&2
			bad=1
		fi
	done < <(find "$out" -type f -print0)
	# Every library a binary needs: in lib/, or a system one.
	libdir=$(cd "$out/lib" && pwd -P)
	for f in "$out"/bin/*; do
		missing=$(ldd "$f" 2>/dev/null | awk '$2 == "=>" { print $1, $3 }' |
			while read -r n p; do
				is_system_lib "$n" && continue
				case "$(realpath -m "$p")" in "$libdir"/*) continue ;; esac
				case "$n" in libcuda.so*) continue ;; esac
				echo "$n($p)"
			done)
		if [ -n "$missing" ]; then
			echo "pack-bundle.sh: $f needs libraries outside the bundle: $missing" >&2
			bad=1
		fi
	done
	size=$(du -sb "$out" | cut -f1)
	mib=$(((size + 1048575) / 1048576))
	if [ "$size" -gt $((max_mib * 1048576)) ]; then
		echo "pack-bundle.sh: $out is $mib MiB, more than $max_mib MiB" >&2
		bad=1
	fi
	[ $bad = 0 ] || exit 1
	packed=
	[ -f "$out.tar.gz" ] && packed=$(du -sb "$out.tar.gz" | awk '{ printf ", %.1f MiB packed", $1 / 1048576 }')
	echo "gpu-bundle: $out ($mib MiB$packed): relocatable (no $build_dir inside), every library in lib/ or the system's"
}

[ $check_only = 1 ] || pack
check
