// SPDX-License-Identifier: GPL-2.0
/*
 * Randomized model test of the arbiter core: a long random trace of
 * ALLOC / PUBLISH / LOOKUP / PUT / QUOTA / client free over several
 * clients (two namespaces), run against the core and against a brute-force
 * model of docs/design.md section 3 (state, refcount, parent and children per
 * page; holdings per client; (namespace, key) -> page by linear search).
 * Results, errnos and counters are compared after every step, every page
 * descriptor and KVS_STATS_CHECK every few steps.  Eviction order is only
 * checked loosely: the pages an ALLOC evicted must have been CACHED, as
 * many as it had to evict, and never the parent of a page left in place.
 *
 * The trace is a function of the seed alone: a failure prints the variant,
 * the seed, the step and the last operations, and running the binary again
 * replays it.  KVS_MODEL_SEED=n replaces every variant's seed, and
 * KVS_MODEL_STEPS=n the number of steps (default 20000).
 */
#include <stdarg.h>

#include "kt.h"

#define M_MAX_PAGES	64
#define M_MAX_CLIENTS	4
#define M_CHAINS	6
#define M_CHAIN_LEN	8
#define M_KEY_A		0x6d6f64656cull	/* kt_key(M_KEY_A, id) */
#define M_MISS		100000		/* key ids from here never exist */
#define M_LOG		24

struct m_page {
	__u32 state;
	__u32 ref;
	__u32 parent;
	__u32 nch;
	__u32 key;		/* key id while SHARED/CACHED */
	__u64 ns;
	int owner;		/* client slot while OWNED */
};

struct m_client {
	struct kt_client *kc;
	__u64 ns;
	__u32 quota;
	__u32 held;
	__u32 hold[M_MAX_PAGES];	/* OWNED: 1; SHARED: references */
};

struct model {
	__u32 n_pages, max_q, n_clients;
	struct m_page p[M_MAX_PAGES];
	struct m_client c[M_MAX_CLIENTS];
	struct kt_client *viewer;
	__u32 pool;
	__u64 allocs, publishes, dups, hits, evictions;
	__u64 seed, rng;
	long step;
	char log[M_LOG][200];
	long nlog;
	/* what the trace exercised */
	__u64 n_ok[8], n_err[8], n_evict_allocs, n_dup_entries;
};

static struct model M;

