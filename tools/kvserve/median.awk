# SPDX-License-Identifier: GPL-2.0
#
# median(list): the median of the numbers in list, a string of numbers
# separated by spaces (0 for an empty list); the mean of the middle two
# for an even count.  For scale.sh and burst.sh, which collect one list
# per table cell over the rounds: awk -f median.awk -f <program>.
# Insertion sort: a list holds a few rounds.
function median(list,   n, i, j, t, v) {
	n = split(list, v, " ")
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) {
			t = v[j]; v[j] = v[j - 1]; v[j - 1] = t
		}
	return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
