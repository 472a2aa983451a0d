// SPDX-License-Identifier: GPL-2.0
/*
 * Unit tests of the radix tree (<kvshare/radix.h>) and the request-to-
 * token tables (<kvshare/req_table.h>): every operation and its edges.
 * No arbiter here; pages are plain numbers and the release callback
 * records what the tree gives back.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvshare/radix.h>
#include "kselftest_harness.h"

/* Everything the tree gave back, in order (each test is its own process). */
#define LOG_MAX		(1u << 20)
static uint32_t rel_pages[LOG_MAX];
static unsigned int rel_flags[LOG_MAX];
static size_t rel_n;

static void rel(void *priv, const uint32_t *pages, uint32_t n, unsigned int flags)
{
	uint32_t i;

	(void)priv;
	for (i = 0; i < n && rel_n < LOG_MAX; i++) {
		rel_flags[rel_n] = flags;
		rel_pages[rel_n++] = pages[i];
	}
}

static struct kv_radix *mk(uint32_t tpp)
{
	struct kv_radix_ops ops = { .release = rel };
	struct kv_radix *t;

	return kv_radix_create(tpp, &ops, &t) ? NULL : t;
}

/* Pages first, first + 1, ... for the full pages of @n tokens. */
static long ins(struct kv_radix *t, const uint32_t *tok, size_t n, uint32_t first)
{
	static uint32_t pages[1 << 17];
	size_t i;

	for (i = 0; i < n / kv_radix_tokens_per_page(t); i++)
		pages[i] = first + i;
	return kv_radix_insert(t, tok, n, pages, 0, NULL);
}

static size_t match(struct kv_radix *t, const uint32_t *tok, size_t n,
		    uint32_t *pages, struct kv_radix_node **last)
{
	struct kv_radix_match m;

	if (kv_radix_match_prefix(t, tok, n, pages, &m))
		return (size_t)-1;
	if (last)
		*last = m.last_node;
	return m.len;
}

static void seq(uint32_t *v, size_t n, uint32_t start)
{
	size_t i;

	for (i = 0; i < n; i++)
		v[i] = start + i;
}

TEST(create_arguments)
{
	struct kv_radix_ops none = { 0 }, ops = { .release = rel };
	struct kv_radix *t;

	ASSERT_EQ(-EINVAL, kv_radix_create(0, &ops, &t));
	ASSERT_EQ(-EINVAL, kv_radix_create(4, &none, &t));
	ASSERT_EQ(-EINVAL, kv_radix_create(4, NULL, &t));
	ASSERT_EQ(0, kv_radix_create(4, &ops, &t));
	ASSERT_EQ(4, kv_radix_tokens_per_page(t));
	kv_radix_destroy(t);
	kv_radix_destroy(NULL);
}

/* Empty tree, empty keys, keys shorter than a page. */
TEST(empty_keys)
{
	struct kv_radix *t = mk(4);
	struct kv_radix_node *last = NULL;
	uint32_t tok[3] = { 1, 2, 3 }, pages[4];

	ASSERT_NE(NULL, t);
	ASSERT_EQ(0, match(t, tok, 0, pages, &last));
	ASSERT_EQ(kv_radix_root(t), last);
	ASSERT_EQ(0, match(t, tok, 3, pages, &last));
	ASSERT_EQ(0, ins(t, tok, 0, 100));
	ASSERT_EQ(0, ins(t, tok, 3, 100));	/* no full page: nothing */
	ASSERT_EQ(0, kv_radix_total_pages(t));
	ASSERT_EQ(0, kv_radix_node_count(t));
	ASSERT_EQ(0, kv_radix_peek(t, tok, 3, NULL));
	/* The root cannot be locked, unlocked or evicted. */
	ASSERT_EQ(0, kv_radix_lock(t, kv_radix_root(t)));
	ASSERT_EQ(0, kv_radix_unlock(t, kv_radix_root(t)));
	ASSERT_EQ(0, kv_radix_evict(t, 10));
	ASSERT_EQ(0, kv_radix_check(t));
	kv_radix_destroy(t);
	ASSERT_EQ(0, rel_n);
}

TEST(insert_then_match)
{
	struct kv_radix *t = mk(4);
	uint32_t tok[16], pages[4];
	struct kv_radix_node *last;

	seq(tok, 16, 1);
	ASSERT_EQ(0, ins(t, tok, 14, 10));		/* 3 full pages */
	ASSERT_EQ(3, kv_radix_total_pages(t));
	ASSERT_EQ(3, kv_radix_evictable_pages(t));
	ASSERT_EQ(12, match(t, tok, 14, pages, &last));
	ASSERT_EQ(10, pages[0]);
	ASSERT_EQ(11, pages[1]);
	ASSERT_EQ(12, pages[2]);
	ASSERT_EQ(1, kv_radix_node_count(t));
	/* The same key again: all present, nothing taken. */
	ASSERT_EQ(12, ins(t, tok, 12, 50));
	ASSERT_EQ(3, kv_radix_total_pages(t));
	ASSERT_EQ(12, match(t, tok, 12, pages, NULL));
	ASSERT_EQ(10, pages[0]);
	/* A longer key takes only its new page. */
	ASSERT_EQ(12, ins(t, tok, 16, 50));
	ASSERT_EQ(4, kv_radix_total_pages(t));
	ASSERT_EQ(16, match(t, tok, 16, pages, NULL));
	ASSERT_EQ(53, pages[3]);
	ASSERT_EQ(0, kv_radix_check(t));
	kv_radix_destroy(t);
	ASSERT_EQ(4, rel_n);
}

