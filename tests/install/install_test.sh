#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Single quotes keep $(...) and $1 for make and sh -c:
# shellcheck disable=SC2016
#
# install_test: `make install DESTDIR=...` and `make uninstall`, as TAP.
# Run from the repository root (the Makefile runs host suites there), after
# `make` (and `make module` for the module's part).  Touches nothing
# outside its temporary directory: the udev and systemd checks run in a
# private mount namespace (unshare -m) and are skipped, with the reason,
# where that or the tool is not available.
#
#   KVS_TEST_DKMS_BUILD=1   also build the installed DKMS tree as DKMS does
#                           (a kernel build, ~1 min; KDIR as in the Makefile)
#   KVS_TEST_MAKE_ARGS      extra arguments for the nested make (e.g. -o FILE)
set -uo pipefail

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
D=$W/root			# the DESTDIR of most tests
VERSION=$(cat dist/VERSION)
PREFIX=/usr/local
KO=kvshare.ko
read -ra MAKE_ARGS <<< "${KVS_TEST_MAKE_ARGS:-}"

# A fresh make: the outer one's flags (jobserver, -k) are not ours.
kmake() {
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
		make -s --no-print-directory "${MAKE_ARGS[@]}" "$@"
}

diag() { sed 's/^/# /'; }
say() { echo "# $*"; }

# Each test prints its diagnostics and returns 0 (pass), 1 (fail) or 2
# (skip, with the reason in $why).
TESTS=(
	t_install t_binaries t_lib_files t_system_files t_docs t_dkms_files t_module
	t_manifest t_headers_alone t_link t_python t_unit_paths t_unit_verify t_config_loads
	t_sysusers
	t_udev_syntax t_udev_real t_dkms_conf t_dkms_tree t_dkms_build
	t_uninstall t_uninstall_keeps_changed_conf t_reinstall t_prefix_usr
)
echo "TAP version 13"
echo "1..${#TESTS[@]}"
n=0
failed=0
run() {
	local st

	why=
	"$1"
	st=$?
	n=$((n + 1))
	case $st in
	0) echo "ok $n - ${1#t_}: $desc" ;;
	2) echo "ok $n - ${1#t_}: $desc # SKIP $why" ;;
	*) echo "not ok $n - ${1#t_}: $desc"; failed=$((failed + 1)) ;;
	esac
}

# want MODE PATH [SOURCE]: PATH (under $D) is a regular file of MODE, and
# identical to SOURCE when given.  Prints what is wrong; returns 1 then.
want() {
	local mode=$1 p=$D$2 src=${3:-} m

	if [ ! -f "$p" ] || [ -L "$p" ]; then
		say "missing: $2"
		return 1
	fi
	m=$(stat -c %a "$p")
	if [ "$m" != "${mode#0}" ]; then
		say "$2: mode $m, expected $mode"
		return 1
	fi
	if [ -n "$src" ] && ! cmp -s "$src" "$p"; then
		say "$2: differs from $src"
		return 1
	fi
}

# want_all MODE [PATH SOURCE]...: every pair, all reported.
want_all() {
	local mode=$1 bad=0

	shift
	while [ $# -gt 0 ]; do
		want "$mode" "$1" "$2" || bad=1
		shift 2
	done
	return $bad
}

# ---------------------------------------------------------------------------
t_install() {
	desc="make install DESTDIR=... succeeds"
	kmake install DESTDIR="$D" > "$W/install.log" 2>&1
	local st=$?
	diag < "$W/install.log"
	return $((st != 0))
}

t_binaries() {
	desc="kvshared (sbin) and kvctl (bin): 0755, the built files"
	want_all 0755 $PREFIX/sbin/kvshared build/kvshared $PREFIX/bin/kvctl build/kvctl
}

t_lib_files() {
	desc="libkv.a, every <kvshare/*.h>, <linux/kvshare.h>, kvshare.pc: 0644"
	local args=() h

	for h in include/kvshare/*.h; do
		args+=("$PREFIX/include/kvshare/${h##*/}" "$h")
	done
	want_all 0644 $PREFIX/lib/libkv.a build/libkv.a "${args[@]}" \
		$PREFIX/include/linux/kvshare.h include/uapi/linux/kvshare.h \
		$PREFIX/lib/pkgconfig/kvshare.pc ""
}

