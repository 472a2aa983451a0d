#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# mac_test: pages a Redis writer cannot forge (remote_mac_key_file,
# docs/remote.md), as TAP.  Real servers: one redis-server and kvshared
# hosts (ASan) whose pool's tier has a MAC key.  Host A computes and
# writes; fresh hosts fetch.  A forger that holds the tier's Redis
# password but not the key (remote_forge) plants pages with a consistent
# header and checksum: a keyed host never serves one, counts it
# (kvshare_remote_dropped_total{reason="mac"}) and computes the page,
# equal to the bit, while a host without a key serves the forgery (what
# such a tier trusts).  Keys rotate on SIGHUP: the old key's pages are
# served while it is accepted and refused once it is gone.
set -uo pipefail

build=${BUILD:-build}
. tests/remote/lib.sh
kvsd_bin=$build/san/kvshared

n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n $*"; }
notok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n $*"; }
show() { sed 's/^/#   /' "$1"; }
hits() { metric "$1" '^kvshare_remote_hit_pages_total'; }
mac_drops() { metric "$1" '^kvshare_remote_dropped_total.*reason="mac"'; }
dropped() { metric "$1" '^kvshare_remote_dropped_total'; }

W=(--workers 2 --requests 4 --system-tokens 256 --doc-tokens 256 --docs 2
   --question-tokens 20 --verify 1)

echo "TAP version 13"
echo "1..12"

read -r r1 <<<"$(free_ports 1)"
start_redis r1 "$r1" || exit 1
k1=$(openssl rand -hex 32)
k2=$(openssl rand -hex 32)
key_to() { (umask 077; echo "$2" >"$1"); }
key_to "$tmp/mac.key" "$k1"
keys=",remote_mac_key_file=$tmp/mac.key,remote_mac_key_file_old=$tmp/mac.old"
keyed() { pool_spec "127.0.0.1:$r1" ",remote_namespace=${1}$keys${2:-}"; }
forge() {	# forge NAMESPACE keep|strip: planted count on stdout
	rcli "$r1" --scan --pattern "kvs1:$1:*" |
		"$build/tests/remote_forge" "$r1" kvshare "$tier_pw" "$2"
}
# fresh NAME SPEC OUT [kvserve args]: a new host serves once, then stops.
fresh() {
	local name=$1 spec=$2 out=$3
	shift 3
	start_kvshared "$name" "$spec" || { show "$tmp/$name.log"; return 1; }
	serve "$name" "$out" "$@"
	metric "$name" '^kvshare_remote_hit_pages_total' >"$out.hits"
	metric "$name" '^kvshare_remote_dropped_total.*reason="mac"' >"$out.mac"
	# The family's old name, kept one release: the same counters.
	metric "$name" '^kvshare_remote_dropped_pages_total.*reason="mac"' >"$out.mac_old"
	stop_kvshared "$name"
}

# ---- keyed pages travel ----------------------------------------------------------

start_kvshared A "$(keyed m1)" || { show "$tmp/A.log"; exit 1; }
serve_drained A "$tmp/a1" "${W[@]}"
ca=$(computed "$tmp/a1")
fresh B "$(keyed m1)" "$tmp/b1" "${W[@]}"
if verified "$tmp/b1" && [ "$(computed "$tmp/b1")" = 0 ] && [ "$(cat "$tmp/b1.hits")" -ge "$ca" ] &&
   [ "$(cat "$tmp/b1.mac")" = 0 ]; then
	ok "keyed pages: host B serves A's $ca pages from Redis, equal to the bit"
else
	notok "keyed pages: B computed '$(computed "$tmp/b1")' hits '$(cat "$tmp/b1.hits")'"
	show "$tmp/b1"
fi

# Every value carries the MAC: header, page and 32 bytes of nonce and tag.
lens=$(rcli "$r1" --scan --pattern 'kvs1:m1:*' | while read -r k; do
	rcli "$r1" strlen "$k"; done | sort -u)
if [ "$lens" = $((128 + 16384 + 32)) ]; then
	ok "every value in Redis is header, page and MAC ($lens bytes)"
else
	notok "value lengths: '$lens'"
fi

