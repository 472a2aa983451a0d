// SPDX-License-Identifier: GPL-2.0
/*
 * Differential test of the radix tree against a brute-force model of the
 * same semantics, over long random traces.
 *
 * The model knows no nodes: it keeps one entry per cached page, keyed by
 * the whole token prefix that ends with that page, with the page index,
 * a recency stamp and a lock count.  Match walks prefixes one page longer
 * at a time; insert stamps the present ones and adds the rest; a lock
 * counts on every page of a prefix; eviction takes, one page at a time,
 * the unlocked page with no cached successor that has the oldest stamp.
 * Requests (match, grow, cache_unfinished_req, cache_finished_req) are
 * composed from those the way SGLang composes them.  Every step compares
 * results, released pages (in order), sizes, and now and then the tree's
 * whole content with the model's.
 *
 * The traces use a tiny alphabet so that prompts share prefixes and
 * diverge at every offset, tokens_per_page 1, 2, 3, 4 and 8, and a small
 * page pool so that eviction runs all the time.  Seeds are fixed; a
 * failure names its seed and step:
 *
 *   RADIX_SEED=17 RADIX_OPS=5000 build/tests/radix_model_test
 *
 * reruns that one trace.  RADIX_SEEDS=N sets how many seeds run (default
 * 16), RADIX_OPS the steps of each (default 50000).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvshare/radix.h>
#include "kselftest_harness.h"

#define N_PAGES		384	/* the page pool of a trace */
#define MAX_KEY_PAGES	12
#define MAX_TOK		(MAX_KEY_PAGES * 8 + 8)
#define MAX_REQS	6
#define MAX_HOLDS	8
#define MAX_ENT		(N_PAGES + 8)

static uint64_t rng;

static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

/* ------------------------------------------------------------------ */
/* The model                                                           */

struct ment {
	uint32_t np;			/* pages of the prefix */
	uint32_t tok[MAX_TOK];		/* np * P tokens */
	uint32_t page;
	uint64_t stamp;
	uint32_t locks;
	uint32_t children;		/* entries one page longer */
};

static struct model {
	uint32_t P;
	struct ment e[MAX_ENT];
	uint32_t n;
	uint64_t clock;
	uint32_t rel[4 * N_PAGES];	/* expected releases, in order */
	uint32_t n_rel;
} M;

static struct ment *m_find(const uint32_t *tok, uint32_t np)
{
	uint32_t i;

	for (i = 0; i < M.n; i++)
		if (M.e[i].np == np &&
		    !memcmp(M.e[i].tok, tok, (size_t)np * M.P * sizeof(*tok)))
			return &M.e[i];
	return NULL;
}

static struct ment *m_parent(const struct ment *e)
{
	return e->np > 1 ? m_find(e->tok, e->np - 1) : NULL;
}

/* Pages of the longest cached prefix of the full pages of @tok, stamped. */
static uint32_t m_match(const uint32_t *tok, uint32_t n, uint32_t *pages)
{
	uint32_t k = 0;
	struct ment *e;

	M.clock++;
	while (k < n / M.P && (e = m_find(tok, k + 1))) {
		e->stamp = M.clock;
		pages[k++] = e->page;
	}
	return k;
}

/* Tokens already present; the rest enters with @pages. */
static uint32_t m_insert(const uint32_t *tok, uint32_t n, const uint32_t *pages)
{
	uint32_t i, present = 0;
	struct ment *e;

	M.clock++;
	for (i = 0; i < n / M.P; i++) {
		e = m_find(tok, i + 1);
		if (e) {
			if (present != i)
				return UINT32_MAX;	/* a hole in a chain */
			e->stamp = M.clock;
			present++;
			continue;
		}
		e = &M.e[M.n++];
		e->np = i + 1;
		memcpy(e->tok, tok, (size_t)(i + 1) * M.P * sizeof(*tok));
		e->page = pages[i];
		e->stamp = M.clock;
		e->locks = 0;
		e->children = 0;
		if (m_parent(e))
			m_parent(e)->children++;
	}
	return present * M.P;
}

static void m_lock(const uint32_t *tok, uint32_t np, int d)
{
	uint32_t i;

	for (i = 1; i <= np; i++)
		m_find(tok, i)->locks += d;
}