t_python() {
	desc="the Python package: installed for Debian's python3, imports from there"
	local py=/usr/bin/python3 dir ext

	[ -x "$py" ] || { why="no $py"; return 2; }
	dir=$D$PREFIX/lib/python$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')/dist-packages
	ext=$(ls build/python/kvshare/_kvshare*.so 2>/dev/null | head -n 1)
	[ -n "$ext" ] || { say "build/python/kvshare/_kvshare*.so not built"; return 1; }
	want 0644 "${dir#"$D"}/kvshare/${ext##*/}" "$ext" &&
	want 0644 "${dir#"$D"}/kvshare/__init__.py" python/kvshare/__init__.py || return 1
	# From the installed copy, not the build tree: the path it reports.
	(cd / && PYTHONPATH=$dir "$py" -c 'import kvshare, sys; print(kvshare.__file__)') \
		> "$W/py.out" 2>&1 || { diag < "$W/py.out"; return 1; }
	grep -qF "$dir/kvshare/" "$W/py.out" || { say "imported from elsewhere:"; diag < "$W/py.out"; return 1; }
}

t_system_files() {
	desc="udev rule, systemd unit, sysusers.d, config, docs: 0644"
	want_all 0644 \
		$PREFIX/lib/udev/rules.d/60-kvshare.rules dist/60-kvshare.rules \
		$PREFIX/lib/systemd/system/kvshared.service "" \
		$PREFIX/lib/sysusers.d/kvshare.conf dist/kvshare.sysusers \
		/etc/kvshare/kvshared.conf daemon/kvshared.conf.example \
		$PREFIX/share/doc/kvshare/kvshared.conf.example daemon/kvshared.conf.example \
		$PREFIX/share/doc/kvshare/daemon/README.md daemon/README.md
}

