#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# kvctl_test: kvctl against a live arbiter, as kselftest-style TAP.
# Runs in the VM guest under busybox ash (so: POSIX sh only, no jq, no
# bash arrays) against /dev/kvshare, and on the host against a private
# kvshared (tests/daemon/with-kvshared.sh sets KVSHARE_ARBITER; see
# tools/kvctl/kvctl.mk).  KVCTL and KVSHARE_DEVICE may point elsewhere.
#
# Run as root.  The cases named nobody_* run kvctl as uid 65534 (through
# util-linux setpriv, else busybox start-stop-daemon), with the device's
# group as a real install's udev rule grants it; they skip when neither
# can switch users.  Cases that need an unsealed or short memfd make one
# with python3, and skip without it.

KVCTL=${KVCTL:-kvctl}
DEV=${KVSHARE_DEVICE:-${KVSHARE_ARBITER:-/dev/kvshare}}
export KVSHARE_DEVICE="$DEV"
P=kvctl_test_$$
NPAGES=16
NOBODY=65534

echo "TAP version 13"
if [ ! -e "$DEV" ]; then
	echo "1..0 # SKIP no $DEV"
	exit 0
fi

unset KVSHARE_POOL_OWNER
case $KVCTL in
*/*) ;;
*) KVCTL=$(command -v "$KVCTL") ;;
esac
T=$(mktemp -d /tmp/kvctl_test.XXXXXX) || exit 1
chmod 0755 "$T"
cleanup() {
	for p in "$P" "${P}_x" "${P}_pub" "${P}_mem"; do
		"$KVCTL" pool destroy "$p" --owner 0 >/dev/null 2>&1
		"$KVCTL" pool destroy "$p" --owner "$NOBODY" >/dev/null 2>&1
	done
	for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do
		"$KVCTL" pool destroy "${P}_q$i" --owner "$NOBODY" >/dev/null 2>&1
	done
	rm -rf "$T"
}
trap cleanup EXIT

# The group that may open the arbiter: the device's (a real install gives
# it to group kvshare), nothing special for the daemon's socket.
if [ -c "$DEV" ]; then
	DEVGID=$(stat -c %g "$DEV")
else
	DEVGID=$NOBODY
fi
if [ "$(id -u)" != 0 ]; then
	DROP=
elif setpriv --reuid=0 --regid=0 --clear-groups true 2>/dev/null; then
	DROP=setpriv
elif busybox start-stop-daemon --help >/dev/null 2>&1; then
	DROP=ssd
else
	DROP=
fi

# nobody CMD...: CMD as uid 65534 with the arbiter's group (see above).
nobody() {
	if [ "$DROP" = setpriv ]; then
		setpriv --reuid="$NOBODY" --regid="$NOBODY" --groups="$DEVGID" "$@"
	else
		# -n names no running process, so it always starts PROG.
		prog=$1
		shift
		busybox start-stop-daemon -S -c "$NOBODY:$DEVGID" \
			-n "kvctl-test-nobody-$$" -a "$prog" -- "$@"
	fi
}

# A case returns 0 (pass), 1 (fail) or 2 (skip, saying why in $why).
# Cases share the shell's variables: the runner's are i, pass, fail, skip.
why=
need_nobody() {
	[ -n "$DROP" ] && return 0
	why="neither setpriv --reuid nor busybox start-stop-daemon here"
	return 1
}
need_python() {
	command -v python3 >/dev/null 2>&1 && return 0
	why="no python3 to make a memfd"
	return 1
}

# run CMD...: stdout in $T/out, stderr in $T/err, exit status in $rc.
run() {
	"$@" >"$T/out" 2>"$T/err"
	rc=$?
}

# fails WORD CMD...: CMD exits non-zero and says WORD on stderr.
fails() {
	word=$1
	shift
	run "$@"
	[ "$rc" -ne 0 ] && grep -q -- "$word" "$T/err"
}

# has WORD: the last command's stdout contains WORD.
has() {
	grep -q -- "$1" "$T/out"
}

# lines: pages listed by the last `kvctl pages` (data lines start with a digit).
lines() {
	grep -c '^[0-9]' "$T/out"
}

GEOM="--layers 2 --kv-heads 4 --head-dim 64 --tokens-per-page 16 --dtype bf16"
PAGE_BYTES=$((2 * 2 * 4 * 64 * 16 * 2))

create() {
	run "$KVCTL" pool create "$1" --pages "$NPAGES" $GEOM --mode 0600
	[ "$rc" -eq 0 ]
}

# field NAME: the value of "NAME  value" in the last command's stdout.
field() {
	sed -n "s/^$1  *//p" "$T/out"
}

