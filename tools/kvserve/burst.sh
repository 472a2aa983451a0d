#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Time to first token under a burst: $WORKERS workers (default 4) start
# together, each with its first request on the same new document (kvserve
# --burst: a prefix no one has computed), three ways side by side in each
# round, in a fresh kvshared session each: shared with in-flight dedupe
# (--inflight-wait 2000: one worker computes each prefix page, the others
# wait for it), shared without it (--inflight-wait 0: every worker computes
# the prefix and PUBLISH keeps one), and --no-share.  Reports, as medians
# over $ROUNDS rounds (default 3): the first requests' time to first token
# (median, p90 and max over the workers, from the common start), pages
# computed and computed twice, and throughput, as a markdown table on
# stdout and in $BUILD/serve-burst.md.  Other arguments go to every
# kvserve run (default --requests 4 --verify 0).
#
# Usage: [WORKERS=4] [ROUNDS=3] tools/kvserve/burst.sh [kvserve options...]
set -euo pipefail

build=${BUILD:-build}
here=$(dirname "$0")
workers=${WORKERS:-4}
rounds=${ROUNDS:-3}
md=$build/serve-burst.md
raw=$build/serve-burst.raw
args=(--requests 4 --verify 0 "$@" --workers "$workers" --burst)
modes=("--inflight-wait 2000" "--inflight-wait 0" "--no-share")
names=("shared, --inflight-wait 2000" "shared, --inflight-wait 0 (no in-flight dedupe)" "--no-share")

load() { cut -d' ' -f1-3 /proc/loadavg; }

# One run: print "ttft_median ttft_p90 ttft_max computed dups rps".
run() {
	local out

	# shellcheck disable=SC2086 # a mode is one or more words
	out=$(BUILD=$build "$here/run.sh" "${args[@]}" $1 2>&1) || {
		echo "burst.sh: kvserve ${args[*]} $1 failed:" >&2
		echo "$out" >&2
		return 1
	}
	echo "$out" | awk '
		/^  pages computed/ { pc = $3; dup = substr($4, 3) }
		/^  throughput/ { rps = $2 }
		/^  time to first token/ {
			sub(/.*common start: median /, "")
			med = $1; p90 = $4; sub(/,$/, "", p90); max = $6
		}
		END { print med, p90, max, pc, dup, rps }'
}

load_before=$(load)
: >"$raw"
for round in $(seq "$rounds"); do
	# Rotate the order, so that no mode always runs first.
	for i in 0 1 2; do
		m=$(((i + round) % 3))
		echo "$m $(run "${modes[$m]}")" >>"$raw"
	done
done
load_after=$(load)

{
	echo "kvserve under a burst: $workers workers start together, each first request on one new"
	echo "document (\`tools/kvserve/burst.sh ${*:-}\`, kvserve ${args[*]}): medians of $rounds"
	echo "rounds ($(nproc) cores; load average before $load_before, after $load_after)"
	echo
	echo "| mode | TTFT of the burst: median ms | p90 ms | max ms | pages computed | computed twice | requests/s |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	for m in 0 1 2; do
		awk -v m="$m" -v name="${names[$m]}" -f "$here/median.awk" \
		    -f "$here/burst_row.awk" "$raw"
	done
} | tee "$md"
echo "burst.sh: table in $md"