t_docs() {
	desc="README.md and docs/*.md in the doc dir: 0644, every relative link resolving there"
	local doc=$PREFIX/share/doc/kvshare args=() f

	for f in README.md docs/*.md python/README.md; do
		args+=("$doc/$f" "$f")
	done
	want_all 0644 "${args[@]}" || return 1
	/usr/bin/python3 tests/docs/doc_links_test.py "$D$doc" > "$W/links.tap" 2>&1 ||
		{ diag < "$W/links.tap"; return 1; }
}

# The module's sources as Kbuild names them, plus its headers.
module_files() {
	printf 'include Kbuild\nall:\n\t@echo %s\n' \
		'$(kvshare-y:.o=.c) $(wildcard kmod/*.h core/*.h) include/uapi/linux/kvshare.h' |
		make -s --no-print-directory -f -
}

t_dkms_files() {
	desc="DKMS tree /usr/src/kvshare-$VERSION: dkms.conf, Kbuild, module sources"
	local t=/usr/src/kvshare-$VERSION args=() f

	for f in Kbuild $(module_files); do
		args+=("$t/$f" "$f")
	done
	want_all 0644 "$t/dkms.conf" "" "${args[@]}"
}

t_module() {
	desc="kvshare.ko in /lib/modules/KVER/updates when built"
	local kver

	if [ ! -f "$KO" ]; then
		why="$KO not built (make module): the module's install is not tested"
		[ -z "$(find "$D/lib/modules" -name kvshare.ko 2>/dev/null)" ] || {
			say "a module was installed although $KO does not exist"; return 1; }
		return 2
	fi
	kver=$(modinfo -F vermagic "$KO" | cut -d' ' -f1)
	want 0644 "/lib/modules/$kver/updates/kvshare.ko" "$KO"
}

# Every file under $D is in the manifest and every manifest file is there.
t_manifest() {
	desc="the manifest lists exactly the installed files"
	local m=$D$PREFIX/share/kvshare/install-manifest

	[ -f "$m" ] || { say "no manifest"; return 1; }
	(cd "$D" && find . -type f -o -type l) | sed 's/^\.//' | sort > "$W/found"
	awk '$1 == "f" { print $2 } $1 == "c" { print $3 }' "$m" | sort > "$W/listed"
	diff "$W/listed" "$W/found" > "$W/mdiff" && return 0
	say "< listed only, > installed only:"
	diag < "$W/mdiff"
	return 1
}

# Each public header on its own, with only the installed include directory
# (run from $W, so no "..." include can reach into the repository).
t_headers_alone() {
	desc="installed headers compile alone (C; C++ too when g++ exists)"
	local inc=$D$PREFIX/include h bad=0 cc

	for h in "$inc"/kvshare/*.h "$inc"/linux/kvshare.h; do
		h=${h#"$inc"/}
		for cc in "cc -x c" "g++ -x c++"; do
			command -v "${cc%% *}" > /dev/null || continue
			# shellcheck disable=SC2086
			if ! (cd "$W" && printf '#include <%s>\n' "$h" |
			      $cc -Wall -Wextra -Werror -fsyntax-only -I"$inc" - 2> "$W/h.err"); then
				say "<$h> (${cc%% *}):"; diag < "$W/h.err"; bad=1
			fi
		done
	done
	printf '#include <kvshare/arbiter.h>\n#include <linux/kvshare.h>\n' |
		(cd "$W" && cc -fsyntax-only -I"$inc" -x c - 2> "$W/h.err") ||
		{ say "arbiter.h + linux/kvshare.h:"; diag < "$W/h.err"; bad=1; }
	return $bad
}

# pkg-config with the sysroot = DESTDIR, as a cross build would use it.
t_link() {
	desc="a program links against the installed libkv (pkg-config kvshare)"
	local flags

	cat > "$W/t.c" <<-'EOF'
	#include <stdio.h>
	#include <kvshare/arbiter.h>

	int main(void)
	{
		struct kv_arbiter *arb = NULL;
		int ret = kv_arbiter_open("/nonexistent/kvshare", 0, &arb);

		printf("kv_arbiter_open: %d\n", ret);
		return ret < 0 ? 0 : 1;
	}
	EOF
	if ! flags=$(PKG_CONFIG_PATH='' PKG_CONFIG_LIBDIR=$D$PREFIX/lib/pkgconfig \
		     PKG_CONFIG_SYSROOT_DIR=$D pkg-config --static --cflags --libs kvshare); then
		say "pkg-config --static --cflags --libs kvshare failed"
		return 1
	fi
	say "flags: $flags"
	# shellcheck disable=SC2086
	(cd "$W" && cc -o t t.c $flags 2> link.err) ||
		{ diag < "$W/link.err"; return 1; }
	"$W/t" | diag
	return "${PIPESTATUS[0]}"
}

unit() { echo "$D$PREFIX/lib/systemd/system/kvshared.service"; }

t_unit_paths() {
	desc="unit: ExecStart is the installed kvshared, socket dir root:kvshare 0750"
	local u bad=0 sock l

	u=$(unit)
	for l in "ExecStart=$PREFIX/sbin/kvshared --config /etc/kvshare/kvshared.conf" \
		 "Group=kvshare" "RuntimeDirectory=kvshare" "RuntimeDirectoryMode=0750"; do
		grep -qxF "$l" "$u" || { say "no line '$l'"; bad=1; }
	done
	# The configured socket is inside the runtime directory.
	sock=$(sed -n 's/^socket *= *//p' "$D/etc/kvshare/kvshared.conf")
	[ "${sock%/*}" = /run/kvshare ] || { say "config socket '$sock' not in /run/kvshare"; bad=1; }
	return $bad
}

