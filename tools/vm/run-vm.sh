#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Boot the Debian kernel in QEMU (TCG) with the kvshare initramfs, mirror the
# serial console to stdout and to a log file, then split the log into result
# files with split-log.awk.
#
# Usage:
#   run-vm.sh -K VMLINUZ -i INITRAMFS -l CONSOLE.LOG -d RESULTS_DIR
#             [-m test|bench] [-s "suite names"] [-T TIMEOUT_S]
#
# Exit status: 0 when the guest ran every suite, unloaded the module and its
# kernel log is clean; 1 otherwise (the reasons are printed and, in test
# mode, recorded in RESULTS_DIR/vm-kernel-log.tap).  Test failures inside
# the suites are not this script's business: they are in the vm-*.tap files
# for scripts/tap-summary.sh.
#
# Environment: KVS_VM_MEM (MiB, default 2048), KVS_VM_SMP (default 2),
# KVS_VM_APPEND (extra kernel command line), KVS_VM_QUIET=1 (do not mirror
# the console to stdout), KVS_VM_SHOW_DMESG=1 (mirror the guest's final
# dmesg dump too).
set -euo pipefail

die() {
	echo "run-vm.sh: error: $*" >&2
	exit 2
}

here=$(cd "$(dirname "$0")" && pwd)
kernel="" initrd="" log="" dir="" mode=test suites="" vm_timeout=600
while getopts "K:i:l:d:m:s:T:" opt; do
	case "$opt" in
	K) kernel=$OPTARG ;;
	i) initrd=$OPTARG ;;
	l) log=$OPTARG ;;
	d) dir=$OPTARG ;;
	m) mode=$OPTARG ;;
	s) suites=$OPTARG ;;
	T) vm_timeout=$OPTARG ;;
	*) die "bad option (see the usage at the top of $0)" ;;
	esac
done
[ -n "$kernel" ] && [ -n "$initrd" ] && [ -n "$log" ] && [ -n "$dir" ] ||
	die "-K, -i, -l and -d are required"
[ -r "$kernel" ] || die "cannot read kernel $kernel (install linux-image-amd64: make setup)"
[ -r "$initrd" ] || die "cannot read initramfs $initrd"
command -v qemu-system-x86_64 >/dev/null ||
	die "qemu-system-x86_64 not found (install qemu-system-x86: make setup)"

mkdir -p "$dir" "$(dirname "$log")"

# TCG only: KVM is not usable on the project's machines (and -cpu host
# aborts there).  -cpu max gives the guest every feature TCG emulates.
# log_buf_len: suites that provoke many kernel messages must not push an
# early WARNING out of the ring buffer before the final dmesg dump.
# No oops=panic / panic_on_warn: after a splat the guest carries on, so the
# other suites still run and the splat is reported from the log.
append="console=ttyS0 panic=-1 quiet log_buf_len=4M ${KVS_VM_APPEND:-}"
qemu=(
	qemu-system-x86_64
	-accel tcg -cpu max
	-m "${KVS_VM_MEM:-2048}" -smp "${KVS_VM_SMP:-2}"
	-kernel "$kernel" -initrd "$initrd"
	-append "$append"
	-nographic -no-reboot
	-nic none
)

# One boot; sets vm_status.  The console goes to "$log" and, unless
# KVS_VM_QUIET=1, to stdout.
boot() {
	local filter
	set +e
	# stdin from /dev/null: QEMU must not grab a terminal or wait on CI's stdin.
	if [ "${KVS_VM_QUIET:-0}" = 1 ]; then
		timeout --kill-after=10 "$vm_timeout" "${qemu[@]}" </dev/null >"$log" 2>&1
		vm_status=$?
	else
		# The guest's kernel log dump is long; it stays in the log file and
		# bad lines are reported below, so the mirror skips it unless asked.
		filter='/^KVSVM: DMESG BEGIN/,/^KVSVM: DMESG END/d'
		[ "${KVS_VM_SHOW_DMESG:-0}" = 1 ] && filter=''
		timeout --kill-after=10 "$vm_timeout" "${qemu[@]}" </dev/null 2>&1 | tee "$log" |
			sed -u -e "$filter"
		vm_status=${PIPESTATUS[0]}
	fi
	set -e
}

echo "run-vm.sh: booting $(basename "$kernel") (TCG, timeout ${vm_timeout}s), console log: $log"
start=$(date +%s)
boot
# QEMU 7.2's TCG very rarely segfaults by itself (seen about once in 60
# boots here).  A QEMU killed by a signal is a host-side failure, not a guest
# result (a guest panic makes QEMU exit 0 through -no-reboot; our timeout
# gives 124, or 137 after --kill-after), so boot once more and keep the
# first log for the record.
if [ "$vm_status" -gt 128 ] && [ "$vm_status" -ne 137 ]; then
	echo "run-vm.sh: warning: QEMU died with status $vm_status (signal $((vm_status - 128))); booting again" >&2
	mv -f "$log" "$log.qemu-died"
	boot
fi
echo "run-vm.sh: VM exited with status $vm_status after $(($(date +%s) - start)) s"

awk -v dir="$dir" -v mode="$mode" -v suites="$suites" \
	-v vm_status="$vm_status" -v vm_timeout="$vm_timeout" \
	-f "$here/split-log.awk" "$log"
