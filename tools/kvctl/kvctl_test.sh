#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# kvctl_test: kvctl against a live /dev/kvshare, as kselftest-style TAP.
# Runs in the VM guest under busybox ash (so: POSIX sh only, no jq, no
# bash arrays).  KVCTL and KVSHARE_DEVICE may point elsewhere for a run
# on another machine.

KVCTL=${KVCTL:-kvctl}
DEV=${KVSHARE_DEVICE:-/dev/kvshare}
P=kvctl_test_$$
NPAGES=16

echo "TAP version 13"
if [ ! -e "$DEV" ]; then
	echo "1..0 # SKIP no $DEV"
	exit 0
fi

T=$(mktemp -d /tmp/kvctl_test.XXXXXX) || exit 1
cleanup() {
	"$KVCTL" pool destroy "$P" >/dev/null 2>&1
	"$KVCTL" pool destroy "${P}_x" >/dev/null 2>&1
	rm -rf "$T"
}
trap cleanup EXIT

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

create() {
	run "$KVCTL" pool create "$1" --pages "$NPAGES" --layers 2 --kv-heads 4 \
		--head-dim 64 --tokens-per-page 16 --dtype bf16 --mode 0600
	[ "$rc" -eq 0 ]
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
err_unknown_command err_pages_start pool_destroy err_destroy_missing
err_stats_missing"

n=0
for tc in $TESTS; do
	n=$((n + 1))
done
echo "1..$n"

i=0
pass=0
fail=0
for tc in $TESTS; do
	i=$((i + 1))
	: >"$T/out"
	: >"$T/err"
	if "test_$tc"; then
		echo "ok $i kvctl.$tc"
		pass=$((pass + 1))
	else
		echo "not ok $i kvctl.$tc"
		fail=$((fail + 1))
		# What kvctl said, for whoever reads the log.
		sed -n '1,8s/^/#   out: /p' "$T/out"
		sed -n '1,8s/^/#   err: /p' "$T/err"
	fi
done

echo "# Totals: pass:$pass fail:$fail xfail:0 xpass:0 skip:0 error:0"
[ "$fail" -eq 0 ]