# with_memfd SEALS BYTES CMD...: CMD with fd 3 a memfd of BYTES, sealed
# as pool memory must be (F_SEAL_SHRINK and F_SEAL_SEAL) if SEALS is "shrink".
with_memfd() {
	python3 -c '
import fcntl, os, sys
fd = os.memfd_create("kvctl-test", os.MFD_ALLOW_SEALING)
os.ftruncate(fd, int(sys.argv[2]))
if sys.argv[1] == "shrink":
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
os.dup2(fd, 3)
os.execvp(sys.argv[3], sys.argv[3:])' "$@"
}

test_info() {
	run "$KVCTL" info && [ "$rc" -eq 0 ] && has abi_version && has max_batch
}

test_info_json() {
	run "$KVCTL" info --json && [ "$rc" -eq 0 ] && has '^{' && has '^}' &&
		has '"abi_version": '
}

test_pool_create() {
	create "$P" && has "$P" &&
		has "$((2 * 2 * 4 * 64 * 16 * 2)) bytes"
}

test_pool_list() {
	run "$KVCTL" pool list && [ "$rc" -eq 0 ] && has " $P "
}

test_pool_list_json() {
	run "$KVCTL" pool list --json && [ "$rc" -eq 0 ] && has '^{' &&
		has '"pools": \[' && has "\"name\": \"$P\"" && has '^}'
}

test_pool_show() {
	run "$KVCTL" pool show "$P" && [ "$rc" -eq 0 ] &&
		has "^n_pages  *$NPAGES\$" && has '^dtype  *bf16$' &&
		has "^n_free  *$NPAGES\$" && has '^mode  *0600$'
}

test_pool_show_json() {
	run "$KVCTL" pool show "$P" --json && [ "$rc" -eq 0 ] && has '^{' &&
		has "\"name\": \"$P\"" && has '"stats": {' &&
		has "\"n_free\": $NPAGES" && has '^}'
}

test_stats_check() {
	run "$KVCTL" stats "$P" --check && [ "$rc" -eq 0 ] &&
		has '^invariants  *ok$' && has "^n_pages  *$NPAGES\$" &&
		has '^evictions  *0$'
}

test_stats_json() {
	run "$KVCTL" stats "$P" --json --check && [ "$rc" -eq 0 ] &&
		has "\"pool\": \"$P\"" && has '"invariants": "ok"'
}

test_pages_all() {
	run "$KVCTL" pages "$P" && [ "$rc" -eq 0 ] && [ "$(lines)" -eq "$NPAGES" ]
}

test_pages_range() {
	run "$KVCTL" pages "$P" --start 10 --count 4 && [ "$rc" -eq 0 ] &&
		[ "$(lines)" -eq 4 ] && has '^10 ' && has '^13 '
}

test_pages_state() {
	run "$KVCTL" pages "$P" --state free && [ "$rc" -eq 0 ] &&
		[ "$(lines)" -eq "$NPAGES" ] &&
		run "$KVCTL" pages "$P" --state cached && [ "$rc" -eq 0 ] &&
		[ "$(lines)" -eq 0 ]
}

test_pages_json() {
	run "$KVCTL" pages "$P" --count 2 --json && [ "$rc" -eq 0 ] &&
		has '"pages": \[' && has '"state": "free"' && has '^}'
}

