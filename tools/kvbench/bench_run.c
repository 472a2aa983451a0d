// SPDX-License-Identifier: GPL-2.0
/*
 * The kvbench scenarios, on one pool, through any bench_target.
 *
 * Order matters, because each phase leaves the pool in the state the
 * next one needs:
 *   1. ALLOC from an empty pool (pages put back FREE after each sample);
 *   2. PUBLISH (pages put back, so they stay CACHED);
 *   3. fill: publish and put chains until every page is CACHED, so that
 *      lookups search an index as large as the pool;
 *   4. LOOKUP+PUT of a chain published just before, in the full index;
 *   5. ALLOC when every page is CACHED: each page costs one eviction;
 *      the pages are published again afterwards to keep the pool full.
 * Only the command itself is inside the timed region; key generation
 * and the bookkeeping calls are outside.
 */
#include "kvbench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct run {
	struct bench_target *t;
	uint64_t n_pages;
	uint32_t reps;
	uint64_t next_chain;		/* fresh key chains */
	uint32_t pages[MAX_CHAIN];
	struct kvs_key keys[MAX_CHAIN];
	struct kvs_publish_entry ents[MAX_CHAIN];
	uint64_t *samples;		/* [reps] */
	const char *what;		/* the failing step, for the report */
};

static int fail(struct run *r, const char *what, int ret)
{
	r->what = what;
	return ret;
}

static int do_alloc(struct run *r, uint32_t n)
{
	struct kvs_alloc req = { .count = n, .pages = (uintptr_t)r->pages };

	return r->t->data(r->t, KVS_IOC_ALLOC, &req);
}

static int do_put(struct run *r, uint32_t n)
{
	struct kvs_put req = { .count = n, .pages = (uintptr_t)r->pages };

	return r->t->data(r->t, KVS_IOC_PUT, &req);
}

/* Entries for pages[0..n) as one fresh chain, linked by PARENT_PREV. */
static void prep_publish(struct run *r, uint32_t n)
{
	uint64_t chain = r->next_chain++;
	uint32_t i;

	memset(r->ents, 0, n * sizeof(r->ents[0]));
	for (i = 0; i < n; i++) {
		r->ents[i].page = r->pages[i];
		r->ents[i].parent = i ? KVS_PARENT_PREV : KVS_NO_PAGE;
		bench_key(&r->ents[i].key, chain, i);
	}
}

/* After PUBLISH the file holds a reference on each result page. */
static int do_publish(struct run *r, uint32_t n)
{
	struct kvs_publish req = { .count = n, .entries = (uintptr_t)r->ents };
	uint32_t i;
	int ret;

	ret = r->t->data(r->t, KVS_IOC_PUBLISH, &req);
	for (i = 0; !ret && i < n; i++)
		r->pages[i] = r->ents[i].result;
	return ret;
}

/* PUT the n pages the run holds. */
static int put_held(struct run *r, uint32_t n)
{
	int ret = do_put(r, n);

	return ret ? fail(r, "put", ret) : 0;
}

/* PUBLISH the chain prep_publish() made of the n pages held, then PUT: left CACHED. */
static int publish_put(struct run *r, uint32_t n)
{
	int ret = do_publish(r, n);

	return ret ? fail(r, "publish", ret) : put_held(r, n);
}

/* An ALLOC of n pages timed into sample @rep; @what names it in an error. */
static int alloc_timed(struct run *r, uint32_t n, uint32_t rep, const char *what)
{
	uint64_t t0 = bench_now_ns();
	int ret = do_alloc(r, n);

	r->samples[rep] = bench_now_ns() - t0;
	return ret ? fail(r, what, ret) : 0;
}

/* ALLOC n pages and make them a fresh chain to PUBLISH (prep_publish). */
static int alloc_chain(struct run *r, uint32_t n)
{
	int ret = do_alloc(r, n);

	if (ret)
		return fail(r, "alloc", ret);
	prep_publish(r, n);
	return 0;
}