# A host without a key takes keyed pages (it trusts Redis, as before).
fresh C "$(pool_spec "127.0.0.1:$r1" ",remote_namespace=m1")" "$tmp/c1" "${W[@]}"
if verified "$tmp/c1" && [ "$(computed "$tmp/c1")" = 0 ]; then
	ok "a host without a key serves keyed pages too"
else
	notok "keyless host on keyed pages: computed '$(computed "$tmp/c1")'"
fi

# ---- the forger --------------------------------------------------------------------

# Bytes rewritten, checksum recomputed, the old tag kept.
planted=$(forge m1 keep)
fresh F1 "$(keyed m1 ",remote_write=none")" "$tmp/f1" "${W[@]}"
if [ "${planted:-0}" -gt 0 ] && verified "$tmp/f1" && [ "$(computed "$tmp/f1")" = "$ca" ] &&
   [ "$(cat "$tmp/f1.hits")" = 0 ] && [ "$(cat "$tmp/f1.mac")" -gt 0 ] &&
   [ "$(cat "$tmp/f1.mac_old")" = "$(cat "$tmp/f1.mac")" ]; then
	ok "$planted planted pages with a stale tag: none served, $(cat "$tmp/f1.mac") dropped for mac (kvshare_remote_dropped_total, and its old name), all $ca computed, equal to the bit"
else
	notok "stale tag: planted '$planted' computed '$(computed "$tmp/f1")' hits '$(cat "$tmp/f1.hits")' mac '$(cat "$tmp/f1.mac")'"
	show "$tmp/f1"
fi
# The MAC cut off: the format of a tier without a key, consistent throughout.
planted=$(forge m1 strip)
fresh F2 "$(keyed m1 ",remote_write=none")" "$tmp/f2" "${W[@]}"
if [ "${planted:-0}" -gt 0 ] && verified "$tmp/f2" && [ "$(computed "$tmp/f2")" = "$ca" ] &&
   [ "$(cat "$tmp/f2.hits")" = 0 ] && [ "$(cat "$tmp/f2.mac")" -gt 0 ]; then
	ok "$planted planted pages without a MAC: none served, $(cat "$tmp/f2.mac") dropped for mac, all computed, equal to the bit"
else
	notok "no MAC: planted '$planted' computed '$(computed "$tmp/f2")' hits '$(cat "$tmp/f2.hits")' mac '$(cat "$tmp/f2.mac")'"
	show "$tmp/f2"
fi
# What a tier without a key trusts: the same forgeries are served.
fresh C2 "$(pool_spec "127.0.0.1:$r1" ",remote_namespace=m1,remote_write=none")" "$tmp/c2" \
	"${W[@]}"
if [ "$(cat "$tmp/c2.hits")" -gt 0 ] && ! verified "$tmp/c2"; then
	ok "without a key the planted pages are served and the outputs differ (the forger is real)"
else
	notok "keyless host on forgeries: hits '$(cat "$tmp/c2.hits")'"; show "$tmp/c2"
fi

# ---- rotation without a restart -------------------------------------------------------

# Host R fetches throughout; A writes.  Seeds 11 and 13 under k1.
start_kvshared R "$(keyed m1 ",remote_write=none")" || show "$tmp/R.log"
serve_drained A "$tmp/a11" "${W[@]}" --seed 11
serve_drained A "$tmp/a13" "${W[@]}" --seed 13
mv "$tmp/mac.key" "$tmp/mac.old"
key_to "$tmp/mac.key" "$k2"
reloaded() { grep -q "MAC keys reloaded ($2 accepted)" "$tmp/$1.log"; }
kill -HUP "${kvsd_pid[A]}" "${kvsd_pid[R]}"
wait_until 5 reloaded A 2 && wait_until 5 reloaded R 2
serve R "$tmp/r11" "${W[@]}" --seed 11
if verified "$tmp/r11" && [ "$(computed "$tmp/r11")" = 0 ] && [ "$(mac_drops R)" = 0 ]; then
	ok "rotated on SIGHUP (k2 signs, k1 accepted): the old key's pages are served"
else
	notok "after rotation: computed '$(computed "$tmp/r11")' mac '$(mac_drops R)'"
	show "$tmp/R.log"
