#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# remote_test: the remote tier (docs/remote.md) end to end, as TAP.  Two
# kvshared instances stand for two hosts (own sockets, pools, memory);
# kvserve on host A computes and publishes, kvserve on host B serves the
# same prompts from pages fetched out of Redis, and --verify 1 recomputes
# every request from scratch and compares it to the bit.  Real servers
# only, on 127.0.0.1 ports picked at run time: a single redis-server, a
# Redis Cluster of 3 masters and 3 replicas, and a TLS redis-server.
set -uo pipefail

# Run from the top of the tree, as make test does.
build=${BUILD:-build}
. tests/remote/lib.sh

n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n $*"; }
notok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n $*"; }
check() {	# check DESCRIPTION COMMAND...
	local what=$1
	shift
	if "$@"; then ok "$what"; else notok "$what"; fi
}
show() { sed 's/^/#   /' "$1"; }

# Small runs: 2 workers x 4 requests of 256 + 256 + 20 tokens, all verified.
W=(--workers 2 --requests 4 --system-tokens 256 --doc-tokens 256 --docs 2
   --question-tokens 20 --verify 1)

echo "TAP version 13"
echo "1..38"

# ---- one redis-server -----------------------------------------------------------

read -r r1 <<<"$(free_ports 1)"
start_redis r1 "$r1" || exit 1
spec=$(pool_spec "127.0.0.1:$r1" ",remote_namespace=t1")

start_kvshared A "$spec" && start_kvshared B "$spec"
check "two hosts start with the tier up" \
	grep -q "remote tier up: 1 node, namespace 't1'" "$tmp/B.log"

# The pool's remote_* keys are the configuration's: kvctl cannot turn
# that tier off at run time (EBUSY), and it stays up.
"$build/kvctl" --device "$tmp/A.sock" pool remote kvserve --off >"$tmp/cfgoff" 2>&1
st=$?
if [ "$st" != 0 ] && grep -q "set by kvshared's configuration" "$tmp/cfgoff" &&
   [ "$(metric A '^kvshare_remote_up\{pool="kvserve"\}')" = 1 ]; then
	ok "the configured tier cannot be turned off at run time (EBUSY)"
else
	notok "pool remote --off on the configured tier: status $st"; show "$tmp/cfgoff"
fi

# Auth: a wrong password is a clear error at startup, and never logged.
printf 'not-the-password-%s\n' $$ >"$tmp/badpw"
chmod 600 "$tmp/badpw"
start_kvshared bad "$(pool_spec "127.0.0.1:$r1" ",remote_namespace=t1" |
	sed "s|$tmp/pw|$tmp/badpw|")"
st=$(cat "$tmp/bad.status" 2>/dev/null)
show "$tmp/bad.log"
if [ "$st" = 1 ] && grep -q 'AUTH as kvshare .* refused: WRONGPASS' "$tmp/bad.log" &&
   ! grep -q "not-the-password" "$tmp/bad.log"; then
	ok "a wrong password: kvshared exits at startup saying AUTH was refused"
else
	notok "a wrong password: status '$st', log above"
fi

# A password file others may read is refused before anything starts.
chmod 640 "$tmp/badpw"
start_kvshared bad2 "$(pool_spec "127.0.0.1:$r1" "" | sed "s|$tmp/pw|$tmp/badpw|")"
if [ "$(cat "$tmp/bad2.status" 2>/dev/null)" = 2 ] &&
   grep -q 'mode 0640: others may read it' "$tmp/bad2.log"; then
	ok "a group-readable password file is refused (exit 2)"
else
	notok "a group-readable password file was accepted"; show "$tmp/bad2.log"
fi