/* -1 if two candidates tie (the semantics would be ambiguous). */
static int m_evict(uint32_t n)
{
	uint32_t done, i, best, ties;

	for (done = 0; done < n; done++) {
		best = UINT32_MAX;
		ties = 0;
		for (i = 0; i < M.n; i++) {
			if (M.e[i].locks || M.e[i].children)
				continue;
			if (best == UINT32_MAX || M.e[i].stamp < M.e[best].stamp) {
				best = i;
				ties = 0;
			} else if (M.e[i].stamp == M.e[best].stamp) {
				ties++;
			}
		}
		if (best == UINT32_MAX)
			break;
		if (ties)
			return -1;
		M.rel[M.n_rel++] = M.e[best].page;
		if (m_parent(&M.e[best]))
			m_parent(&M.e[best])->children--;
		M.e[best] = M.e[--M.n];
	}
	return (int)done;
}

static void m_sizes(size_t *evictable, size_t *protected_)
{
	uint32_t i;

	*evictable = *protected_ = 0;
	for (i = 0; i < M.n; i++) {
		if (M.e[i].locks)
			++*protected_;
		else
			++*evictable;
	}
}

static void m_release_range(const uint32_t *pages, uint32_t from, uint32_t to)
{
	while (to > from)
		M.rel[M.n_rel++] = pages[--to];
}

/* ------------------------------------------------------------------ */
/* The implementation's side                                           */

static uint32_t got_rel[4 * N_PAGES];
static uint32_t n_got;

static void rel_cb(void *priv, const uint32_t *pages, uint32_t n, unsigned int flags)
{
	(void)priv;
	(void)flags;
	while (n--)
		got_rel[n_got++] = *pages++;
}

/* Pages not in the tree nor in a request. */
static uint32_t free_pages[N_PAGES];
static uint32_t n_free;

static bool take_pages(uint32_t n, uint32_t *out)
{
	uint32_t i;

	if (n > n_free)
		return false;
	for (i = 0; i < n; i++)
		out[i] = free_pages[--n_free];
	return true;
}

static void give_pages(const uint32_t *p, uint32_t n)
{
	while (n--)
		free_pages[n_free++] = *p++;
}

struct req {
	bool live;
	struct kv_radix_req r;
	uint32_t tok[MAX_TOK];
	uint32_t len;			/* tokens it will reach */
	uint32_t pages[MAX_KEY_PAGES + 2]; /* the model's row, by page */
};

struct hold {
	struct kv_radix_node *node;
	uint32_t tok[MAX_TOK];
	uint32_t np;
};

struct trace {
	struct kv_radix *t;
	struct kv_req_table *rt;
	struct req reqs[MAX_REQS];
	struct hold holds[MAX_HOLDS];
	uint32_t n_holds;
	char what[96];
	uint32_t n_ops[8], max_pages, max_nodes;
};

/* A prompt over a 2- or 3-letter alphabet: prefixes meet everywhere. */
static uint32_t gen_key(uint32_t *tok, uint32_t max_pages)
{
	uint32_t n = rnd(max_pages * M.P + M.P), alpha = 2 + rnd(2), i;

	for (i = 0; i < n; i++)
		tok[i] = rnd(alpha);
	return n;
}

/* ------------------------------------------------------------------ */
/* One step each                                                       */

#define FAIL(fmt, ...) do {						\
		snprintf(tr->what + strlen(tr->what),			\
			 sizeof(tr->what) - strlen(tr->what),		\
			 ": " fmt, ##__VA_ARGS__);			\
		return -1;						\
	} while (0)

static int op_match(struct trace *tr)
{
	uint32_t tok[MAX_TOK], mp[MAX_KEY_PAGES + 1], tp[MAX_KEY_PAGES + 1];
	uint32_t n = gen_key(tok, MAX_KEY_PAGES), k, i;
	struct kv_radix_match m;
	struct hold *h;

	strcpy(tr->what, "match");
	k = m_match(tok, n, mp);
	if (kv_radix_match_prefix(tr->t, tok, n, tp, &m))
		FAIL("failed");
	if (m.len != k * M.P)
		FAIL("len %zu, model %u", m.len, k * M.P);
	for (i = 0; i < k; i++)
		if (tp[i] != mp[i])
			FAIL("page %u: %u, model %u", i, tp[i], mp[i]);
	/* Sometimes hold the match as a lock, as a scheduler would. */
	if (tr->n_holds < MAX_HOLDS && rnd(3) == 0) {
		h = &tr->holds[tr->n_holds++];
		h->node = m.last_node;
		h->np = k;
		memcpy(h->tok, tok, sizeof(tok));
		kv_radix_lock(tr->t, m.last_node);
		m_lock(tok, k, 1);
	}
	return 0;
}

