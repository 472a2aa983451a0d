#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# The directory variables come from the environment (checked below).
# shellcheck disable=SC2154
#
# dist/install.sh install|uninstall: the body of `make install` and
# `make uninstall`.  dist/install.mk passes everything in the environment
# (the GNU directory variables, DESTDIR, the built files); run it through
# make, from the repository root.
#
# install writes a manifest, $datadir/kvshare/install-manifest, of every file
# and every directory it created (paths without DESTDIR, so a staged tree
# stays valid where it lands), and uninstall removes exactly those: the
# files, then the directories that are empty again.  Lines:
#   f PATH          a file
#   c SHA256 PATH   a configuration file: removed only if unchanged since
#   d PATH          a directory that did not exist before
# A second install keeps the first one's entries (the module of another
# kernel, a configuration file it kept), so one uninstall removes both.
#
# With DESTDIR (packaging, tests) nothing outside DESTDIR is touched.
# Without it, install also runs depmod, creates the kvshare group, reloads
# udev and systemd, and keeps an existing /etc/kvshare/kvshared.conf.
set -euo pipefail

die() { echo "install.sh: error: $*" >&2; exit 1; }
note() { echo "install.sh: $*"; }

action=${1:-}
DESTDIR=${DESTDIR:-}
DIRS="prefix bindir sbindir libdir includedir datadir docdir sysconfdir
      pkgconfigdir udevrulesdir systemdunitdir sysusersdir dkmsdir pythondir"
for v in $DIRS; do
	# Absolute, and plain enough to be spliced into sed and unit files.
	[[ "${!v:-}" =~ ^/[A-Za-z0-9._/+-]*$ ]] ||
		die "$v='${!v:-}': an absolute path of [A-Za-z0-9._/+-] is needed (run 'make install')"
