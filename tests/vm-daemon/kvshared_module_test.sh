#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# kvshared_module_test: kvshared where the module is loaded (run in the VM
# guest under busybox ash; POSIX sh only).  The daemon must create its
# configured pools in the module with their memory registered there, keep
# them across its own kill -9 and restart, and destroy them on SIGTERM.

KVSHARED=${KVSHARED:-kvshared}
KVCTL=${KVCTL:-kvctl}
P=kvsd_mod_$$

echo "TAP version 13"
if [ ! -e /dev/kvshare ]; then
	echo "1..0 # SKIP no /dev/kvshare"
	exit 0
fi
echo "1..6"

T=$(mktemp -d /tmp/kvsd.XXXXXX) || exit 1
pid=
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
	"$KVCTL" pool destroy "$P" >/dev/null 2>&1
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
	fi
}

# start: run kvshared in the background, wait for "ready" (bounded).
start() {
	"$KVSHARED" --mode auto --socket "$T/sock" \
		--pool "$P:pages=64,layers=2,kv_heads=2,head_dim=64,tokens_per_page=16,dtype=bf16,mode=0666,memory=host" \
		>"$T/log" 2>&1 &
	pid=$!
	i=0
	while [ $i -lt 100 ]; do
		grep -q '^kvshared: ready' "$T/log" && return 0
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

listed_with_memory() {
	"$KVCTL" --device /dev/kvshare pool list >"$T/list" 2>&1 &&
		grep "$P" "$T/list" | grep -q mem-fd
}

start
report $? "kvshared starts where the module is loaded"

listed_with_memory && grep -qi module "$T/log"
report $? "the pool is created in the module, with its memory registered"

"$KVCTL" --device /dev/kvshare stats "$P" --check >"$T/stats" 2>&1 &&
	grep -q 'n_pages *64' "$T/stats"
report $? "the module's invariants hold on the daemon's pool"

kill -9 "$pid"
wait "$pid" 2>/dev/null
pid=
listed_with_memory
report $? "the pool outlives kvshared killed with -9"

start && listed_with_memory
report $? "a restarted kvshared takes the existing pool back"

kill -TERM "$pid"
wait "$pid"
st=$?
pid=
! "$KVCTL" --device /dev/kvshare pool list 2>/dev/null | grep -q "$P" && [ "$st" -eq 0 ]
report $? "SIGTERM: kvshared exits 0 and destroys its pools"
