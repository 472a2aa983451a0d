#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# kvshared_module_test: kvshared where the module is loaded (run in the VM
# guest as root under busybox ash; POSIX sh only).  The daemon must create
# its configured pools in the module with their memory registered there,
# keep them across its own kill -9 and restart, and destroy them on
# SIGTERM.
#
# No squatting (issue 11): pool names are scoped by owner, so an attacker
# (uid 65534, holding the device's group as any user of the arbiter does)
# who creates the daemon's pool name first gets a pool of its own, and
# neither kvshared nor its clients use it.  Where the attacker is the
# configured owner itself, kvshared refuses (exit status 1, a log line
# naming the pool, the owner found and the owner expected) to adopt its
# pool unless it is exactly the configured one.

KVSHARED=${KVSHARED:-kvshared}
KVCTL=${KVCTL:-kvctl}
KVSD_AS=${KVSD_AS:-kvsd_as}
DEV=/dev/kvshare
P=kvsd_mod_$$
Q=kvsd_sq_$$
R=kvsd_own_$$
NOBODY=65534
MEMBER=65533
GEOM="layers=2,kv_heads=2,head_dim=64,tokens_per_page=16,dtype=bf16"
KGEOM="--layers 2 --kv-heads 2 --head-dim 64 --tokens-per-page 16 --dtype bf16"

echo "TAP version 13"
if [ ! -e "$DEV" ]; then
	echo "1..0 # SKIP no $DEV"
	exit 0
fi
echo "1..15"

T=$(mktemp -d /tmp/kvsd.XXXXXX) || exit 1
chmod 0755 "$T"
DEVGID=$(stat -c %g "$DEV")
pid=
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
	for name in "$P" "$Q" "$R"; do
		"$KVCTL" pool destroy "$name" --owner 0 >/dev/null 2>&1
		"$KVCTL" pool destroy "$name" --owner "$NOBODY" >/dev/null 2>&1
	done
	rm -rf "$T"
}
trap cleanup EXIT

n=0
report() {
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then
		echo "ok $n $2"
	else
		echo "not ok $n $2"
		sed 's/^/# /' "$T/log" 2>/dev/null
		sed 's/^/# out: /' "$T/out" 2>/dev/null
	fi
}

# as UID CMD...: CMD as UID (gid UID) with the device's group as its
# supplementary group, as any user allowed to open the arbiter.
as() {
	uid=$1
	shift
	"$KVSD_AS" "$uid" "$uid,$DEVGID" "$@"
}

# start SPEC...: kvshared with these pools, in the background; wait for
# "ready" (bounded: TCG is slow).  1 if it exited or never got ready, with
# why at the end of the log.
start() {
	args=
	for spec in "$@"; do
		args="$args --pool $spec"
	done
	# Emptied here, not by the background job's own redirection: that one
	# may run after the first grep below, which would then find the last
	# run's "ready" in the old log.
	: >"$T/log"
	# shellcheck disable=SC2086  # one word per argument, by construction
	"$KVSHARED" --mode auto --socket "$T/sock" $args >>"$T/log" 2>&1 &
	pid=$!
	i=0
	while [ $i -lt 300 ]; do
		grep -q '^kvshared: ready' "$T/log" && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
		i=$((i + 1))
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "(test: not ready after 30 s)" >>"$T/log"
	else
		echo "(test: kvshared exited before it was ready)" >>"$T/log"
	fi
	return 1
}

# stop: SIGTERM; 0 if kvshared exited 0.
stop() {
	kill -TERM "$pid"
	wait "$pid"
	st=$?
	pid=
	return "$st"
}

# refused SPEC: kvshared exits by itself, non-zero, never ready.  Leaves
# its status in $st.
refused() {
	start "$@" && return 1
	kill -9 "$pid" 2>/dev/null	# never ready, and still running: a failure
	wait "$pid"
	st=$?
	pid=
	[ "$st" -ne 0 ] && ! grep -q '^kvshared: ready' "$T/log"
}

listed_with_memory() {
	"$KVCTL" --device "$DEV" pool list >"$T/list" 2>&1 &&
		grep "$P" "$T/list" | grep -q mem-fd
}

# show NAME OWNER FIELD: a field of pool NAME of OWNER (kvctl pool show).
show() {
	"$KVCTL" pool show "$1" --owner "$2" >"$T/out" 2>&1 &&
		sed -n "s/^$3  *//p" "$T/out" | head -n 1
}

start "$P:pages=64,$GEOM,mode=0666,memory=host"
report $? "kvshared starts where the module is loaded"

listed_with_memory && grep -qi module "$T/log"
report $? "the pool is created in the module, with its memory registered"