static void mlog(struct model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void mlog(struct model *m, const char *fmt, ...)
{
	va_list ap;
	char *s = m->log[m->nlog++ % M_LOG];
	int n;

	n = snprintf(s, sizeof(m->log[0]), "step %ld: ", m->step);
	va_start(ap, fmt);
	vsnprintf(s + n, sizeof(m->log[0]) - n, fmt, ap);
	va_end(ap);
}

static void mdump(struct __test_metadata *_metadata, struct model *m)
{
	long i = m->nlog > M_LOG ? m->nlog - M_LOG : 0;

	TH_LOG("last operations (seed %llu):", (unsigned long long)m->seed);
	for (; i < m->nlog; i++)
		TH_LOG("  %s", m->log[i % M_LOG]);
}

#define M_FAIL(m, fmt, ...) do {						\
	mdump(_metadata, (m));							\
	TH_LOG("MODEL MISMATCH seed %llu step %ld: " fmt,			\
	       (unsigned long long)(m)->seed, (m)->step, ##__VA_ARGS__);	\
	ASSERT_TRUE(0);								\
} while (0)

#define M_CHECK(m, cond, fmt, ...) do {						\
	if (!(cond))								\
		M_FAIL(m, "%s: " fmt, #cond, ##__VA_ARGS__);			\
} while (0)

static __u32 rnd(struct model *m, __u32 n)
{
	return kt_rand_below(&m->rng, n);
}

static int keyed(const struct m_page *p)
{
	return p->state == KVS_PAGE_SHARED || p->state == KVS_PAGE_CACHED;
}

static __u32 m_find(struct model *m, __u64 ns, __u32 key)
{
	__u32 i;

	for (i = 0; i < m->n_pages; i++)
		if (keyed(&m->p[i]) && m->p[i].ns == ns && m->p[i].key == key)
			return i;
	return KVS_NO_PAGE;
}

static __u32 m_count(struct model *m, __u32 state)
{
	__u32 i, n = 0;

	for (i = 0; i < m->n_pages; i++)
		n += m->p[i].state == state;
	return n;
}

/* CACHED pages that eviction may reach: no SHARED page below them. */
static __u32 m_reachable_evictable(struct model *m)
{
	int blocked[M_MAX_PAGES] = { 0 };
	__u32 i, q, n = 0, guard;

	for (i = 0; i < m->n_pages; i++) {
		if (m->p[i].state != KVS_PAGE_SHARED)
			continue;
		for (q = m->p[i].parent, guard = 0; q != KVS_NO_PAGE && guard < M_MAX_PAGES;
		     q = m->p[q].parent, guard++)
			blocked[q] = 1;
	}
	for (i = 0; i < m->n_pages; i++)
		n += m->p[i].state == KVS_PAGE_CACHED && !blocked[i];
	return n;
}

static void m_unref(struct model *m, __u32 pg)
{
	if (--m->p[pg].ref == 0)
		m->p[pg].state = KVS_PAGE_CACHED;
}

/* Give back one holding of client ci on page pg. */
static void m_release(struct model *m, int ci, __u32 pg)
{
	struct m_client *c = &m->c[ci];

	c->hold[pg]--;
	c->held--;
	if (m->p[pg].state == KVS_PAGE_OWNED) {
		m->p[pg].state = KVS_PAGE_FREE;
		m->p[pg].owner = -1;
	} else {
		m_unref(m, pg);
	}
}

/* ---- comparisons -------------------------------------------------------- */

static void m_compare(struct __test_metadata *_metadata, struct model *m, int full)
{
	static struct kvs_page_desc d[M_MAX_PAGES];
	struct kvs_pool_stats st;
	__u32 i, n, evictable = 0, refs = 0, held = 0;
	int ret;

	for (i = 0; i < m->n_pages; i++) {
		refs += m->p[i].ref;
		evictable += m->p[i].state == KVS_PAGE_CACHED && m->p[i].nch == 0;
	}
	for (i = 0; i < m->n_clients; i++)
		held += m->c[i].held;
	ret = kt_stats(m->viewer, m->pool, full ? KVS_STATS_CHECK : 0, &st);
	M_CHECK(m, ret == 0, "POOL_STATS returned %d", ret);
#define M_STAT(field, want) M_CHECK(m, st.field == (want), #field " core %llu model %llu", \
				    (unsigned long long)st.field, (unsigned long long)(want))
	M_STAT(n_free, m_count(m, KVS_PAGE_FREE));
	M_STAT(n_owned, m_count(m, KVS_PAGE_OWNED));
	M_STAT(n_shared, m_count(m, KVS_PAGE_SHARED));
	M_STAT(n_cached, m_count(m, KVS_PAGE_CACHED));
	M_STAT(n_evictable, evictable);
	M_STAT(n_refs, refs);
	M_STAT(n_held, held);
	M_STAT(n_files, m->n_clients);
	M_STAT(allocs, m->allocs);
	M_STAT(publishes, m->publishes);
	M_STAT(dup_publishes, m->dups);
	M_STAT(hits, m->hits);
	M_STAT(evictions, m->evictions);
#undef M_STAT
	for (i = 0; i < m->n_clients; i++) {
		__u32 q = 0, h = 0;

		ret = kt_quota(m->c[i].kc, 0, 0, &q, &h);
		M_CHECK(m, ret == 0, "QUOTA of client %u: %d", i, ret);
		M_CHECK(m, h == m->c[i].held, "client %u held core %u model %u", i, h, m->c[i].held);
		M_CHECK(m, q == m->c[i].quota, "client %u quota core %u model %u", i, q,
			m->c[i].quota);
	}
	if (!full)
		return;

	ret = kt_pages(m->viewer, m->pool, 0, m->n_pages, d, &n);
	M_CHECK(m, ret == 0 && n == m->n_pages, "PAGES: %d, %u", ret, n);
	for (i = 0; i < m->n_pages; i++) {
		const struct m_page *p = &m->p[i];

		M_CHECK(m, d[i].state == p->state, "page %u state core %u model %u", i,
			d[i].state, p->state);
		M_CHECK(m, d[i].refcount == p->ref, "page %u refcount core %u model %u", i,
			d[i].refcount, p->ref);
		M_CHECK(m, d[i].n_children == p->nch, "page %u children core %u model %u", i,
			d[i].n_children, p->nch);
		if (keyed(p)) {
			struct kvs_key k = kt_key(M_KEY_A, p->key);

			M_CHECK(m, d[i].parent == p->parent, "page %u parent core %u model %u",
				i, d[i].parent, p->parent);
			M_CHECK(m, kt_key_eq(&k, &d[i].key), "page %u key", i);
			M_CHECK(m, d[i].ns == p->ns, "page %u ns core %llu model %llu", i,
				(unsigned long long)d[i].ns, (unsigned long long)p->ns);
		}
	}
	kt_check_pool(_metadata, m->viewer, m->pool, __LINE__, NULL);
}

