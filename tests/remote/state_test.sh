#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# state_test: run-time tiers survive a restart of kvshared (state_dir,
# docs/remote.md), as TAP.  Real servers: one redis-server and one
# kvshared (ASan) with a state directory, restarted between steps.  A
# non-root owner (uid 65534) turns tier T on for its run-time pool; after
# a restart its pool made again under the same name gets the tier back,
# with its namespace (its pages come from Redis), while another uid's
# pool of that name never does.  The state file is kvshared's own (0600,
# a directory only it may write), and hostile files are refused.
set -uo pipefail

build=${BUILD:-build}
. tests/remote/lib.sh
chmod 0755 "$tmp"
kvsd_bin=$build/san/kvshared

OWNER=65534
OTHER=65533
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n $*"; }
notok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n $*"; }
show() { sed 's/^/#   /' "$1"; }

as() { local uid=$1; shift; setpriv --reuid "$uid" --regid "$uid" --clear-groups "$@"; }
kvctl_as() {	# kvctl_as UID OUT ARGS...: status in OUT.st
	local uid=$1 out=$2
	shift 2
	as "$uid" "$build/kvctl" --device "$tmp/A.sock" "$@" >"$out" 2>&1
	echo $? >"$out.st"
}
serve_as() {	# serve_as UID OUT [kvserve args]
	local uid=$1 out=$2
	shift 2
	as "$uid" env KVSHARE_ARBITER="$tmp/A.sock" KVSHARE_POOL_OWNER="$uid" \
		"$build/kvserve" --pool kvserve "$@" >"$out" 2>&1
	echo $? >"$out.st"
}
tier_up() { [ "$(metric A '^kvshare_remote_up\{pool="kvserve"\}')" = 1 ]; }
has_tier() {
	curl -s --max-time 5 --unix-socket "$tmp/A.met" http://kvshared/metrics |
		grep -q '^kvshare_remote_up{pool="kvserve"}'
}
create() { kvctl_as "$1" "$2" pool create kvserve --pages 1024 --layers 2 --kv-heads 2 \
	--head-dim 64 --tokens-per-page 16 --dtype bf16 --memory --mode 0600; }
restart() {	# restart [more kvshared flags]: A again, same state directory
	stop_kvshared A >/dev/null
	kvsd_args=("${base_args[@]}" "$@")
	start_kvshared A ""
}

W=(--workers 2 --requests 4 --system-tokens 256 --doc-tokens 256 --docs 2
   --question-tokens 20 --verify 1)

echo "TAP version 13"
echo "1..11"

read -r r1 <<<"$(free_ports 1)"
start_redis r1 "$r1" || exit 1
state=$tmp/state
mkdir -m 0700 "$state"
base_args=(--state-dir "$state"
	   --remote "T:nodes=127.0.0.1:$r1,user=kvshare,password_file=$tmp/pw")
kvsd_args=("${base_args[@]}")
start_kvshared A "" || { show "$tmp/A.log"; exit 1; }

create $OWNER "$tmp/c1"
kvctl_as $OWNER "$tmp/on" pool remote kvserve --tier T --namespace st1 --owner $OWNER
wait_until 10 tier_up
serve_as $OWNER "$tmp/s1" "${W[@]}"
wait_until 10 drained A || echo "# writes still pending"
line=$(tail -n +2 "$state/remote-tiers" 2>/dev/null)
perm=$(stat -c '%a %u' "$state/remote-tiers" 2>/dev/null)
if [ "$(cat "$tmp/on.st")" = 0 ] && verified "$tmp/s1" &&
   [ "$line" = "$OWNER kvserve T st1 $OWNER 0" ] && [ "$perm" = "600 0" ] &&
   [ ! -e "$state/.remote-tiers.tmp" ]; then
	ok "the owner's run-time tier is written to the state file (0600, kvshared's): '$line'"
else
	notok "state file: line '$line' perm '$perm'"; show "$tmp/on"; ls -la "$state" | show /dev/stdin
fi

# Restarted: the pools made at run time are gone, the tier is remembered.
restart
if grep -q "1 run-time tier remembered" "$tmp/A.log" && ! has_tier; then
	ok "restarted: 1 run-time tier remembered, no pool has it yet"
else
	notok "restart"; show "$tmp/A.log"
fi

# Another uid's pool of that name never gets it.
create $OTHER "$tmp/c2"
kvctl_as $OTHER "$tmp/off2" pool remote kvserve --off --owner $OTHER
if [ "$(cat "$tmp/c2.st")" = 0 ] && ! has_tier && grep -q "has no remote tier" "$tmp/off2" &&
   ! grep -q "of uid $OTHER: remembered" "$tmp/A.log"; then
	ok "uid $OTHER's pool 'kvserve' does not get uid $OWNER's tier"
else
	notok "another uid's pool got the tier"; show "$tmp/off2"; show "$tmp/A.log"
fi
kvctl_as $OTHER "$tmp/d2" pool destroy kvserve --owner $OTHER

# The owner's pool made again: the tier is back, namespace and all, so
# the new empty pool is served from Redis.
create $OWNER "$tmp/c3"
wait_until 10 tier_up
serve_as $OWNER "$tmp/s3" "${W[@]}"
if grep -q "pool 'kvserve' of uid $OWNER: remembered remote tier 'T', namespace 'st1': on again" \
	"$tmp/A.log" && tier_up && verified "$tmp/s3" && [ "$(computed "$tmp/s3")" = 0 ]; then
	ok "the owner's pool made again gets tier T back (namespace st1): served from Redis, equal to the bit"
else
	notok "tier not restored: computed '$(computed "$tmp/s3")'"; show "$tmp/A.log"
fi

