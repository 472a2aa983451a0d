#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# remote_module_test: the remote tier in module mode, in the VM guest (run
# as root under busybox ash; POSIX sh only).  Two kvshared --mode module
# stand for two hosts: each creates its own pool in kvshare.ko (hostA_*,
# hostB_*) with a tier to the guest's own redis-server on 127.0.0.1, under
# one remote_namespace, and serves it through the pool's event channel
# only: kvserve's workers call /dev/kvshare directly.  kvserve on host A
# computes and publishes (write-behind from PUBLISHED records); kvserve on
# host B, with the same prompts, computes nothing: its misses are claimed
# for B's channel, fetched from Redis and published by B's tier, and its
# outputs are verified to the bit against a recomputation from scratch and
# equal A's digest.  Then a kill -9 of host B's kvshared while it holds
# references and claims leaves none, and SIGTERM destroys both pools.

KVSHARED=${KVSHARED:-kvshared}
KVSERVE=${KVSERVE:-kvserve}
KVCTL=${KVCTL:-kvctl}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
DEV=/dev/kvshare
PORT=6392
A=hostA_$$
B=hostB_$$
GEOM="layers=2,kv_heads=2,head_dim=64,tokens_per_page=16,dtype=bf16"
TIER="remote=127.0.0.1:$PORT,remote_namespace=vm2h,remote_timeout_ms=5000"
W="--workers 2 --requests 2 --system-tokens 64 --doc-tokens 64 --docs 2 --question-tokens 8 --gen-tokens 2 --verify 1 --inflight-wait 30000"

echo "TAP version 13"
if [ ! -e "$DEV" ]; then
	echo "1..0 # SKIP no $DEV"
	exit 0
fi
if ! command -v "$REDIS_SERVER" >/dev/null 2>&1 || ! command -v "$KVSERVE" >/dev/null 2>&1; then
	echo "1..0 # SKIP $REDIS_SERVER or $KVSERVE is not in the guest"
	exit 0
fi
echo "1..8"

T=$(mktemp -d /tmp/rmod.XXXXXX) || exit 1
rpid=
pid_A=
pid_B=
cleanup() {
	for p in "$pid_A" "$pid_B" "$rpid"; do
		[ -n "$p" ] && kill -9 "$p" 2>/dev/null
	done
	for name in "$A" "$B"; do
		"$KVCTL" pool destroy "$name" --owner 0 >/dev/null 2>&1
	done
	rm -rf "$T"
}
trap cleanup EXIT

n=0
# report STATUS TEXT [FILE...]: a TAP line; on failure the files as comments.
report() {
	st=$1
	text=$2
	shift 2
	n=$((n + 1))
	if [ "$st" -eq 0 ]; then
		echo "ok $n $text"
		return
	fi
	echo "not ok $n $text"
	for f in "$@"; do
		sed "s|^|# $(basename "$f"): |" "$f" 2>/dev/null
	done
}

rcli() {
	"$REDIS_CLI" -h 127.0.0.1 -p "$PORT" "$@"
}

# metric HOST RE: the sum of the samples of kvshared HOST's metrics
# matching RE (busybox wget over the loopback).
metric() {
	wget -q -O - "http://127.0.0.1:$(cat "$T/$1.mport")/metrics" 2>/dev/null |
		awk -v re="$2" '$0 !~ /^#/ && $0 ~ re { s += $NF } END { print s + 0 }'
}

# wait_for TENTHS COMMAND...: until COMMAND succeeds, 1 if it never did.
wait_for() {
	tries=$1
	shift
	until "$@"; do
		tries=$((tries - 1))
		[ "$tries" -gt 0 ] || return 1
		sleep 0.1
	done
}

ready() { grep -q '^kvshared: ready' "$T/$1.log"; }
tier_up() { [ "$(metric "$1" '^kvshare_remote_up')" = 1 ]; }
drained() { [ "$(metric "$1" '^kvshare_remote_write_pending')" = 0 ]; }

# start HOST POOL MPORT: kvshared --mode module with POOL and its tier, in
# the background, until ready and its tier up.
start() {
	echo "$3" >"$T/$1.mport"
	: >"$T/$1.log"
	"$KVSHARED" --mode module --device "$DEV" --socket "$T/$1.sock" \
		--metrics "127.0.0.1:$3" \
		--pool "$2:pages=256,$GEOM,mode=0600,memory=host,$TIER" >>"$T/$1.log" 2>&1 &
	eval "pid_$1=\$!"
	wait_for 300 ready "$1" && wait_for 100 tier_up "$1"
}

field() { sed -n "s/^$1  *//p" "$2" | head -n 1; }
computed() { sed -n 's/^ *pages computed *\([0-9]*\) .*/\1/p' "$1"; }
digest() { sed -n 's/^ *outputs digest *\([0-9a-f]*\).*/\1/p' "$1"; }
verified() { grep -q 'equal to the bit' "$1"; }

"$REDIS_SERVER" --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
	--dir "$T" --logfile "$T/redis.log" --daemonize no &