# systemd-analyze verify checks that ExecStart exists, at its real path:
# a tmpfs over sbindir in a private mount namespace holds the installed
# binary.  verify exits 0 on unknown keys and bad values, so any output
# fails the test.
t_unit_verify() {
	desc="systemd-analyze verify: the unit is clean"
	command -v systemd-analyze > /dev/null || { why="no systemd-analyze (package systemd)"; return 2; }
	[ -d $PREFIX/sbin ] || { why="no $PREFIX/sbin to mount over"; return 2; }
	unshare -m --propagation private true 2> /dev/null ||
		{ why="unshare -m not permitted (needs root/CAP_SYS_ADMIN)"; return 2; }
	unshare -m --propagation private sh -c '
		mount -t tmpfs none "$1/sbin" && cp "$2$1/sbin/kvshared" "$1/sbin/" &&
		systemd-analyze verify "$3"' _ $PREFIX "$D" "$(unit)" > "$W/verify" 2>&1
	local st=$?
	diag < "$W/verify"
	[ $st = 0 ] && [ ! -s "$W/verify" ]
}

# The installed kvshared accepts the installed configuration: it starts,
# says "ready" and stops cleanly.  On a private socket, in socket mode,
# metrics on a free port; the configured memory is only reserved (memfd),
# and the example's CUDA pool is skipped without a driver.
t_config_loads() {
	desc="installed kvshared starts with the installed kvshared.conf"
	local pid _ st

	"$D$PREFIX/sbin/kvshared" --config "$D/etc/kvshare/kvshared.conf" \
		--socket "$W/kvs.sock" --mode socket --metrics 127.0.0.1:0 \
		> "$W/kvshared.log" 2>&1 &
	pid=$!
	for _ in $(seq 100); do
		grep -q '^kvshared: ready' "$W/kvshared.log" && break
		kill -0 $pid 2> /dev/null || break
		sleep 0.1
	done
	kill -TERM $pid 2> /dev/null
	wait $pid
	st=$?
	diag < "$W/kvshared.log"
	grep -q '^kvshared: ready' "$W/kvshared.log" && [ $st = 0 ]
}

# systemd-sysusers on a minimal root: it must plan to create the group.
t_sysusers() {
	desc="sysusers.d entry creates system group kvshare"
	local r=$W/sysroot

	command -v systemd-sysusers > /dev/null || { why="no systemd-sysusers (package systemd)"; return 2; }
	mkdir -p "$r/etc"
	echo "root:x:0:0:root:/root:/bin/sh" > "$r/etc/passwd"
	echo "root:x:0:" > "$r/etc/group"
	systemd-sysusers --dry-run --root="$r" "$D$PREFIX/lib/sysusers.d/kvshare.conf" \
		> "$W/su" 2>&1
	local st=$?
	diag < "$W/su"
	[ $st = 0 ] && grep -q "Creating group 'kvshare' with GID" "$W/su"
}