"$KVCTL" --device "$DEV" stats "$P" --owner 0 --check >"$T/stats" 2>&1 &&
	grep -q 'n_pages *64' "$T/stats"
report $? "the module's invariants hold on the daemon's pool"

# kvshared's loop ticks once a second (metrics, stall timeouts): it must
# go on living past a few of them with no socket of its own to serve.
sleep 2.5
kill -0 "$pid" 2>/dev/null && ! grep -qi 'segfault\|sanitizer' "$T/log"
report $? "kvshared in module mode lives on past its first ticks"

kill -9 "$pid"
wait "$pid" 2>/dev/null
pid=
listed_with_memory
report $? "the pool outlives kvshared killed with -9"

start "$P:pages=64,$GEOM,mode=0666,memory=host" && listed_with_memory &&
	grep -q "pool '$P' adopted from the module" "$T/log"
report $? "a restarted kvshared takes its own pool back"

stop
st=$?
! "$KVCTL" --device "$DEV" pool list 2>/dev/null | grep -q "$P" && [ "$st" -eq 0 ]
report $? "SIGTERM: kvshared exits 0 and destroys its pools"

# --- squatting -------------------------------------------------------------

# The attacker takes the name first, with memory of its own.
as "$NOBODY" "$KVCTL" pool create "$Q" --pages 32 $KGEOM --mode 0666 \
	--memory >"$T/out" 2>&1 &&
	[ "$(show "$Q" "$NOBODY" uid)" = "$NOBODY" ]
report $? "uid $NOBODY creates pool '$Q' before kvshared"

start "$Q:pages=64,$GEOM,mode=0666,memory=host" &&
	grep -q "pool '$Q' created: .*owner 0:" "$T/log" &&
	! grep -q "adopted" "$T/log"
report $? "kvshared creates its own '$Q' (owner 0) beside the attacker's"

# Clients attach to the daemon's pool: by default (root's, on the
# module) and as another user of the arbiter.
[ "$(show "$Q" 0 n_pages)" = 64 ] &&
	as "$MEMBER" "$KVCTL" stats "$Q" >"$T/out" 2>&1 &&
	grep -q 'n_pages *64' "$T/out" &&
	[ "$(show "$Q" "$NOBODY" n_pages)" = 32 ]
report $? "clients find the daemon's '$Q', not the attacker's"

stop && [ "$(show "$Q" "$NOBODY" n_pages)" = 32 ] &&
	! "$KVCTL" pool show "$Q" --owner 0 >/dev/null 2>&1
report $? "SIGTERM destroys only the daemon's '$Q'"

# --- the configured owner's own pool ---------------------------------------

# uid 65534 is the configured owner and made the pool first, its own way.
as "$NOBODY" "$KVCTL" pool create "$R" --pages 32 $KGEOM --mode 0660 \
	--memory >"$T/out" 2>&1 &&
	refused "$R:pages=64,$GEOM,mode=0660,uid=$NOBODY,gid=$NOBODY" &&
	grep -q "pool '$R': refusing to adopt the pool of that name in the module (owner uid $NOBODY, expected uid $NOBODY): its geometry differs" "$T/log"
report $? "kvshared refuses (status $st) a pool of its owner with another geometry"

"$KVCTL" pool destroy "$R" --owner "$NOBODY" >/dev/null 2>&1
as "$NOBODY" "$KVCTL" pool create "$R" --pages 64 $KGEOM --mode 0666 \
	--memory >"$T/out" 2>&1 &&
	refused "$R:pages=64,$GEOM,mode=0660,uid=$NOBODY,gid=$NOBODY" &&
	grep -q "pool '$R': refusing to adopt .* (owner uid $NOBODY, expected uid $NOBODY): its mode 0666" "$T/log"
report $? "kvshared refuses (status $st) a pool of its owner with another mode"

# With no such pool, kvshared creates it as the configured owner, and
# takes it back after a crash.
"$KVCTL" pool destroy "$R" --owner "$NOBODY" >/dev/null 2>&1
start "$R:pages=64,$GEOM,mode=0660,uid=$NOBODY,gid=$NOBODY" &&
	[ "$(show "$R" "$NOBODY" uid)" = "$NOBODY" ] &&
	[ "$(show "$R" "$NOBODY" gid)" = "$NOBODY" ]
report $? "kvshared creates a pool owned by its configured owner"

kill -9 "$pid"
wait "$pid" 2>/dev/null
pid=
start "$R:pages=64,$GEOM,mode=0660,uid=$NOBODY,gid=$NOBODY" &&
	grep -q "pool '$R' adopted from the module" "$T/log" && stop &&
	! "$KVCTL" pool show "$R" --owner "$NOBODY" >/dev/null 2>&1
report $? "and adopts it after kill -9, destroying it on SIGTERM"