# Destroyed and made again without a restart: still remembered.
kvctl_as $OWNER "$tmp/d3" pool destroy kvserve --owner $OWNER
create $OWNER "$tmp/c4"
if [ "$(cat "$tmp/d3.st")$(cat "$tmp/c4.st")" = 00 ] && wait_until 10 tier_up; then
	ok "a pool destroyed and made again gets its tier back"
else
	notok "destroy and create again"; show "$tmp/A.log"
fi

# Off forgets it: nothing comes back after a restart.
kvctl_as $OWNER "$tmp/off" pool remote kvserve --off --owner $OWNER
restart
create $OWNER "$tmp/c5"
sleep 0.5
if [ "$(tail -n +2 "$state/remote-tiers" | wc -l)" = 0 ] && ! has_tier &&
   grep -q "0 run-time tiers remembered" "$tmp/A.log"; then
	ok "turned off, the tier is forgotten: not back after a restart"
else
	notok "off did not forget"; show "$tmp/A.log"; show "$state/remote-tiers"
fi
kvctl_as $OWNER "$tmp/d5" pool destroy kvserve --owner $OWNER

# Hostile state files: every bad line is refused, the good one kept.
good="$OWNER kvserve T st1 $OWNER 0"
write_state() { printf '%s\n' "$@" >"$state/remote-tiers"; chmod 600 "$state/remote-tiers"; }
write_state "kvshared-remote-tiers 1" \
	"-1 kvserve T st1 0 0" "4294967295 kvserve T st1 0 0" "0${OWNER} x T st1 0 0" \
	"$OWNER ../etc T st1 $OWNER 0" "$OWNER a%n T st1 $OWNER 0" "$OWNER p T st1 $OWNER 2" \
	"$OWNER p T st1 $OWNER" "$OWNER p T st1 $OWNER 0 extra" "$OWNER  p T st1 $OWNER 0" \
	"$OWNER p T $(printf 'n%.0s' $(seq 70)) $OWNER 0" "$good" "$OWNER kvserve U u $OWNER 0"
restart
ignored=$(grep -c "line ignored" "$tmp/A.log")
create $OWNER "$tmp/c6"
if [ "$ignored" = 8 ] && grep -q "bad lines ignored" "$tmp/A.log" &&
   grep -q "1 run-time tier remembered" "$tmp/A.log" && wait_until 10 tier_up; then
	ok "a state file with 11 bad lines: each refused (8 logged), the good one restored"
else
	notok "bad lines: $ignored logged"; show "$tmp/A.log"
fi
kvctl_as $OWNER "$tmp/d6" pool destroy kvserve --owner $OWNER

# A file others may write, another uid's, a symlink, a huge one: ignored.
files_ok=1
for bad in mode owner link huge magic; do
	rm -f "$state/remote-tiers"
	write_state "kvshared-remote-tiers 1" "$good"
	case $bad in
	mode)	chmod 666 "$state/remote-tiers" ;;
	owner)	chown $OWNER "$state/remote-tiers" ;;
	link)	mv "$state/remote-tiers" "$tmp/elsewhere"
		ln -s "$tmp/elsewhere" "$state/remote-tiers" ;;
	huge)	head -c 70000 /dev/zero | tr '\0' '#' >>"$state/remote-tiers" ;;
	magic)	sed -i 1d "$state/remote-tiers" ;;
	esac
	restart
	if ! grep -q "remote tiers state .*ignored" "$tmp/A.log" ||
	   grep -q "run-time tier remembered" "$tmp/A.log"; then
		echo "# state file '$bad' was not refused:"; show "$tmp/A.log"
		files_ok=0
	fi
done
if [ "$files_ok" = 1 ]; then
	ok "state files with mode 0666, of another uid, a symlink, over 64 KiB, without the magic: ignored"
else
	notok "a hostile state file was used"
fi

# The next change replaces the file, atomically, with kvshared's own.
create $OWNER "$tmp/c7"
kvctl_as $OWNER "$tmp/on7" pool remote kvserve --tier T --owner $OWNER
if [ ! -L "$state/remote-tiers" ] && [ "$(stat -c '%a %u' "$state/remote-tiers")" = "600 0" ] &&
   [ "$(tail -n +2 "$state/remote-tiers")" = "$OWNER kvserve T kvserve $OWNER 0" ]; then
	ok "the next change replaces it with kvshared's own file"
else
	notok "state file after a change"; ls -la "$state" | show /dev/stdin
fi

# A state directory others may write, or another uid's: kvshared does not start.
chmod 0770 "$state"
stop_kvshared A >/dev/null
kvsd_args=("${base_args[@]}")
start_kvshared S ""
st1=$(cat "$tmp/S.status" 2>/dev/null)
grep -q "state_dir '$state': not a directory of kvshared's uid 0 that only it may write" "$tmp/S.log"
g1=$?
chmod 0700 "$state"
"$build/kvshared" --mode socket --socket "$tmp/cfg.sock" --state-dir rel/dir >"$tmp/cfg.out" 2>&1
st2=$?
if [ "$st1" = 1 ] && [ "$g1" = 0 ] && [ "$st2" = 2 ] && grep -q "not an absolute path" "$tmp/cfg.out"; then
	ok "a group-writable state directory stops kvshared (exit 1); a relative one is refused (exit 2)"
else
	notok "state_dir checks: status '$st1' '$st2'"; show "$tmp/S.log"; show "$tmp/cfg.out"
fi

if [ "$bad_exits" = 0 ]; then
	ok "every kvshared (ASan) exited with status 0 ($n_exits of them)"
else
	notok "$bad_exits kvshared exits were not clean"
fi
[ "$failed" = 0 ]