# Configuration errors name the key and stop kvshared (exit 2).
cfg_bad=0
base="kvserve:pages=64,layers=2,kv_heads=2,head_dim=64,tokens_per_page=16,dtype=bf16,mode=0600"
for bad in "remote_namespace=x@remote_\* keys without remote=" \
	   "remote=127.0.0.1:$r1,remote_tls_ca=/x@remote_tls=yes" \
	   "remote=127.0.0.1:0@is not HOST:PORT" \
	   "remote=127.0.0.1:$r1,remote_namespace=a{b}@A-Za-z0-9" \
	   "remote=127.0.0.1:$r1,remote_user=kvshare@remote_password_file" \
	   "remote=127.0.0.1:$r1,memory=none@memory=host or hugetlb" \
	   "remote=127.0.0.1:$r1,remote_password_file=/etc/passwd@belongs to uid\|mode 0644"; do
	"$build/kvshared" --mode socket --socket "$tmp/cfg.sock" --pool "$base,${bad%%@*}" \
		>"$tmp/cfg.out" 2>&1
	st=$?
	if [ "$st" != 2 ] || ! grep -q "${bad#*@}" "$tmp/cfg.out"; then
		echo "# --pool ...,${bad%%@*}: status $st, wanted 2 and '${bad#*@}':"
		show "$tmp/cfg.out"
		cfg_bad=$((cfg_bad + 1))
	fi
done
check "bad remote_* keys are refused at startup, naming what is wrong" test "$cfg_bad" = 0

# Cross-host sharing.
serve_drained A "$tmp/a1" "${W[@]}"
serve B "$tmp/b1" "${W[@]}"
show "$tmp/b1"
ca=$(computed "$tmp/a1")
cb=$(computed "$tmp/b1")
if verified "$tmp/a1" && verified "$tmp/b1" && [ "${ca:-0}" -gt 0 ] &&
   [ "$cb" = 0 ] && [ "$(digest "$tmp/a1")" = "$(digest "$tmp/b1")" ]; then
	ok "host B serves host A's prompts from remote pages: $ca pages computed on A, 0 on B, equal to the bit"
else
	notok "cross-host: computed A '$ca' B '$cb', status $(cat "$tmp/a1.st") $(cat "$tmp/b1.st")"