/*
 * A node of 6 pages, and a second key that leaves it after every token
 * offset: match splits where the match ends (on a page boundary), insert
 * adds the rest beside the old tail.
 */
static void split_at_every_offset(struct __test_metadata *_metadata, uint32_t tpp)
{
	uint32_t base[128], other[128], pages[16];
	size_t n = 6 * tpp, j, whole, i;

	seq(base, n, 1000);
	for (j = 0; j < n; j++) {
		struct kv_radix *t = mk(tpp);
		struct kv_radix_node *last;

		ASSERT_EQ(0, ins(t, base, n, 100));
		memcpy(other, base, sizeof(base));
		other[j] = 7;				/* diverge at token j */
		whole = j / tpp;			/* pages matched whole */

		ASSERT_EQ(whole * tpp, kv_radix_peek(t, other, n, NULL));
		ASSERT_EQ(1, kv_radix_node_count(t));	/* peek splits nothing */
		ASSERT_EQ(whole * tpp, match(t, other, n, pages, &last));
		for (i = 0; i < whole; i++)
			ASSERT_EQ(100 + i, pages[i]);
		ASSERT_EQ(whole ? 2 : 1, kv_radix_node_count(t));
		ASSERT_EQ(0, kv_radix_check(t));
		if (whole) {
			struct kv_radix_node_info ni;

			kv_radix_node_info(t, last, &ni);
			ASSERT_EQ(whole, ni.n_pages);
			ASSERT_EQ(0, ni.depth);
			ASSERT_EQ(1, ni.n_children);
		}

		ASSERT_EQ(whole * tpp, ins(t, other, n, 200));
		ASSERT_EQ(0, kv_radix_check(t));
		ASSERT_EQ(6 + 6 - whole, kv_radix_total_pages(t));
		ASSERT_EQ(whole ? 3 : 2, kv_radix_node_count(t));
		/* Both keys still read back whole, each with its own pages. */
		ASSERT_EQ(n, match(t, base, n, pages, NULL));
		for (i = 0; i < 6; i++)
			ASSERT_EQ(100 + i, pages[i]);
		ASSERT_EQ(n, match(t, other, n, pages, NULL));
		for (i = whole; i < 6; i++)
			ASSERT_EQ(200 + i, pages[i]);
		ASSERT_EQ(0, kv_radix_check(t));
		kv_radix_destroy(t);
	}
}

TEST(split_at_every_offset_p1)
{
	split_at_every_offset(_metadata, 1);
}

TEST(split_at_every_offset_p3)
{
	split_at_every_offset(_metadata, 3);
}

TEST(split_at_every_offset_p16)
{
	split_at_every_offset(_metadata, 16);
}

/* Insert of a key that ends inside a node splits it there, like SGLang. */
TEST(insert_prefix_splits)
{
	struct kv_radix *t = mk(2);
	struct kv_radix_node *last;
	struct kv_radix_node_info ni;
	uint32_t tok[10];

	seq(tok, 10, 1);
	ASSERT_EQ(0, ins(t, tok, 10, 0));
	ASSERT_EQ(4, kv_radix_insert(t, tok, 4, (uint32_t[]){ 9, 9 }, 0, &last));
	ASSERT_EQ(2, kv_radix_node_count(t));
	kv_radix_node_info(t, last, &ni);
	ASSERT_EQ(2, ni.n_pages);
	ASSERT_EQ(5, kv_radix_total_pages(t));
	ASSERT_EQ(0, kv_radix_check(t));
	kv_radix_destroy(t);
}

/* One token different anywhere: the match stops at that page. */
TEST(one_token_divergence)
{
	uint32_t a[40], b[40], pages[10];
	size_t j;

	seq(a, 40, 1);
	for (j = 0; j < 40; j++) {
		struct kv_radix *t = mk(4);

		memcpy(b, a, sizeof(a));
		b[j] += 1000;
		ASSERT_EQ(0, ins(t, a, 40, 0));
		ASSERT_EQ(j / 4 * 4, match(t, b, 40, pages, NULL));
		ASSERT_EQ(j / 4 * 4, ins(t, b, 40, 100));
		ASSERT_EQ(40, match(t, b, 40, pages, NULL));
		ASSERT_EQ(100 + j / 4, pages[j / 4]);
		ASSERT_EQ(40, match(t, a, 40, pages, NULL));
		ASSERT_EQ(j / 4, pages[j / 4]);
		ASSERT_EQ(0, kv_radix_check(t));
		kv_radix_destroy(t);
	}
}

