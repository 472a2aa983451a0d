#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# charge_test: remote fetches are charged to the uid whose LOOKUP missed
# (daemon/user.h, KVSD_CHARGE_FETCH), as TAP.  Host A computes and
# publishes a workload to a real redis-server; host B (max_user_memory
# 16 MiB, 16 KiB pages, fetches of up to 512 pages: 8 MiB each) is
# stormed by uid 65534 with LOOKUP misses of 512-page chains while Redis
# is stopped, so that its fetches stay out: the first two fill its 16 MiB
# (the second cut to what is left), every later one is refused
# (kvshare_remote_fetch_skipped_total{why="user_memory"}), and uid 65533
# still gets its fetch.  Once Redis answers the charges go back to 0 and
# uid 65533 is served A's prompts from Redis, equal to the bit; fetches
# still out at shutdown are given back too (no ledger left charged, ASan
# clean).
set -uo pipefail

# Run from the top of the tree, as make test does.
build=${BUILD:-build}
. tests/remote/lib.sh
chmod 0755 "$tmp"	# the uids below reach B's socket
kvsd_bin=$build/san/kvshared

ATTACKER=65534
OTHER=65533
MAX_USER=$((16 << 20))
CHAIN=512
PAGE=16384

n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n $*"; }
notok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n $*"; }
show() { sed 's/^/#   /' "$1"; }

as() { local uid=$1; shift; setpriv --reuid "$uid" --regid "$uid" --clear-groups "$@"; }
storm_as() {	# storm_as UID N: N LOOKUPs of new CHAIN-page chains on B
	as "$1" "$build/tests/remote_lookup_storm" "$tmp/B.sock" kvserve "$2" "$CHAIN" \
		>"$tmp/storm.$1" 2>&1 || show "$tmp/storm.$1"
}
charged() {	# charged UID: what B's ledger charges UID for fetches now
	metric B "^kvshare_user_memory_bytes\\{uid=\"$1\",what=\"remote-fetches\"\\}"
}
refused() { metric B 'why="user_memory"'; }
no_fetch_charges() { [ "$(metric B 'what="remote-fetches"')" = 0 ]; }

W=(--workers 2 --requests 4 --system-tokens 256 --doc-tokens 256 --docs 2
   --question-tokens 20 --verify 1)

echo "TAP version 13"
echo "1..7"

read -r r1 <<<"$(free_ports 1)"
start_redis r1 "$r1" || exit 1
spec=$(pool_spec "127.0.0.1:$r1" \
	",remote_namespace=c1,remote_fetch_max=$CHAIN,remote_timeout_ms=4000" |
	sed 's/pages=1024/pages=4096/; s/mode=0600/mode=0666/')
start_kvshared A "$spec" || { echo "# host A did not start"; show "$tmp/A.log"; exit 1; }
kvsd_args=(--max-user-memory "$MAX_USER")
start_kvshared B "$spec" || { echo "# host B did not start"; show "$tmp/B.log"; exit 1; }
serve_drained A "$tmp/a1" "${W[@]}" --seed 1

# Redis stopped: every fetch started stays out (4 s), charged.
kill -STOP "${redis_pid[r1]}"
storm_as "$ATTACKER" 20
got=$(charged "$ATTACKER")
nref=$(refused)
if [ "$got" -le "$MAX_USER" ] && [ "$got" -gt $((MAX_USER - CHAIN * PAGE)) ]; then
	ok "uid $ATTACKER's fetches out are charged to it, within max_user_memory ($got bytes)"
else
	notok "uid $ATTACKER's fetches out: $got bytes charged (max_user_memory $MAX_USER)"
fi
if [ "$nref" = 18 ] &&
   grep -q "uid $ATTACKER: a remote fetch refused: .*max_user_memory" "$tmp/B.log"; then
	ok "its 20 misses: 2 fetches fill its ledger, 18 refused (why=\"user_memory\"), logged with the uid"
else
	notok "its 20 misses: $nref refused for its memory (want 18)"; show "$tmp/B.log" | tail -5
fi
storm_as "$OTHER" 1
other=$(charged "$OTHER")
if [ "$(refused)" = "$nref" ] && [ "$other" = $((CHAIN * PAGE)) ]; then
	ok "meanwhile uid $OTHER's miss is fetched, on its own ledger ($other bytes)"
else
	notok "uid $OTHER's miss: $other bytes charged, refusals $nref -> $(refused)"
fi
kill -CONT "${redis_pid[r1]}"

if wait_until 10 no_fetch_charges; then
	ok "every fetch's charge is given back once it ends"
else
	notok "fetch charges left: $(metric B 'what="remote-fetches"') bytes"
fi
as "$OTHER" env KVSHARE_ARBITER="$tmp/B.sock" KVSHARE_POOL_OWNER=0 \
	"$build/kvserve" --pool kvserve "${W[@]}" --seed 1 >"$tmp/b1" 2>&1
echo $? >"$tmp/b1.st"
if verified "$tmp/b1" && [ "$(computed "$tmp/b1")" = 0 ]; then
	ok "uid $OTHER is served A's prompts from Redis, equal to the bit"
else
	notok "uid $OTHER on B: computed '$(computed "$tmp/b1")'"; show "$tmp/b1"
fi

# Fetches out at shutdown: given back as the tier is freed.
kill -STOP "${redis_pid[r1]}"
storm_as "$ATTACKER" 2
out=$(charged "$ATTACKER")
stop_kvshared A >/dev/null
if stop_kvshared B && [ "$out" -gt 0 ] && ! grep -q "(a bug)" "$tmp/B.log"; then
	ok "fetches out at shutdown ($out bytes) are given back: no ledger left charged, exit 0"
else
	notok "shutdown with $out bytes of fetches out"; show "$tmp/B.log" | tail -20
fi
kill -CONT "${redis_pid[r1]}"

# The largest limit the configuration allows is 256 MiB a uid: past it
# kvshared does not start.
"$build/kvshared" --mode socket --socket "$tmp/big.sock" --max-user-memory 257M \
	>/dev/null 2>"$tmp/big.log" &
big=$!
wait "$big"
st=$?
if [ "$st" = 2 ] && grep -q "max-user-memory.*out of range (16777216..268435456)" "$tmp/big.log"; then
	ok "max_user_memory past 256 MiB is refused at startup (exit 2, the range named)"
else
	notok "--max-user-memory 257M: status $st"; show "$tmp/big.log"
fi
[ "$failed" = 0 ]
