#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Sharing against no sharing, as the worker count grows: for each count in
# $WORKERS (default 1 2 4 8) run kvserve on the same workload twice, with
# prefix pages shared through kvshared (with in-flight dedupe: $SHARE_ARGS,
# default --inflight-wait 2000) and with --no-share (each worker its own
# private cache, which still reuses its own prefixes), each in a fresh
# kvshared session so that no run finds another's pages.  Reports
# requests/s and tokens/s, prefill tokens computed, pages computed twice,
# KV pages resident per worker and resident in total (pool pages count
# once however many workers hold them; and those of the prompts' shared
# prefixes), and the CPU time a request of all the run's processes (the
# workers, kvshared, setup included: the work, which other load on the
# machine changes far less than the rates), as a markdown
# table on stdout and in $BUILD/$NAME.md (NAME default serve-scale), and
# plots throughput and memory against workers in $BUILD/$NAME.svg
# (gnuplot; skipped with a note if it is missing).
#
# The runs measure serving alone: --verify 0 unless the arguments say
# otherwise (the recompute would take most of the time; tests/serve checks
# the bits).  Other arguments go to every kvserve run.  The machine's load
# (/proc/loadavg) is printed before and after: with other work on the
# cores the ratios, not the absolute rates, are what compare.
#
# Usage: [WORKERS="1 2 4 8"] [ROUNDS=3] [NAME=serve-scale] [SHARE_ARGS=...]
#        tools/kvserve/scale.sh [kvserve options...]
set -euo pipefail

build=${BUILD:-build}
here=$(dirname "$0")
workers=${WORKERS:-1 2 4 8}
name=${NAME:-serve-scale}
md=$build/$name.md
dat=$build/$name.dat
svg=$build/$name.svg
rounds=${ROUNDS:-3}
args=(--verify 0 "$@")
read -r -a share <<<"${SHARE_ARGS---inflight-wait 2000}"


load() { cut -d' ' -f1-3 /proc/loadavg; }

