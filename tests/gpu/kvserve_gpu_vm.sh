#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# kvserve_gpu_vm: kvserve's GPU mode where kvshare.ko is the arbiter (run in
# the VM guest as root under busybox ash; POSIX sh only).  kvshared
# --mode module creates a memory=cuda pool through the CUDA driver stand-in
# and registers the driver's handle with the module, which from then on
# serves the pool alone: kvserve-simt's workers attach on /dev/kvshare, get
# the handle from the module, import and map it, and run the exact .cu
# kernels (tests/simt) on that mapping.  Pages one worker's kernels wrote
# are found by another through the module; every request is recomputed by
# the C reference and compared within tests/attn's tolerances.  On SIGTERM
# kvshared destroys the pool; the guest's final rmmod then proves that no
# worker, handle or mapping kept a reference.
#
# Small on purpose: the kernel stand-in is slow and TCG slower again.  The
# host-side twin, larger and with a broken kernel, is kvserve_gpu_test.sh.

KVSHARED=${KVSHARED:-kvshared_cuda}
KVSERVE=${KVSERVE:-kvserve-simt}
KVCTL=${KVCTL:-kvctl}
DEV=/dev/kvshare
P=kvsv_$$
WORKERS=2
REQUESTS=3
GEOM="layers=2,kv_heads=2,head_dim=64,tokens_per_page=16,dtype=bf16"
POOL="$P:pages=64,$GEOM,mode=0600,memory=cuda"

echo "TAP version 13"
if [ ! -e "$DEV" ]; then
	echo "1..0 # SKIP no $DEV"
	exit 0
fi
echo "1..7"

T=$(mktemp -d /tmp/kvsv.XXXXXX) || exit 1
pid=
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
	"$KVCTL" pool destroy "$P" --owner 0 >/dev/null 2>&1
	rm -rf "$T"
}
trap cleanup EXIT

n=0
fail=0
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
	fail=1
	for f in "$@"; do
		sed "s|^|# $(basename "$f"): |" "$f" 2>/dev/null
	done
}

# field NAME FILE: the value after "NAME  " in kvctl stats output.
field() {
	sed -n "s/^$1  *//p" "$2" | head -n 1
}

t0=$(date +%s)

# kvshared in module mode; wait for "ready" (bounded: TCG is slow).
"$KVSHARED" --mode module --device "$DEV" --pool "$POOL" >"$T/log" 2>&1 &
pid=$!
i=0
while [ $i -lt 300 ] && ! grep -q '^kvshared: ready' "$T/log"; do
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
	i=$((i + 1))
done
t_ready=$(date +%s)
grep -q '^kvshared: ready' "$T/log" &&
	grep -q "module mode: $DEV" "$T/log" &&
	grep -q "pool '$P' created: .*memory=cuda" "$T/log" &&
	"$KVCTL" --device "$DEV" pool show "$P" --owner 0 >"$T/show" 2>&1 &&
	[ "$(field flags "$T/show")" = device-mem ]
what="kvshared --mode module: the memory=cuda pool is in kvshare.ko"
report $? "$what, with its device handle" "$T/log" "$T/show"

# Every request verified (--verify 1), the in-flight wait making the second
# worker read the first one's pages rather than compute them again.  The
# module is named, and no socket is in the environment to fall back to.
env -u KVSHARE_ARBITER -u KVSHARE_SOCKET \
	"$KVSERVE" --arbiter "$DEV" --pool "$P" --memory cuda \
	--workers $WORKERS --requests $REQUESTS --system-tokens 64 \
	--doc-tokens 64 --docs 2 --question-tokens 8 --gen-tokens 2 --verify 1 \
	--inflight-wait 60000 >"$T/serve" 2>&1
st=$?
sed 's/^/# /' "$T/serve"
want=$((WORKERS * REQUESTS))
ver=$(sed -n 's/.*verified *\([0-9]*\) requests recomputed.*/\1/p' "$T/serve")
[ "$st" -eq 0 ] && [ "$ver" = "$want" ] &&
	grep -q "within tests/attn's bf16 tolerance" "$T/serve" &&
	! grep -q 'differs from scratch' "$T/serve"
what="kvserve --memory cuda on the module's pool: exit $st"
report $? "$what, $ver of $want requests verified within tolerance"

# Another worker's pages, seen from both sides: kvserve counts them, and
# the module counts the publishes and the hits of its lookups.
"$KVCTL" --device "$DEV" stats "$P" --owner 0 --check >"$T/stats" 2>&1
remote=$(sed -n 's/.*tree, \([0-9]*\) found through the arb.*/\1/p' "$T/serve")
[ "${remote:-0}" -gt 0 ] && [ "$(field publishes "$T/stats")" -gt 0 ] &&
	[ "$(field hits "$T/stats")" -ge "$remote" ]
what="${remote:-no} pages another worker's kernels wrote"
report $? "$what, found through the module" "$T/stats"

# Every request on the pool (none in private pages after an arbiter
# failure), so on the kernels the report names.
grep -q 'attention on the pool *CUDA kernels on the CPU STAND-IN tests/simt' \
	"$T/serve" &&
	grep -q 'memory  *cuda: .*CUDA driver STAND-IN' "$T/serve" &&
	grep -q "requests served  *$want\$" "$T/serve" &&
	grep -q 'arbiter failures  *0 requests served without sharing, 0 served but not published, 0 arbiter calls' \
		"$T/serve"
what="kvserve served all $want requests on the pool"
report $? "$what with the CUDA kernels, on the stand-ins"

# After the workers: the module's invariants, and nothing held or attached.
grep -q '^invariants *ok' "$T/stats" &&
	[ "$(field n_refs "$T/stats")" = 0 ] &&
	[ "$(field n_held "$T/stats")" = 0 ] &&
	[ "$(field n_files "$T/stats")" = 0 ] &&
	grep -q 'pool .*invariants hold' "$T/serve"
what="the pool's invariants hold in the module"
report $? "$what; no worker left a reference" "$T/stats"

# kvshared has nothing to do while the module serves, but its loop still
# ticks (once a second): two seconds at least must have passed, leaving it
# running.  (Serving takes longer than that under TCG; the wait is for a
# faster guest.)
while [ "$(date +%s)" -le $((t_ready + 2)) ]; do
	sleep 0.2
done
kill -0 "$pid" 2>/dev/null
st=$?
dmesg | grep "$(basename "$KVSHARED")\[$pid\]" >"$T/dmesg"
report "$st" "kvshared --mode module still runs after its first ticks" \
	"$T/log" "$T/dmesg"

kill -TERM "$pid" 2>/dev/null
wait "$pid"
st=$?
pid=
[ "$st" -eq 0 ] &&
	! "$KVCTL" --device "$DEV" pool show "$P" --owner 0 >/dev/null 2>&1
report $? "SIGTERM: kvshared exits $st and the pool leaves the module" "$T/log"

echo "# $(($(date +%s) - t0)) s in the guest"
exit "$fail"