/* ---- operations ----------------------------------------------------------- */

enum { OP_ALLOC, OP_PUBLISH, OP_LOOKUP, OP_PUT, OP_QUOTA, OP_FREE };

static void op_alloc(struct __test_metadata *_metadata, struct model *m, int ci)
{
	struct m_client *c = &m->c[ci];
	__u32 k = 1 + rnd(m, rnd(m, 8) ? 4 : 8), pages[8], nfree, avail, i, j;
	__u32 n_evicted = 0, need;
	int want = 0, alt = 0, ret, was[8];

	nfree = m_count(m, KVS_PAGE_FREE);
	avail = nfree + m_reachable_evictable(m);
	/* Half the time ask for what fits, so that most allocs evict. */
	if (avail < k && avail > nfree && rnd(m, 2))
		k = avail;
	if (c->held + k > c->quota)
		want = -EDQUOT;
	if (avail < k) {
		if (want)
			alt = -ENOSPC;	/* both apply: either may be reported */
		else
			want = -ENOSPC;
	}
	mlog(m, "client %d ALLOC %u (free %u, reachable %u, held %u/%u) want %d", ci, k,
	     nfree, avail, c->held, c->quota, want);
	memset(pages, 0xff, sizeof(pages));
	ret = kt_alloc(c->kc, k, pages);
	M_CHECK(m, ret == want || (alt && ret == alt), "ALLOC %u returned %d, model %d", k, ret,
		want);
	if (ret) {
		m->n_err[OP_ALLOC]++;
		return;
	}
	m->n_ok[OP_ALLOC]++;
	need = k > nfree ? k - nfree : 0;
	for (i = 0; i < k; i++) {
		M_CHECK(m, pages[i] < m->n_pages, "ALLOC page %u out of range", pages[i]);
		for (j = 0; j < i; j++)
			M_CHECK(m, pages[i] != pages[j], "ALLOC returned page %u twice", pages[i]);
		was[i] = m->p[pages[i]].state;
		M_CHECK(m, was[i] == KVS_PAGE_FREE || was[i] == KVS_PAGE_CACHED,
			"ALLOC returned page %u in state %u", pages[i], was[i]);
		n_evicted += was[i] == KVS_PAGE_CACHED;
	}
	M_CHECK(m, n_evicted == need, "ALLOC %u with %u free evicted %u pages", k, nfree,
		n_evicted);
	/* Leaf first: every child of an evicted page was evicted with it. */
	for (i = 0; i < k; i++) {
		if (was[i] != KVS_PAGE_CACHED)
			continue;
		for (j = 0; j < m->n_pages; j++) {
			__u32 x;
			int in = 0;

			if (!keyed(&m->p[j]) || m->p[j].parent != pages[i])
				continue;
			for (x = 0; x < k; x++)
				in |= pages[x] == j && was[x] == KVS_PAGE_CACHED;
			M_CHECK(m, in, "evicted page %u before its child %u (state %u)",
				pages[i], j, m->p[j].state);
		}
	}
	if (n_evicted)
		m->n_evict_allocs++;
	/* Evicted pages leave their parents first (a parent may go too). */
	for (i = 0; i < k; i++) {
		struct m_page *p = &m->p[pages[i]];

		if (was[i] == KVS_PAGE_CACHED) {
			if (p->parent != KVS_NO_PAGE)
				m->p[p->parent].nch--;
			m->evictions++;
		}
	}
	for (i = 0; i < k; i++) {
		struct m_page *p = &m->p[pages[i]];

		p->state = KVS_PAGE_OWNED;
		p->owner = ci;
		p->ref = 0;
		p->parent = KVS_NO_PAGE;
		p->nch = 0;
		c->hold[pages[i]] = 1;
		c->held++;
	}
	m->allocs += k;
}

