#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The Python binding's suite for `make test`: pytest (Debian's
# /usr/bin/python3 and python3-pytest) over tests/python/test_*.py, with the
# package from build/python, reported as TAP on stdout, one line per test;
# pytest's own report goes to stderr.  Exit status: pytest's (0: all passed).
# Extra arguments go to pytest (e.g. -k key).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-build}
case "$build" in /*) ;; *) build=$root/$build ;; esac
python=${PYTHON:-/usr/bin/python3}

export PYTHONPATH=$build/python:$here${PYTHONPATH:+:$PYTHONPATH}
export KVS_BUILD=$build
export PYTHONDONTWRITEBYTECODE=1
exec 3>&1
export KVS_TAP_FD=3
cd "$here" || exit 1
"$python" -m pytest -p tap_plugin -p no:cacheprovider -q -rfE "$@" "$here" 1>&2
