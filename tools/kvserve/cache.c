// SPDX-License-Identifier: GPL-2.0
/*
 * The two caches a kvserve request's pages can live in, behind one set of
 * calls (struct req_cache in worker.h): the pool's prefix cache, shared
 * through the arbiter, and the worker's private cache, a radix tree over
 * private pages (--no-share, and the fallback when the arbiter fails).
 * worker.c serves a request through these and never asks which it has.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvshare/arbiter.h>
#include <kvshare/prefix.h>
#include <kvshare/req_table.h>

#include "kvserve.h"
#include "worker.h"

/* ---- the private cache ---- */

static void pc_release(void *priv, const uint32_t *pages, uint32_t n, unsigned int flags)
{
	struct private_cache *pc = priv;

	(void)flags;
	memcpy(pc->free + pc->n_free, pages, n * sizeof(*pages));
	pc->n_free += n;
}

static int pc_adopt(void *priv, const uint32_t *tokens, uint32_t first, uint32_t *pages,
		    uint32_t n, uint32_t parent)
{
	struct private_cache *pc = priv;

	(void)tokens, (void)first, (void)pages, (void)parent;
	pc->computed_pages += n;
	return 0;
}

int pc_setup(struct worker *w)
{
	struct private_cache *pc = &w->pc;
	struct kv_radix_ops ops = { .release = pc_release, .adopt = pc_adopt, .priv = pc };
	uint32_t i, n = w->o->private_pages ? w->o->private_pages : w->pool_pages;

	if (pc->base)
		return 0;
	/* Room for a whole batch, whatever the pool's size: the fallback must serve. */
	if (n < w->o->batch * w->max_pages)
		n = w->o->batch * w->max_pages;
	/* Untouched pages are never backed: what is resident is what is used. */
	pc->base = malloc((size_t)n * w->geom.page_bytes);
	pc->free = malloc((size_t)n * sizeof(*pc->free));
	if (!pc->base || !pc->free || kv_radix_create(w->geom.tokens_per_page, &ops, &pc->tree)) {
		free(pc->base);
		free(pc->free);
		pc->base = NULL;
		return -ENOMEM;
	}
	pc->n_pages = n;
	for (i = 0; i < n; i++)
		pc->free[i] = n - 1 - i;
	pc->n_free = n;
	return 0;
}

static int pc_alloc(struct private_cache *pc, uint32_t n, uint32_t *pages)
{
	while (pc->n_free < n) {
		size_t ev = kv_radix_evict(pc->tree, n - pc->n_free);

		if (!ev)
			return -ENOSPC;
		pc->evicted_pages += ev;
	}
	pc->n_free -= n;
	memcpy(pages, pc->free + pc->n_free, n * sizeof(*pages));
	return 0;
}

static void pc_abort(struct worker *w, struct request *q)
{
	const uint32_t T = w->geom.tokens_per_page;
	uint32_t all, i;

	if (!kv_req_row(w->rt, q->req.slot))
		return;
	all = (q->req.n_tokens + T - 1) / T;
	for (i = q->req.cached_len / T; i < all; i++)
		w->pc.free[w->pc.n_free++] = kv_req_page(w->rt, q->req.slot, i);
	kv_radix_unlock(w->pc.tree, q->req.last_node);
	kv_req_free(w->rt, q->req.slot);
	q->req.last_node = NULL;
	q->req.slot = -1;
}

/* Nothing to fall back to: the error is the request's. */
static int pc_fail(struct worker *w, struct request *q, int err)
{
	pc_abort(w, q);
	return err;
}