/* Full pages only: the unaligned tail is never keyed or matched. */
TEST(page_unaligned_prompts)
{
	struct kv_radix *t = mk(4);
	uint32_t tok[11], pages[3];

	seq(tok, 11, 1);
	ASSERT_EQ(0, ins(t, tok, 10, 0));		/* 2 pages, 2 tokens dropped */
	ASSERT_EQ(2, kv_radix_total_pages(t));
	ASSERT_EQ(8, match(t, tok, 11, pages, NULL));
	ASSERT_EQ(8, match(t, tok, 9, pages, NULL));
	ASSERT_EQ(4, match(t, tok, 7, pages, NULL));
	ASSERT_EQ(8, ins(t, tok, 11, 5));		/* still 2 full pages */
	ASSERT_EQ(2, kv_radix_total_pages(t));
	ASSERT_EQ(0, kv_radix_check(t));
	kv_radix_destroy(t);
}

/* A chain of thousands of nodes: nothing recurses. */
static void deep_chain(struct __test_metadata *_metadata, uint32_t tpp)
{
	const size_t depth = tpp == 1 ? 10000 : 3000;
	size_t n = depth * tpp, i;
	uint32_t *tok = malloc(n * sizeof(*tok)), *pages = malloc(depth * 4);
	struct kv_radix *t = mk(tpp);
	struct kv_radix_node *last;
	FILE *null = fopen("/dev/null", "w");

	ASSERT_NE(NULL, tok);
	for (i = 0; i < n; i++)
		tok[i] = i % 7;
	/* Each insert adds one page under the previous: one node each. */
	for (i = 1; i <= depth; i++)
		ASSERT_EQ((i - 1) * tpp, ins(t, tok, i * tpp, 0));
	ASSERT_EQ(depth, kv_radix_node_count(t));
	ASSERT_EQ(n, match(t, tok, n, pages, &last));
	for (i = 0; i < depth; i++)
		ASSERT_EQ(i, pages[i]);
	ASSERT_EQ(0, kv_radix_check(t));
	ASSERT_EQ(0, kv_radix_print(t, null, 4));

	ASSERT_EQ(-(long)depth, kv_radix_lock(t, last));
	ASSERT_EQ(depth, kv_radix_protected_pages(t));
	ASSERT_EQ(0, kv_radix_evict(t, depth));
	ASSERT_EQ((long)depth, kv_radix_unlock(t, last));
	/* Evicting everything climbs the chain leaf by leaf. */
	ASSERT_EQ(depth, kv_radix_evict(t, 2 * depth));
	ASSERT_EQ(0, kv_radix_node_count(t));
	for (i = 0; i < depth; i++)
		ASSERT_EQ(depth - 1 - i, rel_pages[i]);	/* deepest first */
	ASSERT_EQ(0, kv_radix_check(t));

	for (i = 1; i <= depth; i++)
		ins(t, tok, i * tpp, 0);
	kv_radix_destroy(t);			/* releases a deep chain too */
	ASSERT_EQ(2 * depth, rel_n);
	fclose(null);
	free(tok);
	free(pages);
}

TEST(deep_chain_p1)
{
	deep_chain(_metadata, 1);
}

TEST(deep_chain_p8)
{
	deep_chain(_metadata, 8);
}

