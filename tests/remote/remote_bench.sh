#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# remote_bench (make bench): the remote tier's speed on this machine.
#
# 1. One 256-page chain (a 4096-token system prompt of 16-token bf16
#    pages of 16 KiB: 4 MiB), computed and published on host A; then on a
#    fresh host B, side by side, medians of $CHAIN_REPS runs:
#      remote   B's first request: the pages come from Redis (the tier's
#               own fetch time, from its histogram, and kvserve's match
#               time, which adds hashing, LOOKUPs and the wait);
#      local    B's second request: the same pages from B's own arbiter;
#      compute  the from-scratch prefill of the same prompt (--verify).
#    Against a single redis-server, without and with a MAC key, and
#    against a 3-master cluster.
# 2. Two hosts serving the same workload one after the other: prompt
#    tokens host B computes with and without the tier.
# 0. First, the tier beside Redis's own speed (tier_bench): C clients at
#    once each fetch a chain on host B (LOOKUP with WAIT until every page
#    is a hit, each byte checked) and publish one on host A (the time
#    until the tier has written it all), against C clients of a plain
#    pipelined hiredis loop GETting and SETting the very same keys and
#    values on the same servers; $REPS starts of both hosts a row, $PAIRS
#    tier/loop pairs of each kind a start, interleaved; the median of the
#    pairs' tier/loop ratios and their range (tb_row).
# PARTS="0 1 2" picks parts, ROWS=REGEX part 0's rows.
set -uo pipefail

build=${BUILD:-build}
REPS=${REPS:-3}		# part 0: kvshared starts of each row
CHAIN_REPS=${CHAIN_REPS:-5}	# part 1: runs of each row
PAIRS=${PAIRS:-6}	# part 0: tier/loop pairs of each kind within one start
PARTS=${PARTS:-0 1 2}	# which parts to run
ROWS=${ROWS:-.}		# part 0: only the rows whose label matches this regex
. tests/remote/lib.sh

chain=(--workers 1 --requests 1 --system-tokens 4096 --doc-tokens 16 --docs 1
       --question-tokens 16 --gen-tokens 1 --verify 1)

median() { sort -g | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : "?" }'; }
match_ms() { sed -n 's/.*match (tree, keys, LOOKUP, waits) \([0-9]*\) .*/\1/p' "$1"; }
scratch_ms() { sed -n 's/^ *from-scratch prefill *\([0-9.]*\) ms.*/\1/p' "$1"; }
prefill_tokens() { sed -n 's/^ *prefill *\([0-9]*\) of \([0-9]*\) .*/\1 of \2/p' "$1"; }

# bench_chain LABEL NODES EXTRA-KEYS: one row of part 1.
bench_chain() {
	local label=$1 spec r fetch match local_ms scratch s0 s1
	spec=$(pool_spec "$2" ",remote_namespace=bench$RANDOM$3")
	start_kvshared A "$spec" || { echo "$label: kvshared did not start"; return; }
	serve A "$tmp/a" "${chain[@]}"
	sleep 0.3	# the write-behind
	: >"$tmp/fetch"; : >"$tmp/match"; : >"$tmp/local"; : >"$tmp/scratch"
	for r in $(seq "$CHAIN_REPS"); do
		start_kvshared B "$spec" || break
		s0=$(metric B '^kvshare_remote_fetch_seconds_sum')
		serve B "$tmp/b1" "${chain[@]}"
		s1=$(metric B '^kvshare_remote_fetch_seconds_sum')
		serve B "$tmp/b2" "${chain[@]}"
		verified "$tmp/b1" && verified "$tmp/b2" || echo "# run $r not verified"
		awk -v a="$s0" -v b="$s1" 'BEGIN { printf "%.3f\n", (b - a) * 1000 }' >>"$tmp/fetch"
		match_ms "$tmp/b1" >>"$tmp/match"
		match_ms "$tmp/b2" >>"$tmp/local"
		scratch_ms "$tmp/b1" >>"$tmp/scratch"
		stop_kvshared B >/dev/null
	done
	stop_kvshared A >/dev/null
	fetch=$(median <"$tmp/fetch")
	match=$(median <"$tmp/match")
	local_ms=$(median <"$tmp/local")
	scratch=$(median <"$tmp/scratch")
	printf '  %-22s %8s ms %9s GB/s %10s ms %10s ms %12s ms\n' "$label" "$fetch" \
		"$(awk -v ms="$fetch" 'BEGIN { printf "%.2f", (ms > 0 ? 4194304 / (ms / 1000) / 1e9 : 0) }')" \
		"$match" "$local_ms" "$scratch"
}