/* A fresh chain of n pages, left CACHED; its keys stay in r->keys. */
static int publish_cached(struct run *r, uint32_t n)
{
	uint32_t i;
	int ret;

	ret = alloc_chain(r, n);
	if (ret)
		return ret;
	for (i = 0; i < n; i++)
		r->keys[i] = r->ents[i].key;
	return publish_put(r, n);
}

static int time_alloc(struct run *r, uint32_t n, uint32_t rep)
{
	int ret = alloc_timed(r, n, rep, "alloc");

	return ret ? ret : put_held(r, n);
}

static int time_publish(struct run *r, uint32_t n, uint32_t rep)
{
	uint64_t t0;
	int ret;

	ret = alloc_chain(r, n);
	if (ret)
		return ret;
	t0 = bench_now_ns();
	ret = do_publish(r, n);
	r->samples[rep] = bench_now_ns() - t0;
	if (ret)
		return fail(r, "publish", ret);
	return put_held(r, n);
}

/* r->keys holds a cached chain of n pages (publish_cached). */
static int time_lookup_put(struct run *r, uint32_t n, uint32_t rep)
{
	struct kvs_lookup lk = { .count = n, .keys = (uintptr_t)r->keys,
				 .pages = (uintptr_t)r->pages };
	uint64_t t0;
	int ret;

	t0 = bench_now_ns();
	ret = r->t->data(r->t, KVS_IOC_LOOKUP, &lk);
	if (!ret && lk.n_hit == n)
		ret = do_put(r, n);
	r->samples[rep] = bench_now_ns() - t0;
	if (!ret && lk.n_hit != n) {
		/* Evicted under us would be an arbiter bug: the pool is idle. */
		fprintf(stderr, "kvbench: %s: lookup hit %u of %u pages\n",
			r->t->name, lk.n_hit, n);
		return fail(r, "lookup", -ENOENT);
	}
	return ret ? fail(r, "lookup+put", ret) : 0;
}

/* The pool is all CACHED; republishing the pages keeps it so. */
static int time_evict(struct run *r, uint32_t n, uint32_t rep)
{
	int ret = alloc_timed(r, n, rep, "evict-alloc");

	if (ret)
		return ret;
	prep_publish(r, n);
	return publish_put(r, n);
}

typedef int (*timed_fn)(struct run *r, uint32_t n, uint32_t rep);

/* R samples of one scenario, stored as median ns per page. */
static int measure(struct run *r, timed_fn fn, uint32_t n, double *out)
{
	uint32_t rep;
	int ret;

	for (rep = 0; rep < r->reps; rep++) {
		ret = fn(r, n, rep);
		if (ret)
			return ret;
	}
	*out = (double)bench_median(r->samples, r->reps) / n;
	return 0;
}

static int pool_stats(struct run *r, uint32_t id, uint32_t flags,
		      struct kvs_pool_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->pool_id = id;
	st->flags = flags;
	return r->t->ctl(r->t, KVS_IOC_POOL_STATS, st);
}

/* Phase 3: every page CACHED, checked against the pool's own counters. */
static int fill(struct run *r, uint32_t pool_id)
{
	uint32_t n = r->n_pages < MAX_CHAIN ? r->n_pages : MAX_CHAIN;
	struct kvs_pool_stats st;
	uint64_t done;
	int ret;

	/* Free pages go first, so n_pages allocations leave none free. */
	for (done = 0; done < r->n_pages; done += n) {
		ret = publish_cached(r, n);
		if (ret)
			return ret;
	}
	ret = pool_stats(r, pool_id, 0, &st);
	if (ret)
		return fail(r, "stats", ret);
	if (st.n_cached != r->n_pages) {
		fprintf(stderr, "kvbench: %s: fill left %llu of %llu pages "
			"cached\n", r->t->name, (unsigned long long)st.n_cached,
			(unsigned long long)r->n_pages);
		return fail(r, "fill", -EUCLEAN);
	}
	return 0;
}