test_err_bad_dtype() {
	fails dtype "$KVCTL" pool create "${P}_x" --pages 4 --layers 1 \
		--kv-heads 1 --head-dim 1 --tokens-per-page 1 --dtype f64
}

test_err_missing_pages() {
	fails missing "$KVCTL" pool create "${P}_x" --layers 1 --kv-heads 1 \
		--head-dim 1 --tokens-per-page 1 --dtype f16 &&
		grep -q -- --pages "$T/err"
}

test_err_nonnumeric_pages() {
	fails "not a number" "$KVCTL" pool create "${P}_x" --pages lots \
		--layers 1 --kv-heads 1 --head-dim 1 --tokens-per-page 1 --dtype f16
}

test_err_duplicate() {
	! create "$P" && grep -q "already exists" "$T/err" &&
		grep -q EEXIST "$T/err"
}

test_err_unknown_command() {
	fails unknown "$KVCTL" frobnicate
}

test_err_pages_start() {
	fails beyond "$KVCTL" pages "$P" --start "$NPAGES"
}

# Names are scoped by owner: the pool is root's, and another owner's
# name lookup says whose pools it searched and who has one.
test_owner_shown() {
	run "$KVCTL" pool show "$P" && [ "$rc" -eq 0 ] && has '^uid  *0$' &&
		run "$KVCTL" pool show "$P" --owner 0 && [ "$rc" -eq 0 ] &&
		run env KVSHARE_POOL_OWNER=0 "$KVCTL" pool show "$P" &&
		[ "$rc" -eq 0 ] && has '^uid  *0$'
}

test_err_owner_missing() {
	fails "no pool named '$P' owned by uid 1234; uid 0 has one (--owner)" \
		"$KVCTL" stats "$P" --owner 1234 && [ "$rc" -eq 1 ] &&
		fails "no pool named '$P' owned by uid 4321; uid 0 has one" \
		env KVSHARE_POOL_OWNER=4321 "$KVCTL" pages "$P"
}

test_err_owner_invalid() {
	fails "--owner: 'no-such-user-kvctl' is neither a uid nor a known user" \
		"$KVCTL" stats "$P" --owner no-such-user-kvctl && [ "$rc" -eq 2 ] &&
		fails "KVSHARE_POOL_OWNER 'no-such-user-kvctl' is neither a uid" \
		env KVSHARE_POOL_OWNER=no-such-user-kvctl "$KVCTL" stats "$P" &&
		[ "$rc" -eq 1 ]
}

test_user() {
	run "$KVCTL" user && [ "$rc" -eq 0 ] && has '^uid  *0$' &&
		has '^n_pools  *[0-9]' && has '^max_user_pools  *[0-9n]' &&
		has '^max_user_held_bytes ' &&
		run "$KVCTL" user "$NOBODY" && [ "$rc" -eq 0 ] &&
		has "^uid  *$NOBODY\$"
}

test_user_json() {
	run "$KVCTL" user --json && [ "$rc" -eq 0 ] && has '^{' &&
		has '"uid": 0,' && has '"max_user_pools": ' && has '"held_bytes": ' &&
		has '^}'
}

test_err_user_invalid() {
	fails "neither a uid nor a known user" "$KVCTL" user no-such-user-kvctl &&
		[ "$rc" -eq 2 ]
}

# Memory kvctl makes is a memfd sealed against shrinking (and more).
test_create_memory() {
	run "$KVCTL" pool create "${P}_mem" --pages "$NPAGES" $GEOM --memory &&
		[ "$rc" -eq 0 ] && has "with memory" &&
		run "$KVCTL" pool show "${P}_mem" && [ "$rc" -eq 0 ] &&
		has '^flags  *mem-fd$' &&
		run "$KVCTL" pool destroy "${P}_mem" && [ "$rc" -eq 0 ]
}