# A strict reading of the udev rule syntax (udev 252 has no `udevadm
# verify`): every line is comma-separated KEY[{attr}]OP"value" pairs, with
# the operators each key accepts, octal modes, plain group names, and at
# least one match and one assignment (a rule without a match would apply
# to every device).  Then what the rule must say.
udev_strict() {
	local f=$1 line no=0 rest key op val sep nm na all=
	local re='^[[:space:]]*([A-Z_]+)(\{[^}]+\})?(==|!=|\+=|-=|:=|=)"([^"\\]*)"[[:space:]]*(,?)[[:space:]]*(.*)$'

	while IFS= read -r line || [ -n "$line" ]; do
		no=$((no + 1))
		[[ "$line" =~ ^[[:space:]]*(#.*)?$ ]] && continue
		[[ "$line" != *\\ ]] || { say "$f:$no: line continuation"; return 1; }
		rest=$line nm=0 na=0
		while [ -n "$rest" ]; do
			[[ "$rest" =~ $re ]] || { say "$f:$no: cannot parse '$rest'"; return 1; }
			key=${BASH_REMATCH[1]} op=${BASH_REMATCH[3]} val=${BASH_REMATCH[4]}
			sep=${BASH_REMATCH[5]} rest=${BASH_REMATCH[6]}
			case "$key $op" in
			"KERNEL =="|"KERNEL !="|"SUBSYSTEM =="|"SUBSYSTEM !="|"ACTION =="|"ACTION !=")
				nm=$((nm + 1)) ;;
			"GROUP ="|"GROUP :="|"OWNER ="|"OWNER :=")
				[[ "$val" =~ ^[a-z_][a-z0-9_-]*$ ]] ||
					{ say "$f:$no: $key '$val' is not a name"; return 1; }
				na=$((na + 1)) ;;
			"MODE ="|"MODE :=")
				[[ "$val" =~ ^0?[0-7]{3}$ ]] ||
					{ say "$f:$no: MODE '$val' is not octal"; return 1; }
				na=$((na + 1)) ;;
			*)	say "$f:$no: '$key$op' is not a key and operator this rule may use"
				return 1 ;;
			esac
			[ -z "$rest" ] || [ -n "$sep" ] || { say "$f:$no: no comma before '$rest'"; return 1; }
			[ -n "$rest" ] || [ -z "$sep" ] || { say "$f:$no: trailing comma"; return 1; }
			all+=" $key$op\"$val\""
		done
		[ $nm -gt 0 ] && [ $na -gt 0 ] ||
			{ say "$f:$no: a rule needs a match and an assignment"; return 1; }
	done < "$f"
	[ "$all" = ' KERNEL=="kvshare" SUBSYSTEM=="misc" GROUP="kvshare" MODE="0660"' ] ||
		{ say "$f: rule is$all"; return 1; }
}

t_udev_syntax() {
	desc="udev rule: strict syntax check, KERNEL==kvshare misc -> kvshare 0660"
	udev_strict "$D$PREFIX/lib/udev/rules.d/60-kvshare.rules"
}