/* Locks go up to the root; evictable and protected stay exact. */
TEST(lock_sizes)
{
	struct kv_radix *t = mk(2);
	uint32_t a[8] = { 1, 1, 2, 2, 3, 3, 4, 4 }, b[8] = { 1, 1, 2, 2, 9, 9, 9, 9 };
	struct kv_radix_node *la, *lb, *mid;
	struct kv_radix_node_info ni;

	ASSERT_EQ(0, ins(t, a, 8, 0));
	ASSERT_EQ(4, ins(t, b, 8, 10));		/* split after 2 pages */
	ASSERT_EQ(6, kv_radix_total_pages(t));
	ASSERT_EQ(8, match(t, a, 8, NULL, &la));
	ASSERT_EQ(8, match(t, b, 8, NULL, &lb));
	ASSERT_EQ(4, match(t, a, 4, NULL, &mid));

	ASSERT_EQ(-4, kv_radix_lock(t, la));	/* a's 2 + shared 2 */
	ASSERT_EQ(4, kv_radix_protected_pages(t));
	ASSERT_EQ(2, kv_radix_evictable_pages(t));
	ASSERT_EQ(-2, kv_radix_lock(t, lb));	/* only b's own */
	ASSERT_EQ(0, kv_radix_lock(t, mid));	/* already protected */
	ASSERT_EQ(6, kv_radix_protected_pages(t));
	ASSERT_EQ(0, kv_radix_evictable_pages(t));
	kv_radix_node_info(t, mid, &ni);
	ASSERT_EQ(3, ni.lock_ref);
	ASSERT_EQ(0, kv_radix_evict(t, 100));
	ASSERT_EQ(0, kv_radix_check(t));

	ASSERT_EQ(0, kv_radix_unlock(t, mid));
	ASSERT_EQ(2, kv_radix_unlock(t, la));
	ASSERT_EQ(-EINVAL, kv_radix_unlock(t, la));	/* not locked now */
	ASSERT_EQ(2, kv_radix_evictable_pages(t));
	ASSERT_EQ(2, kv_radix_evict(t, 100));		/* a's tail only */
	ASSERT_EQ(4, kv_radix_protected_pages(t));
	ASSERT_EQ(4, kv_radix_unlock(t, lb));
	ASSERT_EQ(4, kv_radix_evictable_pages(t));
	ASSERT_EQ(0, kv_radix_protected_pages(t));
	ASSERT_EQ(0, kv_radix_check(t));
	kv_radix_destroy(t);
}

/* A locked node that is split leaves both halves locked. */
TEST(split_keeps_locks)
{
	struct kv_radix *t = mk(1);
	uint32_t a[6] = { 1, 2, 3, 4, 5, 6 }, b[6] = { 1, 2, 3, 9, 9, 9 };
	struct kv_radix_node *la, *lb;

	ASSERT_EQ(0, ins(t, a, 6, 0));
	ASSERT_EQ(6, match(t, a, 6, NULL, &la));
	kv_radix_lock(t, la);
	ASSERT_EQ(3, match(t, b, 6, NULL, &lb));	/* splits the locked node */
	ASSERT_EQ(6, kv_radix_protected_pages(t));
	ASSERT_EQ(0, kv_radix_check(t));
	ASSERT_EQ(6, kv_radix_unlock(t, la));		/* la still ends at 6 */
	ASSERT_EQ(6, kv_radix_evictable_pages(t));
	ASSERT_EQ(0, kv_radix_check(t));
	kv_radix_destroy(t);
}

/* Least recently used leaves first; a parent is examined once a leaf. */
TEST(evict_lru)
{
	struct kv_radix *t = mk(1);
	uint32_t a[4] = { 1, 2, 3, 4 }, b[4] = { 1, 2, 7, 8 }, c[2] = { 5, 5 };

	ASSERT_EQ(0, ins(t, a, 4, 10));		/* pages 10..13 */
	ASSERT_EQ(2, ins(t, b, 4, 20));		/* 22, 23 under [1 2] */
	ASSERT_EQ(0, ins(t, c, 2, 30));		/* 30, 31 */
	ASSERT_EQ(4, match(t, a, 4, NULL, NULL));	/* a is the newest */
	/* Oldest: b's tail, then c, then a's tail, then the shared part. */
	ASSERT_EQ(1, kv_radix_evict(t, 1));	/* trims b's leaf: exact */
	ASSERT_EQ(23, rel_pages[0]);
	ASSERT_EQ(3, kv_radix_evict(t, 3));
	ASSERT_EQ(22, rel_pages[1]);
	ASSERT_EQ(31, rel_pages[2]);
	ASSERT_EQ(30, rel_pages[3]);
	ASSERT_EQ(0, kv_radix_check(t));
	ASSERT_EQ(4, kv_radix_evict(t, 10));
	ASSERT_EQ(13, rel_pages[4]);
	ASSERT_EQ(12, rel_pages[5]);
	ASSERT_EQ(11, rel_pages[6]);		/* the shared part, once a leaf */
	ASSERT_EQ(10, rel_pages[7]);
	ASSERT_EQ(0, kv_radix_total_pages(t));
	ASSERT_EQ(0, kv_radix_node_count(t));
	ASSERT_EQ(0, kv_radix_check(t));
	kv_radix_destroy(t);
}

/* Flags travel with the pages, through splits, to release(). */
TEST(flags_reach_release)
{
	struct kv_radix *t = mk(1);
	uint32_t a[3] = { 1, 2, 3 }, b[3] = { 1, 2, 9 };

	ASSERT_EQ(0, kv_radix_insert(t, a, 3, (uint32_t[]){ 1, 2, 3 }, KV_RADIX_HELD, NULL));
	ASSERT_EQ(2, kv_radix_insert(t, b, 3, (uint32_t[]){ 0, 0, 4 }, 0, NULL));
	ASSERT_EQ(4, kv_radix_evict(t, 4));
	ASSERT_EQ(4, rel_n);
	ASSERT_EQ(3, rel_pages[0]);		/* a's tail is older */
	ASSERT_EQ(KV_RADIX_HELD, rel_flags[0]);
	ASSERT_EQ(4, rel_pages[1]);
	ASSERT_EQ(0, rel_flags[1]);
	ASSERT_EQ(KV_RADIX_HELD, rel_flags[2]);
	ASSERT_EQ(KV_RADIX_HELD, rel_flags[3]);
	kv_radix_destroy(t);
}