done
[ -z "$DESTDIR" ] || [[ "$DESTDIR" = /* ]] || die "DESTDIR='$DESTDIR' is not absolute"
[[ "${KVS_VERSION:-}" =~ ^[0-9A-Za-z.+~-]+$ ]] || die "KVS_VERSION='${KVS_VERSION:-}' is not a version"

manifest=$datadir/kvshare/install-manifest
entries=()

record() { entries+=("$*"); }

# Create directory $1 (without DESTDIR) and its missing parents, recording
# each one created.
mkdirs() {
	local d=$1

	[ "$d" = / ] || [ -d "$DESTDIR$d" ] && return 0
	mkdirs "$(dirname "$d")"
	mkdir -m 0755 "$DESTDIR$d"
	record "d $d"
}

# inst MODE SRC DEST
inst() {
	mkdirs "$(dirname "$3")"
	install -m "$1" "$2" "$DESTDIR$3"
	record "f $3"
}

sha() { sha256sum < "$1" | cut -d' ' -f1; }

tmpdir=
cleanup() { [ -z "$tmpdir" ] || rm -rf "$tmpdir"; }
trap cleanup EXIT

# ---------------------------------------------------------------------------
# What the module was built from: Kbuild, the sources, and the repository
# files Kbuild's dependency records (DIR/.NAME.o.cmd) name, which are the
# headers the preprocessor actually read.
module_inputs() {
	local c cmd

	echo Kbuild
	# shellcheck disable=SC2086
	for c in $KMOD_SRCS; do
		echo "$c"
		cmd=$(dirname "$c")/.$(basename "${c%.c}").o.cmd
		[ ! -f "$cmd" ] || awk -v p="$PWD/" '{
			for (i = 1; i <= NF; i++)
				if (index($i, p) == 1) {
					f = substr($i, length(p) + 1)
					sub(/[:\\]+$/, "", f)
					if (f !~ /\.o$/)
						print f
				}
		}' "$cmd"
	done | sort -u
}

install_module() {
	local ko=${KO:-kvshare.ko} newer magic

	if [ ! -f "$ko" ]; then
		note "$ko not built ('make module'): the module is not installed, only its DKMS source tree"
		return 0
	fi
	[ -n "${KVER:-}" ] && [ -n "${moduledir:-}" ] ||
		die "$ko exists but KVER is unknown (no kernel headers?)"
	# A module older than its sources would not be the code being installed.
	newer=$(module_inputs | while read -r f; do
		[ ! "$f" -nt "$ko" ] || { echo "$f"; break; }
	done)
	[ -z "$newer" ] || die "$ko is older than $newer: run 'make module' (or remove $ko to install without it)"
	if command -v modinfo >/dev/null; then
		magic=$(modinfo -F vermagic "$ko" | cut -d' ' -f1)
		[ "$magic" = "$KVER" ] ||
			die "$ko was built for kernel '$magic', not KVER=$KVER"
	fi
	inst 0644 "$ko" "$moduledir/kvshare.ko"
	module_installed=1
}

# The module's sources as the repository lays them out, so that Kbuild
# builds them unchanged under DKMS.
install_dkms_tree() {
	local f

	inst 0644 Kbuild "$dkmsdir/Kbuild"
	# shellcheck disable=SC2086
	for f in $KMOD_SRCS kmod/*.h core/*.h include/uapi/linux/kvshare.h; do
		inst 0644 "$f" "$dkmsdir/$f"
	done
	sed "s/@VERSION@/$KVS_VERSION/" dist/dkms.conf > "$tmpdir/dkms.conf"
	inst 0644 "$tmpdir/dkms.conf" "$dkmsdir/dkms.conf"
}

# The manual, laid out as in the repository so that its relative links
# hold: README.md, docs/*.md and the READMEs they link to (daemon/README.md
# comes with the daemon).
install_docs() {
	local f

	for f in README.md docs/*.md python/README.md; do
		inst 0644 "$f" "$docdir/$f"
	done
}

install_daemon() {
	local conf=$sysconfdir/kvshare/kvshared.conf

	inst 0755 "$KVSHARED" "$sbindir/kvshared"
	# The unit names the default paths; follow sbindir, sysconfdir, docdir.
	sed -e "s|/usr/local/sbin/kvshared|$sbindir/kvshared|g" \
	    -e "s|/etc/kvshare/|$sysconfdir/kvshare/|g" \
	    -e "s|/usr/local/share/doc/kvshare|$docdir|g" \
	    daemon/kvshared.service > "$tmpdir/kvshared.service"
	inst 0644 "$tmpdir/kvshared.service" "$systemdunitdir/kvshared.service"
	inst 0644 daemon/kvshared.conf.example "$docdir/kvshared.conf.example"
	inst 0644 daemon/README.md "$docdir/daemon/README.md"
	# The administrator's configuration is never replaced on a live system.
	if [ -z "$DESTDIR" ] && [ -e "$conf" ]; then
		note "keeping $conf; the shipped example is $docdir/kvshared.conf.example"
		return 0
	fi
	mkdirs "$(dirname "$conf")"
	install -m 0644 daemon/kvshared.conf.example "$DESTDIR$conf"
	record "c $(sha "$DESTDIR$conf") $conf"
}

install_lib() {
	local h

	inst 0644 "$LIBKV" "$libdir/libkv.a"
	for h in include/kvshare/*.h; do
		inst 0644 "$h" "$includedir/kvshare/${h##*/}"
	done
	inst 0644 include/uapi/linux/kvshare.h "$includedir/linux/kvshare.h"
	sed -e "s|@prefix@|$prefix|; s|@includedir@|$includedir|; s|@libdir@|$libdir|" \
	    -e "s|@VERSION@|$KVS_VERSION|; s|@LIBS_PRIVATE@|$LIBKV_LDLIBS|" \
	    dist/kvshare.pc.in > "$tmpdir/kvshare.pc"
	inst 0644 "$tmpdir/kvshare.pc" "$pkgconfigdir/kvshare.pc"
}

# The Python package kvshare: the extension built for Debian's python3 and
# the package's modules.  Skipped, and said so, when it was not built.
install_python() {
	local f

	if [ -z "${PY_EXT:-}" ] || [ ! -f "$PY_EXT" ]; then
		note "Python binding not built ('make python'): not installed"
		return 0
	fi
	inst 0644 "$PY_EXT" "$pythondir/kvshare/${PY_EXT##*/}"
	for f in python/kvshare/*.py; do
		inst 0644 "$f" "$pythondir/kvshare/${f##*/}"
	done
}

# The old manifest's entries, then the new ones, each once.
write_manifest() {
	local old=()

	mkdirs "$(dirname "$manifest")"
	[ ! -f "$DESTDIR$manifest" ] || mapfile -t old < "$DESTDIR$manifest"
	record "f $manifest"
	# Each line once; of a configuration file, the newest checksum.
	printf '%s\n' "${old[@]}" "${entries[@]}" | awk 'NF {
		k = ($1 == "c") ? "c " $3 : $0
		if (!(k in line)) order[n++] = k
		line[k] = $0
	} END { for (i = 0; i < n; i++) print line[order[i]] }' > "$DESTDIR$manifest.tmp"
	chmod 0644 "$DESTDIR$manifest.tmp"
	mv -f "$DESTDIR$manifest.tmp" "$DESTDIR$manifest"
}