static __u32 pick_held_shared(struct model *m, int ci)
{
	__u32 cand[M_MAX_PAGES], n = 0, i;

	for (i = 0; i < m->n_pages; i++)
		if (m->p[i].state == KVS_PAGE_SHARED && m->c[ci].hold[i])
			cand[n++] = i;
	return n ? cand[rnd(m, n)] : KVS_NO_PAGE;
}

static void op_publish(struct __test_metadata *_metadata, struct model *m, int ci)
{
	struct m_client *c = &m->c[ci];
	struct kvs_publish_entry e[6];
	__u32 owned[M_MAX_PAGES], n_owned = 0, cnt, i, ch, st, n_dup = 0, prev, want_dup = 0;
	__u32 bad_pg[M_MAX_PAGES], n_bad = 0;
	int want = 0, ret, err = rnd(m, 10) == 0 ? 1 + (int)rnd(m, 4) : 0;

	for (i = 0; i < m->n_pages; i++)
		if (m->p[i].state == KVS_PAGE_OWNED && m->p[i].owner == ci)
			owned[n_owned++] = i;
	if (!n_owned)
		return op_alloc(_metadata, m, ci);
	cnt = 1 + rnd(m, n_owned < 4 ? n_owned : 4);
	for (i = 0; i < n_owned; i++) {		/* shuffle */
		__u32 j = i + rnd(m, n_owned - i), t = owned[i];

		owned[i] = owned[j];
		owned[j] = t;
	}
	ch = rnd(m, M_CHAINS);
	st = rnd(m, M_CHAIN_LEN - cnt + 1);
	if (rnd(m, 3)) {
		/* Mostly extend what the namespace has of the chain, as engines do. */
		__u32 run = 0;

		while (run < M_CHAIN_LEN && m_find(m, c->ns, ch * 16 + run) != KVS_NO_PAGE)
			run++;
		st = run < M_CHAIN_LEN - cnt ? run : M_CHAIN_LEN - cnt;
	}
	memset(e, 0, sizeof(e));
	for (i = 0; i < cnt; i++) {
		e[i].page = owned[i];
		e[i].key = kt_key(M_KEY_A, ch * 16 + st + i);
		e[i].result = 0;
		if (i && rnd(m, 8) == 0)
			e[i].key = e[i - 1].key;		/* duplicate inside the batch */
		if (i == 0) {
			__u32 up = st ? m_find(m, c->ns, ch * 16 + st - 1) : KVS_NO_PAGE;

			if (up != KVS_NO_PAGE && m->p[up].state == KVS_PAGE_SHARED &&
			    c->hold[up] && rnd(m, 4))
				e[i].parent = up;	/* the real parent */
			else
				e[i].parent = rnd(m, 3) ? pick_held_shared(m, ci) : KVS_NO_PAGE;
		}
		else if (rnd(m, 8))
			e[i].parent = KVS_PARENT_PREV;
		else
			e[i].parent = rnd(m, 2) ? KVS_NO_PAGE : pick_held_shared(m, ci);
	}
	/* One fault at most. */
	if (err == 1) {				/* a page this file does not own */
		for (i = 0; i < m->n_pages; i++)
			if (!(m->p[i].state == KVS_PAGE_OWNED && m->p[i].owner == ci))
				bad_pg[n_bad++] = i;
		if (n_bad) {
			e[rnd(m, cnt)].page = bad_pg[rnd(m, n_bad)];
			want = -ENOENT;
		}
	} else if (err == 2 && cnt > 1) {	/* a page listed twice */
		e[1 + rnd(m, cnt - 1)].page = e[0].page;
		want = -EINVAL;
	} else if (err == 3) {			/* PARENT_PREV first */
		e[0].parent = KVS_PARENT_PREV;
		want = -EINVAL;
	} else if (err == 4) {			/* a parent not held SHARED */
		/*
		 * Not a page the batch itself publishes or takes a reference
		 * on: whether those count as held is not specified.
		 */
		for (i = 0; i < m->n_pages; i++) {
			__u32 j, in_batch = 0;

			for (j = 0; j < cnt; j++)
				in_batch |= e[j].page == i ||
					    m_find(m, c->ns, ch * 16 + st + j) == i;
			if (!(m->p[i].state == KVS_PAGE_SHARED && c->hold[i]) && !in_batch)
				bad_pg[n_bad++] = i;
		}
		if (n_bad) {
			e[rnd(m, cnt)].parent = bad_pg[rnd(m, n_bad)];
			want = -ENOENT;
		}
	}
	mlog(m, "client %d PUBLISH %u entries chain %u from %u, first page %u parent %u, want %d",
	     ci, cnt, ch, st, e[0].page, e[0].parent, want);
	ret = kt_publish(c->kc, e, cnt, &n_dup);
	M_CHECK(m, ret == want, "PUBLISH returned %d, model %d", ret, want);
	if (ret) {
		m->n_err[OP_PUBLISH]++;
		return;
	}
	m->n_ok[OP_PUBLISH]++;
	prev = KVS_NO_PAGE;
	for (i = 0; i < cnt; i++) {
		__u32 pg = e[i].page, par = e[i].parent, key = ch * 16 + st + i, canon;
		__u32 j;

		/* The key id of this entry (duplicates in the batch copy the previous). */
		for (j = i; j > 0 && !memcmp(&e[j].key, &e[j - 1].key, sizeof(e[j].key)); j--)
			;
		key = ch * 16 + st + j;
		if (par == KVS_PARENT_PREV)
			par = prev;
		canon = m_find(m, c->ns, key);
		if (canon != KVS_NO_PAGE) {
			M_CHECK(m, e[i].result == canon && e[i].flags == KVS_PUBLISHED_DUP,
				"entry %u: result %u flags %u, model: duplicate of %u", i,
				e[i].result, e[i].flags, canon);
			m->p[pg].state = KVS_PAGE_FREE;
			m->p[pg].owner = -1;
			c->hold[pg] = 0;
			c->hold[canon]++;
			m->p[canon].ref++;
			m->p[canon].state = KVS_PAGE_SHARED;
			m->dups++;
			want_dup++;
			m->n_dup_entries++;
			prev = canon;
		} else {
			M_CHECK(m, e[i].result == pg && e[i].flags == 0,
				"entry %u: result %u flags %u, model: new page %u", i,
				e[i].result, e[i].flags, pg);
			m->p[pg].state = KVS_PAGE_SHARED;
			m->p[pg].owner = -1;
			m->p[pg].ref = 1;
			m->p[pg].key = key;
			m->p[pg].ns = c->ns;
			m->p[pg].parent = par;
			m->p[pg].nch = 0;
			if (par != KVS_NO_PAGE)
				m->p[par].nch++;
			prev = pg;
		}
		m->publishes++;
	}
	M_CHECK(m, n_dup == want_dup, "n_dup core %u model %u", n_dup, want_dup);
}

