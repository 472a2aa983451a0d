// SPDX-License-Identifier: GPL-2.0
/*
 * remote_mac_bench: what the remote tier's page MAC costs (mac.h),
 * for `make bench`.  One thread seals and checks pages of 16 KiB and of
 * 2 MiB (a Llama-8B page) with and without a key, side by side in one run:
 * the rate is page bytes per second of the thread's own CPU time (one
 * core, whatever else the machine runs), medians of 5 runs, and the MAC's
 * share is the keyed rate against the unkeyed one (XXH3 alone).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include "page.h"

#define RUNS		5
#define BYTES_PER_RUN	(512ull << 20)	/* page bytes sealed (or checked) a run */
#define WANT_GBS	5.0		/* the floor for the keyed check */

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Median GB/s of sealing (check = 0) or checking @val @n times a run. */
static double rate(const struct kvsd_rpage_id *id, uint8_t *val, const struct kvs_key *key,
		   int check)
{
	size_t len = kvsd_rpage_value_len(id);
	uint64_t n = BYTES_PER_RUN / id->geom.page_bytes, i;
	double r[RUNS], t0;
	int run;

	for (run = 0; run < RUNS; run++) {
		t0 = cpu_s();
		for (i = 0; i < n; i++) {
			if (check ? kvsd_rpage_check(val, len, id, key) != KVSD_RPAGE_OK :
				    kvsd_rpage_seal(val, id, key) != 0) {
				fprintf(stderr, "remote_mac_bench: %s failed\n",
					check ? "check" : "seal");
				exit(1);
			}
		}
		r[run] = n * (double)id->geom.page_bytes / (cpu_s() - t0) / 1e9;
	}
	qsort(r, RUNS, sizeof(r[0]), cmp_double);
	return r[RUNS / 2];
}

int main(void)
{
	static const struct { const char *name; uint32_t layers, heads, dim, tokens; } sizes[] = {
		{ "16 KiB", 2, 2, 64, 16 },	/* 2 x 2 x 64 x 16 x 2 (K, V) x 2 bytes */
		{ "2 MiB", 32, 8, 128, 16 },	/* Llama-8B: 32 layers, 8 KV heads, bf16 */
	};
	char dir[] = "/tmp/remote_mac_bench_XXXXXX", path[64], err[300];
	struct kvs_key key = { { 1, 2, 3, 4 } };
	struct kvsd_rmac *mac;
	unsigned int s, i;
	int low = 0;
	FILE *f;

	if (!mkdtemp(dir))
		return 1;
	snprintf(path, sizeof(path), "%s/key", dir);
	f = fopen(path, "w");
	for (i = 0; f && i < KVSD_RMAC_KEY; i++)
		fprintf(f, "%02x", (i * 37 + 11) & 0xff);
	if (!f || fclose(f) || chmod(path, 0600) ||
	    kvsd_rmac_new(&mac, path, NULL, err, sizeof(err))) {
		fprintf(stderr, "remote_mac_bench: key: %s\n", err);
		return 1;
	}
	unlink(path);
	rmdir(dir);
	printf("remote tier page MAC (Poly1305, one-time key from ChaCha20; one core's "
	       "CPU time, medians of %d runs):\n", RUNS);
	printf("  %-8s %14s %14s %14s %14s %8s\n", "page", "seal, no key", "seal, MAC",
	       "check, no key", "check, MAC", "ratio");
	for (s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		struct kvs_geometry g = {
			.n_layers = sizes[s].layers, .n_kv_heads = sizes[s].heads,
			.head_dim = sizes[s].dim, .tokens_per_page = sizes[s].tokens,
			.dtype = KVS_DTYPE_BF16,
		};
		struct kvsd_rpage_id plain, keyed;
		double sp, sk, cp, ck;
		uint8_t *val;

		g.page_bytes = 2ull * g.n_layers * g.n_kv_heads * g.head_dim *
			       g.tokens_per_page * 2;
		kvsd_rpage_id_init(&plain, "bench", 1000, 1, &g, NULL);
		kvsd_rpage_id_init(&keyed, "bench", 1000, 1, &g, mac);
		val = malloc(kvsd_rpage_value_len(&keyed));
		if (!val)
			return 1;
		for (i = 0; i < g.page_bytes; i++)
			val[KVSD_RPAGE_HDR + i] = (uint8_t)(i * 131 + 7);
		sp = rate(&plain, val, &key, 0);
		cp = rate(&plain, val, &key, 1);
		sk = rate(&keyed, val, &key, 0);
		ck = rate(&keyed, val, &key, 1);
		printf("  %-8s %9.2f GB/s %9.2f GB/s %9.2f GB/s %9.2f GB/s %7.2fx\n",
		       sizes[s].name, sp, sk, cp, ck, cp / ck);
		low |= sk < WANT_GBS || ck < WANT_GBS;
		free(val);
	}
	printf("  ratio: the unkeyed check's rate over the keyed one's; keyed seal and "
	       "check %s %.0f GB/s on one core\n", low ? "BELOW" : "at least", WANT_GBS);
	kvsd_rmac_free(mac);
	return 0;
}
