// SPDX-License-Identifier: GPL-2.0
/*
 * kvbench helpers: clock, medians, key generation, argument parsing.
 */
#include "kvbench.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const uint32_t bench_chains[N_CHAINS] = { 16, 256, MAX_CHAIN };

const char *const bench_op_names[N_OPS] = {
	[OP_ALLOC] = "alloc",
	[OP_PUBLISH] = "publish",
	[OP_LOOKUP_PUT] = "lookup+put",
	[OP_EVICT] = "evict-alloc",
};

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Sorts @samples in place.  The median ignores the odd slow repetition. */
uint64_t bench_median(uint64_t *samples, uint32_t n)
{
	qsort(samples, n, sizeof(*samples), cmp_u64);
	if (n % 2)
		return samples[n / 2];
	return (samples[n / 2 - 1] + samples[n / 2]) / 2;
}

/* splitmix64's finalizer: consecutive inputs give unrelated outputs. */
uint64_t bench_mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/*
 * A distinct 256-bit key per (chain, position), spread like the hash
 * chain a real client computes, so the arbiter's index sees the same
 * distribution of keys as in serving.
 */
void bench_key(struct kvs_key *key, uint64_t chain, uint32_t pos)
{
	uint64_t base = bench_mix64(chain) + 4ull * pos;
	int i;

	for (i = 0; i < 4; i++)
		key->w[i] = bench_mix64(base + i);
}

/* "1k", "64K", "1M", "4096": a positive count with a binary suffix. */
static int parse_size(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (!len || !isdigit((unsigned char)s[0]))
		return -EINVAL;
	for (i = 0; i < len && isdigit((unsigned char)s[i]); i++) {
		v = v * 10 + (s[i] - '0');
		if (v > KVS_MAX_POOL_PAGES)
			return -ERANGE;
	}
	if (i < len) {
		if (i + 1 != len)
			return -EINVAL;
		switch (s[i]) {
		case 'k': case 'K':
			v <<= 10;
			break;
		case 'm': case 'M':
			v <<= 20;
			break;
		default:
			return -EINVAL;
		}
	}
	if (!v || v > KVS_MAX_POOL_PAGES)
		return -ERANGE;
	*out = v;
	return 0;
}

/* Comma-separated sizes; returns how many, or -errno. */
int bench_parse_sizes(const char *s, uint64_t *out, int max)
{
	int n = 0, ret;

	for (;;) {
		size_t len = strcspn(s, ",");

		if (n == max)
			return -E2BIG;
		ret = parse_size(s, len, &out[n]);
		if (ret)
			return ret;
		n++;
		if (!s[len])
			return n;
		s += len + 1;
	}
}

int bench_parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
	unsigned long v;
	char *end;

	if (!isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	if (v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

void bench_results_init(struct bench_results *r)
{
	int p, o, c, s;

	memset(r, 0, sizeof(*r));
	for (p = 0; p < MAX_POOLS; p++)
		for (o = 0; o < N_OPS; o++)
			for (c = 0; c < N_CHAINS; c++)
				for (s = 0; s < N_SLOTS; s++)
					r->ns[p][o][c][s] = -1;
}