static int run_phases(struct run *r, struct bench_results *res, int pool,
		      int slot, uint32_t pool_id)
{
	static const timed_fn early[] = { time_alloc, time_publish };
	int op, c, ret;

	for (op = OP_ALLOC; op <= OP_PUBLISH; op++)
		for (c = 0; c < N_CHAINS; c++) {
			if (bench_chains[c] > r->n_pages)
				continue;
			ret = measure(r, early[op], bench_chains[c],
				      &res->ns[pool][op][c][slot]);
			if (ret)
				return ret;
		}
	ret = fill(r, pool_id);
	for (c = 0; !ret && c < N_CHAINS; c++) {
		if (bench_chains[c] > r->n_pages)
			continue;
		ret = publish_cached(r, bench_chains[c]);
		if (!ret)
			ret = measure(r, time_lookup_put, bench_chains[c],
				      &res->ns[pool][OP_LOOKUP_PUT][c][slot]);
	}
	for (c = 0; !ret && c < N_CHAINS; c++) {
		if (bench_chains[c] > r->n_pages)
			continue;
		ret = measure(r, time_evict, bench_chains[c],
			      &res->ns[pool][OP_EVICT][c][slot]);
	}
	return ret;
}

/* Create and attach a pool of n pages; the core never touches KV bytes. */
static int pool_setup(struct run *r, uint32_t *pool_id, bool *created)
{
	struct kvs_pool_create cr = {
		.n_pages = r->n_pages,
		.geom = { .n_layers = 1, .n_kv_heads = 1, .head_dim = 1,
			  .tokens_per_page = 1, .dtype = KVS_DTYPE_F16 },
		.mode = 0600,
		.mem_fd = -1,
	};
	struct kvs_pool_attach at = { 0 };
	int ret;

	snprintf(cr.name, sizeof(cr.name), "kvbench-%d-%llu", (int)getpid(),
		 (unsigned long long)r->n_pages);
	ret = r->t->ctl(r->t, KVS_IOC_POOL_CREATE, &cr);
	if (ret)
		return fail(r, "pool create", ret);
	*pool_id = cr.pool_id;
	*created = true;
	ret = r->t->open(r->t);
	if (ret)
		return fail(r, "open", ret);
	strcpy(at.name, cr.name);
	at.owner = geteuid();		/* the pool this process just created */
	ret = r->t->data(r->t, KVS_IOC_POOL_ATTACH, &at);
	return ret ? fail(r, "pool attach", ret) : 0;
}

/* Checks the invariants once the run is over, then removes the pool. */
static int pool_teardown(struct run *r, uint32_t pool_id, int ret)
{
	struct kvs_pool_destroy de = { .pool_id = pool_id };
	struct kvs_pool_stats st;
	int err;

	if (!ret) {
		err = pool_stats(r, pool_id, KVS_STATS_CHECK, &st);
		if (err)
			ret = fail(r, "stats check", err);
	}
	r->t->close(r->t);
	err = r->t->ctl(r->t, KVS_IOC_POOL_DESTROY, &de);
	if (err && !ret)
		ret = fail(r, "pool destroy", err);
	return ret;
}

int bench_pool(struct bench_target *t, struct bench_results *res, int pool,
	       int slot)
{
	bool created = false;
	uint32_t pool_id = 0;
	struct run *r;
	int ret;

	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->t = t;
	r->n_pages = res->pools[pool];
	r->reps = res->reps;
	r->next_chain = (uint64_t)pool << 40;
	r->samples = calloc(r->reps, sizeof(*r->samples));
	if (!r->samples) {
		free(r);
		return -ENOMEM;
	}
	ret = pool_setup(r, &pool_id, &created);
	if (!ret)
		ret = run_phases(r, res, pool, slot, pool_id);
	if (created)
		ret = pool_teardown(r, pool_id, ret);
	if (ret)
		fprintf(stderr, "kvbench: %s: pool of %llu pages: %s failed: %s\n",
			t->name, (unsigned long long)r->n_pages, r->what,
			strerror(-ret));
	free(r->samples);
	free(r);
	return ret;
}
