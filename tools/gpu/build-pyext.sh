#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Build the kvshare Python package's extension inside an unpacked GPU bundle
# for PYTHON, the GPU machine's python with torch (tools/gpu/gpu-checks.sh,
# step copies): the bundle cannot carry a build for a python it does not
# know.  Only the extension's own C files are compiled (py/kvshare/*.c, a
# few seconds); libkv comes built, as lib/libkv-pic.a, and links against
# the bundle's lib/ (liburing, libcrypto, libxxhash; RPATH to it).  Needs a
# C compiler, PYTHON's Python.h and numpy, and cuda.h ($CUDA_HOME/include).
#
# Usage: build-pyext.sh PYTHON   (prints the package directory for PYTHONPATH)
set -euo pipefail

py=${1:?usage: build-pyext.sh PYTHON}
cd "$(dirname "$0")/../.."
[ -f MANIFEST ] && [ -d py/kvshare ] || { echo "build-pyext.sh: not in a GPU bundle" >&2; exit 1; }
inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
npinc=$("$py" -c 'import numpy; print(numpy.get_include())')
suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
cuda_inc=${CUDA_HOME:-/usr/local/cuda}/include
[ -f "$inc/Python.h" ] || { echo "build-pyext.sh: no Python.h in $inc ($py)" >&2; exit 1; }
[ -f "$cuda_inc/cuda.h" ] || { echo "build-pyext.sh: no cuda.h in $cuda_inc (set CUDA_HOME)" >&2; exit 1; }
cc=${CC:-cc}
command -v "$cc" >/dev/null || cc=gcc
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvshare-pyext.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
version=$(cat py/VERSION)
pids=()
for c in py/kvshare/*.c; do
	"$cc" -O2 -fPIC -fvisibility=hidden -D_GNU_SOURCE -DKVSHARE_VERSION="\"$version\"" \
		-Ipy/include -Ipy/include/uapi -I"$inc" -I"$npinc" -isystem "$cuda_inc" \
		-c "$c" -o "$tmp/$(basename "$c" .c).o" &
	pids+=($!)
done
for p in "${pids[@]}"; do
	wait "$p" || { echo "build-pyext.sh: compiling failed" >&2; exit 1; }
done
libs=()
for l in liburing libcrypto libxxhash; do
	f=$(ls lib/$l.so.* 2>/dev/null | head -n 1)
	[ -n "$f" ] || { echo "build-pyext.sh: the bundle has no lib/$l.so.*" >&2; exit 1; }
	libs+=("$f")
done
"$cc" -shared -o "py/kvshare/_kvshare$suffix" "$tmp"/*.o lib/libkv-pic.a "${libs[@]}" \
	-ldl -pthread -Wl,--exclude-libs,ALL -Wl,-rpath,'$ORIGIN/../../lib'
echo "$PWD/py"
