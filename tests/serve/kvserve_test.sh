#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# kvserve_test: the main job end to end on the embedded default (kvshared
# on host memory, no module), as TAP.  Each worker checks every page it
# reads byte for byte, so a page shared wrongly or memory not shared
# fails the run; here we also check that sharing happened at all.
set -uo pipefail

build=${BUILD:-build}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

echo "TAP version 13"
echo "1..4"
BUILD=$build tools/kvserve/run.sh --workers 3 --requests 8 --system-tokens 512 \
	--doc-tokens 512 --docs 2 --question-tokens 40 >"$out" 2>&1
st=$?
sed 's/^/# /' "$out"

if [ "$st" -eq 0 ]; then echo "ok 1 kvserve: every page read back right, invariants hold"
else echo "not ok 1 kvserve: exit status $st"; fi

# 3 x 8 requests, 64 full pages each (1024 shared + 40 unique tokens):
# all but the first computations of the 64 shared pages come from the cache.
hits=$(sed -n 's/.*pages from the cache *\([0-9]*\) (.*/\1/p' "$out")
if [ -n "$hits" ] && [ "$hits" -ge 1000 ]; then echo "ok 2 kvserve: $hits pages from the cache"
else echo "not ok 2 kvserve: pages from the cache: '${hits}' (expected >= 1000)"; fi

# Workers start together: some pages must have come from another worker.
remote=$(sed -n 's/.*tree, \([0-9]*\) found through the arbiter.*/\1/p' "$out")
if [ -n "$remote" ] && [ "$remote" -gt 0 ]; then echo "ok 3 kvserve: $remote pages computed by another worker"
else echo "not ok 3 kvserve: pages found through the arbiter: '${remote}' (expected > 0)"; fi

if grep -q '^invariants *ok' "$out" && grep -q '^n_held *0$' "$out"; then
	echo "ok 4 kvserve: pool consistent, nothing held after the workers exit"
else
	echo "not ok 4 kvserve: pool not consistent after the run"
fi
