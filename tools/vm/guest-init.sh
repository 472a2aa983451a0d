#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# /init of the kvshare test VM (busybox sh, PID 1).
#
# Loads kvshare.ko, runs every suite listed in /etc/kvshare-vm/suites (one
# "name<TAB>command" per line, written by mkinitramfs.sh), dumps the kernel
# log and powers off.  Everything goes to the serial console, and the host
# (tools/vm/split-log.awk) finds its way through it by the "KVSVM: " marker
# lines below, so their format is an interface: change both sides together.
#
#   KVSVM: BOOTED <uname -r>
#   KVSVM: INSMOD OK | KVSVM: INSMOD FAILED status=<n>
#   KVSVM: BEGIN <suite>
#   ... the suite's stdout and stderr ...
#   KVSVM: END <suite> status=<exit status>
#   KVSVM: RMMOD OK | KVSVM: RMMOD FAILED status=<n>
#   KVSVM: DMESG BEGIN / ... dmesg ... / KVSVM: DMESG END
#   KVSVM: DONE
#
# No "set -e": PID 1 must reach poweroff whatever fails, or the host waits
# for its timeout instead of reading a result.

export PATH=/bin
export HOME=/tmp

# The kernel starts /init with no open files when the initramfs has no
# /dev/console node (we pack without mknod so packing needs no root), so
# mount devtmpfs first and take the console from there.
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tmpfs -o mode=1777 tmpfs /tmp
mkdir -p /dev/shm /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm	# shm_open()
mount -t devpts devpts /dev/pts 2>/dev/null
# The loopback, for the suites' own servers (redis-server, kvshared's tier
# to it).  The VM has no network card (run-vm.sh: -nic none), so nothing
# leaves the guest.
ip link set lo up

MODE="test"
SUITE_TIMEOUT=600
LIB_DIR=
[ -f /etc/kvshare-vm/config ] && . /etc/kvshare-vm/config
# Libraries packed for dlopen() by name (mkinitramfs.sh -L: the CUDA
# driver stand-in); the dynamic binaries' own libraries need no path.
[ -n "$LIB_DIR" ] && [ -d "$LIB_DIR" ] && export LD_LIBRARY_PATH="$LIB_DIR"

# Start on a fresh line: the console may hold a partial line of firmware
# output (terminal resets) before ours.
echo
echo "KVSVM: BOOTED $(uname -r) mode=$MODE"

insmod /lib/modules/kvshare.ko
st=$?
if [ "$st" -eq 0 ]; then
	echo "KVSVM: INSMOD OK"
	# kvshare.ko makes /dev/kvshare 0660 root:root and a real install's
	# udev rule gives it to group kvshare; there is no udev here, so do
	# what the rule does, with the VM's kvshare group (65533): the suites'
	# unprivileged "members" hold that group, their attackers do not.
	# The mode stays the module's: that is what the suites check.
	chgrp 65533 /dev/kvshare ||
		echo "KVSVM: cannot give /dev/kvshare to group 65533"
	ls -l /dev/kvshare 2>&1
else
	echo "KVSVM: INSMOD FAILED status=$st"
fi

# Suites run even when insmod failed only in bench mode (user-space
# benchmarks are still worth printing); in test mode a missing module would
# turn device tests into skips and hide the failure, so the host marks every
# suite as not run instead.
if [ "$st" -eq 0 ] || [ "$MODE" = bench ]; then
	tab=$(printf '\t')
	while IFS="$tab" read -r name cmd; do
		[ -n "$name" ] || continue
		echo "KVSVM: BEGIN $name"
		# A subshell in /tmp so a suite cannot change our cwd; timeout so
		# one hung suite cannot eat the whole VM budget.
		(cd /tmp && timeout -s KILL "$SUITE_TIMEOUT" sh -c "$cmd") </dev/null
		rc=$?
		echo "KVSVM: END $name status=$rc"
	done </etc/kvshare-vm/suites
fi

# Unloading proves every file was released: a leaked reference keeps the
# module busy and rmmod fails.  A suite that unloads the module (to test
# unload) must load it again from /lib/modules/kvshare.ko before it ends.
if [ "$st" -eq 0 ] && ! grep -q '^kvshare ' /proc/modules; then
	echo "KVSVM: RMMOD FAILED status=not-loaded (a suite unloaded kvshare and did not load it again)"
elif [ "$st" -eq 0 ]; then
	rmmod kvshare
	rc=$?
	if [ "$rc" -eq 0 ]; then
		echo "KVSVM: RMMOD OK"
	else
		echo "KVSVM: RMMOD FAILED status=$rc"
		lsmod
	fi
fi

echo "KVSVM: DMESG BEGIN"
dmesg
echo "KVSVM: DMESG END"
echo "KVSVM: DONE"
poweroff -f
# poweroff -f does not return; if it somehow does, do not let PID 1 exit
# (that panics, and panic=-1 reboots, which -no-reboot turns into an exit
# the host would have to tell apart from a real crash).
while :; do sleep 1000; done