static int op_unhold(struct trace *tr)
{
	struct hold *h;
	uint32_t i;

	strcpy(tr->what, "unlock");
	if (!tr->n_holds)
		return 0;
	i = rnd(tr->n_holds);
	h = &tr->holds[i];
	if (kv_radix_unlock(tr->t, h->node) < 0 && h->np)
		FAIL("unlock failed");
	m_lock(h->tok, h->np, -1);
	tr->holds[i] = tr->holds[--tr->n_holds];
	return 0;
}

static int op_insert(struct trace *tr)
{
	uint32_t tok[MAX_TOK], pages[MAX_KEY_PAGES + 1];
	uint32_t n = gen_key(tok, MAX_KEY_PAGES), np = n / M.P, want;
	long got;

	strcpy(tr->what, "insert");
	if (!take_pages(np, pages))
		return 0;
	want = m_insert(tok, n, pages);
	if (want == UINT32_MAX)
		FAIL("model chain broken");
	got = kv_radix_insert(tr->t, tok, n, pages, 0, NULL);
	if (got != (long)want)
		FAIL("present %ld, model %u", got, want);
	give_pages(pages, want / M.P);	/* the caller's duplicates */
	return 0;
}

static int op_evict(struct trace *tr)
{
	uint32_t n = 1 + rnd(3 * M.P);
	size_t got;
	int want;

	snprintf(tr->what, sizeof(tr->what), "evict %u", n);
	want = m_evict(n);
	if (want < 0)
		FAIL("model: two leaves share the oldest stamp");
	got = kv_radix_evict(tr->t, n);
	if (got != (size_t)want)
		FAIL("evicted %zu, model %d", got, want);
	return 0;
}

static struct req *pick_req(struct trace *tr, bool live)
{
	uint32_t i, start = rnd(MAX_REQS);

	for (i = 0; i < MAX_REQS; i++) {
		struct req *q = &tr->reqs[(start + i) % MAX_REQS];

		if (q->live == live)
			return q;
	}
	return NULL;
}

static int op_req_start(struct trace *tr)
{
	struct req *q = pick_req(tr, false);
	uint32_t n_match, k;
	long got;

	strcpy(tr->what, "req_match");
	if (!q)
		return 0;
	memset(q, 0, sizeof(*q));
	q->len = gen_key(q->tok, MAX_KEY_PAGES);
	n_match = rnd(q->len + 1);
	q->r.slot = kv_req_alloc(tr->rt);
	q->r.tokens = q->tok;
	if (q->r.slot < 0)
		FAIL("no row");
	q->live = true;
	k = m_match(q->tok, n_match, q->pages);
	m_lock(q->tok, k, 1);
	got = kv_radix_req_match(tr->t, tr->rt, &q->r, n_match);
	if (got != (long)(k * M.P))
		FAIL("matched %ld, model %u", got, k * M.P);
	return 0;
}

static int op_req_grow(struct trace *tr)
{
	struct req *q = pick_req(tr, true);
	uint32_t new_len, need, have, i, p[MAX_KEY_PAGES + 2];

	strcpy(tr->what, "req_grow");
	if (!q || q->r.n_tokens >= q->len)
		return 0;
	new_len = q->r.n_tokens + 1 + rnd(q->len - q->r.n_tokens);
	need = kv_req_pages_needed(tr->rt, q->r.slot, new_len);
	if (!take_pages(need, p))
		return 0;
	if (kv_req_extend(tr->rt, q->r.slot, new_len, p))
		FAIL("extend");
	have = q->r.n_tokens / M.P + !!(q->r.n_tokens % M.P);
	for (i = 0; i < need; i++)
		q->pages[have + i] = p[i];
	q->r.n_tokens = new_len;
	if (kv_req_check(tr->rt, q->r.slot))
		FAIL("row broken");
	return 0;
}

