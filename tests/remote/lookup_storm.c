// SPDX-License-Identifier: GPL-2.0
/*
 * lookup_storm: N LOOKUPs of distinct random chains of CHAIN keys (4
 * unless given) on pool NAME of the arbiter at PATH, as fast as they go,
 * without waiting: what a client that misses everything does to a remote
 * tier.  Prints the hits.  Usage: lookup_storm PATH NAME N [CHAIN]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <kvshare/arbiter.h>

int main(int argc, char **argv)
{
	struct kvs_pool_attach info = { 0 };	/* flags are an input */
	struct kv_arbiter *arb;
	struct kvs_key *keys;
	uint32_t *pages;
	long i, n, chain = 4, hits = 0;
	int ret;

	if ((argc != 4 && argc != 5) || (n = atol(argv[3])) < 1 ||
	    (argc == 5 && ((chain = atol(argv[4])) < 1 || chain > 65536))) {
		fprintf(stderr, "usage: lookup_storm PATH NAME N [CHAIN (1..65536)]\n");
		return 2;
	}
	keys = calloc(chain, sizeof(*keys));
	pages = calloc(chain, sizeof(*pages));
	if (!keys || !pages) {
		fprintf(stderr, "lookup_storm: no memory for chains of %ld keys\n", chain);
		return 1;
	}
	ret = kv_arbiter_open(argv[1], 0, &arb);
	if (!ret)
		ret = kv_arbiter_attach(arb, argv[2], 0, &info);
	if (ret) {
		fprintf(stderr, "lookup_storm: %s: %s\n", argv[1], strerror(-ret));
		return 1;
	}
	for (i = 0; i < n; i++) {
		if (getrandom(keys, chain * sizeof(*keys), 0) !=
		    (ssize_t)(chain * sizeof(*keys)))
			return 1;
		ret = kv_lookup(arb, keys, chain, pages);
		if (ret < 0) {
			fprintf(stderr, "lookup_storm: LOOKUP: %s\n", strerror(-ret));
			return 1;
		}
		hits += ret;
		if (ret)
			kv_put(arb, pages, ret);
	}
	printf("%ld hits\n", hits);
	kv_arbiter_close(arb);
	free(keys);
	free(pages);
	return 0;
}
