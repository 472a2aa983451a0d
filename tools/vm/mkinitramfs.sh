#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Build the test VM's initramfs (gzip'd newc cpio):
#   /bin/busybox + a symlink per applet, /init (guest-init.sh),
#   /lib/modules/kvshare.ko, the guest binaries in /bin, the shared
#   libraries the dynamic ones need, and /etc/kvshare-vm/{config,suites}
#   telling /init what to run.
#
# Usage:
#   mkinitramfs.sh -o OUT.cpio.gz -k kvshare.ko [-m test|bench] [-t SECS]
#                  [-b BIN]... [-d BIN]... [-L LIB]...
#                  [-s NAME<TAB>COMMAND]... [-B "CMD; CMD; ..."]
#     -b  a statically linked binary, copied to /bin/<basename>
#     -d  a dynamically linked binary, copied to /bin/<basename> with the
#         shared libraries it needs (ldd) at the paths they have here,
#         its program interpreter included
#     -L  a shared library that is dlopen()ed by name (the CUDA driver
#         stand-in), copied with the libraries it needs to $GUEST_LIB_DIR,
#         which the guest puts in every suite's LD_LIBRARY_PATH
#     -s  one suite: the name the host reports it under, a tab, and the
#         shell command the guest runs (PATH=/bin, cwd /tmp)
#     -B  ';'-separated commands, one suite each, named
#         bench<N>-<first word>   (the form of GUEST_BENCH)
#     -t  per-suite timeout inside the guest (default 600)
#
# The suite names, in order, are also written to OUT.suites for the host.
#
# Packing needs no root: there are no device nodes in the archive (the
# guest mounts devtmpfs first) and cpio is told to record uid/gid 0.
set -euo pipefail

die() {
	echo "mkinitramfs.sh: error: $*" >&2
	exit 1
}

here=$(cd "$(dirname "$0")" && pwd)
# Where -L libraries go; guest-init.sh reads it from the config.
GUEST_LIB_DIR=/lib/kvshare-test