/* The model's cache_(un)finished_req; returns the pages now the tree's. */
static uint32_t m_cache_req(struct req *q, bool finished, uint32_t *present_out)
{
	uint32_t full = q->r.n_tokens / M.P;
	uint32_t all = full + !!(q->r.n_tokens % M.P);
	uint32_t cached = q->r.cached_len / M.P, present, i;

	present = m_insert(q->tok, full * M.P, q->pages) / M.P;
	if (finished) {
		m_release_range(q->pages, full, all);
		m_release_range(q->pages, cached, present);
		m_lock(q->tok, cached, -1);
	} else {
		m_release_range(q->pages, cached, present);
		for (i = cached; i < present; i++)
			q->pages[i] = m_find(q->tok, i + 1)->page;
		m_lock(q->tok, full, 1);
		m_lock(q->tok, cached, -1);
	}
	*present_out = present;
	return full;
}

static int op_req_cache(struct trace *tr, bool finished)
{
	struct req *q = pick_req(tr, true);
	uint32_t full, present, i;

	strcpy(tr->what, finished ? "cache_finished_req" : "cache_unfinished_req");
	if (!q)
		return 0;
	full = m_cache_req(q, finished, &present);
	if (finished) {
		if (kv_radix_cache_finished_req(tr->t, tr->rt, &q->r, 0))
			FAIL("failed");
		q->live = false;
		return 0;
	}
	if (kv_radix_cache_unfinished_req(tr->t, tr->rt, &q->r, 0))
		FAIL("failed");
	if (q->r.cached_len != full * M.P)
		FAIL("cached_len %u, model %u", q->r.cached_len, full * M.P);
	for (i = 0; i < full; i++)
		if (kv_req_page(tr->rt, q->r.slot, i) != q->pages[i])
			FAIL("row page %u: %u, model %u", i,
			     kv_req_page(tr->rt, q->r.slot, i), q->pages[i]);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Comparing                                                           */

static uint32_t path[MAX_TOK * 2];

struct cmp {
	uint32_t seen;
	bool bad;
};

static int cmp_node(void *arg, const struct kv_radix_node_info *ni)
{
	struct cmp *c = arg;
	uint32_t j;

	memcpy(path + ni->depth, ni->tokens, (size_t)ni->n_pages * M.P * 4);
	for (j = 0; j < ni->n_pages; j++) {
		struct ment *e = m_find(path, ni->depth / M.P + j + 1);

		if (!e || e->page != ni->pages[j] || e->stamp != ni->last_access ||
		    e->locks != ni->lock_ref) {
			c->bad = true;
			return 1;
		}
		c->seen++;
	}
	return 0;
}

static int compare(struct trace *tr, bool full)
{
	size_t ev, pr;
	uint32_t i;

	if (n_got != M.n_rel)
		FAIL("released %u pages, model %u", n_got, M.n_rel);
	for (i = 0; i < n_got; i++)
		if (got_rel[i] != M.rel[i])
			FAIL("release %u: page %u, model %u", i, got_rel[i], M.rel[i]);
	give_pages(got_rel, n_got);
	n_got = M.n_rel = 0;
	m_sizes(&ev, &pr);
	if (ev != kv_radix_evictable_pages(tr->t) || pr != kv_radix_protected_pages(tr->t))
		FAIL("sizes %zu/%zu, model %zu/%zu", kv_radix_evictable_pages(tr->t),
		     kv_radix_protected_pages(tr->t), ev, pr);
	if (full) {
		struct cmp c = { 0 };
		size_t owned = 0;

		/* Every page is free, the tree's, or a request's own. */
		for (i = 0; i < MAX_REQS; i++) {
			const struct kv_radix_req *r = &tr->reqs[i].r;

			if (tr->reqs[i].live)
				owned += r->n_tokens / M.P + !!(r->n_tokens % M.P) -
					 r->cached_len / M.P;
		}
		if (n_free + owned + kv_radix_total_pages(tr->t) != N_PAGES)
			FAIL("pages leaked: %u free + %zu owned + %zu cached != %u",
			     n_free, owned, kv_radix_total_pages(tr->t), N_PAGES);

		if (kv_radix_check(tr->t))
			FAIL("kv_radix_check");
		kv_radix_walk(tr->t, cmp_node, &c);
		if (c.bad || c.seen != M.n)
			FAIL("content differs (%u of %u pages agree)", c.seen, M.n);
	}
	return 0;
}

/* ------------------------------------------------------------------ */

static int step(struct trace *tr)
{
	uint32_t r = rnd(100), k;
	int ret;

	/* Under pressure, make room as an allocator would. */
	if (n_free < 2 * MAX_KEY_PAGES && rnd(2)) {
		strcpy(tr->what, "pressure");
		return op_evict(tr);
	}
	if (r < 22)
		ret = op_match(tr), k = 0;
	else if (r < 30)
		ret = op_unhold(tr), k = 1;
	else if (r < 45)
		ret = op_insert(tr), k = 2;
	else if (r < 55)
		ret = op_evict(tr), k = 3;
	else if (r < 67)
		ret = op_req_start(tr), k = 4;
	else if (r < 81)
		ret = op_req_grow(tr), k = 5;
	else if (r < 91)
		ret = op_req_cache(tr, false), k = 6;
	else
		ret = op_req_cache(tr, true), k = 7;
	tr->n_ops[k]++;
	if (kv_radix_total_pages(tr->t) > tr->max_pages)
		tr->max_pages = kv_radix_total_pages(tr->t);
	if (kv_radix_node_count(tr->t) > tr->max_nodes)
		tr->max_nodes = kv_radix_node_count(tr->t);
	return ret;
}

static int run_trace(struct __test_metadata *_metadata, uint32_t seed, uint32_t ops)
{
	static const uint32_t tpps[] = { 1, 2, 3, 4, 8 };
	struct kv_radix_ops kops = { .release = rel_cb };
	struct trace tr = { 0 };
	uint32_t i;
	int ret = 0;

	rng = 0x9e3779b97f4a7c15ull * (seed + 1);
	memset(&M, 0, sizeof(M));
	M.P = tpps[seed % 5];
	n_got = 0;
	n_free = 0;
	for (i = 0; i < N_PAGES; i++)
		free_pages[n_free++] = N_PAGES - 1 - i;
	if (kv_radix_create(M.P, &kops, &tr.t) ||
	    kv_req_table_create(MAX_REQS, MAX_TOK, M.P, &tr.rt))
		return -1;
	for (i = 0; i < ops && !ret; i++) {
		ret = step(&tr);
		if (!ret)
			ret = compare(&tr, i % 64 == 0 || i == ops - 1);
		if (ret)
			TH_LOG("seed %u (tokens_per_page %u), step %u: %s\n"
			       "# reproduce: RADIX_SEED=%u RADIX_OPS=%u %s",
			       seed, M.P, i, tr.what, seed, i + 1,
			       "build/tests/radix_model_test");
	}
	printf("# seed %u, tokens_per_page %u: %u steps; match %u, unlock %u, "
	       "insert %u, evict %u, req_match %u, grow %u, unfinished %u, "
	       "finished %u; up to %u pages in %u nodes\n", seed, M.P, i,
	       tr.n_ops[0], tr.n_ops[1], tr.n_ops[2], tr.n_ops[3], tr.n_ops[4],
	       tr.n_ops[5], tr.n_ops[6], tr.n_ops[7], tr.max_pages, tr.max_nodes);
	fflush(stdout);
	kv_req_table_destroy(tr.rt);
	kv_radix_destroy(tr.t);
	return ret;
}

static uint32_t env_u32(const char *name, uint32_t def)
{
	const char *v = getenv(name);

	return v && *v ? (uint32_t)strtoul(v, NULL, 0) : def;
}

FIXTURE(model) {
	int unused;
};

FIXTURE_SETUP(model)
{
}

FIXTURE_TEARDOWN(model)
{
}

/* ~20 s under ASan on a slow core; the harness's default is 30 s. */
TEST_F_TIMEOUT(model, differential, 300)
{
	uint32_t ops = env_u32("RADIX_OPS", 50000);
	uint32_t n = env_u32("RADIX_SEEDS", 16), seed;
	const char *one = getenv("RADIX_SEED");

	if (one && *one) {
		ASSERT_EQ(0, run_trace(_metadata, env_u32("RADIX_SEED", 0), ops));
		return;
	}
	for (seed = 1; seed <= n; seed++)
		ASSERT_EQ(0, run_trace(_metadata, seed, ops));
}

TEST_HARNESS_MAIN