# Live system only: make what was installed take effect.  Each tool may be
# absent (a container, a chroot), which is not an error.
activate() {
	if [ -n "${module_installed:-}" ]; then
		if command -v depmod >/dev/null && [ -d "/lib/modules/$KVER/kernel" ]; then
			depmod -a "$KVER" || note "warning: depmod -a $KVER failed"
		else
			note "not running depmod: no depmod or no /lib/modules/$KVER/kernel"
		fi
	fi
	if ! getent group kvshare >/dev/null; then
		if command -v systemd-sysusers >/dev/null; then
			systemd-sysusers "$sysusersdir/kvshare.conf" ||
				note "warning: systemd-sysusers failed; create group kvshare"
		elif command -v groupadd >/dev/null; then
			groupadd -r kvshare || note "warning: groupadd failed; create group kvshare"
		fi
	fi
	reload
	note "done.  Add users to group kvshare; 'systemctl enable --now kvshared';"
	note "for DKMS: 'make install KVS_INSTALL_MODULE=no' then 'dkms install kvshare/$KVS_VERSION'"
}

reload() {
	if command -v udevadm >/dev/null; then
		udevadm control --reload 2>/dev/null || true
		[ ! -e /sys/class/misc/kvshare ] ||
			udevadm trigger --action=change /sys/class/misc/kvshare 2>/dev/null || true
	fi
	if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
	fi
}

do_install() {
	tmpdir=$(mktemp -d)
	[ -z "$DESTDIR" ] || mkdir -p "$DESTDIR"
	[ -f "$KVSHARED" ] && [ -f "$KVCTL" ] && [ -f "$LIBKV" ] ||
		die "$KVSHARED, $KVCTL or $LIBKV missing: run 'make'"
	if [ "${KVS_INSTALL_MODULE:-auto}" != no ]; then
		install_module
	fi
	install_dkms_tree
	inst 0644 dist/60-kvshare.rules "$udevrulesdir/60-kvshare.rules"
	inst 0644 dist/kvshare.sysusers "$sysusersdir/kvshare.conf"
	install_daemon
	inst 0755 "$KVCTL" "$bindir/kvctl"
	install_lib
	install_python
	install_docs
	write_manifest
	[ -n "$DESTDIR" ] || activate
}

# ---------------------------------------------------------------------------
do_uninstall() {
	local lines=() dirs=() kvers=() l p sum rest k

	if [ ! -f "$DESTDIR$manifest" ]; then
		note "no $DESTDIR$manifest: nothing installed with this prefix"
		return 0
	fi
	mapfile -t lines < "$DESTDIR$manifest"
	# Check every line before removing anything.
	for l in "${lines[@]}"; do
		[[ "$l" =~ ^(f|d|c\ [0-9a-f]{64})\ /[^\ ]*$ ]] && [[ "$l" != *..* ]] ||
			die "$DESTDIR$manifest: bad line '$l'; nothing removed"
	done
	for l in "${lines[@]}"; do
		case $l in
		"f "*)
			p=${l#f }
			rm -f -- "$DESTDIR$p"
			[[ "$p" != */modules/*/kvshare.ko ]] || {
				k=${p#*/modules/}; kvers+=("${k%%/*}"); }
			;;
		"c "*)
			rest=${l#c }; sum=${rest%% *}; p=${rest#* }
			[ -f "$DESTDIR$p" ] || continue
			if [ "$(sha "$DESTDIR$p")" = "$sum" ]; then
				rm -f -- "$DESTDIR$p"
			else
				note "keeping $DESTDIR$p: changed since it was installed"
			fi
			;;
		"d "*)
			dirs+=("${l#d }")
			;;
		esac
	done
	# Deepest first; a directory that holds anything else stays.
	printf '%s\n' "${dirs[@]}" | sort -r -u | while read -r p; do
		[ -z "$p" ] || rmdir -- "$DESTDIR$p" 2>/dev/null || true
	done
	[ -z "$DESTDIR" ] || return 0
	for k in "${kvers[@]}"; do
		if command -v depmod >/dev/null && [ -d "/lib/modules/$k/kernel" ]; then
			depmod -a "$k" || true
		fi
	done
	reload
	note "the group kvshare is kept (files may still belong to it)"
}

case $action in
install) do_install ;;
uninstall) do_uninstall ;;
*) die "usage: $0 install|uninstall" ;;
esac