# tb_row LABEL NODES EXTRA-KEYS GEOMETRY PAGE-BYTES PAGES CLIENTS LOOP-NODES...:
# one row of part 0.  Each of $REPS runs starts both hosts afresh, then
# takes $PAIRS pairs of each kind, the tier's and the loop's one after the
# other, the order alternating from pair to pair:
#   fetch/GET  B fetches chain set k % 2 (A published sets 0 and 1; B's
#              pool holds one set, so each fetch evicts the other), the
#              loop GETs the same keys;
#   write/SET  A publishes a new chain set, timed until the tier has
#              written it all; the loop SETs the same keys to the values
#              they hold.
tb_row() {
	local label=$1 nodes=$2 extra=$3 geom=$4 pb=$5 np=$6 nc=$7 r k ns spec seed keys f g p q
	local tb=$build/tests/remote_tier_bench
	shift 7
	: >"$tmp/tb.pub"; : >"$tmp/tb.set"; : >"$tmp/tb.fetch"; : >"$tmp/tb.get"
	for r in $(seq "$REPS"); do
		ns=tb$RANDOM$r
		seed=$RANDOM$r
		spec="kvserve:pages=@PAGES@,$geom,mode=0600,memory=host,remote=$nodes"
		spec+=",remote_user=kvshare,remote_password_file=$tmp/pw,remote_namespace=$ns$extra"
		# A deadline that measures a slow run on a loaded machine instead
		# of cutting it off.
		spec+=",remote_timeout_ms=10000"
		# A's pool 4 times what it publishes: write-behind holds at most a
		# quarter of a pool's pages; B's exactly one set, so that a fetch
		# evicts all of the set before.
		start_kvshared A "${spec/@PAGES@/$((4 * np * nc + 16))}" &&
			start_kvshared B "${spec/@PAGES@/$((np * nc))}" ||
			{ echo "# $label: kvshared did not start"; return; }
		# Both hosts as hosts that have run a while: their pools' memory
		# in place, the tier connected to every node, B's pages recycled
		# (each fetch evicts the set before), so that neither side pays a
		# first touch.
		"$tb" warm "$tmp/A.sock" kvserve
		"$tb" warm "$tmp/B.sock" kvserve
		for k in 0 1; do
			TB_NS=$k "$tb" publish "$tmp/A.sock" "$tmp/A.met" kvserve "$nc" "$np" \
				"$seed" >/dev/null
		done
		TB_NS=1 "$tb" fetch "$tmp/B.sock" kvserve "$nc" "$np" "$seed" >/dev/null
		for k in $(seq 0 $((PAIRS - 1))); do
			keys="kvs1:$ns:*:000000000000000$((k % 2)):*"
			if [ $(((r + k) % 2)) = 0 ]; then
				f=$(TB_NS=$((k % 2)) "$tb" fetch "$tmp/B.sock" kvserve "$nc" "$np" "$seed")
				g=$("$tb" getloop default "$admin_pw" "$keys" "$nc" "$@")
			else
				g=$("$tb" getloop default "$admin_pw" "$keys" "$nc" "$@")
				f=$(TB_NS=$((k % 2)) "$tb" fetch "$tmp/B.sock" kvserve "$nc" "$np" "$seed")
			fi
			# A pair counts whole or not at all (a side that failed said why).
			if [ -n "$f" ] && [ -n "$g" ]; then
				echo "$f" >>"$tmp/tb.fetch"
				echo "$g" >>"$tmp/tb.get"
			else
				echo "# $label: a fetch/GET pair failed, left out"
			fi
			# A new set each time (a published page is written once).
			p=$(TB_NS=$((k + 2)) "$tb" publish "$tmp/A.sock" "$tmp/A.met" kvserve "$nc" \
				"$np" "$seed")
			q=$("$tb" setloop default "$admin_pw" "kvs1:$ns:*:$(printf %016x $((k + 2))):*" \
				"$nc" "$@")
			if [ -n "$p" ] && [ -n "$q" ]; then
				echo "$p" >>"$tmp/tb.pub"
				echo "$q" >>"$tmp/tb.set"
			else
				echo "# $label: a write/SET pair failed, left out"
			fi
		done
		stop_kvshared A >/dev/null
		stop_kvshared B >/dev/null
		# The servers as they were: this row's values out of the next one's way.
		for n in "$@"; do
			rcli "${n##*:}" flushall >/dev/null
		done
	done
	# rate FILE: the median run's GB/s; ratio A B: the median of each pair's
	# A over the same pair's B (paired: a pair's load is the same for both).
	rate() { awk '{ print $3 / $2 / 1e9 }' "$1" | median; }
	ratio() { paste "$1" "$2" | awk '{ print 100 * ($3 / $2) / ($6 / $5) }' | median; }
	range() {
		paste "$1" "$2" | awk '{ print 100 * ($3 / $2) / ($6 / $5) }' | sort -g |
			awk '{ v[NR] = $1 } END { printf "%.0f-%.0f", v[1], v[NR] }'
	}
	awk -v l="$label" -v f="$(rate "$tmp/tb.fetch")" -v g="$(rate "$tmp/tb.get")" \
		-v p="$(rate "$tmp/tb.pub")" -v s="$(rate "$tmp/tb.set")" \
		-v fr="$(ratio "$tmp/tb.fetch" "$tmp/tb.get")" \
		-v pr="$(ratio "$tmp/tb.pub" "$tmp/tb.set")" \
		-v fq="$(range "$tmp/tb.fetch" "$tmp/tb.get")" \
		-v pq="$(range "$tmp/tb.pub" "$tmp/tb.set")" 'BEGIN {
		printf "  %-34s %7.2f %7.2f %6.0f%% %-9s %7.2f %7.2f %6.0f%% %s\n", l, f, g,
			fr, "(" fq ")", p, s, pr, "(" pq ")" }'
}

