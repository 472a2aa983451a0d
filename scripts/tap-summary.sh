#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Sum the results of kselftest TAP files.
#
# Usage: scripts/tap-summary.sh FILE.tap...
#
# Prints a per-suite table, then as its LAST line exactly
#     N passed, N failed, N skipped
# which is the line CI reads.  Exits 1 if anything failed, else 0.
#
# Counting rules (top-level TAP lines only, as the 6.1 harness prints them):
#   "ok N ..."                      passed, unless it carries "# SKIP": skipped
#   "not ok N ..."                  failed
#   "1..0 # SKIP reason"            whole suite skipped (ksft_exit_skip): 1 skipped
#   no plan line, or fewer results  the suite crashed, hung or was killed:
#   than the plan                   1 extra failure
#   "# exit status: N"              (a trailer our runners append) N other than 0
#                                   or 4 (KSFT_SKIP) in a suite that shows no
#                                   other failure: 1 extra failure, so a binary
#                                   that dies after its last result still fails
#   a file that does not exist      1 failure
set -euo pipefail

if [ "$#" -eq 0 ]; then
	echo "tap-summary: no result files" >&2
	echo "0 passed, 0 failed, 0 skipped"
	exit 0
fi

awk '
function flush(   extra, note, name) {
	if (file == "")
		return
	extra = 0
	note = ""
	if (!plan_seen) {
		extra = 1
		note = "CRASHED: no plan line"
	} else if (plan_n == 0 && nres == 0) {
		# "1..0": the binary skipped itself as a whole.
		if (fail == 0) {
			skip++
			note = "skipped as a whole"
		}
	} else if (nres < plan_n) {
		extra = 1
		note = sprintf("CRASHED: %d of %d results", nres, plan_n)
	}
	if (!extra && fail == 0 && exit_status != "" && exit_status != 0 && exit_status != 4) {
		extra = 1
		note = "exit status " exit_status
	}
	fail += extra
	if (forced_note != "")
		note = forced_note
	name = file
	sub(/^.*\//, "", name)
	sub(/\.tap$/, "", name)
	printf "  %-32s %6d %6d %6d  %s\n", name, pass, fail, skip, note
	tpass += pass; tfail += fail; tskip += skip
}
function start(f) {
	file = f
	pass = fail = skip = nres = 0
	plan_seen = 0
	plan_n = 0
	exit_status = ""
	forced_note = ""
}
BEGIN {
	printf "  %-32s %6s %6s %6s\n", "suite", "pass", "fail", "skip"
	left = 0
	for (i = 1; i < ARGC; i++) {
		r = (getline line < ARGV[i])
		if (r > 0) {
			close(ARGV[i])
			left++
			continue
		}
		# Missing, unreadable (r < 0) or empty (r == 0) result file: the
		# suite never reported.  Count it here, since awk never sees an
		# empty file at FNR == 1, and keep it out of the main loop.
		start(ARGV[i])
		if (r < 0) {
			plan_seen = 1
			fail = 1
			forced_note = "MISSING result file"
		}
		flush()
		file = ""
		delete ARGV[i]
	}
	file = ""
	# With every operand deleted awk would read stdin; go straight to END.
	if (left == 0)
		exit
}
FNR == 1 { flush(); start(FILENAME) }
{ sub(/\r+$/, "") }
/^not ok( |$)/ {
	fail++; nres++
	next
}
/^ok( |$)/ {
	if (toupper($0) ~ /#[ \t]*SKIP/)
		skip++
	else
		pass++
	nres++
	next
}
/^1\.\.[0-9]+/ {
	# The first plan counts; a later one (a second TAP stream) is ignored.
	if (!plan_seen) {
		plan_seen = 1
		plan_n = substr($1, 4) + 0
	}
	next
}
/^# exit status: -?[0-9]+/ {
	exit_status = $4 + 0
	next
}
END {
	flush()
	printf "%d passed, %d failed, %d skipped\n", tpass, tfail, tskip
	exit(tfail > 0 ? 1 : 0)
}
' "$@"