/* Children told apart by their whole first page, many of them. */
TEST(many_children)
{
	struct kv_radix *t = mk(4);
	uint32_t tok[8], pages[2];
	uint32_t i;

	for (i = 0; i < 3000; i++) {
		/* Same first token, different page: the table must compare all. */
		uint32_t k[8] = { 1, i, i >> 3, 5, i, 6, 7, 8 };

		ASSERT_EQ(0, ins(t, k, 8, 2 * i));
	}
	ASSERT_EQ(3000, kv_radix_node_count(t));
	for (i = 0; i < 3000; i += 7) {
		uint32_t k[8] = { 1, i, i >> 3, 5, i, 6, 7, 8 };

		ASSERT_EQ(8, match(t, k, 8, pages, NULL));
		ASSERT_EQ(2 * i, pages[0]);
	}
	memset(tok, 0, sizeof(tok));
	ASSERT_EQ(0, match(t, tok, 8, pages, NULL));
	ASSERT_EQ(0, kv_radix_check(t));
	/* Evict half: deletions keep the table's probe chains intact. */
	ASSERT_EQ(3000, kv_radix_evict(t, 3000));
	ASSERT_EQ(0, kv_radix_check(t));
	for (i = 0; i < 3000; i++) {
		uint32_t k[8] = { 1, i, i >> 3, 5, i, 6, 7, 8 };
		size_t got = match(t, k, 8, pages, NULL);

		ASSERT_TRUE(got == 0 || got == 8);
	}
	ASSERT_EQ(0, kv_radix_check(t));
	kv_radix_destroy(t);
}

/* peek neither splits nor stamps. */
TEST(peek_changes_nothing)
{
	struct kv_radix *t = mk(1);
	uint32_t a[4] = { 1, 2, 3, 4 }, b[4] = { 1, 2, 9, 9 }, c[2] = { 7, 7 }, pages[4];

	ins(t, a, 4, 0);
	ins(t, c, 2, 10);
	ASSERT_EQ(2, kv_radix_peek(t, b, 4, pages));
	ASSERT_EQ(1, pages[1]);
	ASSERT_EQ(2, kv_radix_node_count(t));
	/* a is still the oldest: peek did not stamp it. */
	ASSERT_EQ(1, kv_radix_evict(t, 1));
	ASSERT_EQ(3, rel_pages[0]);
	kv_radix_destroy(t);
}

/* The printer's format (kvctl and debugging read it). */
TEST(pretty_print)
{
	struct kv_radix *t = mk(2);
	uint32_t a[4] = { 1, 2, 3, 4 }, b[4] = { 1, 2, 5, 6 };
	struct kv_radix_node *l;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	ins(t, a, 4, 10);
	ins(t, b, 4, 20);
	match(t, b, 4, NULL, &l);
	kv_radix_lock(t, l);
	ASSERT_EQ(0, kv_radix_print(t, f, 3));
	fclose(f);
	ASSERT_STREQ("kv_radix: 2 tokens/page, 3 nodes, 3 pages (1 evictable, 2 protected)\n"
		     "root\n"
		     "  #2 [0,2) 1 page lock 1 t 3: 1 2 -> 10\n"
		     "    #1 [2,4) 1 page lock 0 t 1: 3 4 -> 11\n"
		     "    #3 [2,4) 1 page lock 1 t 3: 5 6 -> 21\n", buf);
	kv_radix_unlock(t, l);
	free(buf);
	kv_radix_destroy(t);
}

/* ------------------------------------------------------------------ */
/* Requests                                                             */

static uint32_t next_page = 1000;

static void own_pages(struct kv_req_table *rt, struct kv_radix_req *r, uint32_t len)
{
	uint32_t need = kv_req_pages_needed(rt, r->slot, len), p[64], i;

	for (i = 0; i < need; i++)
		p[i] = next_page++;
	kv_req_extend(rt, r->slot, len, p);
	r->n_tokens = len;
}

static int released(uint32_t page)
{
	size_t i;

	for (i = 0; i < rel_n; i++)
		if (rel_pages[i] == page)
			return 1;
	return 0;
}