fi
wa=$(metric A '^kvshare_remote_written_pages_total')
hb=$(metric B '^kvshare_remote_hit_pages_total')
db=$(metric B '^kvshare_remote_dropped_total')
# The password is in no log and no metrics.
leak=$(cat "$tmp"/*.log; curl -s --unix-socket "$tmp/A.met" http://kvshared/metrics)
check "metrics: A wrote $wa pages, B fetched $hb, dropped $db; no log or metric shows the password" \
	eval '[ "$wa" -ge "$ca" ] && [ "$hb" -ge "$ca" ] && [ "$db" = 0 ] && ! grep -q "$tier_pw" <<<"$leak"'
keys=$(rcli "$r1" --scan --pattern 'kvs1:t1:*' | wc -l)
check "Redis holds the $ca computed pages under namespace t1 ($keys keys)" \
	test "$keys" -eq "$ca"

# Bad data: values copied under another geometry's or namespace's keys,
# and values damaged in place, are refused by the check: no hit.
copy_values() {	# copy_values SED-EXPR: every t1 key to its rewritten name
	local k
	rcli "$r1" --scan --pattern 'kvs1:t1:*' | while read -r k; do
		rcli "$r1" copy "$k" "$(sed "$1" <<<"$k")" replace >/dev/null
	done
}
bad_host() {	# bad_host NAME SPEC REASON: a fresh host gets nothing from the tier
	local name=$1 spec=$2 reason=$3 c h d
	start_kvshared "$name" "$spec" || { notok "$name did not start"; return; }
	serve "$name" "$tmp/$name.out" "${W[@]}"
	c=$(computed "$tmp/$name.out")
	h=$(metric "$name" '^kvshare_remote_hit_pages_total')
	d=$(metric "$name" "^kvshare_remote_dropped_total.*reason=\"$reason\"")
	if verified "$tmp/$name.out" && [ "$c" = "$ca" ] && [ "$h" = 0 ] && [ "$d" -gt 0 ]; then
		ok "$4: no hit ($d dropped for $reason), all $c pages recomputed, equal to the bit"
	else
		notok "$4: computed '$c' hits '$h' dropped '$d'"; show "$tmp/$name.out"
	fi
	stop_kvshared "$name"
}
copy_values 's/:L2H2D64T16bf16:/:L2H2D64T16f16:/'
bad_host G "$(pool_spec "127.0.0.1:$r1" ",remote_namespace=t1,remote_write=none" dtype=f16)" \
	geometry "a bf16 page stored under an f16 pool's key"
copy_values 's/^kvs1:t1:/kvs1:t9:/'
bad_host N "$(pool_spec "127.0.0.1:$r1" ",remote_namespace=t9,remote_write=none")" \
	key "another namespace's page stored under this namespace's key"
rcli "$r1" --scan --pattern 'kvs1:t1:*' | while read -r k; do
	rcli "$r1" setrange "$k" 1000 tampered >/dev/null
done
bad_host T "$(pool_spec "127.0.0.1:$r1" ",remote_namespace=t1,remote_write=none")" \
	checksum "values tampered with in Redis"

# Faults.  A stopped (slow) Redis: requests wait at most the fetch
# deadline, and serving goes on.
kill -STOP "${redis_pid[r1]}"
t0=$(date +%s%N)
serve B "$tmp/b2" "${W[@]}" --seed 2
ms=$((($(date +%s%N) - t0) / 1000000))
kill -CONT "${redis_pid[r1]}"
check "a stopped Redis: host B serves new prompts anyway, equal to the bit, in $ms ms (< 5000)" \
	eval 'verified "$tmp/b2" && [ "$ms" -lt 5000 ]'
# One user missing everything cannot take every fetch: while Redis does
# not answer, its 20 LOOKUPs of new chains start 8 fetches (each claims
# pages, which may evict others' cached ones), and the other 12 are not
# sent on.
busy0=$(metric A 'why="busy"')
kill -STOP "${redis_pid[r1]}"
"$build/tests/remote_lookup_storm" "$tmp/A.sock" kvserve 20 >"$tmp/storm" 2>&1
busy=$(($(metric A 'why="busy"') - busy0))
kill -CONT "${redis_pid[r1]}"
check "one uid's 20 LOOKUP misses start at most 8 fetches ($busy not sent on)" \
	test "$busy" = 12
# A killed Redis: serving goes on; the tier says it is down.
{ kill -9 "${redis_pid[r1]}"; wait "${redis_pid[r1]}"; } 2>/dev/null
serve A "$tmp/a3" "${W[@]}" --seed 3
serve B "$tmp/b3" "${W[@]}" --seed 3
check "a killed Redis: both hosts serve, equal to the bit, tier down in the metrics" \
	eval 'verified "$tmp/a3" && verified "$tmp/b3" && [ "$(metric A "^kvshare_remote_up")" = 0 ]'
# Restarted (empty): both tiers reconnect by themselves and share again.
start_redis r1 "$r1"
tiers_up() {	# both tiers answered again (a probe every 500 ms)
	[ "$(metric A '^kvshare_remote_up')" = 1 ] && [ "$(metric B '^kvshare_remote_up')" = 1 ]
}
wait_until 10 tiers_up || echo "# the tiers are not up 10 s after Redis restarted"
serve_drained A "$tmp/a4" "${W[@]}" --seed 4
serve B "$tmp/b4" "${W[@]}" --seed 4
check "a restarted Redis: the tiers reconnect, B computes nothing A computed ($(computed "$tmp/b4") pages)" \
	eval 'verified "$tmp/b4" && [ "$(computed "$tmp/b4")" = 0 ]'
# A crash of kvshared on host B mid-run: B's workers finish in private
# pages; restarted, B's empty pool refills from Redis.
serve_drained A "$tmp/a7" "${W[@]}" --seed 7 --requests 16
lookups() { metric "$1" '^kvshare_pool_lookups_total'; }
l0=$(lookups B)
serve B "$tmp/b7" "${W[@]}" --seed 7 --requests 16 &
sp=$!
# Mid-run: once B's kvserve has asked its arbiter something.
wait_until 10 eval '[ "$(lookups B)" -gt "$l0" ]' || echo "# B's kvserve never looked up"
{ kill -9 "${kvsd_pid[B]}"; wait "${kvsd_pid[B]}"; } 2>/dev/null
wait "$sp"
start_kvshared B "$spec"
serve B "$tmp/b8" "${W[@]}" --seed 7 --requests 16
lost=$(sed -n 's/^ *arbiter failures *\([0-9]*\) requests served without sharing.*/\1/p' "$tmp/b7")
if verified "$tmp/b7" && [ "${lost:-0}" -gt 0 ] && verified "$tmp/b8" &&
   [ "$(computed "$tmp/b8")" = 0 ]; then
	ok "kvshared killed mid-run: B serves all (${lost} without sharing); restarted, it refills from Redis"
else
	notok "kvshared killed: b7 status $(cat "$tmp/b7.st"), restarted B computed $(computed "$tmp/b8")"
	show "$tmp/b7"
fi
# A full Redis.  allkeys-lru: writes go on, old pages are evicted.
rcli "$r1" config set maxmemory 2mb >/dev/null
rcli "$r1" config set maxmemory-policy allkeys-lru >/dev/null
serve_drained A "$tmp/a5" "${W[@]}" --seed 5 --docs 4 --requests 8
ev=$(rcli "$r1" info stats | sed -n 's/^evicted_keys:\([0-9]*\).*/\1/p')
check "a full Redis (maxmemory 2mb, allkeys-lru): serving goes on, Redis evicted $ev keys" \
	eval 'verified "$tmp/a5" && [ "$ev" -gt 0 ]'
# noeviction: Redis refuses writes (OOM); counted, serving goes on.
rcli "$r1" config set maxmemory-policy noeviction >/dev/null
we=$(metric A '^kvshare_remote_write_errors_total')
serve_drained A "$tmp/a6" "${W[@]}" --seed 6
we2=$(metric A '^kvshare_remote_write_errors_total')
check "a full Redis refusing writes (noeviction): $((we2 - we)) write errors counted, serving goes on" \
	eval 'verified "$tmp/a6" && [ "$we2" -gt "$we" ]'
rcli "$r1" config set maxmemory 0 >/dev/null
stop_kvshared A; sa=$?
stop_kvshared B; sb=$?
check "both kvshared exit cleanly after the faults (status $sa $sb)" test "$sa$sb" = 00

# ---- a Redis Cluster: 3 masters, 3 replicas -------------------------------------

read -r -a cp <<<"$(free_cluster_ports 6)"
for i in 0 1 2 3 4 5; do
	start_redis "c$i" "${cp[$i]}" --cluster-enabled yes --cluster-node-timeout 1000 \
		--cluster-allow-reads-when-down yes --repl-diskless-sync-delay 0 \
		--cluster-config-file "$tmp/nodes-$i.conf" || exit 1
done
rcli "${cp[0]}" --cluster create $(for p in "${cp[@]}"; do echo "127.0.0.1:$p"; done) \
	--cluster-replicas 1 --cluster-yes >"$tmp/create.out" 2>&1
cluster_ok() {
	local p
	for p in "$@"; do
		rcli "$p" cluster info 2>/dev/null | grep -q 'cluster_state:ok' || return 1
	done
}
# A replica holds its master's pages, and CLUSTER SLOTS lists it, only
# once its first sync is done: until then a dead master's pages are lost.
repl() {	# repl PORT FIELD: a field of the node's INFO replication
	rcli "$1" info replication | sed -n "s/^$2:\([^\r]*\).*/\1/p"
}
replicas_synced() {
	local p
	for p in "${cp[@]}"; do
		[ "$(repl "$p" role)" = master ] || [ "$(repl "$p" master_link_status)" = up ] ||
			return 1
	done
}
wait_until 10 cluster_ok "${cp[@]}"
wait_until 15 replicas_synced
check "a 3-master cluster with 3 replicas is up, every replica synced" \
	eval 'cluster_ok "${cp[@]}" && replicas_synced'
# Roles as each node says of itself (another node's CLUSTER NODES may lag
# behind a failover).
masters() {	# the ports of the live masters
	local p
	for p in "${cp[@]}"; do [ "$(repl "$p" role)" = master ] && echo "$p"; done
}
replica_of() {	# replica_of PORT: the port of a replica of that master
	local p
	for p in "${cp[@]}"; do
		[ "$(repl "$p" role)" = slave ] && [ "$(repl "$p" master_port)" = "$1" ] &&
			{ echo "$p"; return; }
	done
}

# A fetch deadline of 1 s, not 200 ms: these tests count pages that came
# from Redis, and a CPU-starved test machine must not turn a slow fetch
# into a computed page (test 11 holds the deadline itself).
cl_more=",remote_cluster=yes,remote_namespace=c,remote_timeout_ms=1000"
cspec=$(pool_spec "127.0.0.1:${cp[0]}" "$cl_more")
start_kvshared A "$cspec" && start_kvshared B "$cspec"
serve_drained A "$tmp/ca1" "${W[@]}"
serve B "$tmp/cb1" "${W[@]}"
spread=$(for p in $(masters); do rcli "$p" dbsize; done | tr '\n' ' ')
if verified "$tmp/ca1" && verified "$tmp/cb1" && [ "$(computed "$tmp/cb1")" = 0 ] &&
   [ "$(computed "$tmp/ca1")" -gt 0 ] && ! grep -qw 0 <<<"$spread"; then
	ok "cluster: host B serves A's prompts from remote pages; keys on every master ($spread)"
else
	notok "cluster: computed A $(computed "$tmp/ca1") B $(computed "$tmp/cb1"), keys per master: $spread"
fi

# A manual failover: both hosts still have the old map and follow MOVED.
rep=$(for p in "${cp[@]}"; do [ "$(repl "$p" role)" = slave ] && echo "$p"; done | head -1)
old=$(repl "$rep" master_port)
rcli "$rep" cluster failover >/dev/null
# Done when the two have swapped roles and every node's map says so.
promoted() {
	local p
	[ "$(repl "$rep" role)" = master ] && [ "$(repl "$old" master_port)" = "$rep" ] &&
		cluster_ok "${cp[@]}" || return 1
	for p in "${cp[@]}"; do
		rcli "$p" cluster nodes | grep ":$old@" | grep -q slave || return 1
	done
}
wait_until 10 promoted || echo "# $rep is not a master 10 s after CLUSTER FAILOVER"
serve_drained A "$tmp/ca2" "${W[@]}" --seed 2
serve B "$tmp/cb2" "${W[@]}" --seed 2
rd=$(($(metric A '^kvshare_remote_redirects_total') + $(metric B '^kvshare_remote_redirects_total')))
if verified "$tmp/ca2" && verified "$tmp/cb2" && [ "$(computed "$tmp/cb2")" = 0 ] && [ "$rd" -gt 0 ]; then
	ok "cluster failover: writes and reads follow the new master ($rd redirects), B computes nothing"
else
	notok "cluster failover: B computed $(computed "$tmp/cb2"), redirects $rd"
fi

# A master killed mid-run: both hosts keep serving; after its replica
# takes over, sharing resumes.
# Not the master just promoted by hand: its replica (the old master,
# resyncing) may not be allowed to fail over so soon after.
victim=$(masters | grep -vx "$rep" | head -1)
# Its replica takes over only when told to (below), so that a host can
# be seen reading from it while the master is dead.
vid=$(rcli "$victim" cluster myid)
vrep=$(replica_of "$victim")
rcli "$vrep" config set cluster-replica-no-failover yes >/dev/null
# The replica holds every page written so far (the ones read below).
caught_up() {
	[ "$(repl "$vrep" master_link_status)" = up ] &&
		[ "$(repl "$vrep" slave_repl_offset)" -ge "$(repl "$victim" master_repl_offset)" ]
}
wait_until 10 caught_up || echo "# $vrep has not caught up with $victim after 10 s"
l0=$(lookups A)
serve A "$tmp/ca3" "${W[@]}" --seed 3 --requests 8 &
sp=$!
wait_until 10 eval '[ "$(lookups A)" -gt "$l0" ]' || echo "# A's kvserve never looked up"
for i in 0 1 2 3 4 5; do
	if [ "${cp[$i]}" = "$victim" ]; then
		{ kill -9 "${redis_pid[c$i]}"; wait "${redis_pid[c$i]}"; } 2>/dev/null
	fi
done
serve B "$tmp/cb3" "${W[@]}" --seed 3 --requests 8
wait "$sp"
check "a master killed mid-run: both hosts serve every request, equal to the bit" \
	eval 'verified "$tmp/ca3" && verified "$tmp/cb3"'
# Wait until the cluster has settled with the master dead: every live
# node has marked it failed (so the cluster refuses writes, CLUSTERDOWN,
# and answers reads: cluster-allow-reads-when-down), and the slot map
# lists its replica for its slots.
alive=()
for p in "${cp[@]}"; do [ "$p" = "$victim" ] || alive+=("$p"); done
vrep_id=$(rcli "$vrep" cluster myid)
marked_failed() {
	local p
	for p in "${alive[@]}"; do
		rcli "$p" cluster nodes | grep ":$victim@" | grep -q ',fail ' || return 1
	done
}
replica_listed() { rcli "${alive[0]}" cluster slots | grep -qx "$vrep_id"; }
settled=yes
wait_until 15 marked_failed || settled="no: $victim not marked failed after 15 s"
wait_until 5 replica_listed || settled="no: CLUSTER SLOTS does not list $vrep"
# Before its replica takes over, a fresh host (given every node as a
# seed, as an operator would) reads the dead master's slots from the
# replica (READONLY).
start_kvshared C "$(pool_spec "$(printf '127.0.0.1:%s+' "${cp[@]}" | sed 's/+$//')" \
	"$cl_more")"
serve C "$tmp/cc3" "${W[@]}" --seed 2
rr=$(metric C '^kvshare_remote_replica_reads_total')
if [ "$settled" = yes ] && verified "$tmp/cc3" && [ "$(computed "$tmp/cc3")" = 0 ] &&
   [ "$rr" -gt 0 ]; then
	ok "a dead master's pages are read from its replica ($rr reads): a fresh host computes nothing"
else
	notok "replica reads: settled $settled, computed $(computed "$tmp/cc3"), replica reads '$rr'"
	echo "# victim '$victim' ($vid), its replica '$vrep', the one promoted by hand '$rep':"
	rcli "${alive[0]}" cluster nodes | cut -c 42-130 | sed 's/^/#   /'
	echo "# CLUSTER SLOTS: $(rcli "${alive[0]}" cluster slots | tr '\n' ' ')"
	rcli "$vrep" info replication | grep -E 'link|offset' | sed 's/^/#   /'
	show "$tmp/C.log"
fi
stop_kvshared C
# Meanwhile the cluster refuses every write (CLUSTERDOWN): an answer, not
# a dead tier; host A's tier stays up, and with it its fetches.
we=$(metric A '^kvshare_remote_write_errors_total')
downs=$(grep -c 'remote tier down' "$tmp/A.log")
serve_drained A "$tmp/ca5" "${W[@]}" --seed 5
we2=$(metric A '^kvshare_remote_write_errors_total')
check "a cluster refusing writes: A serves, $((we2 - we)) writes refused, its tier stays up" \
	eval 'verified "$tmp/ca5" && [ "$we2" -gt "$we" ] &&
	      [ "$(metric A "^kvshare_remote_up")" = 1 ] &&
	      [ "$(grep -c "remote tier down" "$tmp/A.log")" = "$downs" ]'
rcli "$vrep" config set cluster-replica-no-failover no >/dev/null
rcli "$vrep" cluster failover force >/dev/null
# The victim is marked failed already: the live nodes say ok again once
# its replica has taken its slots.
taken_over() { rcli "$vrep" role | head -1 | grep -q master && cluster_ok "${alive[@]}"; }
wait_until 15 taken_over || echo "# $vrep has not taken over after 15 s"
wait_until 10 tiers_up || echo "# the tiers are not up 10 s after the takeover"
serve_drained A "$tmp/ca4" "${W[@]}" --seed 4
serve B "$tmp/cb4" "${W[@]}" --seed 4
if verified "$tmp/cb4" && [ "$(computed "$tmp/cb4")" = 0 ]; then
	ok "after the replica took over: B serves A's new prompts from remote pages"
else
	notok "after the takeover: B computed $(computed "$tmp/cb4")"
	for h in A B; do
		curl -s --unix-socket "$tmp/$h.met" http://kvshared/metrics |
			grep '^kvshare_remote' | grep -v _bucket | sed "s/^/# $h: /"
		grep 'remote tier' "$tmp/$h.log" | sed "s/^/# $h: /"
	done
fi
stop_kvshared A
stop_kvshared B

# ---- a Redis that lies ----------------------------------------------------------
# Every answer a hostile or broken server can give: the host keeps
# serving, kvshared survives (the sanitizer build when there is one) and
# exits cleanly.
[ -x "$build/san/kvshared" ] && kvsd_bin=$build/san/kvshared
for mode in garbage huge nested wrongtype moved slots trickle close; do
	read -r hp <<<"$(free_ports 1)"
	/usr/bin/python3 tests/remote/hostile_redis.py "$mode" "$hp" >"$tmp/h.out" 2>&1 &
	hpid=$!
	pids+=($hpid)
	for _ in $(seq 50); do grep -q ready "$tmp/h.out" && break; sleep 0.1; done
	extra=",remote_namespace=h"
	[ "$mode" = slots ] && extra="$extra,remote_cluster=yes"
	start_kvshared H "$(pool_spec "127.0.0.1:$hp" "$extra")"
	serve H "$tmp/h1" "${W[@]}"
	alive=$(kill -0 "${kvsd_pid[H]}" 2>/dev/null && echo yes)
	stop_kvshared H
	st=$?
	{ kill -9 "$hpid"; wait "$hpid"; } 2>/dev/null
	if verified "$tmp/h1" && [ "$alive" = yes ] && [ "$st" = 0 ]; then
		ok "a Redis answering '$mode': the host serves, kvshared survives and exits cleanly"
	else
		notok "a Redis answering '$mode': kvserve $(cat "$tmp/h1.st"), alive '$alive', exit $st"
		show "$tmp/h1"
	fi
done
unset kvsd_bin

# ---- TLS -----------------------------------------------------------------------

tls=$tmp/tls
mkdir -p "$tls"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=kvshare-test-ca \
	-keyout "$tls/ca.key" -out "$tls/ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout "$tls/srv.key" \
	-out "$tls/srv.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >"$tls/ext"
openssl x509 -req -in "$tls/srv.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" \
	-CAcreateserial -days 1 -extfile "$tls/ext" -out "$tls/srv.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=kvshared -keyout "$tls/cli.key" \
	-out "$tls/cli.csr" 2>/dev/null
openssl x509 -req -in "$tls/cli.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" \
	-CAcreateserial -days 1 -out "$tls/cli.crt" 2>/dev/null
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=other-ca \
	-keyout "$tls/other.key" -out "$tls/other.crt" 2>/dev/null
read -r t1 <<<"$(free_ports 1)"
start_redis tls 0 --tls-port "$t1" --tls-cert-file "$tls/srv.crt" \
	--tls-key-file "$tls/srv.key" --tls-ca-cert-file "$tls/ca.crt" \
	--tls-auth-clients yes >/dev/null 2>&1 || true
tspec=$(pool_spec "127.0.0.1:$t1" ",remote_namespace=tls,remote_tls=yes,remote_tls_ca=$tls/ca.crt,remote_tls_cert=$tls/cli.crt,remote_tls_key=$tls/cli.key")
start_kvshared A "$tspec" && start_kvshared B "$tspec"
serve_drained A "$tmp/ta1" "${W[@]}"
serve B "$tmp/tb1" "${W[@]}"
if grep -q 'remote tier up: TLS' "$tmp/B.log" && verified "$tmp/tb1" &&
   [ "$(computed "$tmp/tb1")" = 0 ]; then
	ok "TLS with client certificates: host B serves A's prompts from remote pages"
else
	notok "TLS: B computed '$(computed "$tmp/tb1")'"; show "$tmp/B.log"
fi
start_kvshared X "$(sed "s|$tls/ca.crt|$tls/other.crt|" <<<"$tspec")"
serve X "$tmp/tx1" "${W[@]}"
if grep -q 'remote tier down at start: TLS handshake .*certificate' "$tmp/X.log" &&
   verified "$tmp/tx1"; then
	ok "TLS: a server the CA does not vouch for is refused; the host serves alone"
else
	notok "TLS: untrusted server"; show "$tmp/X.log"
fi
start_kvshared Y "$(sed "s|,remote_tls_cert=.*||" <<<"$tspec")"
serve Y "$tmp/ty1" "${W[@]}"
if grep -q 'remote tier down.*TLS: .*certificate required' "$tmp/Y.log" &&
   verified "$tmp/ty1"; then
	ok "TLS: without a client certificate the server refuses the tier; the host serves alone"
else
	notok "TLS: no client certificate"; show "$tmp/Y.log"
fi
stop_kvshared A
stop_kvshared B
stop_kvshared X
stop_kvshared Y
check "every kvshared exited with status 0 ($n_exits of them, $bad_exits not)" \
	test "$bad_exits" = 0
[ "$failed" = 0 ]