read -r r1 <<<"$(free_ports 1)"
start_redis r1 "$r1" >/dev/null || exit 1
read -r -a cp <<<"$(free_cluster_ports 3)"
for i in 0 1 2; do
	start_redis "c$i" "${cp[$i]}" --cluster-enabled yes \
		--cluster-config-file "$tmp/nodes-$i.conf" >/dev/null || exit 1
done
rcli "${cp[0]}" --cluster create "127.0.0.1:${cp[0]}" "127.0.0.1:${cp[1]}" \
	"127.0.0.1:${cp[2]}" --cluster-yes >/dev/null 2>&1
for _ in $(seq 100); do
	rcli "${cp[2]}" cluster info | grep -q cluster_state:ok && break
	sleep 0.1
done
sleep 0.5
cl="127.0.0.1:${cp[0]}+127.0.0.1:${cp[1]}+127.0.0.1:${cp[2]}"
cl_loop=("127.0.0.1:${cp[0]}" "127.0.0.1:${cp[1]}" "127.0.0.1:${cp[2]}")
small="layers=2,kv_heads=2,head_dim=64,tokens_per_page=16,dtype=bf16"	# 16 KiB
llama="layers=32,kv_heads=8,head_dim=128,tokens_per_page=16,dtype=bf16"	# 2 MiB: Llama-8B

part() { [[ " $PARTS " == *" $1 "* ]]; }
row() { [[ $1 =~ $ROWS ]] && tb_row "$@"; }

if part 0; then
	echo "remote tier beside a pipelined hiredis loop of the same values (GB/s, medians; tier/loop: the median of $((REPS * PAIRS)) paired ratios, their range; load: $(cut -d' ' -f1-3 /proc/loadavg)):"
	printf '  %-34s %7s %7s %7s %-9s %7s %7s %7s\n' "" "fetch" "GET" "ratio" "" "write" "SET" "ratio"
	for nc in 1 4; do
		s=$([ $nc = 1 ] || echo s)
		row "one server, 256 x 16 KiB, $nc client$s" \
			"127.0.0.1:$r1" "" "$small" 16384 256 "$nc" "127.0.0.1:$r1"
		row "one server, 16 x 2 MiB, $nc client$s" \
			"127.0.0.1:$r1" "" "$llama" 2097152 16 "$nc" "127.0.0.1:$r1"
		row "3 masters, 256 x 16 KiB, $nc client$s" \
			"$cl" ",remote_cluster=yes" "$small" 16384 256 "$nc" "${cl_loop[@]}"
		row "3 masters, 16 x 2 MiB, $nc client$s" \
			"$cl" ",remote_cluster=yes" "$llama" 2097152 16 "$nc" "${cl_loop[@]}"
	done
	echo "  (load after: $(cut -d' ' -f1-3 /proc/loadavg))"
fi
part 1 || part 2 || exit 0

if part 1; then
echo "remote tier: one chain of 256 pages (4 MiB; medians of $CHAIN_REPS runs, kvserve's ms are whole ms)"
printf '  %-22s %11s %14s %13s %13s %15s\n' "" "tier fetch" "fetch rate" "remote match" \
	"local match" "recompute"
bench_chain "single redis-server" "127.0.0.1:$r1" ""
# The same with a MAC key: every page sealed and checked (mac.h).
(umask 077; openssl rand -hex 32 >"$tmp/bench.mac")
bench_chain "single, MAC key" "127.0.0.1:$r1" ",remote_mac_key_file=$tmp/bench.mac"
bench_chain "cluster, 3 masters" "127.0.0.1:${cp[0]}" ",remote_cluster=yes"
fi
part 2 || exit 0

# Part 2: the same workload on A, then on B; what B computes.
two_hosts() {
	local spec=$1
	start_kvshared A "$spec" && start_kvshared B "$spec" || return
	serve A "$tmp/wa" --workers 2 --requests 8 --system-tokens 1024 --doc-tokens 1024 \
		--docs 2 --question-tokens 64 --verify 4
	sleep 0.3
	serve B "$tmp/wb" --workers 2 --requests 8 --system-tokens 1024 --doc-tokens 1024 \
		--docs 2 --question-tokens 64 --verify 4
	verified "$tmp/wb" || echo "# host B not verified"
	stop_kvshared A >/dev/null
	stop_kvshared B >/dev/null
	echo "$(prefill_tokens "$tmp/wb") prompt tokens computed on B, prefill $(sed -n 's/^ *prefill .*, \([0-9.]*\) ms a request/\1/p' "$tmp/wb") ms a request"
}
echo "two hosts, 2 workers x 8 requests each (1024 system + 1024 of 2 documents + 64 tokens), B after A:"
plain=$(pool_spec x | sed 's/,remote=.*//')
echo "  without the tier: $(two_hosts "$plain")"
echo "  with the tier:    $(two_hosts "$(pool_spec "127.0.0.1:$r1" ",remote_namespace=w$RANDOM")")"