/* SGLang's flow: match, compute the rest, cache_finished_req. */
TEST(cache_finished_req)
{
	struct kv_radix *t = mk(4);
	struct kv_req_table *rt;
	struct kv_radix_req r = { 0 };
	uint32_t tok[18], pages[4];

	seq(tok, 18, 1);
	ASSERT_EQ(0, kv_req_table_create(4, 64, 4, &rt));
	r.slot = kv_req_alloc(rt);
	r.tokens = tok;
	ASSERT_EQ(0, kv_radix_req_match(t, rt, &r, 18));
	own_pages(rt, &r, 18);			/* pages 1000..1004 */
	ASSERT_EQ(0, kv_req_check(rt, r.slot));
	ASSERT_EQ(0, kv_radix_cache_finished_req(t, rt, &r, 0));
	ASSERT_EQ(4, kv_req_table_available(rt));
	ASSERT_EQ(-1, r.slot);
	/* 4 full pages cached, the unaligned tail (1004) given back. */
	ASSERT_EQ(4, kv_radix_total_pages(t));
	ASSERT_EQ(1, rel_n);
	ASSERT_EQ(1004, rel_pages[0]);
	ASSERT_EQ(16, match(t, tok, 18, pages, NULL));
	ASSERT_EQ(1000, pages[0]);
	ASSERT_EQ(4, kv_radix_evictable_pages(t));	/* unlocked */

	/* A second request hits all 4 pages, adds one, finishes. */
	r = (struct kv_radix_req){ .slot = kv_req_alloc(rt), .tokens = tok };
	ASSERT_EQ(16, kv_radix_req_match(t, rt, &r, 17));
	ASSERT_EQ(4, kv_radix_protected_pages(t));
	ASSERT_EQ(1001 * 4 + 3, kv_req_row(rt, r.slot)[7]);
	own_pages(rt, &r, 18);
	ASSERT_EQ(0, kv_radix_cache_finished_req(t, rt, &r, 0));
	ASSERT_EQ(0, kv_radix_protected_pages(t));
	ASSERT_EQ(4, kv_radix_total_pages(t));
	ASSERT_TRUE(released(1005));
	ASSERT_EQ(0, kv_radix_check(t));
	kv_req_table_destroy(rt);
	kv_radix_destroy(t);
}

/* Two requests computed the same prompt; the second's pages are duplicates. */
TEST(cache_finished_duplicates)
{
	struct kv_radix *t = mk(2);
	struct kv_req_table *rt;
	struct kv_radix_req a = { 0 }, b = { 0 };
	uint32_t tok[8];

	seq(tok, 8, 1);
	kv_req_table_create(2, 16, 2, &rt);
	a = (struct kv_radix_req){ .slot = kv_req_alloc(rt), .tokens = tok };
	b = (struct kv_radix_req){ .slot = kv_req_alloc(rt), .tokens = tok };
	kv_radix_req_match(t, rt, &a, 8);
	kv_radix_req_match(t, rt, &b, 8);
	own_pages(rt, &a, 8);			/* 1000..1003 */
	own_pages(rt, &b, 8);			/* 1004..1007 */
	ASSERT_EQ(0, kv_radix_cache_finished_req(t, rt, &a, 0));
	ASSERT_EQ(0, rel_n);
	ASSERT_EQ(0, kv_radix_cache_finished_req(t, rt, &b, 0));
	ASSERT_EQ(4, rel_n);			/* all of b's */
	ASSERT_TRUE(released(1004) && released(1007));
	ASSERT_EQ(4, kv_radix_total_pages(t));
	ASSERT_EQ(2, kv_req_table_available(rt));
	ASSERT_EQ(0, kv_radix_check(t));
	kv_req_table_destroy(rt);
	kv_radix_destroy(t);
}