# udev itself: `udevadm test` on a real misc device, in a private mount
# namespace where the only rules are ours (tmpfs over every rules
# directory, /run and /dev, so nothing real is changed) and /etc/group has
# kvshare.  A copy of the rule matches that device's name; udev must apply
# its GROUP and MODE and report nothing else about either file.
t_udev_real() {
	desc="udevadm test: udev parses the rule and applies GROUP and MODE"
	local rule=$D$PREFIX/lib/udev/rules.d/60-kvshare.rules dev name gid

	command -v udevadm > /dev/null || { why="no udevadm (package udev); strict check only"; return 2; }
	unshare -m --propagation private true 2> /dev/null ||
		{ why="unshare -m not permitted (needs root); strict check only"; return 2; }
	for dev in /sys/class/misc/*; do
		[ -f "$dev/dev" ] && break
		dev=
	done
	[ -n "$dev" ] || { why="no misc device in /sys/class/misc; strict check only"; return 2; }
	name=${dev##*/}
	mkdir -p "$W/udev"
	cp /etc/group "$W/udev/group"
	gid=$(getent group kvshare | cut -d: -f3)
	if [ -z "$gid" ]; then
		gid=64123
		echo "kvshare:x:$gid:" >> "$W/udev/group"
	fi
	cp "$rule" "$W/udev/60-kvshare.rules"
	sed "s/KERNEL==\"kvshare\"/KERNEL==\"$name\"/" "$rule" > "$W/udev/61-kvshare-test.rules"
	unshare -m --propagation private sh -c '
		set -e
		for d in /etc/udev/rules.d /usr/local/lib/udev/rules.d \
			 /usr/lib/udev/rules.d /lib/udev/rules.d; do
			[ ! -d $d ] || [ -L $d ] || mount -t tmpfs none $d
		done
		mount -t tmpfs none /run
		mount -t tmpfs none /dev
		mkdir -p /run/udev/rules.d
		cp "$1"/*.rules /run/udev/rules.d/
		mount --bind "$1/group" /etc/group
		udevadm test --action=add "$2"' _ "$W/udev" "$dev" > "$W/ut" 2>&1
	local st=$? bad=0
	grep -F -e kvshare -e "$name:" "$W/ut" | diag
	[ $st = 0 ] || { say "udevadm test: exit status $st"; bad=1; }
	grep -qE "61-kvshare-test.rules:[0-9]+ GROUP $gid\$" "$W/ut" ||
		{ say "GROUP $gid not applied"; bad=1; }
	grep -qE "61-kvshare-test.rules:[0-9]+ MODE 0660\$" "$W/ut" ||
		{ say "MODE 0660 not applied"; bad=1; }
	if grep -E "kvshare(-test)?\.rules" "$W/ut" |
	   grep -vE "^Reading rules file: |rules:[0-9]+ (GROUP $gid|MODE 0660)\$" | grep -q .; then
		say "udev complained about the rule (above)"; bad=1
	fi
	return $bad
}

dkms_conf() { echo "$D/usr/src/kvshare-$VERSION/dkms.conf"; }

# dkms sources dkms.conf in bash with its own variables set; so do we,
# with set -u, so a misspelt variable is an error too.
t_dkms_conf() {
	desc="dkms.conf: valid bash, name/version/module/location/autoinstall/MAKE"
	local c out exp

	c=$(dkms_conf)
	bash -n "$c" || return 1
	out=$(env -i bash -c 'set -eu
		kernelver=6.1.0-99-amd64 arch=x86_64 kernel_source_dir=/KSRC
		dkms_tree=/var/lib/dkms source_tree=/usr/src
		. "$1"
		printf "%s\n" "$PACKAGE_NAME" "$PACKAGE_VERSION" "${BUILT_MODULE_NAME[0]}" \
			"${DEST_MODULE_LOCATION[0]}" "$AUTOINSTALL" "${MAKE[0]}"' _ "$c") || return 1
	exp="kvshare
$VERSION
kvshare
/updates
yes
make -C /KSRC M=/var/lib/dkms/kvshare/$VERSION/build modules"
	[ "$out" = "$exp" ] && return 0
	say "got:"; diag <<< "$out"
	say "expected:"; diag <<< "$exp"
	return 1
}

# Every object Kbuild names has its source, and every project header the
# sources include ("..." or <linux/kvshare.h>) is in the tree at the path
# Kbuild's -I flags give it.
t_dkms_tree() {
	desc="DKMS tree: Kbuild's sources and every header they include are there"
	local t=$D/usr/src/kvshare-$VERSION f inc bad=0 o

	for o in $(cd "$t" && printf 'include Kbuild\nall:\n\t@echo $(kvshare-y)\n' |
		   make -s --no-print-directory -f -); do
		[ -f "$t/${o%.o}.c" ] || { say "Kbuild names $o, no ${o%.o}.c"; bad=1; }
	done
	for f in "$t"/kmod/*.[ch] "$t"/core/*.[ch] "$t"/include/uapi/linux/*.h; do
		while read -r inc; do
			[ -f "$(dirname "$f")/$inc" ] || [ -f "$t/kmod/$inc" ] ||
			[ -f "$t/core/$inc" ] ||
			[ -f "$t/include/uapi/$inc" ] ||
				{ say "${f#"$t"/}: $inc not in the tree"; bad=1; }
		done < <(sed -nE 's/^#[[:space:]]*include[[:space:]]*("([^"]+)"|<(linux\/kvshare\.h)>).*/\2\3/p' "$f")
	done
	return $bad
}