rpid=$!
wait_for 300 sh -c "[ \"\$($REDIS_CLI -h 127.0.0.1 -p $PORT PING 2>/dev/null)\" = PONG ]"
report $? "redis-server answers on the guest's loopback" "$T/redis.log"

start A "$A" 9101 && start B "$B" 9102 &&
	grep -q "module mode" "$T/A.log" && grep -q "module mode" "$T/B.log"
report $? "two kvshared --mode module, each with its pool's tier up" "$T/A.log" "$T/B.log"

t0=$(date +%s)
env -u KVSHARE_ARBITER -u KVSHARE_SOCKET "$KVSERVE" --arbiter "$DEV" --pool "$A" $W \
	>"$T/a1" 2>&1
st=$?
wait_for 100 drained A
written=$(metric A '^kvshare_remote_written_pages_total')
keys=$(rcli DBSIZE 2>/dev/null)
[ "$st" -eq 0 ] && verified "$T/a1" && [ "$(computed "$T/a1")" -gt 0 ] &&
	[ "$written" -gt 0 ] && [ "$keys" -ge "$written" ]
report $? "host A serves, verified; its tier wrote $written pages ($keys keys in Redis)" "$T/a1" "$T/A.log"

env -u KVSHARE_ARBITER -u KVSHARE_SOCKET "$KVSERVE" --arbiter "$DEV" --pool "$B" $W \
	>"$T/b1" 2>&1
st=$?
t1=$(date +%s)
hits=$(metric B '^kvshare_remote_hit_pages_total')
[ "$st" -eq 0 ] && verified "$T/b1" && [ "$(computed "$T/b1")" = 0 ] &&
	[ "$hits" -gt 0 ] && [ "$(digest "$T/b1")" = "$(digest "$T/a1")" ]
report $? "host B serves A's prompts from the tier: 0 pages computed, $hits fetched, verified to the bit, A's digest ($((t1 - t0)) s)" \
	"$T/b1" "$T/B.log"

"$KVCTL" --device "$DEV" stats "$B" --owner 0 --check >"$T/statsB" 2>&1 &&
	[ "$(field publishes "$T/statsB")" -gt 0 ] && [ "$(field n_refs "$T/statsB")" = 0 ] &&
	[ "$(field n_owned "$T/statsB")" = 0 ] && [ "$(field n_claimed "$T/statsB")" = 0 ] &&
	[ "$(field n_held "$T/statsB")" = 0 ]
report $? "B's pages came through its channel; no reference or claim left" "$T/statsB"

# Host B's kvshared killed while its tier holds claims (a fetch stalled
# behind a sleeping Redis) and references: the module releases them.
# (kvctl stats shows the pool's holdings, not whose: n_claimed counts the
# tier's claims and those of kvserve's own computes alike.)
rcli CONFIG SET enable-debug-command yes >/dev/null 2>&1
( rcli DEBUG SLEEP 3 >/dev/null 2>&1 & )
sleep 0.2
env -u KVSHARE_ARBITER -u KVSHARE_SOCKET "$KVSERVE" --arbiter "$DEV" --pool "$B" $W \
	--salt other --inflight-wait 100 >"$T/b2" 2>&1 &
spid=$!
held=0
i=0
while [ $i -lt 50 ]; do
	"$KVCTL" --device "$DEV" stats "$B" --owner 0 >"$T/statsB" 2>&1
	if [ "$(field n_claimed "$T/statsB")" -gt 0 ] 2>/dev/null; then
		held=1
		break
	fi
	sleep 0.1
	i=$((i + 1))
done
cp "$T/statsB" "$T/statsB.held"
kill -9 "$pid_B"
wait "$pid_B" 2>/dev/null
pid_B=
wait "$spid"
"$KVCTL" --device "$DEV" stats "$B" --owner 0 --check >"$T/statsB" 2>&1 &&
	[ "$held" = 1 ] && [ "$(field n_refs "$T/statsB")" = 0 ] &&
	[ "$(field n_claimed "$T/statsB")" = 0 ] &&
	[ "$(field n_owned "$T/statsB")" = 0 ] && [ "$(field n_held "$T/statsB")" = 0 ]
report $? "kill -9 of host B's kvshared with claims held leaves no reference or claim" \
	"$T/statsB.held" "$T/statsB" "$T/b2"

start B "$B" 9102 && grep -q "pool '$B' adopted from the module" "$T/B.log"
report $? "host B's kvshared takes its pool back, tier up" "$T/B.log"

kill -TERM "$pid_A" "$pid_B"
wait "$pid_A"
sa=$?
wait "$pid_B"
sb=$?
pid_A=
pid_B=
! "$KVCTL" --device "$DEV" pool list 2>/dev/null | grep -q "host[AB]_$$" &&
	[ "$sa" -eq 0 ] && [ "$sb" -eq 0 ]
report $? "SIGTERM: both exit 0 (status $sa, $sb) and destroy their pools" "$T/A.log" "$T/B.log"