/* Chunked prefill: cache_unfinished_req after each chunk moves the lock. */
TEST(cache_unfinished_req)
{
	struct kv_radix *t = mk(4);
	struct kv_req_table *rt;
	struct kv_radix_req r, o;
	struct kv_radix_node *old;
	uint32_t tok[30], pages[8];

	seq(tok, 30, 1);
	kv_req_table_create(4, 64, 4, &rt);
	r = (struct kv_radix_req){ .slot = kv_req_alloc(rt), .tokens = tok };
	kv_radix_req_match(t, rt, &r, 30);
	own_pages(rt, &r, 10);			/* chunk 1: 1000..1002 */
	old = r.last_node;
	ASSERT_EQ(0, kv_radix_cache_unfinished_req(t, rt, &r, 0));
	ASSERT_EQ(8, r.cached_len);
	ASSERT_NE(old, r.last_node);
	ASSERT_EQ(2, kv_radix_protected_pages(t));
	ASSERT_EQ(0, rel_n);			/* the partial page stays */

	/* Meanwhile another request caches a longer run of the same prompt. */
	o = (struct kv_radix_req){ .slot = kv_req_alloc(rt), .tokens = tok };
	kv_radix_req_match(t, rt, &o, 30);
	ASSERT_EQ(8, o.cached_len);
	own_pages(rt, &o, 20);			/* 1003..1005 */
	ASSERT_EQ(0, kv_radix_cache_finished_req(t, rt, &o, 0));

	/* Chunk 2: the pages o cached first are duplicates; the row follows. */
	own_pages(rt, &r, 24);			/* fills 1002, adds 1006..1008 */
	/* o's pages cover page indices 2..4: 1002, 1006, 1007 are duplicates. */
	ASSERT_EQ(0, kv_radix_cache_unfinished_req(t, rt, &r, 0));
	ASSERT_EQ(24, r.cached_len);
	ASSERT_TRUE(released(1002) && released(1006) && released(1007));
	ASSERT_FALSE(released(1008));
	ASSERT_EQ(1003, kv_req_page(rt, r.slot, 2));	/* the tree's pages */
	ASSERT_EQ(1005, kv_req_page(rt, r.slot, 4));
	ASSERT_EQ(1008, kv_req_page(rt, r.slot, 5));
	ASSERT_EQ(0, kv_req_check(rt, r.slot));
	ASSERT_EQ(6, kv_radix_protected_pages(t));
	ASSERT_EQ(24, match(t, tok, 30, pages, NULL));
	ASSERT_EQ(1008, pages[5]);
	ASSERT_EQ(0, kv_radix_check(t));

	own_pages(rt, &r, 30);
	ASSERT_EQ(0, kv_radix_cache_finished_req(t, rt, &r, 0));
	ASSERT_EQ(0, kv_radix_protected_pages(t));
	ASSERT_EQ(7, kv_radix_total_pages(t));
	ASSERT_EQ(0, kv_radix_check(t));
	kv_req_table_destroy(rt);
	kv_radix_destroy(t);
}

/* adopt() swaps pages for canonical ones, or cancels the insert. */
static int adopt_ret;

static int adopt(void *priv, const uint32_t *tokens, uint32_t first,
		 uint32_t *pages, uint32_t n, uint32_t parent)
{
	uint32_t i;

	(void)priv;
	(void)tokens;
	if (adopt_ret)
		return adopt_ret;
	/* The first batch starts a chain; a later one hangs from the tree. */
	if ((first == 0) != (parent == KVS_NO_PAGE))
		return -EPROTO;
	for (i = 0; i < n; i++)
		pages[i] = 5000 + first + i;
	return 0;
}

TEST(adopt_hook)
{
	struct kv_radix_ops ops = { .release = rel, .adopt = adopt };
	struct kv_req_table *rt;
	struct kv_radix_req r;
	struct kv_radix *t;
	uint32_t tok[12], pages[3];

	seq(tok, 12, 1);
	ASSERT_EQ(0, kv_radix_create(4, &ops, &t));
	kv_req_table_create(2, 16, 4, &rt);
	r = (struct kv_radix_req){ .slot = kv_req_alloc(rt), .tokens = tok };
	kv_radix_req_match(t, rt, &r, 12);
	own_pages(rt, &r, 8);
	adopt_ret = -EIO;
	ASSERT_EQ(-EIO, kv_radix_cache_unfinished_req(t, rt, &r, 0));
	ASSERT_EQ(0, kv_radix_total_pages(t));	/* nothing changed */
	ASSERT_EQ(0, rel_n);
	adopt_ret = 0;
	ASSERT_EQ(0, kv_radix_cache_unfinished_req(t, rt, &r, 0));
	ASSERT_EQ(5000, kv_req_page(rt, r.slot, 0));	/* the row follows */
	ASSERT_EQ(8, match(t, tok, 12, pages, NULL));
	ASSERT_EQ(5001, pages[1]);
	own_pages(rt, &r, 12);
	adopt_ret = -ENOTCONN;
	/* Finishing with a failed adopt gives back what the request owned. */
	ASSERT_EQ(-ENOTCONN, kv_radix_cache_finished_req(t, rt, &r, 0));
	ASSERT_EQ(1, rel_n);
	ASSERT_EQ(2, kv_radix_total_pages(t));
	ASSERT_EQ(0, kv_radix_protected_pages(t));
	ASSERT_EQ(2, kv_req_table_available(rt));
	kv_req_table_destroy(rt);
	kv_radix_destroy(t);
}

/* ------------------------------------------------------------------ */
/* Request-to-token tables                                              */

