# SPDX-License-Identifier: GPL-2.0
#
# scale.sh's rounds ($BUILD/<name>.raw) to one line per worker count: the
# median of each column, then of the three ratios (throughput, prefix
# memory, CPU work), each taken within a round.  Columns in: 1 workers,
# 2-9 shared, 10-17 no-share, as scale.sh's run() prints them.  Needs
# median.awk (awk -f median.awk -f scale_medians.awk).
{
	if (!($1 in seen)) { seen[$1] = 1; order[++k] = $1 }
	for (c = 2; c <= 17; c++)
		vals[$1 "," c] = vals[$1 "," c] " " $c
	vals[$1 ",t"] = vals[$1 ",t"] " " ($10 > 0 ? $2 / $10 : 0)
	vals[$1 ",m"] = vals[$1 ",m"] " " ($15 > 0 ? $7 / $15 : 0)
	vals[$1 ",w"] = vals[$1 ",w"] " " ($9 > 0 ? $17 / $9 : 0)
}
END {
	for (i = 1; i <= k; i++) {
		n = order[i]
		line = n
		for (c = 2; c <= 17; c++)
			line = line " " median(vals[n "," c])
		print line, median(vals[n ",t"]), median(vals[n ",m"]), median(vals[n ",w"])
	}
}