# CREATE's refusals of memory, each explained.
test_err_mem_not_memfd() {
	: >"$T/file" && truncate -s $((NPAGES * PAGE_BYTES)) "$T/file" || return 1
	"$KVCTL" pool create "${P}_x" --pages "$NPAGES" $GEOM --mem-fd 3 \
		3<>"$T/file" >"$T/out" 2>"$T/err"
	rc=$?
	[ "$rc" -eq 1 ] && grep -q "memory fd 3 ($T/file) is not a memfd" "$T/err" &&
		grep -q EINVAL "$T/err"
}

test_err_mem_unsealed() {
	need_python || return 2
	fails "memory fd 3 is not sealed against shrinking: add F_SEAL_SHRINK" \
		with_memfd none $((NPAGES * PAGE_BYTES)) "$KVCTL" pool create \
		"${P}_x" --pages "$NPAGES" $GEOM --mem-fd 3 &&
		grep -q EPERM "$T/err"
}

test_err_mem_short() {
	need_python || return 2
	short=$(((NPAGES - 1) * PAGE_BYTES))
	fails "memory fd 3 holds $short bytes, less than the pool's $((NPAGES * PAGE_BYTES)) ($NPAGES pages)" \
		with_memfd shrink "$short" "$KVCTL" pool create \
		"${P}_x" --pages "$NPAGES" $GEOM --mem-fd 3 &&
		grep -q ERANGE "$T/err"
}

test_err_mem_badfd() {
	fails "mem-fd 999 is not an open file descriptor" "$KVCTL" pool create \
		"${P}_x" --pages "$NPAGES" $GEOM --mem-fd 999 && grep -q EBADF "$T/err"
}

# uid 65534 creates a pool of the same name: its own, not a squat.
test_nobody_same_name() {
	need_nobody || return 2
	run nobody "$KVCTL" pool create "$P" --pages "$NPAGES" $GEOM --mode 0600 &&
		[ "$rc" -eq 0 ] &&
		run nobody "$KVCTL" pool show "$P" && [ "$rc" -eq 0 ] &&
		has "^uid  *$NOBODY\$" && theirs=$(field pool_id) &&
		run "$KVCTL" pool show "$P" && [ "$rc" -eq 0 ] && has '^uid  *0$' &&
		mine=$(field pool_id) && [ -n "$mine" ] && [ "$mine" != "$theirs" ] &&
		run "$KVCTL" pool show "$P" --owner "$NOBODY" && [ "$rc" -eq 0 ] &&
		[ "$(field pool_id)" = "$theirs" ] &&
		run nobody "$KVCTL" pool destroy "$P" && [ "$rc" -eq 0 ] &&
		run "$KVCTL" pool show "$P" && [ "$rc" -eq 0 ] &&
		[ "$(field pool_id)" = "$mine" ]
}

# Without a pool of its own by that name, uid 65534 finds the default
# owner's (root's); --check is refused, and says why.
test_nobody_stats_check() {
	need_nobody || return 2
	run "$KVCTL" pool create "${P}_pub" --pages "$NPAGES" $GEOM --mode 0666 &&
		[ "$rc" -eq 0 ] &&
		run nobody "$KVCTL" stats "${P}_pub" && [ "$rc" -eq 0 ] &&
		has "^n_pages  *$NPAGES\$" &&
		fails "the invariant check walks every page under the pool lock: admin only" \
		nobody "$KVCTL" stats "${P}_pub" --check && grep -q EPERM "$T/err"
}

test_nobody_err_missing() {
	need_nobody || return 2
	fails "no pool named 'none_$$' owned by uid $NOBODY (you) or uid 0 (the default owner)" \
		nobody "$KVCTL" stats "none_$$"
}

test_nobody_user() {
	need_nobody || return 2
	run nobody "$KVCTL" user && [ "$rc" -eq 0 ] && has "^uid  *$NOBODY\$" &&
		fails "only an admin may see another user's usage (uid 0)" \
		nobody "$KVCTL" user 0 && grep -q EPERM "$T/err"
}

