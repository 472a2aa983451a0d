#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# kvshare installed with pip into a virtual environment (issue 22), as an
# engine's operator would: a venv of Debian's python3 with its own pip
# (python3-venv; --system-site-packages, for numpy, torch, pytest and the
# build dependencies python3-setuptools and python3-wheel), `pip wheel` of
# python/ and `pip install` of that wheel, offline.  Then the whole Python
# suite (tests/python) and tests/pip/test_installed.py run against the
# installed copy, from a temporary directory outside the checkout, with no
# build/python on the path.  build/ still provides kvshared, kvpy_ref and
# the CUDA stand-in (KVS_BUILD); only the package comes from the venv.
#
# TAP on stdout, one line per pytest test; a failed setup step is one
# "not ok" with pip's output.  pip's and pytest's reports go to stderr.
# Extra arguments go to pytest (e.g. -k installed).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-build}
case "$build" in /*) ;; *) build=$root/$build ;; esac
python=${PYTHON:-/usr/bin/python3}

work=$(mktemp -d "${TMPDIR:-/tmp}/kvshare-venv.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
# Readable by all, as an engine's venv is: the suite's attackers run as a
# second uid (65534) with this venv's python and must import the package.
chmod 0755 "$work"
log=$work/setup.log

setup_failed() {
	printf 'TAP version 13\n1..1\nnot ok 1 %s\n' "$1"
	tail -n 40 "$log" | sed 's/^/#   /'
	exit 1
}

# Nothing but the checkout and the interpreter's own packages: no index, no
# find-links or pip configuration of this machine, no user site.
unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL PYTHONPATH
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
export PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1

venv=$work/venv
pip=("$venv/bin/python" -m pip)
SECONDS=0
"$python" -m venv --system-site-packages "$venv" > "$log" 2>&1 ||
	setup_failed "$python -m venv --system-site-packages (python3-venv installed?)"
"${pip[@]}" wheel --no-index --no-build-isolation --no-deps -w "$work/wheels" \
	"$root/python" >> "$log" 2>&1 ||
	setup_failed "pip wheel --no-index --no-build-isolation $root/python"
wheel=$(ls "$work"/wheels/kvshare-*.whl 2>/dev/null)
[ "$(echo "$wheel" | wc -w)" = 1 ] ||
	setup_failed "pip wheel made '$wheel', not one kvshare-*.whl"
"${pip[@]}" install --no-index "$wheel" >> "$log" 2>&1 ||
	setup_failed "pip install --no-index $wheel"
cat "$log" >&2
echo "venv_test.sh: venv, wheel and install took ${SECONDS}s" >&2

export KVS_BUILD=$build KVS_VENV=$venv KVS_WHEEL=$wheel
# The installed package has no build tree beside it: the demo finds the
# build's kvshared the documented way.
export KVSHARED=$build/kvshared
# tap_plugin only: the package must come from the venv.
export PYTHONPATH=$root/tests/python
exec 3>&1
export KVS_TAP_FD=3
cd "$work" || exit 1
"$venv/bin/python" -m pytest -p tap_plugin -p no:cacheprovider -q -rfE "$@" \
	"$root/tests/python" "$here" 1>&2
