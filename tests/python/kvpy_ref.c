// SPDX-License-Identifier: GPL-2.0
/*
 * kvpy_ref: libkv driven from C, for the Python suite to compare against.
 * The suite runs the same inputs through the binding and expects the very
 * same output, line for line.
 *
 *   kvpy_ref keys ALGO TPP SALT|- [EXTRA...]   tokens on stdin (one line);
 *       prints each full page's key as 64 hex digits (the key's 32 bytes)
 *   kvpy_ref radix TPP                         a tree trace on stdin
 *   kvpy_ref prefix POOL SALT                  a prefix-cache trace on stdin,
 *       two clients (two handles) on pool POOL of $KVSHARE_ARBITER
 *
 * Trace lines (numbers separated by blanks, '|' between token and page
 * lists); the output line of each is given after "->":
 *   radix:  M tok...            -> M len page...      (node handle: the Mth M)
 *           I tok... | page...  -> I present
 *           L h / U h           -> L delta / U delta
 *           E n                 -> E evicted released-page...
 *           S                   -> S evictable protected total nodes
 *   prefix: R c nmatch tok...   -> R cached_len page...  (match, reserve all
 *                                  tokens, cache_finished_req)
 *           P c tok...          -> P len page...      (match_prefix)
 *           E c n               -> E evicted
 *           S c                 -> S local remote lookups published dups allocated
 *                                  evictions put errors
 *           X                   -> X free owned shared cached held
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvshare/arbiter.h>
#include <kvshare/blockhash.h>
#include <kvshare/prefix.h>
#include <kvshare/req_table.h>

#define MAX_NUMS	(1u << 20)
#define MAX_NODES	65536

static uint32_t nums[MAX_NUMS], nums2[MAX_NUMS], out[MAX_NUMS];
static char line[1u << 24];

/* Parse blank-separated numbers of @s into @v; stop at '|' (its position in *@rest). */
static size_t parse(char *s, uint32_t *v, char **rest)
{
	size_t n = 0;
	char *end;

	*rest = NULL;
	for (;;) {
		while (*s == ' ' || *s == '\t')
			s++;
		if (*s == '|') {
			*rest = s + 1;
			return n;
		}
		if (!*s || *s == '\n')
			return n;
		v[n++] = (uint32_t)strtoul(s, &end, 10);
		if (end == s)
			return n;
		s = end;
	}
}

static void print_list(const char *tag, long first, const uint32_t *v, size_t n)
{
	size_t i;

	printf("%s %ld", tag, first);
	for (i = 0; i < n; i++)
		printf(" %u", v[i]);
	putchar('\n');
}

static int cmd_keys(int argc, char **argv)
{
	struct kv_block_hasher h;
	struct kv_extra ex[16];
	struct kvs_key *keys;
	unsigned int algo = strcmp(argv[0], "xxh3") ? KV_HASH_SHA256 : KV_HASH_XXH3;
	const char *salt = strcmp(argv[2], "-") ? argv[2] : NULL;
	char *rest;
	size_t n, i, j;
	long got;
	int k;

	if (kv_hasher_init_algo(&h, algo, salt, salt ? strlen(salt) : 0,
				(uint32_t)atoi(argv[1])))
		return 1;
	for (k = 3; k < argc && k - 3 < 16; k++)
		ex[k - 3] = (struct kv_extra){ argv[k], strlen(argv[k]) };
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	n = parse(line, nums, &rest);
	keys = calloc(n + 1, sizeof(*keys));
	got = kv_hash_chain(&h, NULL, nums, n, ex, argc - 3, keys);
	if (got < 0)
		return 1;
	for (i = 0; i < (size_t)got; i++) {
		const unsigned char *b = (const unsigned char *)&keys[i];

		for (j = 0; j < sizeof(keys[i]); j++)
			printf("%02x", b[j]);
		putchar('\n');
	}
	free(keys);
	return 0;
}

static size_t n_rel;

static void rel(void *priv, const uint32_t *pages, uint32_t n, unsigned int flags)
{
	memcpy(out + n_rel, pages, n * sizeof(*pages));
	n_rel += n;
}

static int cmd_radix(uint32_t tpp)
{
	struct kv_radix_ops ops = { .release = rel };
	static struct kv_radix_node *nodes[MAX_NODES];
	struct kv_radix_match m;
	struct kv_radix *t;
	size_t n_nodes = 0, n, n2;
	char *rest;

	if (kv_radix_create(tpp, &ops, &t))
		return 1;
	while (fgets(line, sizeof(line), stdin)) {
		char c = line[0];

		n = parse(line + 1, nums, &rest);
		switch (c) {
		case 'M':
			if (kv_radix_match_prefix(t, nums, n, out, &m))
				return 1;
			nodes[n_nodes++ % MAX_NODES] = m.last_node;
			print_list("M", (long)m.len, out, m.n_pages);
			break;
		case 'I':
			n2 = rest ? parse(rest, nums2, &rest) : 0;
			(void)n2;
			printf("I %ld\n", kv_radix_insert(t, nums, n, nums2, 0, NULL));
			break;
		case 'L':
			printf("L %ld\n", kv_radix_lock(t, nodes[nums[0]]));
			break;
		case 'U':
			printf("U %ld\n", kv_radix_unlock(t, nodes[nums[0]]));
			break;
		case 'E':
			n_rel = 0;
			n = kv_radix_evict(t, nums[0]);
			print_list("E", (long)n, out, n_rel);
			break;
		case 'S':
			printf("S %zu %zu %zu %zu\n", kv_radix_evictable_pages(t),
			       kv_radix_protected_pages(t), kv_radix_total_pages(t),
			       kv_radix_node_count(t));
			break;
		}
		if (kv_radix_check(t)) {
			printf("CHECK FAILED\n");
			return 1;
		}
	}
	kv_radix_destroy(t);
	return 0;
}