# nobody_limit USED LIMIT CAP: of user nobody's usage, USED in $have and
# LIMIT in $max; a skip (2, $why) unless LIMIT is set and at most CAP, so
# small enough for a test to reach.
nobody_limit() {
	need_nobody || return 2
	run nobody "$KVCTL" user && [ "$rc" -eq 0 ] || return 1
	have=$(field "$1")
	max=$(field "$2")
	if [ "$max" = none ] || [ "$max" -gt "$3" ]; then
		why="$2 is $max"
		return 2
	fi
}

# At max_user_pools, the next CREATE says so with the numbers.
test_nobody_quota_pools() {
	nobody_limit n_pools max_user_pools 16 || return
	q=0
	while [ "$have" -lt "$max" ]; do
		q=$((q + 1))
		have=$((have + 1))
		run nobody "$KVCTL" pool create "${P}_q$q" --pages 1 $GEOM &&
			[ "$rc" -eq 0 ] || return 1
	done
	fails "pool create ${P}_q0: user $NOBODY owns $max of at most $max pools (max_user_pools)" \
		nobody "$KVCTL" pool create "${P}_q0" --pages 1 $GEOM &&
		grep -q EDQUOT "$T/err" || return 1
	# Another user still creates.
	run "$KVCTL" pool create "${P}_x" --pages 1 $GEOM && [ "$rc" -eq 0 ] &&
		run "$KVCTL" pool destroy "${P}_x" && [ "$rc" -eq 0 ] || return 1
	while [ "$q" -gt 0 ]; do
		run nobody "$KVCTL" pool destroy "${P}_q$q" && [ "$rc" -eq 0 ] || return 1
		q=$((q - 1))
	done
}

# Past max_user_pool_pages (only where it is small enough to reach).
test_nobody_quota_pages() {
	nobody_limit pool_pages max_user_pool_pages 65536 || return
	more=$((max - have + 1))
	fails "user $NOBODY's pools have $have pages; $more more would pass the limit of $max (max_user_pool_pages)" \
		nobody "$KVCTL" pool create "${P}_q1" --pages "$more" $GEOM &&
		grep -q EDQUOT "$T/err"
}

test_pool_destroy() {
	run "$KVCTL" pool destroy "$P" && [ "$rc" -eq 0 ] &&
		run "$KVCTL" pool list && [ "$rc" -eq 0 ] && ! has " $P "
}

test_err_destroy_missing() {
	fails "no pool" "$KVCTL" pool destroy "$P"
}

test_err_stats_missing() {
	fails "no pool" "$KVCTL" stats "$P"
}

TESTS="info info_json pool_create pool_list pool_list_json pool_show
pool_show_json stats_check stats_json pages_all pages_range pages_state
pages_json err_bad_dtype err_missing_pages err_nonnumeric_pages err_duplicate
err_unknown_command err_pages_start owner_shown err_owner_missing
err_owner_invalid user user_json err_user_invalid create_memory
err_mem_not_memfd err_mem_unsealed err_mem_short err_mem_badfd
nobody_same_name nobody_stats_check nobody_err_missing nobody_user
nobody_quota_pools nobody_quota_pages pool_destroy err_destroy_missing
err_stats_missing"

n=0
for tc in $TESTS; do
	n=$((n + 1))
done
echo "1..$n"

i=0
pass=0
fail=0
skip=0
for tc in $TESTS; do
	i=$((i + 1))
	: >"$T/out"
	: >"$T/err"
	why=
	"test_$tc"
	st=$?
	if [ "$st" -eq 0 ]; then
		echo "ok $i kvctl.$tc"
		pass=$((pass + 1))
	elif [ "$st" -eq 2 ]; then
		echo "ok $i kvctl.$tc # SKIP $why"
		skip=$((skip + 1))
	else
		echo "not ok $i kvctl.$tc"
		fail=$((fail + 1))
		# What kvctl said, for whoever reads the log.
		sed -n '1,8s/^/#   out: /p' "$T/out"
		sed -n '1,8s/^/#   err: /p' "$T/err"
	fi
done

echo "# Totals: pass:$pass fail:$fail xfail:0 xpass:0 skip:$skip error:0"
[ "$fail" -eq 0 ]
