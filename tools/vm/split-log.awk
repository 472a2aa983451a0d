# SPDX-License-Identifier: GPL-2.0
#
# Split the test VM's serial console log into per-suite result files and
# judge the guest run as a whole.  Reads the "KVSVM: " markers that
# tools/vm/guest-init.sh prints.
#
# Variables (awk -v):
#   dir        results directory
#   mode       "test": write <dir>/vm-<suite>.tap and <dir>/vm-kernel-log.tap
#              "bench": write <dir>/vmbench-<suite>.log
#   suites     space-separated names of the suites the guest was given
#   vm_status  exit status of `timeout qemu ...` (124/137: timed out)
#   vm_timeout the timeout in seconds, for the message
#
# In test mode each suite file gets the suite's output followed by
# "# exit status: N" (read by scripts/tap-summary.sh), or a synthetic
# "not ok" line when the suite never ran or never ended.  vm-kernel-log.tap
# holds one test point: ok when the guest booted, loaded and unloaded the
# module, finished every suite and its kernel log is clean; otherwise not
# ok, with the reasons as TAP comments.  Exits 1 when the run had problems.

function problem(msg) {
	problems[++nproblems] = msg
}

# Kernel log lines that mean the kernel found a bug in itself or in us.
# Word boundaries keep "BUG" from matching "DEBUG".
function bad_kernel_line(l) {
	return l ~ /(^|[^A-Za-z0-9_])(BUG|WARNING)([^A-Za-z0-9_]|$)/ ||
	       l ~ /Oops|refcount_t|general protection|Call Trace|Kernel panic|UBSAN:|KASAN:/
}

BEGIN {
	nsuites = split(suites, suite_list, " ")
	cur = ""
	in_dmesg = 0
}

{
	# Serial console noise: CR line ends, and the terminal resets that
	# firmware and QEMU emit before the first line of the guest.
	sub(/\r+$/, "")
	gsub(/\033\[[0-9;?]*[A-Za-z]/, "")
	gsub(/\033[A-Za-z]/, "")
	$0 = $0
	line = $0
}

# printk lines carry a "[    1.234567]" stamp (CONFIG_PRINTK_TIME=y in
# Debian); scan them wherever they appear on the console, even inside a
# suite's output, and scan everything between the DMESG markers.  Test
# output itself is not scanned: a test may well print "BUG" in a name.
(in_dmesg || line ~ /\[ *[0-9]+\.[0-9]+\]/) && line !~ /^KVSVM: / && bad_kernel_line(line) {
	key = line
	sub(/^.*\[ *[0-9]+\.[0-9]+\] */, "", key)	# same message on console and in dmesg: once
	if (!(key in bad_seen)) {
		bad_seen[key] = 1
		bad[++nbad] = line
	}
}

/^KVSVM: BOOTED/		{ booted = 1; next }
/^KVSVM: INSMOD OK/		{ insmod_ok = 1; next }
/^KVSVM: INSMOD FAILED/		{ insmod_failed = $0; next }
/^KVSVM: RMMOD OK/		{ rmmod_ok = 1; next }
/^KVSVM: RMMOD FAILED/		{ rmmod_failed = $0; next }
/^KVSVM: DMESG BEGIN/		{ in_dmesg = 1; next }
/^KVSVM: DMESG END/		{ in_dmesg = 0; dmesg_done = 1; next }
/^KVSVM: DONE/			{ done = 1; next }

/^KVSVM: BEGIN / {
	if (cur != "")
		close(out)
	cur = $3
	began[cur] = 1
	nbegan++
	out = dir "/" (mode == "bench" ? "vmbench-" cur ".log" : "vm-" cur ".tap")
	printf "" > out
	next
}

/^KVSVM: END / {
	name = $3
	st = $4
	sub(/^status=/, "", st)
	ended[name] = 1
	if (name == cur) {
		if (mode != "bench")
			print "# exit status: " st >> out
		close(out)
		cur = ""
	}
	next
}

cur != "" { print line >> out }

END {
	if (cur != "")
		close(out)

	if (vm_status == 124 || vm_status == 137)
		problem("the VM did not power off within " vm_timeout " s (guest hung or too slow)")
	else if (vm_status != 0)
		problem("QEMU exited with status " vm_status)
	if (!booted)
		problem("the guest never reached /init (kernel failed to boot)")
	else if (insmod_failed != "")
		problem("insmod kvshare.ko failed: " insmod_failed)
	else if (!insmod_ok)
		problem("insmod of kvshare.ko never reported")
	if (rmmod_failed != "")
		problem("rmmod kvshare failed after the suites (a reference leaked?): " rmmod_failed)
	if (nsuites == 0)
		problem("no suites were given to the guest (GUEST_TESTS is empty)")
	else if (nbegan == 0 && insmod_ok)
		problem("no suite ran")

	for (i = 1; i <= nsuites; i++) {
		s = suite_list[i]
		f = dir "/" (mode == "bench" ? "vmbench-" s ".log" : "vm-" s ".tap")
		if (!(s in began)) {
			if (mode != "bench") {
				print "1..1" > f
				print "not ok 1 " s " # did not run in the VM (see vm-kernel-log)" >> f
				close(f)
			}
			if (insmod_ok)
				problem("suite " s " never started")
		} else if (!(s in ended)) {
			if (mode != "bench") {
				print "not ok - " s ": no END marker (guest crashed, hung or timed out)" >> f
				close(f)
			}
			problem("suite " s " never ended (crash, hang or timeout)")
		}
	}

	if (booted && !done)
		problem("the guest never printed its DONE marker")
	else if (booted && !dmesg_done)
		problem("the guest kernel log was not dumped")
	if (nbad > 0)
		problem(nbad " bad line(s) in the guest kernel log (BUG/WARNING/Oops/refcount_t/...)")

	if (mode != "bench") {
		f = dir "/vm-kernel-log.tap"
		print "TAP version 13" > f
		print "1..1" >> f
		if (nproblems == 0) {
			print "ok 1 vm: guest ran every suite, module unloaded, kernel log clean" >> f
		} else {
			print "not ok 1 vm: guest run or kernel log not clean" >> f
			for (i = 1; i <= nproblems; i++)
				print "# " problems[i] >> f
		}
		for (i = 1; i <= nbad && i <= 100; i++)
			print "#   " bad[i] >> f
		close(f)
	}

	for (i = 1; i <= nproblems; i++)
		print "vm: PROBLEM: " problems[i] > "/dev/stderr"
	for (i = 1; i <= nbad && i <= 100; i++)
		print "vm:   " bad[i] > "/dev/stderr"
	exit(nproblems > 0 ? 1 : 0)
}