fi
serve_drained A "$tmp/a12" "${W[@]}" --seed 12
rm "$tmp/mac.old"
: >"$tmp/R.log.mark"
kill -HUP "${kvsd_pid[A]}" "${kvsd_pid[R]}"
wait_until 5 reloaded A 1 && wait_until 5 reloaded R 1
h0=$(hits R)
serve R "$tmp/r12" "${W[@]}" --seed 12
h1=$(hits R)
serve R "$tmp/r13" "${W[@]}" --seed 13
if verified "$tmp/r12" && [ "$(computed "$tmp/r12")" = 0 ] && [ "$h1" -gt "$h0" ]; then
	ok "the new key's pages are served after the old key is removed"
else
	notok "new key's pages: computed '$(computed "$tmp/r12")' hits $h0 -> $h1"
fi
if verified "$tmp/r13" && [ "$(computed "$tmp/r13")" -gt 0 ] && [ "$(hits R)" = "$h1" ] &&
   [ "$(mac_drops R)" -gt 0 ]; then
	ok "the old key removed: its pages are refused ($(mac_drops R) for mac), computed, equal to the bit"
else
	notok "old key's pages after removal: computed '$(computed "$tmp/r13")' hits $h1 -> $(hits R) mac '$(mac_drops R)'"
fi
# A reload that finds a bad file keeps the keys in use.
chmod 644 "$tmp/mac.key"
kill -HUP "${kvsd_pid[R]}"
bad_reload() { grep -q "MAC keys not reloaded, those in use stay: .*mode 0644" "$tmp/R.log"; }
if wait_until 5 bad_reload && [ "$(metric R '^kvshare_remote_up')" = 1 ]; then
	ok "a SIGHUP that finds a bad key file keeps the keys in use, saying why"
else
	notok "bad reload"; show "$tmp/R.log"
fi
chmod 600 "$tmp/mac.key"

# ---- the key files -----------------------------------------------------------------

printf 'zz%s\n' "${k1:2}" >"$tmp/k.hex"
chmod 600 "$tmp/k.hex"
key_to "$tmp/k.other" "$k1"
chown 65534 "$tmp/k.other"
key_to "$tmp/k.wide" "$k1"
chmod 604 "$tmp/k.wide"
ln -s "$tmp/mac.key" "$tmp/k.link"
cfg_bad=0
base="kvserve:pages=64,layers=2,kv_heads=2,head_dim=64,tokens_per_page=16,dtype=bf16,memory=host,remote=127.0.0.1:$r1"
for bad in "remote_mac_key_file=$tmp/k.wide@mode 0604: others may read or write it" \
	   "remote_mac_key_file=$tmp/k.other@belongs to uid 65534" \
	   "remote_mac_key_file=$tmp/k.hex@not a hex digit at byte 0" \
	   "remote_mac_key_file=$tmp/k.link@Too many levels of symbolic links" \
	   "remote_mac_key_file=$tmp/none@No such file" \
	   "remote_mac_key_file_old=$tmp/mac.key@remote_mac_key_file_old needs remote_mac_key_file" \
	   "remote_mac_key_file=$tmp/mac.key,remote_mac_key_file_old=$tmp/k.wide@k.wide' has mode"; do
	"$build/kvshared" --mode socket --socket "$tmp/cfg.sock" --pool "$base,${bad%%@*}" \
		>"$tmp/cfg.out" 2>&1
	st=$?
	if [ "$st" != 2 ] || ! grep -qF "${bad#*@}" "$tmp/cfg.out"; then
		echo "# --pool ...,${bad%%@*}: status $st, wanted 2 and '${bad#*@}':"
		show "$tmp/cfg.out"
		cfg_bad=$((cfg_bad + 1))
	fi
done
if [ "$cfg_bad" = 0 ]; then
	ok "bad key files (mode, owner, contents, symlink, absent) are refused at startup (exit 2)"
else
	notok "$cfg_bad bad key files accepted"
fi

stop_kvshared R
stop_kvshared A
if [ "$bad_exits" = 0 ] && ! grep -rqi -e "$k1" -e "$k2" "$tmp"/*.log "$tmp"/a* "$tmp"/b* "$tmp"/cfg.out; then
	ok "every kvshared (ASan) exits with status 0; no log or output shows a key"
else
	notok "$bad_exits bad exits, or a key was shown"
fi
[ "$failed" = 0 ]