# Copy the shared libraries ELF file $1 needs, as ldd resolves them here,
# to the same paths in the stage (symlinks followed: the file itself).  A
# library ldd cannot find is an error: the binary would not start.
pack_needed() {
	local lines line path
	lines=$(LC_ALL=C ldd "$1" 2>&1) || {
		# ldd fails on a static ELF ("not a dynamic executable").
		echo "mkinitramfs.sh: warning: $1 is not dynamically linked (use -b)" >&2
		return 0
	}
	while read -r line; do
		case "$line" in
		*"=> not found"*) die "$1 needs ${line%% *}, which ldd cannot find" ;;
		*"=> /"*) path=${line#*=> } ;;
		/*) path=$line ;;
		*) continue ;;		# linux-vdso.so.1: the kernel's, no file
		esac
		path=${path%% (*}
		[ -e "$stage$path" ] && continue
		mkdir -p "$stage$(dirname "$path")"
		cp -L "$path" "$stage$path"
	done <<<"$lines"
}
out="" ko="" mode=test timeout=600
bins=() dyn_bins=() libs=() suites=()
while getopts "o:k:m:t:b:d:L:s:B:" opt; do
	case "$opt" in
	o) out=$OPTARG ;;
	k) ko=$OPTARG ;;
	m) mode=$OPTARG ;;
	t) timeout=$OPTARG ;;
	b) bins+=("$OPTARG") ;;
	d) dyn_bins+=("$OPTARG") ;;
	L) libs+=("$OPTARG") ;;
	s) suites+=("$OPTARG") ;;
	B)
		IFS=';' read -ra cmds <<<"$OPTARG"
		for c in "${cmds[@]}"; do
			read -r first _ <<<"$c" || true
			[ -n "$first" ] || continue
			first=$(basename "$first" | tr -c 'A-Za-z0-9._+\n-' '_')
			suites+=("bench$((${#suites[@]} + 1))-$first"$'\t'"$c")
		done
		;;
	*) die "bad option (see the usage at the top of $0)" ;;
	esac
done
[ -n "$out" ] || die "-o OUT is required"
[ -n "$ko" ] || die "-k kvshare.ko is required"
[ -f "$ko" ] || die "$ko does not exist: build the module first (make module)"
case "$mode" in test | bench) ;; *) die "-m must be test or bench" ;; esac

busybox=$(command -v busybox || true)
[ -n "$busybox" ] || die "busybox not found: install busybox-static (make setup)"
# A dynamically linked busybox (package "busybox") would find no libc in
# the guest; only busybox-static works here.
if ! file_out=$(LC_ALL=C readelf -l "$busybox" 2>/dev/null) ||
	grep -q 'Requesting program interpreter' <<<"$file_out"; then
	die "$busybox is not statically linked: install busybox-static (make setup)"
fi

mkdir -p "$(dirname "$out")"
stage=$(mktemp -d "${TMPDIR:-/tmp}/kvshare-initramfs.XXXXXX")
trap 'rm -rf "$stage"' EXIT

mkdir -p "$stage"/{bin,dev,proc,sys,tmp,etc/kvshare-vm,lib/modules}
ln -s bin "$stage/sbin"
mkdir -p "$stage/usr"
ln -s ../bin "$stage/usr/bin"
ln -s ../bin "$stage/usr/sbin"

cp "$busybox" "$stage/bin/busybox"
# Every applet busybox has, as a relative link, so the guest has sh, mount,
# insmod, rmmod, lsmod, dmesg, timeout, poweroff and the rest.
for applet in $("$busybox" --list); do
	[ "$applet" = busybox ] || ln -sf busybox "$stage/bin/$applet"
done

install -m 0755 "$here/guest-init.sh" "$stage/init"
install -m 0644 "$ko" "$stage/lib/modules/kvshare.ko"

for b in "${bins[@]}"; do
	if [ ! -f "$b" ]; then
		# Keep going: the suite then fails visibly in the guest ("not
		# found", no plan), while every other suite still runs.
		echo "mkinitramfs.sh: warning: $b is missing, not packed" >&2
		continue
	fi
	if LC_ALL=C readelf -l "$b" 2>/dev/null | grep -q 'Requesting program interpreter'; then
		echo "mkinitramfs.sh: warning: $b is dynamically linked and will not run in the guest (link it with -static)" >&2
	fi
	# Replaces a busybox applet link of the same name, if any.
	rm -f "$stage/bin/$(basename "$b")"
	install -m 0755 "$b" "$stage/bin/$(basename "$b")"
done

# Dynamic binaries and dlopen()ed libraries: each ELF with what ldd says
# it needs, at the same absolute path, so that the guest's loader finds
# them where it looks on this host (its default directories, /lib64 for
# itself).  No ld.so.cache in the guest: the loader then searches its
# built-in directories, which are those.
for b in "${dyn_bins[@]}"; do
	if [ ! -f "$b" ]; then
		echo "mkinitramfs.sh: warning: $b is missing, not packed" >&2
		continue
	fi
	rm -f "$stage/bin/$(basename "$b")"
	install -m 0755 "$b" "$stage/bin/$(basename "$b")"
	pack_needed "$b"
done
for l in "${libs[@]}"; do
	[ -f "$l" ] || die "$l does not exist (a library for $GUEST_LIB_DIR)"
	mkdir -p "$stage$GUEST_LIB_DIR"
	install -m 0755 "$l" "$stage$GUEST_LIB_DIR/$(basename "$l")"
	pack_needed "$l"
done

# Tests drop privileges with setuid(65534) themselves; these entries only
# give the ids names for id(1), ls -l and getpwuid().
printf 'root:x:0:0:root:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$stage/etc/passwd"
# kvshare (65533): the device's group, as the udev rule of a real install
# makes it (guest-init.sh gives /dev/kvshare to it; see tests/uapi/kvs_test.h).
printf 'root:x:0:\nkvshare:x:65533:\nnogroup:x:65534:\n' >"$stage/etc/group"

printf 'MODE=%s\nSUITE_TIMEOUT=%s\nLIB_DIR=%s\n' "$mode" "$timeout" "$GUEST_LIB_DIR" \
	>"$stage/etc/kvshare-vm/config"
: >"$stage/etc/kvshare-vm/suites"
: >"$out.suites.tmp"
for s in "${suites[@]}"; do
	[[ "$s" == *$'\t'* ]] || die "suite '$s' has no tab between name and command"
	name=${s%%$'\t'*}
	[[ "$name" =~ ^[A-Za-z0-9._+-]+$ ]] || die "suite name '$name' must be [A-Za-z0-9._+-]+ (it becomes a file name)"
	printf '%s\n' "$s" >>"$stage/etc/kvshare-vm/suites"
	printf '%s\n' "$name" >>"$out.suites.tmp"
done

# newc is the only cpio format the kernel unpacks; -R 0:0 makes every file
# root's in the guest whoever packed it.
(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort |
	cpio --quiet -o -H newc -R 0:0) | gzip -1 >"$out.tmp"
mv "$out.tmp" "$out"
mv "$out.suites.tmp" "$out.suites"