# One run (first argument: the workers): print "rps tps prefill_tokens
# held_per_worker resident prefix_resident dups cpu_ms_per_request".
run() {
	local n=$1 out

	shift
	# times: the CPU time of the run's processes, kvshared's included.
	out=$(BUILD=$build "$here/run.sh" "${args[@]}" --workers "$n" "$@" 2>&1
	      st=$?; times; exit $st) || {
		echo "scale.sh: kvserve --workers $n $* failed:" >&2
		echo "$out" >&2
		return 1
	}
	echo "$out" | awk -v n="$n" '
		/^  requests served/ { req = $3 }
		/^  throughput/ { rps = $2; tps = $4 }
		/^  prefill / { pf = $2 }
		/^  pages computed/ { dup = substr($4, 3) }
		/^  KV pages at the end/ { res = $6; pre = $8; sub(/^\(/, "", pre); held = $(NF - 3) }
		/^[0-9]+m[0-9.]+s [0-9]+m[0-9.]+s$/ {
			split($1, u, "m"); split($2, s, "m")
			cpu = (u[1] * 60 + u[2] + s[1] * 60 + s[2]) * 1000
		}
		END { print rps, tps, pf, held, res, pre, dup, (req ? cpu / req : 0) }'
}

load_before=$(load)
# Rounds of every configuration, shared and --no-share side by side (in
# alternating order); the table shows medians over the rounds, and the
# ratios are taken within a round before their median is.
raw=$build/$name.raw
: >"$raw"
for round in $(seq "$rounds"); do
	for n in $workers; do
		if [ $((round % 2)) = 1 ]; then
			s=$(run "$n" "${share[@]}"); p=$(run "$n" --no-share)
		else
			p=$(run "$n" --no-share); s=$(run "$n" "${share[@]}")
		fi
		echo "$n $s $p" >>"$raw"
	done
done
# Per worker count: the median of each column and of the ratios.
awk -f "$here/median.awk" -f "$here/scale_medians.awk" "$raw" >"$dat"
load_after=$(load)

{
	echo "kvserve scaling: shared prefix pages (kvshared, host memory; ${share[*]:-no in-flight dedupe})"
	echo "vs --no-share (private caches), \`tools/kvserve/scale.sh ${*:-}\`: medians of $rounds rounds"
	echo "($(nproc) cores; load average before $load_before, after $load_after)"
	echo
	echo "| workers | mode | requests/s | tokens/s | prefill tokens computed | pages computed twice | KV pages held per worker | KV pages resident | of which prompt prefixes | CPU ms a request |"
	echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
	awk '{
		printf "| %d | shared | %.2f | %.0f | %.0f | %.0f | %.1f | %.0f | %.0f | %.1f |\n",
		       $1, $2, $3, $4, $8, $5, $6, $7, $9
		printf "| %d | no-share | %.2f | %.0f | %.0f | %.0f | %.1f | %.0f | %.0f | %.1f |\n",
		       $1, $10, $11, $12, $16, $13, $14, $15, $17
	}' "$dat"
	echo
	echo "| workers | throughput shared / no-share | CPU work no-share / shared | prefix memory shared / no-share | 1/N |"
	echo "|---:|---:|---:|---:|---:|"
	awk '{ printf "| %d | %.2fx | %.2fx | %.3f | %.3f |\n", $1, $18, $20, $19, 1 / $1 }' "$dat"
	echo
	awk '$1 == 4 {
		t = $18; m = $19; w = $20
		printf "Goals at 4 workers: throughput %.2fx no-share (goal >= 3x): %s; ", t,
		       (t >= 3 ? "met" : "NOT met")
		printf "prefix memory %.3f of no-share (goal ~1/4 = 0.250): %s.\n", m,
		       ((m > 0.2 && m < 0.3) ? "met" : "NOT met")
		printf "The work sharing saved: %.2fx (CPU a request, kvshared included), the most the\n", w
		printf "throughput can gain when the run has the cores to itself and never waits.\n"
		# Sharing saves only the prefix work each private worker repeats:
		# the prefill tokens both modes compute bound the gain.
		printf "The workload itself caps the gain near %.2fx: prefill tokens computed, no-share / shared.\n",
		       ($4 > 0 ? $12 / $4 : 0)
	}' "$dat"
	# With more runnable work than cores, the rates follow the other load.
	awk -v cores="$(nproc)" -v a="$load_before" -v b="$load_after" 'BEGIN {
		split(a, x, " "); split(b, y, " ")
		if (x[1] > cores || y[1] > cores)
			printf "The machine was loaded (load average %s, then %s, on %d cores): " \
			       "the rates and their ratios move with that load; the work ratio " \
			       "moves less.\n", x[1], y[1], cores
	}'
} | tee "$md"

if command -v gnuplot >/dev/null 2>&1; then
	gnuplot <<EOF
set terminal svg size 960,420 dynamic font "sans,11"
set output "$svg"
set multiplot layout 1,2 title "kvserve: shared prefix pages vs --no-share"
set xlabel "workers"
set logscale x 2
set xrange [0.8:10]
set xtics (1, 2, 4, 8, 16)
set key top left
set grid
set ylabel "requests/s"
set yrange [0:*]
plot "$dat" using 1:2 with linespoints title "shared", \
     "$dat" using 1:10 with linespoints title "no-share"
set ylabel "KV pages resident (total)"
plot "$dat" using 1:6 with linespoints title "shared: all", \
     "$dat" using 1:14 with linespoints title "no-share: all", \
     "$dat" using 1:7 with linespoints dt 2 title "shared: prefixes", \
     "$dat" using 1:15 with linespoints dt 2 title "no-share: prefixes"
unset multiplot
EOF
	echo "scale.sh: table in $md, plot in $svg"
else
	echo "scale.sh: table in $md; no plot: gnuplot is missing (scripts/setup.sh installs it)"
fi