static void op_lookup(struct __test_metadata *_metadata, struct model *m, int ci)
{
	struct m_client *c = &m->c[ci];
	struct kvs_key k[10];
	__u32 ids[10], pages[10], want_pg[10], len = 1 + rnd(m, 10), ch = rnd(m, M_CHAINS);
	__u32 st = rnd(m, 4) ? 0 : rnd(m, M_CHAIN_LEN), run = 0, n_hit = 0, i;
	int want = 0, ret;

	for (i = 0; i < len; i++)
		ids[i] = ch * 16 + st + i;
	if (rnd(m, 4) == 0)
		ids[rnd(m, len)] = M_MISS + rnd(m, 1000);
	for (i = 0; i < len; i++)
		k[i] = kt_key(M_KEY_A, ids[i]);
	for (run = 0; run < len; run++) {
		want_pg[run] = m_find(m, c->ns, ids[run]);
		if (want_pg[run] == KVS_NO_PAGE)
			break;
	}
	if (c->held + run > c->quota)
		want = -EDQUOT;
	mlog(m, "client %d LOOKUP %u keys chain %u from %u: run %u, want %d", ci, len, ch, st,
	     run, want);
	ret = kt_lookup(c->kc, k, len, pages, &n_hit);
	M_CHECK(m, ret == want, "LOOKUP returned %d, model %d", ret, want);
	if (ret) {
		struct kvs_pool_stats st;

		/*
		 * Whether a failed LOOKUP counts its hits is not specified:
		 * accept both.
		 */
		ASSERT_EQ(0, kt_stats(m->viewer, m->pool, 0, &st));
		M_CHECK(m, st.hits == m->hits || st.hits == m->hits + run,
			"hits after a failed LOOKUP: core %llu model %llu (+%u)",
			(unsigned long long)st.hits, (unsigned long long)m->hits, run);
		m->hits = st.hits;
		m->n_err[OP_LOOKUP]++;
		return;
	}
	m->n_ok[OP_LOOKUP]++;
	M_CHECK(m, n_hit == run, "LOOKUP n_hit core %u model %u", n_hit, run);
	for (i = 0; i < run; i++) {
		M_CHECK(m, pages[i] == want_pg[i], "LOOKUP key %u: core page %u model %u", i,
			pages[i], want_pg[i]);
		m->p[want_pg[i]].ref++;
		m->p[want_pg[i]].state = KVS_PAGE_SHARED;
		c->hold[want_pg[i]]++;
		c->held++;
	}
	m->hits += run;
}