struct client {
	struct kv_pool *pool;
	struct kv_prefix_cache *pc;
	struct kv_req_table *rt, *scratch;
};

static int cmd_prefix(const char *pool, const char *salt)
{
	struct kv_prefix_config cfg = { .salt = salt, .salt_len = strlen(salt) };
	struct client cl[2];
	struct kvs_pool_stats st;
	int i;

	for (i = 0; i < 2; i++) {
		const struct kvs_pool_attach *info;

		if (kv_pool_open(NULL, pool, 0, 0, &cl[i].pool))
			return 1;
		info = kv_pool_info(cl[i].pool);
		if (kv_prefix_create(kv_pool_arbiter(cl[i].pool), info, &cfg, &cl[i].pc) ||
		    kv_req_table_create(16, 131072, info->geom.tokens_per_page, &cl[i].rt) ||
		    kv_req_table_create(1, 131072, info->geom.tokens_per_page, &cl[i].scratch))
			return 1;
	}
	while (fgets(line, sizeof(line), stdin)) {
		char c = line[0], *rest;
		size_t n = parse(line + 1, nums, &rest);
		struct client *k = &cl[nums[0] & 1];
		uint32_t tpp = kv_radix_tokens_per_page(kv_prefix_tree(k->pc)), j;
		struct kv_radix_req r = { .tokens = nums + 2 };
		const struct kv_prefix_stats *s;
		long got;
		int ret;

		switch (c) {
		case 'R':
			r.slot = kv_req_alloc(k->rt);
			got = kv_prefix_match(k->pc, k->rt, &r, nums[1]);
			if (got < 0) {
				kv_req_free(k->rt, r.slot);
				printf("R! %ld\n", got);
				break;
			}
			ret = kv_prefix_reserve(k->pc, k->rt, &r, n - 2);
			if (ret) {
				printf("R! %ld %d\n", got, ret);
				kv_prefix_abort(k->pc, k->rt, &r);
				break;
			}
			for (j = 0; j < (n - 2 + tpp - 1) / tpp; j++)
				out[j] = kv_req_page(k->rt, r.slot, j);
			print_list("R", got, out, j);
			if (kv_prefix_cache_finished(k->pc, k->rt, &r))
				return 1;
			break;
		case 'P':
			r.tokens = nums + 1;
			r.slot = kv_req_alloc(k->scratch);
			got = kv_prefix_match(k->pc, k->scratch, &r, n - 1);
			if (got < 0)
				return 1;
			for (j = 0; j < got / tpp; j++)
				out[j] = kv_req_page(k->scratch, r.slot, j);
			kv_radix_unlock(kv_prefix_tree(k->pc), r.last_node);
			kv_req_free(k->scratch, r.slot);
			print_list("P", got, out, j);
			break;
		case 'E':
			printf("E %zu\n", kv_radix_evict(kv_prefix_tree(k->pc), nums[1]));
			break;
		case 'S':
			s = kv_prefix_stats(k->pc);
			printf("S %llu %llu %llu %llu %llu %llu %llu %llu %llu\n",
			       (unsigned long long)s->local_hit_pages,
			       (unsigned long long)s->remote_hit_pages,
			       (unsigned long long)s->lookups,
			       (unsigned long long)s->published,
			       (unsigned long long)s->dup_published,
			       (unsigned long long)s->allocated,
			       (unsigned long long)s->alloc_evictions,
			       (unsigned long long)s->put_pages,
			       (unsigned long long)s->errors);
			break;
		case 'X':
			memset(&st, 0, sizeof(st));
			if (kv_arbiter_call(kv_pool_arbiter(cl[0].pool), KVS_IOC_POOL_STATS, &st))
				return 1;
			printf("X %llu %llu %llu %llu %llu\n", (unsigned long long)st.n_free,
			       (unsigned long long)st.n_owned, (unsigned long long)st.n_shared,
			       (unsigned long long)st.n_cached, (unsigned long long)st.n_held);
			break;
		}
		fflush(stdout);
	}
	for (i = 0; i < 2; i++) {
		kv_prefix_destroy(cl[i].pc);
		kv_req_table_destroy(cl[i].rt);
		kv_req_table_destroy(cl[i].scratch);
		kv_pool_close(cl[i].pool);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 5 && !strcmp(argv[1], "keys"))
		return cmd_keys(argc - 2, argv + 2);
	if (argc == 3 && !strcmp(argv[1], "radix"))
		return cmd_radix((uint32_t)atoi(argv[2]));
	if (argc == 4 && !strcmp(argv[1], "prefix"))
		return cmd_prefix(argv[2], argv[3]);
	fprintf(stderr, "usage: kvpy_ref keys ALGO TPP SALT|- [EXTRA...] | radix TPP | "
		"prefix POOL SALT\n");
	return 2;
}
