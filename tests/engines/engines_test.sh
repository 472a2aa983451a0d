#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# A suite under the engine environment (scripts/engine-env.sh), as TAP on
# stdout, one line per pytest test (tests/python/tap_plugin.py); pytest's
# report goes to stderr.
#
#   engines_test.sh [PYTEST ARGS]                 tests/engines (real vLLM engines)
#   engines_test.sh --python-suite [PYTEST ARGS]  tests/python under torch 2.x
#
# The package is the environment's pip-installed kvshare (built against its
# numpy 2), never build/python (built against Debian's numpy 1); build/
# provides kvshared, kvpy_ref and the CUDA stand-in (KVS_BUILD).  An
# environment that cannot be built is one "not ok" with the reason.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-build}
case "$build" in /*) ;; *) build=$root/$build ;; esac

suite=$here
if [ "${1:-}" = --python-suite ]; then
	suite=$root/tests/python
	shift
	# torch 2.13's OpenMP pool spins: on two loaded cores the suite's tiny
	# decoders ran 4x slower with it (test_stopped_kvshared_keeps_serving
	# took 41 s instead of 10), Debian's torch 1.13 does not.
	export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
fi

log=$(mktemp "${TMPDIR:-/tmp}/kvshare-engine-env.XXXXXX")
trap 'rm -f "$log"' EXIT
if ! python=$("$root/scripts/engine-env.sh" 2>"$log"); then
	printf 'TAP version 13\n1..1\nnot ok 1 the engine environment (scripts/engine-env.sh) failed\n'
	tail -n 30 "$log" | sed 's/^/#   /'
	exit 1
fi
cat "$log" >&2

export KVS_BUILD=$build KVSHARED=$build/kvshared
export PYTHONPATH=$root/tests/python PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1
exec 3>&1
export KVS_TAP_FD=3
cd "$suite" || exit 1
"$python" -m pytest -p tap_plugin -p no:cacheprovider -q -rfE "$@" "$suite" 1>&2