static void op_put(struct __test_metadata *_metadata, struct model *m, int ci)
{
	struct m_client *c = &m->c[ci];
	__u32 list[M_MAX_PAGES * 4], n = 0, i, j, t;
	int want = 0, ret;

	for (i = 0; i < m->n_pages; i++)
		for (j = 0; j < c->hold[i]; j++)
			if (rnd(m, 2) && n < KT_ARRAY_SIZE(list) - 2)
				list[n++] = i;
	if (!n) {
		if (!c->held)
			return op_alloc(_metadata, m, ci);
		for (i = 0; i < m->n_pages && !n; i++)
			if (c->hold[i])
				list[n++] = i;
	}
	for (i = 0; i < n; i++) {		/* shuffle */
		j = i + rnd(m, n - i);
		t = list[i];
		list[i] = list[j];
		list[j] = t;
	}
	if (rnd(m, 10) == 0) {
		/* One page too many: unheld, or held fewer times than listed. */
		__u32 pg = rnd(m, m->n_pages);

		list[n++] = pg;
		for (j = 0, t = 0; j < n; j++)
			t += list[j] == pg;
		if (t > c->hold[pg])
			want = -ENOENT;
		else
			n--;	/* still fine: drop it again */
	}
	mlog(m, "client %d PUT %u pages (first %u), want %d", ci, n, list[0], want);
	ret = kt_put(c->kc, list, n);
	M_CHECK(m, ret == want, "PUT returned %d, model %d", ret, want);
	if (ret) {
		m->n_err[OP_PUT]++;
		return;
	}
	m->n_ok[OP_PUT]++;
	for (i = 0; i < n; i++)
		m_release(m, ci, list[i]);
}