t_dkms_build() {
	desc="the DKMS tree builds kvshare.ko with dkms.conf's MAKE"
	local kdir=${KDIR:-} b=$W/dkms/kvshare/$VERSION/build

	[ "${KVS_TEST_DKMS_BUILD:-0}" = 1 ] || { why="set KVS_TEST_DKMS_BUILD=1 (a kernel build)"; return 2; }
	[ -n "$kdir" ] || kdir=$(ls -d /usr/src/linux-headers-6.1.*-amd64 2> /dev/null | sort -V | tail -n 1)
	[ -d "$kdir" ] || { why="no kernel headers"; return 2; }
	mkdir -p "$b"
	cp -a "$D/usr/src/kvshare-$VERSION/." "$b/"
	# dkms runs MAKE in the build directory, with these two set.
	# shellcheck disable=SC2086
	(export kernel_source_dir=$kdir dkms_tree=$W/dkms
	 cd "$b" && cmd=$(bash -c '. ./dkms.conf; echo "${MAKE[0]}"') &&
	 env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL $cmd) > "$W/dkms.log" 2>&1
	local st=$?
	tail -n 5 "$W/dkms.log" | diag
	[ $st = 0 ] && [ -f "$b/kvshare.ko" ]
}

# Nothing is left: no file, and none of the directories install created.
empty_root() {
	local left

	left=$(cd "$1" && find . -mindepth 1 | sort)
	[ -z "$left" ] && return 0
	say "left behind:"; diag <<< "$left"
	return 1
}

t_uninstall() {
	desc="make uninstall removes every file and directory install created"
	kmake uninstall DESTDIR="$D" 2>&1 | diag
	[ "${PIPESTATUS[0]}" = 0 ] || return 1
	empty_root "$D"
}

t_uninstall_keeps_changed_conf() {
	desc="uninstall keeps a changed kvshared.conf and removes the rest"
	local r=$W/r2 c=/etc/kvshare/kvshared.conf

	kmake install DESTDIR="$r" > /dev/null 2>&1 || { say "install failed"; return 1; }
	echo "# changed by the administrator" >> "$r$c"
	kmake uninstall DESTDIR="$r" 2>&1 | diag
	[ -f "$r$c" ] || { say "$c removed"; return 1; }
	rm -f "$r$c"
	rmdir "$r/etc/kvshare" "$r/etc" 2> /dev/null
	empty_root "$r"
}

t_reinstall() {
	desc="a second install lists nothing twice; one uninstall removes all"
	local r=$W/r3 m

	kmake install DESTDIR="$r" > /dev/null 2>&1 &&
		kmake install DESTDIR="$r" > /dev/null 2>&1 || { say "install failed"; return 1; }
	m=$r$PREFIX/share/kvshare/install-manifest
	[ -z "$(sort "$m" | uniq -d)" ] || { say "duplicate lines:"; sort "$m" | uniq -d | diag; return 1; }
	kmake uninstall DESTDIR="$r" > /dev/null 2>&1 || return 1
	empty_root "$r"
}

t_prefix_usr() {
	desc="prefix=/usr: files under /usr, the unit follows sbindir; uninstall clean"
	local r=$W/r4

	kmake install DESTDIR="$r" prefix=/usr > /dev/null 2>&1 || { say "install failed"; return 1; }
	D=$r want 0755 /usr/sbin/kvshared build/kvshared &&
	D=$r want 0644 /usr/lib/udev/rules.d/60-kvshare.rules dist/60-kvshare.rules &&
	D=$r want 0644 /usr/include/linux/kvshare.h include/uapi/linux/kvshare.h &&
	grep -qxF "ExecStart=/usr/sbin/kvshared --config /etc/kvshare/kvshared.conf" \
		"$r/usr/lib/systemd/system/kvshared.service" ||
		{ say "unit or files not where prefix=/usr puts them"; return 1; }
	kmake uninstall DESTDIR="$r" prefix=/usr > /dev/null 2>&1 || return 1
	empty_root "$r"
}

for t in "${TESTS[@]}"; do
	run "$t"
done
[ "$failed" = 0 ]