static long pc_match(struct worker *w, struct request *q)
{
	long matched = kv_radix_req_match(w->pc.tree, w->rt, &q->req, w->n_prompt - 1);
	uint32_t need;
	int ret;

	if (matched < 0) {
		kv_req_free(w->rt, q->req.slot);
		return matched;
	}
	w->pc.local_hit_pages += matched / w->geom.tokens_per_page;
	need = kv_req_pages_needed(w->rt, q->req.slot, w->n_kv);
	ret = pc_alloc(&w->pc, need, w->pbuf);
	if (!ret) {
		ret = kv_req_extend(w->rt, q->req.slot, w->n_kv, w->pbuf);
		if (ret)
			pc_release(&w->pc, w->pbuf, need, 0);
	}
	if (ret)
		return pc_fail(w, q, ret);
	q->req.n_tokens = w->n_kv;
	return matched;
}

static int pc_cache(struct worker *w, struct request *q, bool finished)
{
	if (finished)
		return kv_radix_cache_finished_req(w->pc.tree, w->rt, &q->req, 0);
	return kv_radix_cache_unfinished_req(w->pc.tree, w->rt, &q->req, 0);
}

static void *pc_memory(const struct worker *w, uint64_t *n_pages)
{
	*n_pages = w->pc.n_pages;
	return w->pc.base;
}

const struct req_cache cache_private = {
	.match = pc_match,
	.cache = pc_cache,
	.fail = pc_fail,
	.abort = pc_abort,
	.memory = pc_memory,
};

/* ---- the pool's prefix cache, shared through the arbiter ---- */

/*
 * An arbiter call failed with @err (0: a LOOKUP failed inside the prefix
 * cache, which keeps the errno to itself).  A handle that timed out or
 * lost the daemon is broken for good (kv_arbiter_broken() says why; every
 * later call fails with ENOTCONN): from then on this worker serves
 * without sharing.
 */
static void arbiter_failed(struct worker *w, int err)
{
	int why = kv_arbiter_broken(kv_pool_arbiter(w->pool));

	w->t.arbiter_errors++;
	if (!why && (err == -ETIMEDOUT || err == -ENOTCONN))
		why = err;
	if (why && !w->dead) {
		w->dead = true;
		w->t.arbiter_gone = why;
		fprintf(stderr, "kvserve: worker %u: the arbiter failed (%s): serving "
			"without sharing from now on\n", w->id, strerror(-why));
	}
}

static void shared_abort(struct worker *w, struct request *q)
{
	kv_prefix_abort(w->cache, w->rt, &q->req);
}

/* The arbiter failed the request: it is dropped, to be served privately. */
static int shared_fail(struct worker *w, struct request *q, int err)
{
	shared_abort(w, q);
	arbiter_failed(w, err);
	return -EAGAIN;
}

static long shared_match(struct worker *w, struct request *q)
{
	uint64_t errs = kv_prefix_stats(w->cache)->errors;
	long matched = kv_prefix_match(w->cache, w->rt, &q->req, w->n_prompt - 1);
	int ret;

	if (matched < 0) {
		kv_req_free(w->rt, q->req.slot);
		arbiter_failed(w, (int)matched);
		return -EAGAIN;
	}
	if (kv_prefix_stats(w->cache)->errors != errs)
		return shared_fail(w, q, 0);
	ret = kv_prefix_reserve(w->cache, w->rt, &q->req, w->n_kv);
	if (ret)
		return shared_fail(w, q, ret);
	return matched;
}

/*
 * A finished request was served and checked: when its PUBLISH fails, only
 * its new pages are not shared.
 */
static int shared_cache(struct worker *w, struct request *q, bool finished)
{
	int ret;

	if (!finished)
		return kv_prefix_cache_unfinished(w->cache, w->rt, &q->req);
	ret = kv_prefix_cache_finished(w->cache, w->rt, &q->req);
	if (ret) {
		w->t.unpublished++;
		arbiter_failed(w, ret);
	}
	return 0;
}

static void *shared_memory(const struct worker *w, uint64_t *n_pages)
{
	*n_pages = w->pool_pages;
	return kv_page_addr(w->pool, 0);
}

const struct req_cache cache_shared = {
	.match = shared_match,
	.cache = shared_cache,
	.fail = shared_fail,
	.abort = shared_abort,
	.memory = shared_memory,
};
