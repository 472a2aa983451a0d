#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# tier_test: named remote tiers turned on at run time (KVS_SOCK_REMOTE_TIER,
# docs/remote.md), as TAP.  Real servers: one redis-server and two
# kvshared hosts with no configured pool.  A non-root owner (uid 65534)
# creates the same pool on both hosts with kvctl and turns tier T on;
# kvserve on host A publishes, kvserve on host B serves A's prompts from
# Redis, verified to the bit.  Another uid is refused (EPERM); turning
# the tier off stops the writes; the password appears nowhere.
set -uo pipefail

build=${BUILD:-build}
. tests/remote/lib.sh
# The owner's processes reach the sockets: the directory must be searchable.
chmod 0755 "$tmp"
kvsd_bin=$build/san/kvshared

OWNER=65534
OTHER=65533
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n $*"; }
notok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n $*"; }
show() { sed 's/^/#   /' "$1"; }

as() {	# as UID COMMAND...
	local uid=$1
	shift
	setpriv --reuid "$uid" --regid "$uid" --clear-groups "$@"
}
kvctl_as() {	# kvctl_as UID HOST OUT ARGS...: status in OUT.st
	local uid=$1 host=$2 out=$3
	shift 3
	as "$uid" "$build/kvctl" --device "$tmp/$host.sock" "$@" >"$out" 2>&1
	echo $? >"$out.st"
}
serve_as() {	# serve_as UID HOST OUT [kvserve args]
	local uid=$1 host=$2 out=$3
	shift 3
	as "$uid" env KVSHARE_ARBITER="$tmp/$host.sock" KVSHARE_POOL_OWNER="$OWNER" \
		"$build/kvserve" --pool kvserve "$@" >"$out" 2>&1
	echo $? >"$out.st"
}
metrics() { curl -s --max-time 5 --unix-socket "$tmp/$1.met" http://kvshared/metrics; }
has_tier() { metrics "$1" | grep -q "^kvshare_remote_up{pool=\"$2\"}"; }
tier_up() { [ "$(metric "$1" "^kvshare_remote_up\\{pool=\"$2\"\\}")" = 1 ]; }
written() { metric "$1" "^kvshare_remote_written_pages_total\\{pool=\"kvserve\"\\}"; }

W=(--workers 2 --requests 4 --system-tokens 256 --doc-tokens 256 --docs 2
   --question-tokens 20 --verify 1)
CREATE=(pool create kvserve --pages 1024 --layers 2 --kv-heads 2 --head-dim 64
	--tokens-per-page 16 --dtype bf16 --memory --mode 0600)

echo "TAP version 13"
echo "1..14"

read -r r1 <<<"$(free_ports 1)"
start_redis r1 "$r1" || exit 1
printf 'not-the-password-%s\n' $$ >"$tmp/badpw"
chmod 600 "$tmp/badpw"

# Host A names its tiers with --remote, host B in a [remote NAME] section.
kvsd_args=(--remote "T:nodes=127.0.0.1:$r1,user=kvshare,password_file=$tmp/pw"
	   --remote "BAD:nodes=127.0.0.1:$r1,user=kvshare,password_file=$tmp/badpw")
start_kvshared A "" || { show "$tmp/A.log"; exit 1; }
cat >"$tmp/B.conf" <<CONF
[remote T]
nodes = 127.0.0.1:$r1
user = kvshare
password_file = $tmp/pw
timeout_ms = 500
CONF
kvsd_args=(--config "$tmp/B.conf")
start_kvshared B "" || { show "$tmp/B.log"; exit 1; }
kvsd_args=()

kvctl_as $OWNER A "$tmp/ca" "${CREATE[@]}"
kvctl_as $OWNER B "$tmp/cb" "${CREATE[@]}"
if [ "$(cat "$tmp/ca.st")$(cat "$tmp/cb.st")" = 00 ]; then
	ok "uid $OWNER creates pool kvserve at run time on both hosts"
else
	notok "pool create"; show "$tmp/ca"; show "$tmp/cb"
fi

# Another uid may not turn the owner's tier on: EPERM, and nothing changes.
kvctl_as $OTHER A "$tmp/other" pool remote kvserve --tier T --owner $OWNER
if [ "$(cat "$tmp/other.st")" != 0 ] && grep -q 'EPERM' "$tmp/other" &&
   ! has_tier A kvserve && grep -q "uid $OTHER: remote tier 'T' on .*Operation not permitted" "$tmp/A.log"; then
	ok "uid $OTHER is refused (EPERM); the pool has no tier"
else
	notok "another uid turned the tier on"; show "$tmp/other"; show "$tmp/A.log"
fi

kvctl_as $OWNER A "$tmp/ona" pool remote kvserve --tier T --owner $OWNER
kvctl_as $OWNER B "$tmp/onb" pool remote kvserve --tier T --owner $OWNER
if [ "$(cat "$tmp/ona.st")$(cat "$tmp/onb.st")" = 00 ] &&
   grep -q "remote tier 'T' on, namespace 'kvserve'" "$tmp/ona" &&
   wait_until 10 tier_up A kvserve && wait_until 10 tier_up B kvserve; then
	ok "the owner turns tier T on for its run-time pool on both hosts; both come up"
else
	notok "owner's tier on"; show "$tmp/ona"; show "$tmp/onb"; show "$tmp/A.log"
fi

# A second tier on the same pool: EBUSY.
kvctl_as $OWNER A "$tmp/busy" pool remote kvserve --tier T --owner $OWNER
if grep -q 'EBUSY' "$tmp/busy"; then
	ok "a second tier on the pool is EBUSY"
else
	notok "second tier"; show "$tmp/busy"
fi

# Cross-host sharing through the run-time tier.
serve_as $OWNER A "$tmp/a1" "${W[@]}"
wait_until 10 drained A || echo "# host A: writes still pending"
serve_as $OWNER B "$tmp/b1" "${W[@]}"
if verified "$tmp/a1" && verified "$tmp/b1" && [ "$(computed "$tmp/b1")" = 0 ] &&
   [ "$(metric B '^kvshare_remote_hit_pages_total')" -gt 0 ]; then
	ok "host B serves A's prompts from remote pages, verified to the bit"
else
	notok "cross-host: B computed '$(computed "$tmp/b1")'"; show "$tmp/b1"
fi

# Hostile requests: each is refused with its errno, and changes nothing.
if /usr/bin/python3 tests/remote/tier_req.py "$tmp/A.sock" $OWNER; then
	ok "bad requests (oversized names, reserved fields, flags, lengths) are refused"
else
	notok "bad requests"
fi

# Off: no more writes; the pages stay.
w0=$(written A)
kvctl_as $OTHER A "$tmp/offo" pool remote kvserve --off --owner $OWNER
kvctl_as $OWNER A "$tmp/off" pool remote kvserve --off --owner $OWNER
keys0=$(rcli "$r1" dbsize)
serve_as $OWNER A "$tmp/a2" "${W[@]}" --seed 7
sleep 0.5
if grep -q EPERM "$tmp/offo" && grep -q 'remote tier off' "$tmp/off" &&
   ! has_tier A kvserve && verified "$tmp/a2" && [ "$(computed "$tmp/a2")" -gt 0 ] &&
   [ "$(rcli "$r1" dbsize)" = "$keys0" ] && [ "$w0" -gt 0 ]; then
	ok "off (the owner's; another uid's is EPERM): new prompts are not written"
else
	notok "off: keys $keys0 -> $(rcli "$r1" dbsize)"; show "$tmp/off"
fi
serve_as $OWNER A "$tmp/a3" "${W[@]}" --seed 7
if verified "$tmp/a3" && [ "$(computed "$tmp/a3")" = 0 ]; then
	ok "the pool's pages stay when its tier goes off"
else
	notok "pages after off: computed '$(computed "$tmp/a3")'"
fi

# A refused AUTH at run time: the request returns at once, the tier
# retries and counts, and the pool serves without it.
kvctl_as $OWNER A "$tmp/onbad" pool remote kvserve --tier BAD --owner $OWNER
refused() { [ "$(metric A '^kvshare_remote_auth_refused_total\{pool="kvserve"\}')" -gt 0 ]; }
serve_as $OWNER A "$tmp/a4" "${W[@]}" --seed 9
if [ "$(cat "$tmp/onbad.st")" = 0 ] && wait_until 10 refused &&
   grep -q "remote tier down: .*WRONGPASS" "$tmp/A.log" && verified "$tmp/a4"; then
	ok "a refused AUTH at run time is logged and counted; the pool serves"
else
	notok "refused AUTH at run time"; show "$tmp/onbad"; tail -5 "$tmp/A.log"
fi

# Destroying the pool turns its tier off.
kvctl_as $OWNER A "$tmp/destroy" pool destroy kvserve --owner $OWNER
if [ "$(cat "$tmp/destroy.st")" = 0 ] && ! has_tier A kvserve; then
	ok "destroying the pool turns its tier off"
else
	notok "destroy with a tier"; show "$tmp/destroy"
fi

# One uid turns at most KVS_REMOTE_TIER_UID_MAX (4) tiers on: EDQUOT after.
quota_ok=1
for i in 1 2 3 4 5; do
	kvctl_as $OWNER A "$tmp/cq$i" pool create "q$i" --pages 64 --layers 2 \
		--kv-heads 2 --head-dim 64 --tokens-per-page 16 --dtype bf16 --memory
	kvctl_as $OWNER A "$tmp/oq$i" pool remote "q$i" --tier T --owner $OWNER
	want=0
	[ "$i" = 5 ] && want=1
	[ "$(cat "$tmp/oq$i.st")" = "$want" ] || quota_ok=0
done
if [ "$quota_ok" = 1 ] && grep -q EDQUOT "$tmp/oq5" && ! has_tier A q5; then
	ok "a uid's fifth run-time tier is EDQUOT"
else
	notok "per-uid tier cap"; show "$tmp/oq5"
fi

# Configuration errors of a named tier stop kvshared (exit 2).
cfg_bad=0
for bad in "T:nodes=127.0.0.1:$r1,namespace=x@each pool that turns the tier on" \
	   "T:cluster=yes@without nodes=HOST:PORT" \
	   "T:nodes=127.0.0.1:$r1,user=kvshare@remote_password_file" \
	   "T:nodes=127.0.0.1:$r1,bogus=1@unknown pool key 'remote_bogus'" \
	   "a{b}:nodes=127.0.0.1:$r1@bad remote tier name"; do
	"$build/kvshared" --mode socket --socket "$tmp/cfg.sock" --remote "${bad%%@*}" \
		>"$tmp/cfg.out" 2>&1
	st=$?
	if [ "$st" != 2 ] || ! grep -qF "${bad#*@}" "$tmp/cfg.out"; then
		echo "# --remote ${bad%%@*}: status $st"; show "$tmp/cfg.out"
		cfg_bad=1
	fi
done
if [ "$cfg_bad" = 0 ]; then
	ok "bad named tiers are refused at startup, each naming its key"
else
	notok "bad named tiers"
fi

metrics A >"$tmp/A.metrics"
metrics B >"$tmp/B.metrics"
if ! grep -rqF -e "$tier_pw" -e "not-the-password" "$tmp"/*.log "$tmp"/*.metrics \
	"$tmp"/ca "$tmp"/cb "$tmp"/other "$tmp"/on* "$tmp"/off* "$tmp"/busy; then
	ok "the password is in no reply, log line or metric"
else
	notok "a password leaked"
fi

stop_kvshared A
stop_kvshared B
if [ "$bad_exits" = 0 ]; then
	ok "both kvshared (ASan) exit with status 0"
else
	notok "kvshared exit"
fi
[ "$failed" = 0 ]