TEST(req_table_rows)
{
	struct kv_req_table *rt;
	int r[4];
	int i;

	ASSERT_EQ(-EINVAL, kv_req_table_create(0, 8, 4, &rt));
	ASSERT_EQ(-EINVAL, kv_req_table_create(4, 8, 0, &rt));
	ASSERT_EQ(0, kv_req_table_create(3, 8, 4, &rt));
	for (i = 0; i < 3; i++) {
		r[i] = kv_req_alloc(rt);
		ASSERT_LE(0, r[i]);
		ASSERT_NE(NULL, kv_req_row(rt, r[i]));
	}
	ASSERT_EQ(-ENOSPC, kv_req_alloc(rt));
	ASSERT_EQ(0, kv_req_free(rt, r[1]));
	ASSERT_EQ(-EINVAL, kv_req_free(rt, r[1]));	/* twice */
	ASSERT_EQ(-EINVAL, kv_req_free(rt, 7));
	ASSERT_EQ(NULL, kv_req_row(rt, r[1]));
	ASSERT_EQ(r[1], kv_req_alloc(rt));
	ASSERT_EQ(0, kv_req_len(rt, r[1]));
	ASSERT_EQ(-ERANGE, kv_req_set_len(rt, r[0], 9));
	ASSERT_EQ(-ERANGE, kv_req_write(rt, r[0], 6, (uint32_t[]){ 1, 2, 3 }, 3));
	ASSERT_EQ(-EINVAL, kv_req_write_pages(rt, r[0], 2, (uint32_t[]){ 1 }, 2));
	kv_req_table_destroy(rt);
}

/* Slots = page * tokens_per_page + offset; partial pages fill first. */
TEST(req_table_slots_and_pages)
{
	struct kv_req_table *rt;
	struct kv_seq_pages sp[2];
	uint32_t buf[8], indptr[3], lens[2];
	int a, b;

	kv_req_table_create(2, 16, 4, &rt);
	a = kv_req_alloc(rt);
	b = kv_req_alloc(rt);
	ASSERT_EQ(0, kv_req_write_pages(rt, a, 0, (uint32_t[]){ 7, 3 }, 6));
	kv_req_set_len(rt, a, 6);
	ASSERT_EQ(29, kv_req_row(rt, a)[1]);
	ASSERT_EQ(13, kv_req_row(rt, a)[5]);
	ASSERT_EQ(1, kv_req_pages_needed(rt, a, 9));	/* 2 in page 3, 1 new */
	ASSERT_EQ(0, kv_req_extend(rt, a, 9, (uint32_t[]){ 5 }));
	ASSERT_EQ(14, kv_req_row(rt, a)[6]);
	ASSERT_EQ(20, kv_req_row(rt, a)[8]);
	ASSERT_EQ(0, kv_req_check(rt, a));
	ASSERT_EQ(0, kv_req_extend(rt, b, 1, (uint32_t[]){ 9 }));

	ASSERT_EQ(4, kv_req_table_pages(rt, (int[]){ a, b }, 2, buf, 8, sp));
	ASSERT_EQ(3, sp[0].n_pages);
	ASSERT_EQ(9, sp[0].seq_len);
	ASSERT_EQ(7, sp[0].pages[0]);
	ASSERT_EQ(5, sp[0].pages[2]);
	ASSERT_EQ(1, sp[1].n_pages);
	ASSERT_EQ(9, sp[1].pages[0]);
	ASSERT_EQ(-ENOSPC, kv_req_table_pages(rt, (int[]){ a, b }, 2, buf, 3, sp));
	/* The same batch as CSR, for struct kv_attn_batch. */
	ASSERT_EQ(4, kv_req_table_csr(rt, (int[]){ a, b }, 2, indptr, buf, 8, lens));
	ASSERT_EQ(0, indptr[0]);
	ASSERT_EQ(3, indptr[1]);
	ASSERT_EQ(4, indptr[2]);
	ASSERT_EQ(9, lens[0]);
	ASSERT_EQ(1, lens[1]);
	ASSERT_EQ(3, buf[1]);
	ASSERT_EQ(9, buf[3]);
	ASSERT_EQ(-ENOSPC, kv_req_table_csr(rt, (int[]){ a, b }, 2, indptr, buf, 3, lens));
	/* A broken row is caught. */
	kv_req_row(rt, a)[2] = 99;
	ASSERT_EQ(-EUCLEAN, kv_req_check(rt, a));
	/* Slots must fit 32 bits. */
	ASSERT_EQ(-ERANGE, kv_req_write_pages(rt, a, 0, (uint32_t[]){ 0x40000000 }, 1));
	kv_req_table_destroy(rt);
}

/* tokens_per_page 1: a slot is a page. */
TEST(req_table_p1)
{
	struct kv_req_table *rt;
	struct kv_seq_pages sp;
	uint32_t buf[4];
	int a;

	kv_req_table_create(1, 4, 1, &rt);
	a = kv_req_alloc(rt);
	ASSERT_EQ(3, kv_req_pages_needed(rt, a, 3));
	ASSERT_EQ(0, kv_req_extend(rt, a, 3, (uint32_t[]){ 8, 2, 5 }));
	ASSERT_EQ(3, kv_req_table_pages(rt, &a, 1, buf, 4, &sp));
	ASSERT_EQ(2, sp.pages[1]);
	ASSERT_EQ(-ERANGE, kv_req_extend(rt, a, 5, (uint32_t[]){ 1, 1 }));
	kv_req_table_destroy(rt);
}

TEST_HARNESS_MAIN
