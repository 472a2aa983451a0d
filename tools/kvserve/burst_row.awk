# SPDX-License-Identifier: GPL-2.0
#
# burst.sh's table row of mode m (-v m=, -v name=) from its rounds
# ($BUILD/serve-burst.raw, lines "mode ttft_median ttft_p90 ttft_max
# computed dups rps"): the median of each column over the rounds.  Needs
# median.awk (awk -f median.awk -f burst_row.awk).
$1 == m { for (c = 2; c <= 7; c++) vals[c] = vals[c] " " $c }
END {
	printf "| %s | %.1f | %.1f | %.1f | %.0f | %.0f | %.2f |\n", name,
	       median(vals[2]), median(vals[3]), median(vals[4]), median(vals[5]),
	       median(vals[6]), median(vals[7])
}
