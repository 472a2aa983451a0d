#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# kvserve_test: the main job end to end on the embedded default (kvshared
# on host memory, no module), as TAP.  Every request is recomputed from
# scratch and compared to the bit (--verify 1), so a page shared wrongly,
# memory not shared, or attention that reads the wrong slot fails the
# run; here we also check that sharing happened at all, and that the
# check itself catches pages that are not this model's.
set -uo pipefail

build=${BUILD:-build}
out=$(mktemp)
out2=$(mktemp)
trap 'rm -f "$out" "$out2"' EXIT

echo "TAP version 13"
echo "1..7"
BUILD=$build tools/kvserve/run.sh --workers 3 --requests 8 --system-tokens 512 \
	--doc-tokens 512 --docs 2 --question-tokens 40 --verify 1 >"$out" 2>&1
st=$?
sed 's/^/# /' "$out"

if [ "$st" -eq 0 ]; then echo "ok 1 kvserve: every request equal to a recompute, invariants hold"
else echo "not ok 1 kvserve: exit status $st"; fi

# 3 x 8 requests, 66 full pages each (1064 tokens): at most the first
# computations of the 64 shared pages are not from the cache.
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

# All 24 requests went through the check, and it compared KV bytes.
ver=$(sed -n 's/.*verified *\([0-9]*\) requests recomputed.*bit: \([0-9]*\) bytes.*/\1 \2/p' "$out")
if [ "${ver%% *}" = 24 ] && [ "${ver##* }" -gt 0 ] 2>/dev/null; then
	echo "ok 5 kvserve: 24 requests and ${ver##* } bytes of KV checked against a recompute"
else
	echo "not ok 5 kvserve: verified '${ver}' (expected 24 requests and some bytes)"
fi

# Two models under one salt: the second finds the first's pages through
# the arbiter, and the recompute must catch that they are not its own.
# With the default salt (which names the model) the second model shares
# nothing wrongly and passes, on the same pool.
BUILD=$build tools/kvshared-session.sh \
	--pool "kvserve:pages=1024,layers=2,kv_heads=2,head_dim=64,tokens_per_page=16,dtype=bf16,mode=0600,memory=host" \
	-- bash -c '
	a="--workers 2 --requests 3 --system-tokens 256 --doc-tokens 256 --docs 1 --question-tokens 20 --verify 1"
	"$1/kvserve" $a --salt shared --model-seed 1 >/dev/null 2>&1; echo "first=$?"
	"$1/kvserve" $a --salt shared --model-seed 2 2>&1; echo "second=$?"
	"$1/kvserve" $a --model-seed 2 2>&1; echo "third=$?"
	"$1/kvctl" stats kvserve --check' _ "$build" >"$out2" 2>&1
sed 's/^/# /' "$out2"
if grep -q '^first=0$' "$out2" && grep -q '^second=1$' "$out2" &&
   grep -q 'FAILED: [1-9][0-9]* requests differ from a recompute' "$out2"; then
	echo "ok 6 kvserve: another model's pages under the same salt are caught"
else
	echo "not ok 6 kvserve: another model's pages under the same salt went unnoticed"
fi
if grep -q '^third=0$' "$out2" && grep -q '^invariants *ok' "$out2" &&
   grep -q '^n_held *0$' "$out2"; then
	echo "ok 7 kvserve: the model-named salt serves right; pool consistent after the failures"
else
	echo "not ok 7 kvserve: third run or pool check failed"
fi