static void op_quota(struct __test_metadata *_metadata, struct model *m, int ci)
{
	struct m_client *c = &m->c[ci];
	__u32 q = rnd(m, m->max_q + 3), got = 0;
	int want = (q > m->max_q || q < c->held) ? -EINVAL : 0, ret;

	/* Mostly generous quotas, or the trace starves. */
	if (!want && rnd(m, 3))
		q = c->held + (m->max_q - c->held) / 2 + rnd(m, (m->max_q - c->held) / 2 + 1);
	want = (q > m->max_q || q < c->held) ? -EINVAL : 0;
	mlog(m, "client %d QUOTA set %u (held %u, max %u), want %d", ci, q, c->held, m->max_q,
	     want);
	ret = kt_quota(c->kc, 1, q, &got, NULL);
	M_CHECK(m, ret == want, "QUOTA set %u returned %d, model %d", q, ret, want);
	if (ret) {
		m->n_err[OP_QUOTA]++;
		return;
	}
	m->n_ok[OP_QUOTA]++;
	M_CHECK(m, got == q, "QUOTA set %u reports %u", q, got);
	c->quota = q;
}

static void m_new_client(struct __test_metadata *_metadata, struct model *m, int ci)
{
	struct m_client *c = &m->c[ci];
	int ret;

	memset(c, 0, sizeof(*c));
	c->kc = kt_new(1000, 1000, 0);
	ASSERT_NE(NULL, c->kc);
	c->ns = 1 + rnd(m, 2);
	c->quota = m->max_q;
	ret = kt_attach(c->kc, "model", c->ns);
	M_CHECK(m, ret == 0, "ATTACH: %d", ret);
}

static void op_free(struct __test_metadata *_metadata, struct model *m, int ci)
{
	struct m_client *c = &m->c[ci];
	__u32 i;

	mlog(m, "client %d FREE (held %u)", ci, c->held);
	kt_free(c->kc);
	for (i = 0; i < m->n_pages; i++)
		while (c->hold[i])
			m_release(m, ci, i);
	m->n_ok[OP_FREE]++;
	m_new_client(_metadata, m, ci);
}

/* ---- the test ------------------------------------------------------------- */

FIXTURE(model) {
	int dummy;
};

FIXTURE_VARIANT(model) {
	__u64 seed;
	__u32 n_pages;
	__u32 quota;		/* pool max_pages_per_file; 0: n_pages */
	__u32 n_clients;
};

FIXTURE_VARIANT_ADD(model, tight) {
	.seed = 1, .n_pages = 12, .quota = 8, .n_clients = 2,
};

FIXTURE_VARIANT_ADD(model, medium) {
	.seed = 2, .n_pages = 24, .quota = 16, .n_clients = 3,
};

FIXTURE_VARIANT_ADD(model, roomy) {
	.seed = 3, .n_pages = 64, .quota = 0, .n_clients = 4,
};

FIXTURE_VARIANT_ADD(model, coffee) {
	.seed = 0xc0ffee, .n_pages = 20, .quota = 20, .n_clients = 3,
};

FIXTURE_VARIANT_ADD(model, crowded) {
	.seed = 20240601, .n_pages = 16, .quota = 12, .n_clients = 4,
};

FIXTURE_SETUP(model)
{
	ASSERT_EQ(0, kt_core_init());
}

FIXTURE_TEARDOWN(model)
{
	kt_core_teardown(_metadata, M.pool);
}

