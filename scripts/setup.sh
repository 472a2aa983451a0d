#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Install every Debian package the kvshare build and tests need, then check
# that the kernel headers and the matching bootable kernel are present.
#
# Idempotent and fast: one dpkg-query call decides; apt-get runs only when a
# package is missing, so a fresh CI machine gets everything and a prepared
# one pays well under a second.  There is deliberately no stamp file: a stamp
# copied along with a work tree would hide a missing package on a new machine.
#
# Usage: scripts/setup.sh [--check]   (--check: report, install nothing)
set -euo pipefail

# Why each package is here:
#   build-essential gcc make libc6-dev  user-space build (static guest binaries need libc6-dev's libc.a)
#   pkg-config                          locating liburing/libxxhash flags
#   liburing-dev                        io_uring uring_cmd client and tests
#   libxxhash-dev                       fast block-hash default
#   libssl-dev                          SHA-256 (collision-resistant key option)
#   linux-headers-amd64                 Debian 6.1 headers the module is built against
#   linux-image-amd64                   the matching kernel booted in QEMU
#   kmod                                modinfo / insmod on the build side
#   qemu-system-x86                     the test VM (TCG)
#   busybox-static                      the VM's userland
#   cpio gzip                           packing the initramfs
#   linux-source-6.1 xz-utils           kselftest_harness.h, kselftest.h and checkpatch.pl, extracted at build time
#   perl                                checkpatch.pl
#   coreutils                           timeout(1) around the VM and the test binaries
#   systemd udev                        tests/install: systemd-analyze verify, systemd-sysusers, udevadm test
#   python3-dev python3-numpy           the Python binding (python/): headers, numpy arrays
#   python3-torch python3-pytest        its demo (kvshare.demo) and its test suite (tests/python)
#   python3-venv python3-pip            tests/pip: kvshare pip-installed into a venv, offline
#   python3-setuptools python3-wheel    its build backend (python/pyproject.toml, --no-build-isolation)
#   gnuplot-nox                         tools/kvserve/scale.sh: the throughput and memory plot (make bench)
#   patchelf                            make gpu-bundle: RPATH $ORIGIN/../lib on the bundle's binaries
#   libhiredis-dev                      make bench: the plain hiredis loop the remote tier is measured against
#   redis-server redis-tools            tests/remote: real Redis servers, a cluster, redis-cli
#   openssl curl                        tests/remote: TLS certificates, the metrics endpoint
PACKAGES=(
	build-essential gcc make libc6-dev pkg-config
	liburing-dev libxxhash-dev libssl-dev
	linux-headers-amd64 linux-image-amd64 kmod
	qemu-system-x86 busybox-static cpio gzip
	linux-source-6.1 xz-utils perl coreutils
	systemd udev
	python3-dev python3-numpy python3-torch python3-pytest
	python3-venv python3-pip python3-setuptools python3-wheel
	gnuplot-nox patchelf
	libhiredis-dev redis-server redis-tools openssl curl
)

die() {
	echo "setup.sh: error: $*" >&2
	exit 1
}

check_only=0
case "${1:-}" in
--check) check_only=1 ;;
"") ;;
*) die "unknown argument '$1' (usage: $0 [--check])" ;;
esac

command -v dpkg-query >/dev/null 2>&1 ||
	die "dpkg-query not found: this project targets Debian 12 (bookworm)"

# Print the packages that are not fully installed.  dpkg-query prints
# nothing usable for a package it has never heard of (and exits non-zero),
# so ask for each one's status and treat anything but "installed" as missing.
missing_packages() {
	local pkg status
	# One dpkg-query call for all of them keeps the fast path fast.
	declare -A have=()
	while IFS=' ' read -r pkg status; do
		[ "$status" = installed ] && have["${pkg%%:*}"]=1
	done < <(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${PACKAGES[@]}" 2>/dev/null || true)
	for pkg in "${PACKAGES[@]}"; do
		[ -n "${have[$pkg]:-}" ] || echo "$pkg"
	done
}

mapfile -t missing < <(missing_packages)

if [ "${#missing[@]}" -gt 0 ]; then
	if [ "$check_only" = 1 ]; then
		die "missing packages: ${missing[*]} (run scripts/setup.sh or make setup)"
	fi
	echo "setup.sh: installing missing packages: ${missing[*]}"
	SUDO=()
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null 2>&1 ||
			die "not root and sudo is not available; as root run: apt-get install -y --no-install-recommends ${missing[*]}"
		SUDO=(sudo)
	fi
	export DEBIAN_FRONTEND=noninteractive
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get -o Acquire::Retries=3 update ||
		die "apt-get update failed"
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get -o Acquire::Retries=3 install -y --no-install-recommends "${missing[@]}" ||
		die "apt-get install failed for: ${missing[*]}"
	mapfile -t still < <(missing_packages)
	[ "${#still[@]}" -eq 0 ] || die "still not installed after apt-get: ${still[*]}"
fi

# The module is built against the newest installed Debian 6.1 headers (never
# `uname -r`: the host runs some other kernel) and the VM boots the kernel of
# exactly that ABI, so both must exist for the same version.  The Makefile
# picks the version the same way (sort -V, highest wins).
hdr=$(ls -d /usr/src/linux-headers-6.1.*-amd64 2>/dev/null | sort -V | tail -n 1 || true)
[ -n "$hdr" ] && [ -d "$hdr" ] ||
	die "no /usr/src/linux-headers-6.1.*-amd64 directory; install linux-headers-amd64 (Debian 12)"
kver=${hdr#/usr/src/linux-headers-}
[ -f "/boot/vmlinuz-$kver" ] ||
	die "headers for $kver are installed but /boot/vmlinuz-$kver is missing; install linux-image-$kver (linux-image-amd64 and linux-headers-amd64 must be at the same version)"
[ -r "/boot/vmlinuz-$kver" ] ||
	die "/boot/vmlinuz-$kver is not readable by $(id -un); QEMU needs to read it"
[ -f /usr/src/linux-source-6.1.tar.xz ] ||
	die "/usr/src/linux-source-6.1.tar.xz is missing; install linux-source-6.1"

exit 0
