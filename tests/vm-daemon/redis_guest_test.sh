#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# redis_guest_test: Debian's redis-server runs inside the VM guest (busybox
# ash, POSIX sh only), bound to the guest's loopback, so that the module-mode
# remote tier's tests have a real Redis without any traffic leaving the VM
# (the VM has no network card at all: run-vm.sh's -nic none).  The server
# starts, answers PING, stores and returns a value byte for byte, listens
# on 127.0.0.1 only, and stops on SHUTDOWN.

REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
PORT=${REDIS_PORT:-6391}

echo "TAP version 13"
if ! command -v "$REDIS_SERVER" >/dev/null 2>&1; then
	echo "1..0 # SKIP $REDIS_SERVER is not in the guest (install redis-server on the host)"
	exit 0
fi
echo "1..6"

T=$(mktemp -d /tmp/redis.XXXXXX) || exit 1
pid=
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
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
		sed 's/^/# log: /' "$T/log" 2>/dev/null
		sed 's/^/# out: /' "$T/out" 2>/dev/null
	fi
}

rcli() {
	"$REDIS_CLI" -h 127.0.0.1 -p "$PORT" "$@"
}

# The loopback is up (guest-init.sh) and is the guest's only interface:
# nothing the guest sends can leave it.
ip -o link show >"$T/out" 2>&1 && [ "$(wc -l <"$T/out")" -eq 1 ] &&
	grep -q '^1: lo: <.*UP' "$T/out" &&
	ip -o addr show >"$T/out" 2>&1 &&
	grep -q ' lo .*inet 127\.0\.0\.1/' "$T/out"
report $? "lo, up with 127.0.0.1, is the guest's only interface"

# No persistence (nothing to save in a RAM disk), in the foreground.
"$REDIS_SERVER" --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
	--dir "$T" --logfile "$T/log" --daemonize no &
pid=$!
i=0
ok=1
while [ $i -lt 300 ]; do
	if [ "$(rcli PING 2>/dev/null)" = PONG ]; then
		ok=0
		break
	fi
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
	i=$((i + 1))
done
report $ok "redis-server starts in the guest and answers PING"

# A value with every byte class a page carries: binary, NUL excepted
# (redis-cli takes arguments), newlines and high bytes included.
printf 'kvs\001\377\n page bytes' >"$T/val"
rcli -x SET kvs1:guest:probe <"$T/val" >"$T/out" 2>&1 &&
	grep -q '^OK$' "$T/out" &&
	rcli --no-raw STRLEN kvs1:guest:probe | grep -q "$(wc -c <"$T/val" | tr -d ' ')" &&
	rcli GET kvs1:guest:probe >"$T/got" 2>&1 &&
	# redis-cli --raw appends one newline to what it prints.
	printf '\n' >>"$T/val" && cmp "$T/val" "$T/got"
report $? "SET and GET of a binary value, byte for byte"

rcli INFO server >"$T/out" 2>&1 && grep -q '^redis_version:7\.' "$T/out"
report $? "it is Debian's redis 7 (INFO server)"

# Bound to the loopback only.
rcli CONFIG GET bind >"$T/out" 2>&1 && sed -n 2p "$T/out" | grep -qx '127.0.0.1'
report $? "it listens on 127.0.0.1 only"

rcli SHUTDOWN NOSAVE >/dev/null 2>&1
i=0
while [ $i -lt 100 ] && kill -0 "$pid" 2>/dev/null; do
	sleep 0.1
	i=$((i + 1))
done
! kill -0 "$pid" 2>/dev/null && wait "$pid"
st=$?
pid=
[ "$st" -eq 0 ]
report $? "SHUTDOWN stops it (status $st)"