TEST_F_TIMEOUT(model, random_trace, 120)
{
	struct model *m = &M;
	long steps = kt_env_long("KVS_MODEL_STEPS", 20000), s;
	__u32 i;
	int ci;

	memset(m, 0, sizeof(*m));
	m->seed = (__u64)kt_env_long("KVS_MODEL_SEED", (long)variant->seed);
	m->rng = m->seed * 0x9e3779b97f4a7c15ull + 1;
	m->n_pages = variant->n_pages;
	m->max_q = variant->quota ? variant->quota : variant->n_pages;
	m->n_clients = variant->n_clients;
	for (i = 0; i < m->n_pages; i++) {
		m->p[i].parent = KVS_NO_PAGE;
		m->p[i].owner = -1;
	}
	m->viewer = kt_new(0, 0, 1);
	ASSERT_NE(NULL, m->viewer);
	ASSERT_EQ(0, kt_create(m->viewer, "model", m->n_pages, 0666, 0, variant->quota,
			       &m->pool));
	for (ci = 0; ci < (int)m->n_clients; ci++)
		m_new_client(_metadata, m, ci);
	m_compare(_metadata, m, 1);

	for (s = 0; s < steps; s++) {
		__u32 r = rnd(m, 100);

		m->step = s;
		ci = rnd(m, m->n_clients);
		if (r < 25)
			op_alloc(_metadata, m, ci);
		else if (r < 50)
			op_publish(_metadata, m, ci);
		else if (r < 72)
			op_lookup(_metadata, m, ci);
		else if (r < 94)
			op_put(_metadata, m, ci);
		else if (r < 97)
			op_quota(_metadata, m, ci);
		else
			op_free(_metadata, m, ci);
		m_compare(_metadata, m, (s & 7) == 0);
	}
	/* Everyone leaves: all pages FREE or CACHED, no reference left. */
	m->step = s;
	for (ci = 0; ci < (int)m->n_clients; ci++) {
		kt_free(m->c[ci].kc);
		for (i = 0; i < m->n_pages; i++)
			while (m->c[ci].hold[i])
				m_release(m, ci, i);
		m->c[ci].kc = NULL;
	}
	m->n_clients = 0;
	m_compare(_metadata, m, 1);
	EXPECT_EQ(0, m_count(m, KVS_PAGE_OWNED) + m_count(m, KVS_PAGE_SHARED));

	/* The trace must have exercised what it is for. */
	TH_LOG("seed %llu: alloc %llu/%llu publish %llu/%llu lookup %llu/%llu put %llu/%llu "
	       "quota %llu/%llu free %llu; evicting allocs %llu, duplicates %llu, hits %llu",
	       (unsigned long long)m->seed,
	       (unsigned long long)m->n_ok[OP_ALLOC], (unsigned long long)m->n_err[OP_ALLOC],
	       (unsigned long long)m->n_ok[OP_PUBLISH], (unsigned long long)m->n_err[OP_PUBLISH],
	       (unsigned long long)m->n_ok[OP_LOOKUP], (unsigned long long)m->n_err[OP_LOOKUP],
	       (unsigned long long)m->n_ok[OP_PUT], (unsigned long long)m->n_err[OP_PUT],
	       (unsigned long long)m->n_ok[OP_QUOTA], (unsigned long long)m->n_err[OP_QUOTA],
	       (unsigned long long)m->n_ok[OP_FREE], (unsigned long long)m->n_evict_allocs,
	       (unsigned long long)m->n_dup_entries, (unsigned long long)m->hits);
	if (steps >= 1000) {
		EXPECT_LT(0, m->n_evict_allocs);
		EXPECT_LT(0, m->n_dup_entries);
		EXPECT_LT(0, m->hits);
		EXPECT_LT(0, m->n_err[OP_PUBLISH]);
		EXPECT_LT(0, m->n_err[OP_PUT]);
		EXPECT_LT(0, m->n_ok[OP_FREE]);
	}
}

TEST_HARNESS_MAIN
