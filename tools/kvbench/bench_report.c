// SPDX-License-Identifier: GPL-2.0
/*
 * kvbench output: a table for people, JSON for scripts.  A row is one
 * (pool size, operation, chain length); chains longer than the pool have
 * no row.
 */
#include "kvbench.h"

#include <stdio.h>

static const char *pool_label(uint64_t n, char *buf, size_t len)
{
	if (n >= (1u << 20) && !(n % (1u << 20)))
		snprintf(buf, len, "%lluM", (unsigned long long)(n >> 20));
	else if (n >= 1024 && !(n % 1024))
		snprintf(buf, len, "%lluk", (unsigned long long)(n >> 10));
	else
		snprintf(buf, len, "%llu", (unsigned long long)n);
	return buf;
}

static bool row_exists(const struct bench_results *r, int p, int c)
{
	return bench_chains[c] <= r->pools[p];
}

static void print_ns(double ns)
{
	if (ns < 0)
		printf(" %13s", "-");
	else
		printf(" %13.1f", ns);
}

const char *const bench_slot_names[N_SLOTS] = {
	"core", "ioctl", "uring", "daemon", "socket", "core+chan"
};

static void print_notes(const struct bench_results *r, int p)
{
	char label[24];
	int s;

	for (s = 0; s < N_SLOTS; s++)
		if (r->note[p][s])
			printf("# pool %s, %s: %s\n",
			       pool_label(r->pools[p], label, sizeof(label)),
			       bench_slot_names[s], r->note[p][s]);
}

static void print_ratio(const double *ns, int slot)
{
	if (ns[SLOT_CORE] > 0 && ns[slot] >= 0)
		printf(" %11.2f", ns[slot] / ns[SLOT_CORE]);
	else
		printf(" %11s", "-");
}

static void print_header(const struct bench_view *v)
{
	char col[32];
	int i;

	printf("%6s  %-12s %5s", "POOL", "OPERATION", "CHAIN");
	if (v->n == 1) {
		printf(" %13s %13s\n", "NS/PAGE", "NS/CALL");
		return;
	}
	for (i = 0; i < v->n; i++) {
		snprintf(col, sizeof(col), "%s_NS/PAGE", bench_slot_names[v->slots[i]]);
		printf(" %13s", col);
	}
	for (i = 1; i < v->n; i++) {
		snprintf(col, sizeof(col), "%s/core", bench_slot_names[v->slots[i]]);
		printf(" %11s", col);
	}
	putchar('\n');
}

void bench_report_table(const struct bench_results *r, const struct bench_view *v)
{
	char label[24];
	int p, o, c, i;

	print_header(v);
	for (p = 0; p < r->n_pools; p++) {
		for (o = 0; o < N_OPS; o++) {
			for (c = 0; c < N_CHAINS; c++) {
				const double *ns = r->ns[p][o][c];

				if (!row_exists(r, p, c))
					continue;
				printf("%6s  %-12s %5u",
				       pool_label(r->pools[p], label, sizeof(label)),
				       bench_op_names[o], bench_chains[c]);
				print_ns(ns[SLOT_CORE]);
				if (v->n == 1) {
					print_ns(ns[SLOT_CORE] < 0 ? -1 :
						 ns[SLOT_CORE] * bench_chains[c]);
					putchar('\n');
					continue;
				}
				for (i = 1; i < v->n; i++)
					print_ns(ns[v->slots[i]]);
				for (i = 1; i < v->n; i++)
					print_ratio(ns, v->slots[i]);
				putchar('\n');
			}
		}
		print_notes(r, p);
	}
}

static void json_row(const struct bench_results *r, const struct bench_view *v,
		     int p, int o, int c, bool *first)
{
	const double *ns = r->ns[p][o][c];
	int i;

	printf("%s\n    {\"pool_pages\": %llu, \"op\": \"%s\", \"chain\": %u",
	       *first ? "" : ",", (unsigned long long)r->pools[p],
	       bench_op_names[o], bench_chains[c]);
	*first = false;
	for (i = 0; i < v->n; i++) {
		int s = v->slots[i];

		if (ns[s] < 0)
			continue;
		printf(", \"%s_ns_per_page\": %.1f", bench_slot_names[s], ns[s]);
		if (s != SLOT_CORE && ns[SLOT_CORE] > 0)
			printf(", \"%s_ratio\": %.3f", bench_slot_names[s],
			       ns[s] / ns[SLOT_CORE]);
	}
	putchar('}');
}

/* Why a pool has no numbers; the texts are ours or strerror's: no quotes. */
static void json_notes(const struct bench_results *r)
{
	bool first = true;
	int p, s;

	for (p = 0; p < r->n_pools; p++)
		for (s = 0; s < N_SLOTS; s++) {
			if (!r->note[p][s])
				continue;
			printf("%s\n    {\"pool_pages\": %llu, \"target\": \"%s\", "
			       "\"why\": \"%s\"}", first ? "" : ",",
			       (unsigned long long)r->pools[p], bench_slot_names[s],
			       r->note[p][s]);
			first = false;
		}
}

void bench_report_json(const struct bench_results *r, const struct bench_view *v)
{
	bool first = true;
	int p, o, c;

	printf("{\n  \"mode\": \"%s\",\n  \"reps\": %u,\n"
	       "  \"statistic\": \"median\",\n  \"unit\": \"ns_per_page\",\n",
	       v->mode, r->reps);
	printf("  \"rows\": [");
	for (p = 0; p < r->n_pools; p++)
		for (o = 0; o < N_OPS; o++)
			for (c = 0; c < N_CHAINS; c++)
				if (row_exists(r, p, c))
					json_row(r, v, p, o, c, &first);
	printf("\n  ],\n  \"skipped\": [");
	json_notes(r);
	printf("\n  ]\n}\n");
}
