// SPDX-License-Identifier: GPL-2.0
/*
 * kvserve: the reference multi-process serving run.  Several worker
 * processes serve prompts that share prefixes (one system prompt, a few
 * documents, a unique question each), as replicas of an engine on one host
 * would, and share prefix KV pages through the arbiter:
 *
 *   match   the prompt against the worker's radix tree, then the arbiter
 *           (LOOKUP of chained SHA-256 block keys): pages some process
 *           already computed;
 *   prefill the rest, one request at a time, in chunks (--prefill-chunk),
 *           with a small transformer (model.c) whose attention is libkv's
 *           paged C reference, reading the shared pages in place; PUBLISH
 *           each chunk's full pages at once (a duplicate: use the
 *           canonical), so that workers waiting for them in flight and
 *           requests that come while this one decodes find them;
 *   decode  greedily, all the requests a worker holds (--batch) together:
 *           one batched call of the paged decode kernel per layer and
 *           generated token; a finished request makes room for the next;
 *   finish  PUBLISH the generated tokens' full pages and PUT everything:
 *           the pages stay CACHED for the next one.
 *
 * --no-share serves the same requests without the arbiter: each worker
 * keeps its own prefix cache (a radix tree over private pages), as an
 * engine without kvshare does.  And when an arbiter call fails during the
 * run (a deadline passed, the daemon is gone), the worker serves that
 * request the same way, in private pages; after a lost connection every
 * later one too, and the requests it held in pool pages start over there.
 *
 * Every --verify'th request of a worker is recomputed from scratch in
 * private memory, alone (a batch of one), and compared to the bit: every
 * KV row of every layer in its pages (its own and other processes'), each
 * generated token and the final hidden state.  Shared memory, arbitration,
 * batching and the attention code are all on trial, and the recompute's
 * time is the cost sharing saved.  The outputs digest (tokens and final
 * states of every request) is the same with or without sharing, whatever
 * the batch: the model is deterministic to the bit.  With --memory cuda the
 * pages the CUDA kernels wrote are compared within tests/attn's tolerances
 * instead (the kernels sum in another order), layer 0's KV still to the bit.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <kvshare/arbiter.h>
#include <kvshare/attn.h>
#include <kvshare/radix.h>
#include <kvshare/req_table.h>

#include "model.h"
#include "tolerance.h"

struct opts {
	const char *arbiter;
	const char *pool;
	const char *salt;
	bool cuda;			/* --memory cuda: the pool is device memory */
	unsigned int workers, requests, system_tokens, doc_tokens, docs;
	unsigned int question_tokens, q_heads, gen_tokens, verify, batch;
	unsigned int prefill_chunk;	/* tokens; 0: the whole prompt in one call */
	unsigned int private_pages;	/* 0: as many as the pool has */
	unsigned int inflight_wait_ms;	/* in-flight dedupe; 0: off */
	bool no_share;
	bool burst;			/* every worker's first request: document 0 */
	uint64_t seed, model_seed;
	char default_salt[96];
};

/* What one worker did, left for the parent in shared memory. */
struct tally {
	uint64_t requests, prompt_tokens, page_tokens;
	uint64_t local_hit_pages, remote_hit_pages, computed_pages, dup_pages;
	uint64_t claimed_pages, claim_conflicts;	/* --inflight-wait */
	uint64_t evicted_pages, errors;
	uint64_t prefill_tokens, decode_tokens, decode_calls;
	uint64_t verified_requests, verified_bytes, mismatches;
	/*
	 * --memory cuda: greedy tokens flipped within tolerance; the worst
	 * errors against the recompute (1e-9 units): relative and absolute
	 * of the KV (layers 1 on), of the final state.
	 */
	uint64_t tol_flips, tol_err[4];
	uint64_t prefill_ns, decode_ns, verify_prefill_ns;
	/*
	 * Where a worker's time goes, wall clock and its own CPU time (the
	 * difference: waiting for a core, an arbiter reply or a page another
	 * worker computes).  match: the radix tree, the block keys' hashing,
	 * LOOKUP (and in-flight waits), ALLOC; publish: the keys and PUBLISH
	 * or PUT of a prompt's and a finished request's pages.
	 */
	uint64_t match_ns, match_cpu_ns, prefill_cpu_ns, publish_ns, publish_cpu_ns;
	uint64_t decode_cpu_ns, verify_ns, verify_cpu_ns, serve_cpu_ns;
	uint64_t setup_ns;		/* process start to ready: fork, pool, model */
	uint64_t start_ns, end_ns;	/* CLOCK_MONOTONIC: serving, setup excluded */
	uint64_t held_pages, prefix_pages;	/* in the worker's trees at its end */
	uint64_t private_pages, private_prefix_pages;	/* of which private */
	uint64_t fallback_requests;	/* served in private pages after an arbiter error */
	uint64_t unpublished;		/* finished, but PUBLISH failed: not shared */
	uint64_t arbiter_errors;	/* arbiter calls that failed */
	int64_t arbiter_gone;		/* -errno that ended sharing for the run, or 0 */
	uint64_t digest;		/* XOR over requests of a hash of their outputs */
	uint64_t ok;			/* the worker ran to its end */
};

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static uint64_t now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

/* A span of wall and CPU time, for struct tally's breakdown. */
struct span {
	uint64_t wall, cpu;
};

static struct span span_start(void)
{
	return (struct span){ now_ns(), clock_ns(CLOCK_PROCESS_CPUTIME_ID) };
}

static void span_end(const struct span *s, uint64_t *wall, uint64_t *cpu)
{
	*wall += now_ns() - s->wall;
	*cpu += clock_ns(CLOCK_PROCESS_CPUTIME_ID) - s->cpu;
}

/* @n token ids drawn from stream @stream (a "text"). */
static void text(uint32_t *out, unsigned int n, uint64_t stream)
{
	uint64_t s = stream * 0x2545f4914f6cdd1dull + 1;
	unsigned int i;

	for (i = 0; i < n; i++)
		out[i] = (uint32_t)(splitmix64(&s) % 128000);
}

/*
 * A worker's private pages: all of them with --no-share, and the ones it
 * falls back to when the arbiter fails.  Its own radix tree over them
 * reuses the worker's own prefixes, as an engine's prefix cache does
 * within one process (vLLM, SGLang): the fair baseline for sharing.
 */
struct private_cache {
	uint8_t *base;
	uint32_t n_pages;
	uint32_t *free;
	uint32_t n_free;
	struct kv_radix *tree;
	uint64_t computed_pages, evicted_pages, local_hit_pages;
};

/* A request a worker holds, from its prefill to its last token. */
struct request {
	unsigned int r;
	bool priv;			/* in the private cache, not the pool */
	bool fell_back;			/* counted in fallback_requests */
	struct kv_radix_req req;
	uint32_t *tokens;		/* prompt, then the generated tokens */
	uint32_t pos;			/* next position to feed */
	uint32_t next;			/* the token to feed there */
	float *hidden;			/* the final hidden state */
};

struct worker {
	const struct opts *o;
	unsigned int id;
	struct kv_pool *pool;		/* NULL with --no-share (after setup) */
	struct kv_prefix_cache *cache;
	struct private_cache pc;	/* .base NULL until needed */
	struct kv_req_table *rt;
	struct model *model;
	struct kvs_geometry geom;
	uint32_t n_prompt, n_kv, n_all;
	uint32_t max_pages;		/* of one request */
	uint32_t chunk;			/* prefill chunk in tokens, whole pages; 0: none */
	uint32_t pool_pages;
	bool dead;			/* the arbiter is gone: serve unshared */
	struct request *reqs;		/* [batch] */
	unsigned int n_active;
	uint32_t *pbuf;			/* [max_pages] */
	int *slots;
	uint32_t *toks, *pos, *nexts, *idx, *indptr, *bpages, *lens;
	float *bhidden;
	uint8_t *scratch;		/* private pages for the recompute */
	uint32_t *scratch_pages;
	uint64_t *ttft;			/* [requests]: ns to the first token, 0: none */
	uint64_t go_ns;			/* when all workers were released to serve */
	uint64_t *bitmap;		/* pool pages the worker holds at its end */
	uint64_t *prefix_bitmap;	/* of which the shared part of a prompt */
	uint32_t bitmap_pages;
	struct tally t;
};

static uint32_t hid_len(const struct worker *w)
{
	return model_hidden_size(w->model);
}

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

static int pc_setup(struct worker *w)
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

/* ---- one request ---- */

static void req_abort(struct worker *w, struct request *q)
{
	const uint32_t T = w->geom.tokens_per_page;
	uint32_t all, i;

	if (!q->priv) {
		kv_prefix_abort(w->cache, w->rt, &q->req);
		return;
	}
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

/* The request's pages and pool, for the model. */
static int req_seq(struct worker *w, struct request *q, struct model_seq *s)
{
	uint32_t indptr[2], len;
	long n = kv_req_table_csr(w->rt, &q->req.slot, 1, indptr, w->pbuf, w->max_pages, &len);

	if (n < 0)
		return n;
	s->pool_base = q->priv ? (void *)w->pc.base : kv_page_addr(w->pool, 0);
	s->pool_pages = q->priv ? w->pc.n_pages : w->pool_pages;
	s->pages = w->pbuf;
	s->n_pages = n;
	return 0;
}

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

/*
 * Match, reserve, prefill and cache the prompt's full pages.  The prefill
 * goes in chunks of --prefill-chunk tokens (as engines' chunked prefill),
 * each chunk's full pages cached (PUBLISHed) as soon as they are computed:
 * a worker waiting for them in flight (--inflight-wait) takes them then,
 * not only after this whole prompt, and the next request, here or in
 * another worker, finds them while this one decodes.  Shared: through the
 * arbiter; -EAGAIN when an arbiter call failed and the request was
 * dropped, to be served privately.
 */
static int req_prefill(struct worker *w, struct request *q)
{
	const uint32_t T = w->geom.tokens_per_page, C = w->chunk;
	uint32_t pos, end;
	struct model_seq seq;
	uint64_t errs = w->cache ? kv_prefix_stats(w->cache)->errors : 0;
	struct span sp = span_start();
	const float *hidden;
	long matched;
	uint32_t need, len;
	int ret;

	q->req = (struct kv_radix_req){ .tokens = q->tokens, .slot = kv_req_alloc(w->rt) };
	if (q->req.slot < 0)
		return q->req.slot;
	if (!q->priv) {
		matched = kv_prefix_match(w->cache, w->rt, &q->req, w->n_prompt - 1);
		if (matched < 0 || kv_prefix_stats(w->cache)->errors != errs) {
			if (matched >= 0)
				kv_prefix_abort(w->cache, w->rt, &q->req);
			else
				kv_req_free(w->rt, q->req.slot);
			arbiter_failed(w, matched < 0 ? (int)matched : 0);
			return -EAGAIN;
		}
		ret = kv_prefix_reserve(w->cache, w->rt, &q->req, w->n_kv);
		if (ret) {
			kv_prefix_abort(w->cache, w->rt, &q->req);
			arbiter_failed(w, ret);
			return -EAGAIN;
		}
	} else {
		matched = kv_radix_req_match(w->pc.tree, w->rt, &q->req, w->n_prompt - 1);
		if (matched < 0) {
			kv_req_free(w->rt, q->req.slot);
			return matched;
		}
		w->pc.local_hit_pages += matched / T;
		need = kv_req_pages_needed(w->rt, q->req.slot, w->n_kv);
		ret = pc_alloc(&w->pc, need, w->pbuf);
		if (!ret) {
			ret = kv_req_extend(w->rt, q->req.slot, w->n_kv, w->pbuf);
			if (ret)
				pc_release(&w->pc, w->pbuf, need, 0);
		}
		if (ret) {
			req_abort(w, q);
			return ret;
		}
		q->req.n_tokens = w->n_kv;
	}
	span_end(&sp, &w->t.match_ns, &w->t.match_cpu_ns);
	for (pos = matched; pos < w->n_prompt; pos = end) {
		end = C ? (pos / C + 1) * C : w->n_prompt;
		if (end > w->n_prompt)
			end = w->n_prompt;
		ret = req_seq(w, q, &seq);
		sp = span_start();
		if (!ret)
			ret = model_prefill(w->model, &seq, q->tokens, pos, end - pos, &q->next);
		span_end(&sp, &w->t.prefill_ns, &w->t.prefill_cpu_ns);
		if (ret) {
			req_abort(w, q);
			return ret;
		}
		w->t.prefill_tokens += end - pos;
		/* The full pages so far into the tree now: the row reads the tree's pages. */
		q->req.n_tokens = end;
		sp = span_start();
		ret = q->priv ? kv_radix_cache_unfinished_req(w->pc.tree, w->rt, &q->req, 0)
			      : kv_prefix_cache_unfinished(w->cache, w->rt, &q->req);
		span_end(&sp, &w->t.publish_ns, &w->t.publish_cpu_ns);
		q->req.n_tokens = w->n_kv;
		if (ret) {
			req_abort(w, q);
			if (q->priv)
				return ret;
			arbiter_failed(w, ret);
			return -EAGAIN;
		}
	}
	q->pos = w->n_prompt;
	hidden = model_last_hidden(w->model, &len);
	memcpy(q->hidden, hidden, len * sizeof(float));
	return 0;
}

/* The worst errors of a request against the recompute, into the tally (1e-9 units). */
static void tol_record(struct worker *w, const struct tol_err *e, unsigned int which)
{
	double v[2] = { tol_rel(e) * 1e9, e->max_abs * 1e9 };
	unsigned int i;

	for (i = 0; i < 2; i++)
		if (v[i] > w->t.tol_err[which + i])
			w->t.tol_err[which + i] = v[i] < 1e18 ? (uint64_t)v[i] : UINT64_MAX;
}

/*
 * Layer @l's K or V (@which) of request @q against the recompute's in
 * w->scratch (pages s->pages): @got holds the served pages, page i of the
 * request at got_pages[i], or at i where got_pages is NULL (a host copy).
 * To the bit where @exact, else within tests/attn's tolerance (relative
 * Frobenius error over the request's tokens).  -EIO on a difference.
 */
static int verify_rows(struct worker *w, struct request *q, const uint8_t *got,
		       const uint32_t *got_pages, const uint32_t *pages,
		       const struct model_seq *s, uint32_t l, uint32_t which, bool exact)
{
	const struct kvs_geometry *g = &w->geom;
	const uint32_t T = g->tokens_per_page;
	const uint64_t row = kv_token_stride(g);
	const double bound = tol_bound(g->dtype);
	struct tol_err e = { 0 };
	uint32_t t;

	for (t = 0; t < w->n_kv; t++) {
		uint32_t p = got_pages ? got_pages[t / T] : t / T;
		const uint8_t *a = got + kv_offset(g, p, l, which, t % T, 0, 0);
		const uint8_t *b = w->scratch + kv_offset(g, s->pages[t / T], l, which,
							  t % T, 0, 0);

		if (exact && memcmp(a, b, row)) {
			fprintf(stderr, "kvserve: worker %u: request %u: %c of token %u, layer "
				"%u, in %s page %u differs from scratch\n", w->id, q->r,
				which == KV_K ? 'K' : 'V', t, l, q->priv ? "private" : "pool",
				pages[t / T]);
			return -EIO;
		}
		if (!exact)
			tol_add_raw(&e, g->dtype, a, b, row / kv_dtype_size(g->dtype));
		w->t.verified_bytes += row;
	}
	if (exact)
		return 0;
	tol_record(w, &e, 0);
	if (tol_rel(&e) <= bound)
		return 0;
	fprintf(stderr, "kvserve: worker %u: request %u: %c of layer %u differs from scratch "
		"by %.3g (relative; bound %.0e), %.3g at most\n", w->id, q->r,
		which == KV_K ? 'K' : 'V', l, tol_rel(&e), bound, e.max_abs);
	return -EIO;
}

/*
 * Request @q's KV against the recompute's.  Pages the CUDA kernels wrote
 * (a device pool: @dev) are read through a host copy, never in place, and
 * compared within tolerance, but layer 0's to the bit: its K and V are
 * projections of the embeddings alone, the same bits on both sides, and
 * the KV write stores them as they are.  Everything else to the bit.
 */
static int verify_kv(struct worker *w, struct request *q, const struct model_seq *served,
		     const struct model_seq *s, bool dev)
{
	const struct kvs_geometry *g = &w->geom;
	const uint32_t n_pages = (w->n_kv + g->tokens_per_page - 1) / g->tokens_per_page;
	const uint8_t *pool = served->pool_base;
	uint8_t *copy = NULL;
	uint32_t i, l, which;
	int ret = 0;

	if (dev) {
		copy = malloc((size_t)n_pages * g->page_bytes);
		if (!copy)
			return -ENOMEM;
		for (i = 0; !ret && i < n_pages; i++)
			ret = kv_cuda_memcpy(copy + (size_t)i * g->page_bytes,
					     pool + (uint64_t)served->pages[i] * g->page_bytes,
					     g->page_bytes);
		if (ret)
			fprintf(stderr, "kvserve: worker %u: request %u: reading its pages "
				"from the device: %s\n", w->id, q->r, kv_cuda_error());
	}
	for (l = 0; !ret && l < g->n_layers; l++)
		for (which = KV_K; !ret && which <= KV_V; which++)
			ret = verify_rows(w, q, dev ? copy : pool, dev ? NULL : served->pages,
					  served->pages, s, l, which, !dev || !l);
	free(copy);
	return ret;
}

/*
 * Recompute the request from scratch in private memory (poisoned with
 * NaN, pages in reverse order, decoded alone: a batch of one) on the C
 * reference, fed the tokens the request was served (teacher-forced), and
 * compare: every KV row of every layer of tokens [0, n_kv), the generated
 * tokens, the final hidden state.  To the bit, or, for a request the CUDA
 * kernels served (--memory cuda, in the pool), within tests/attn's
 * tolerance (tolerance.h), where a greedy token may differ only where the
 * reference's two candidates were tied within it.  -EIO on any other
 * difference; the first is reported.
 */
static int verify(struct worker *w, struct request *q)
{
	const struct kvs_geometry *g = &w->geom;
	const uint32_t T = g->tokens_per_page, n_kv = w->n_kv, n_prompt = w->n_prompt;
	const uint32_t n_pages = (n_kv + T - 1) / T;
	const bool dev = w->o->cuda && !q->priv;
	const double bound = tol_bound(g->dtype);
	struct model_seq s = { w->scratch, n_pages, w->scratch_pages, n_pages }, served;
	struct tol_err e = { 0 };
	uint32_t i, next, len, flips = 0;
	const float *hidden;
	uint64_t t0;
	int ret;

	ret = req_seq(w, q, &served);
	if (ret)
		return ret;
	t0 = now_ns();
	memset(w->scratch, 0xff, (size_t)n_pages * g->page_bytes);
	for (i = 0; i < n_pages; i++)
		w->scratch_pages[i] = n_pages - 1 - i;
	ret = model_prefill(w->model, &s, q->tokens, 0, n_prompt, &next);
	w->t.verify_prefill_ns += now_ns() - t0;
	for (i = n_prompt; !ret && i <= n_kv; i++) {
		if (next != q->tokens[i] &&
		    !(dev && tol_flip_ok(model_last_logits(w->model), next, q->tokens[i],
					 bound))) {
			fprintf(stderr, "kvserve: worker %u: request %u: token %u is %u, "
				"from scratch %u\n", w->id, q->r, i, q->tokens[i], next);
			return -EIO;
		}
		flips += next != q->tokens[i];
		if (i < n_kv)
			ret = model_decode(w->model, &s, q->tokens[i], i, &next);
	}
	if (ret)
		return ret;
	ret = verify_kv(w, q, &served, &s, dev);
	if (ret)
		return ret;
	hidden = model_last_hidden(w->model, &len);
	tol_add_f32(&e, q->hidden, hidden, len);
	if (dev ? !(tol_rel(&e) <= bound) : memcmp(hidden, q->hidden, len * sizeof(float))) {
		fprintf(stderr, "kvserve: worker %u: request %u: final hidden state differs "
			"from scratch (by %.3g, relative)\n", w->id, q->r, tol_rel(&e));
		return -EIO;
	}
	if (dev) {
		tol_record(w, &e, 2);
		w->t.tol_flips += flips;
	}
	w->t.verified_requests++;
	return 0;
}

/* A request's prompt; @first_doc: document 0 whatever @pick says (--burst). */
static void prompt(const struct opts *o, uint32_t *tokens, uint64_t pick, bool first_doc)
{
	unsigned int doc = splitmix64(&pick) % o->docs;

	if (first_doc)
		doc = 0;

	text(tokens, o->system_tokens, o->seed);
	text(tokens + o->system_tokens, o->doc_tokens, o->seed + 1 + doc);
	text(tokens + o->system_tokens + o->doc_tokens, o->question_tokens,
	     o->seed + 1000 + pick);
}

/* What the request produced, for comparing runs: its tokens and final state. */
static uint64_t req_digest(const struct worker *w, const struct request *q)
{
	uint64_t h = (uint64_t)w->id << 32 | q->r, s;
	uint32_t i, bits, n = hid_len(w);

	for (i = w->n_prompt; i <= w->n_kv; i++) {
		s = h ^ q->tokens[i];
		h = splitmix64(&s);
	}
	for (i = 0; i < n; i++) {
		memcpy(&bits, &q->hidden[i], sizeof(bits));
		s = h ^ bits;
		h = splitmix64(&s);
	}
	return h;
}

static int serve_private(struct worker *w, struct request *q);
static void stop_sharing(struct worker *w);

/* Request @i is done: the last one takes its place (buffers swapped, not shared). */
static void drop(struct worker *w, unsigned int i)
{
	struct request tmp = w->reqs[i];

	w->reqs[i] = w->reqs[--w->n_active];
	w->reqs[w->n_active] = tmp;
}

/*
 * Sharing is over for this worker: the requests it holds in pool pages
 * may lose them (the arbiter may hand them to others once it sees this
 * process gone), so each is dropped and served again, whole, in private
 * pages.
 */
static void requeue_shared(struct worker *w)
{
	unsigned int i;
	int ret;

	for (i = 0; i < w->n_active; i++) {
		struct request *q = &w->reqs[i];

		if (q->priv)
			continue;
		req_abort(w, q);
		ret = serve_private(w, q);
		if (ret) {
			fprintf(stderr, "kvserve: worker %u: request %u: %s\n", w->id, q->r,
				strerror(-ret));
			w->t.errors++;
			drop(w, i--);
		}
	}
	stop_sharing(w);
}

/*
 * The handle is broken and no request uses pool pages any more: count
 * what the shared cache did, drop it (its PUTs fail at once on the broken
 * handle) and close the pool, which gives this process's holdings back as
 * soon as the daemon runs again.
 */
static void stop_sharing(struct worker *w)
{
	const struct kv_prefix_stats *st;

	if (!w->cache)
		return;
	st = kv_prefix_stats(w->cache);
	w->t.local_hit_pages += st->local_hit_pages;
	w->t.remote_hit_pages += st->remote_hit_pages;
	w->t.computed_pages += st->published - st->dup_published;
	w->t.dup_pages += st->dup_published;
	w->t.claimed_pages += st->claimed;
	w->t.claim_conflicts += st->claim_conflicts;
	w->t.evicted_pages += st->alloc_evictions;
	kv_prefix_destroy(w->cache);
	w->cache = NULL;
	kv_pool_close(w->pool);
	w->pool = NULL;
}

static int serve_private(struct worker *w, struct request *q)
{
	int ret;

	if (!q->fell_back && !w->o->no_share) {
		q->fell_back = true;
		w->t.fallback_requests++;
	}
	ret = pc_setup(w);
	if (ret)
		return ret;
	q->priv = true;
	return req_prefill(w, q);
}

/* The request has its last token: check it, cache its pages, count it. */
static int finish(struct worker *w, struct request *q)
{
	const struct opts *o = w->o;
	struct span sp;
	int ret = 0;

	q->tokens[w->n_kv] = q->next;
	w->t.digest ^= req_digest(w, q);
	if (o->verify && q->r % o->verify == 0) {
		sp = span_start();
		ret = verify(w, q);
		span_end(&sp, &w->t.verify_ns, &w->t.verify_cpu_ns);
		if (ret == -EIO)
			w->t.mismatches++;
	}
	if (ret) {
		req_abort(w, q);
		return ret;
	}
	sp = span_start();
	if (q->priv) {
		ret = kv_radix_cache_finished_req(w->pc.tree, w->rt, &q->req, 0);
		span_end(&sp, &w->t.publish_ns, &w->t.publish_cpu_ns);
	} else {
		ret = kv_prefix_cache_finished(w->cache, w->rt, &q->req);
		span_end(&sp, &w->t.publish_ns, &w->t.publish_cpu_ns);
		if (ret) {
			/* Served and checked; only its new pages are not shared. */
			w->t.unpublished++;
			arbiter_failed(w, ret);
			ret = 0;
		}
	}
	w->t.requests++;
	w->t.prompt_tokens += w->n_prompt;
	w->t.page_tokens += w->n_prompt / w->geom.tokens_per_page * w->geom.tokens_per_page;
	w->t.decode_tokens += o->gen_tokens - 1;
	return ret;
}

/* Take request @r: prefill it; requests of one token are done at once. */
static int admit(struct worker *w, unsigned int r)
{
	struct request *q = &w->reqs[w->n_active];
	/* The first request arrives at the common start, the rest when taken. */
	uint64_t arrived = r ? now_ns() : w->go_ns;
	int ret;

	q->r = r;
	q->priv = w->o->no_share;
	q->fell_back = false;
	prompt(w->o, q->tokens, w->id * 1000003ull + r + w->o->seed, w->o->burst && !r);
	ret = w->dead ? -EAGAIN : req_prefill(w, q);
	if (ret == -EAGAIN)
		ret = serve_private(w, q);
	if (!ret)
		w->ttft[r] = now_ns() - arrived;
	if (!ret && q->pos < w->n_kv)
		w->n_active++;
	else if (!ret)
		ret = finish(w, q);
	if (w->dead)
		requeue_shared(w);
	return ret;
}

/*
 * One generated token for every request the worker holds: one decode call
 * (per layer) for all of those in the pool, one for those in private
 * pages.
 */
static void decode_step(struct worker *w)
{
	unsigned int i, n, k, priv;
	struct span sp = span_start();
	int ret;

	for (priv = 0; priv < 2; priv++) {
		struct model_batch b = { 0 };
		long np;

		for (i = n = 0; i < w->n_active; i++) {
			struct request *q = &w->reqs[i];

			if (q->priv != priv)
				continue;
			w->slots[n] = q->req.slot;
			w->toks[n] = q->next;
			w->pos[n] = q->pos;
			w->idx[n++] = i;
		}
		if (!n)
			continue;
		np = kv_req_table_csr(w->rt, w->slots, n, w->indptr, w->bpages,
				      (size_t)w->o->batch * w->max_pages, w->lens);
		b.pool_base = priv ? (void *)w->pc.base : kv_page_addr(w->pool, 0);
		b.pool_pages = priv ? w->pc.n_pages : w->pool_pages;
		b.n_reqs = n;
		b.page_indptr = w->indptr;
		b.pages = w->bpages;
		ret = np < 0 ? (int)np : model_decode_batch(w->model, &b, w->toks, w->pos,
							    w->nexts, w->bhidden);
		w->t.decode_calls++;
		for (k = 0; k < n; k++) {
			struct request *q = &w->reqs[w->idx[k]];

			if (ret) {
				/* Marked for the sweep below. */
				q->pos = UINT32_MAX;
				continue;
			}
			q->tokens[q->pos++] = q->next;
			q->next = w->nexts[k];
			memcpy(q->hidden, w->bhidden + (size_t)k * hid_len(w),
			       hid_len(w) * sizeof(float));
		}
	}
	span_end(&sp, &w->t.decode_ns, &w->t.decode_cpu_ns);
	for (i = 0; i < w->n_active; i++) {
		struct request *q = &w->reqs[i];

		if (q->pos == UINT32_MAX) {
			fprintf(stderr, "kvserve: worker %u: request %u: decode failed\n",
				w->id, q->r);
			req_abort(w, q);
			w->t.errors++;
		} else if (q->pos == w->n_kv) {
			ret = finish(w, q);
			if (ret) {
				fprintf(stderr, "kvserve: worker %u: request %u: %s\n", w->id,
					q->r, strerror(-ret));
				w->t.errors++;
			}
		} else {
			continue;
		}
		/* Done: the last one takes its place. */
		drop(w, i--);
	}
	if (w->dead)
		requeue_shared(w);
}

/*
 * kv_pool_open() failed: names are scoped by owner, so say whose pool was
 * looked for (libkv's default owner; $KVSHARE_POOL_OWNER picks another).
 */
static void pool_open_err(const struct opts *o, unsigned int id, int ret)
{
	const char *env = getenv("KVSHARE_POOL_OWNER");
	struct kv_arbiter *arb;
	uint32_t owner;

	if (ret == -EINVAL && env && *env && kv_uid_parse(env, &owner)) {
		fprintf(stderr, "kvserve: worker %u: $KVSHARE_POOL_OWNER '%s' is "
			"neither a uid nor a known user\n", id, env);
		return;
	}
	if (ret == -ENOENT && !kv_arbiter_open(o->arbiter, KV_ARBITER_NO_URING, &arb)) {
		if (!kv_arbiter_default_owner(arb, &owner)) {
			fprintf(stderr, "kvserve: worker %u: no pool '%s' owned by uid %u "
				"(KVSHARE_POOL_OWNER names another owner)\n", id,
				o->pool, owner);
			kv_arbiter_close(arb);
			return;
		}
		kv_arbiter_close(arb);
	}
	fprintf(stderr, "kvserve: worker %u: pool '%s': %s\n", id, o->pool,
		strerror(-ret));
}

/*
 * --memory cuda: the pool must be device memory (kvshared's memory=cuda),
 * mapped by libkv through the CUDA driver, and the model's attention on it
 * runs on the CUDA kernels (model_attn_cuda()): on a GPU with build/kvserve-cuda,
 * or in the tests on the CPU stand-ins of both the driver
 * (tests/gpu/cudastub) and the kernels (tests/simt: build/tests/gpu/kvserve-simt).
 * build/kvserve has no kernels and says so.
 */
static int memory_check(const struct opts *o, const struct worker *w)
{
	const struct kvs_geometry *g = &kv_pool_info(w->pool)->geom;
	int dev = kv_pool_is_device(w->pool), ret;
	char why[320];

	if (dev != o->cuda) {
		fprintf(stderr, "kvserve: worker %u: pool '%s' is %s memory: run with "
			"--memory %s\n", w->id, o->pool, dev ? "device (CUDA)" : "host",
			dev ? "cuda" : "host");
		return -EINVAL;
	}
	if (!dev)
		return 0;
	if ((g->dtype != KVS_DTYPE_F16 && g->dtype != KVS_DTYPE_BF16) ||
	    (g->head_dim != 64 && g->head_dim != 128 && g->head_dim != 256)) {
		fprintf(stderr, "kvserve: worker %u: pool '%s': the CUDA kernels take fp16 "
			"and bf16 pools of head dim 64, 128 or 256\n", w->id, o->pool);
		return -EOPNOTSUPP;
	}
	if (kv_pool_device(w->pool) > 0) {
		fprintf(stderr, "kvserve: worker %u: pool '%s' is on GPU %d; the kernels run "
			"on GPU 0 (CUDA_VISIBLE_DEVICES=%d makes it GPU 0)\n", w->id, o->pool,
			kv_pool_device(w->pool), kv_pool_device(w->pool));
		return -EOPNOTSUPP;
	}
	ret = model_attn_cuda(kv_page_addr(w->pool, 0), kv_cuda_driver(), why, sizeof(why));
	if (ret)
		fprintf(stderr, "kvserve: worker %u: --memory cuda: %s\n", w->id, why);
	return ret;
}

static int worker_setup(struct worker *w)
{
	const struct opts *o = w->o;
	const uint32_t B = o->batch;
	struct kv_prefix_config cfg = { .salt = o->salt, .salt_len = strlen(o->salt),
					.inflight_wait_ms = (int)o->inflight_wait_ms };
	const struct kvs_pool_attach *info;
	unsigned int i;
	uint32_t hid;
	int ret;

	w->n_prompt = o->system_tokens + o->doc_tokens + o->question_tokens;
	w->n_kv = w->n_prompt + o->gen_tokens - 1;
	w->n_all = w->n_prompt + o->gen_tokens;
	/* The geometry is the pool's, with or without sharing. */
	ret = kv_pool_open(o->arbiter, o->pool, 0, 0, &w->pool);
	if (ret) {
		pool_open_err(o, w->id, ret);
		return ret;
	}
	info = kv_pool_info(w->pool);
	ret = memory_check(o, w);
	if (ret)
		return ret;
	w->geom = info->geom;
	w->geom.page_bytes = kv_page_bytes(&info->geom);
	w->pool_pages = info->n_pages;
	w->max_pages = w->n_all / w->geom.tokens_per_page + 1;
	/* Chunks end on page boundaries: each one's pages are full when cached. */
	w->chunk = o->prefill_chunk / w->geom.tokens_per_page * w->geom.tokens_per_page;
	if (o->prefill_chunk && !w->chunk)
		w->chunk = w->geom.tokens_per_page;
	ret = model_create(&info->geom, o->q_heads, o->model_seed,
			   w->n_all > B ? w->n_all : B, &w->model);
	if (ret == -EINVAL) {
		fprintf(stderr, "kvserve: --q-heads %u does not fit pool '%s' (%u KV heads of "
			"dim %u, %s): it must be a multiple of the KV heads\n", o->q_heads,
			o->pool, info->geom.n_kv_heads, info->geom.head_dim,
			"the attention code takes fp16, bf16 and fp32");
		return ret;
	}
	if (!ret && o->no_share) {
		/* No arbiter from here on: private pages, a private tree. */
		kv_pool_close(w->pool);
		w->pool = NULL;
		ret = pc_setup(w);
	} else if (!ret) {
		ret = kv_prefix_create(kv_pool_arbiter(w->pool), info, &cfg, &w->cache);
	}
	if (!ret)
		ret = kv_req_table_create(B, w->n_all, w->geom.tokens_per_page, &w->rt);
	if (ret)
		goto out;
	hid = hid_len(w);
	w->reqs = calloc(B, sizeof(*w->reqs));
	for (i = 0; w->reqs && i < B; i++) {
		w->reqs[i].tokens = calloc(w->n_all, sizeof(uint32_t));
		w->reqs[i].hidden = calloc(hid, sizeof(float));
		if (!w->reqs[i].tokens || !w->reqs[i].hidden)
			ret = -ENOMEM;
	}
	w->pbuf = calloc(w->max_pages, sizeof(uint32_t));
	w->slots = calloc(B, sizeof(int));
	w->toks = calloc(B, sizeof(uint32_t));
	w->pos = calloc(B, sizeof(uint32_t));
	w->nexts = calloc(B, sizeof(uint32_t));
	w->idx = calloc(B, sizeof(uint32_t));
	w->lens = calloc(B, sizeof(uint32_t));
	w->indptr = calloc(B + 1, sizeof(uint32_t));
	w->bpages = calloc((size_t)B * w->max_pages, sizeof(uint32_t));
	w->bhidden = calloc((size_t)B * hid, sizeof(float));
	w->scratch_pages = calloc(w->max_pages, sizeof(uint32_t));
	w->scratch = o->verify ? malloc((size_t)w->max_pages * w->geom.page_bytes) : NULL;
	if (!w->reqs || !w->pbuf || !w->slots || !w->toks || !w->pos || !w->nexts ||
	    !w->idx || !w->lens || !w->indptr || !w->bpages || !w->bhidden ||
	    !w->scratch_pages || (o->verify && !w->scratch))
		ret = -ENOMEM;
out:
	if (ret)
		fprintf(stderr, "kvserve: worker %u: %s\n", w->id, strerror(-ret));
	return ret;
}

struct held {
	struct worker *w;
	uint32_t prefix_pages;		/* pages of the shared part of a prompt */
	bool pool;			/* mark pool pages in the bitmap */
};

static int count_held(void *arg, const struct kv_radix_node_info *ni)
{
	struct held *h = arg;
	const uint32_t T = h->w->geom.tokens_per_page;
	uint32_t i;

	for (i = 0; i < ni->n_pages; i++) {
		uint32_t p = ni->pages[i];
		bool prefix = ni->depth / T + i < h->prefix_pages;

		h->w->t.held_pages++;
		h->w->t.prefix_pages += prefix;
		if (!h->pool) {
			h->w->t.private_pages++;
			h->w->t.private_prefix_pages += prefix;
			continue;
		}
		if (!h->w->bitmap || p >= h->w->bitmap_pages)
			continue;
		h->w->bitmap[p / 64] |= 1ull << (p % 64);
		if (prefix)
			h->w->prefix_bitmap[p / 64] |= 1ull << (p % 64);
	}
	return 0;
}

static void worker_tally(struct worker *w)
{
	struct held h = {
		.w = w,
		.prefix_pages = (w->o->system_tokens + w->o->doc_tokens) / w->geom.tokens_per_page,
	};

	if (w->cache) {
		const struct kv_prefix_stats *st = kv_prefix_stats(w->cache);

		w->t.local_hit_pages += st->local_hit_pages;
		w->t.remote_hit_pages += st->remote_hit_pages;
		w->t.computed_pages += st->published - st->dup_published;
		w->t.dup_pages += st->dup_published;
		w->t.claimed_pages += st->claimed;
		w->t.claim_conflicts += st->claim_conflicts;
		w->t.evicted_pages += st->alloc_evictions;
		h.pool = true;
		kv_radix_walk(kv_prefix_tree(w->cache), count_held, &h);
	}
	if (w->pc.base) {
		w->t.local_hit_pages += w->pc.local_hit_pages;
		w->t.computed_pages += w->pc.computed_pages;
		w->t.evicted_pages += w->pc.evicted_pages;
		h.pool = false;
		kv_radix_walk(w->pc.tree, count_held, &h);
	}
}

/*
 * The start line: every worker, set up or failed, writes a byte to
 * @ready and waits for EOF on @go, which the parent gives (by closing its
 * end) once all are ready or gone, and after it wrote the release time to
 * *go_ns.  So the workers serve from one moment on (--burst's requests
 * arrive together), the setup of one is not in another's serving time,
 * and a worker that died early blocks nobody.
 */
struct gate {
	int ready, go;			/* write end, read end */
	const volatile uint64_t *go_ns;
};

static uint64_t gate_pass(const struct gate *g)
{
	char c = 1;

	if (write(g->ready, &c, 1) != 1)
		perror("kvserve: worker: start line");
	close(g->ready);
	while (read(g->go, &c, 1) < 0 && errno == EINTR)
		;
	close(g->go);
	return *g->go_ns ? *g->go_ns : now_ns();
}

static int worker_run(struct worker *w, const struct gate *g)
{
	unsigned int r = 0, i;
	uint64_t born = now_ns(), cpu;
	int ret;

	ret = worker_setup(w);
	w->t.setup_ns = now_ns() - born;
	w->go_ns = gate_pass(g);
	if (ret)
		goto out;
	w->t.start_ns = now_ns();
	cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
	while (r < w->o->requests || w->n_active) {
		while (w->n_active < w->o->batch && r < w->o->requests) {
			ret = admit(w, r);
			if (ret) {
				fprintf(stderr, "kvserve: worker %u: request %u: %s\n", w->id, r,
					strerror(-ret));
				w->t.errors++;
			}
			r++;
		}
		if (w->n_active)
			decode_step(w);
	}
	w->t.end_ns = now_ns();
	w->t.serve_cpu_ns = clock_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu;
	worker_tally(w);
	w->t.ok = 1;
	ret = 0;
out:
	if (w->cache)
		kv_prefix_destroy(w->cache);
	if (w->pc.tree)
		kv_radix_destroy(w->pc.tree);
	free(w->pc.base);
	free(w->pc.free);
	kv_req_table_destroy(w->rt);
	model_destroy(w->model);
	kv_pool_close(w->pool);
	for (i = 0; w->reqs && i < w->o->batch; i++) {
		free(w->reqs[i].tokens);
		free(w->reqs[i].hidden);
	}
	free(w->reqs);
	free(w->pbuf);
	free(w->slots);
	free(w->toks);
	free(w->pos);
	free(w->nexts);
	free(w->idx);
	free(w->lens);
	free(w->indptr);
	free(w->bpages);
	free(w->bhidden);
	free(w->scratch_pages);
	free(w->scratch);
	return ret;
}

static void usage(FILE *f)
{
	fputs("usage: kvserve [--arbiter PATH] [--pool NAME] [--workers N] [--requests R]\n"
	      "               [--system-tokens S] [--doc-tokens D] [--docs K]\n"
	      "               [--question-tokens Q] [--q-heads H] [--gen-tokens G]\n"
	      "               [--batch B] [--no-share] [--private-pages P]\n"
	      "               [--inflight-wait MS] [--burst] [--prefill-chunk C]\n"
	      "               [--memory host|cuda]\n"
	      "               [--verify V] [--model-seed M] [--salt STR] [--seed N]\n\n"
	      "N worker processes each serve R prompts of S shared system-prompt tokens,\n"
	      "D tokens of one of K shared documents and Q unique tokens, and generate G\n"
	      "tokens each, with a small random-weight transformer of H query heads over\n"
	      "pool NAME's geometry, sharing prefix KV pages through the arbiter (libkv\n"
	      "picks the module or the daemon unless --arbiter names one).  A worker\n"
	      "holds up to B requests: each is prefilled alone, and all are decoded\n"
	      "together, one batched call per generated token.  --no-share serves the\n"
	      "same requests without the arbiter: each worker caches its own prefixes\n"
	      "in P private pages (default: as many as the pool has, at least a\n"
	      "batch's worth).  When an arbiter call fails during the run (no room,\n"
	      "a deadline, the daemon gone), the worker serves that request in private\n"
	      "pages, and after a lost connection every later one too.\n"
	      "Every V'th request of a worker (0: none) is recomputed from scratch,\n"
	      "alone, and compared to the bit.  The model's weights come from M; the\n"
	      "block keys' salt names the model (M and H) unless --salt replaces it.\n"
	      "--seed picks the texts.  --inflight-wait MS: a worker that misses prompt\n"
	      "pages another worker is computing waits up to MS for them instead of\n"
	      "computing them too, and claims those it computes (in-flight dedupe;\n"
	      "default 2000, 0: off, every worker computes what it misses).\n"
	      "A prompt is prefilled in chunks of C tokens (whole pages; 0: at once),\n"
	      "each chunk's full pages cached and published as soon as computed.\n"
	      "The workers start serving together, once all are set up; with --burst\n"
	      "every worker's first request is on document 0, a burst of one new\n"
	      "prefix.  The summary gives time to first token (the first requests from\n"
	      "the common start, every request from when its worker took it).\n"
	      "--memory cuda: the pool is GPU memory (kvshared memory=cuda); attention on\n"
	      "it runs on the CUDA kernels (build/kvserve-cuda; build/kvserve has none),\n"
	      "checked against the C reference within tests/attn's tolerances.\n"
	      "Defaults: 4 workers x 24 requests, 1024 + 2048 of 4 + 96 tokens, 4 q\n"
	      "heads, 8 generated tokens, batches of 8, chunks of 512, --verify 4,\n"
	      "seeds 1.\n", f);
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option longs[] = {
		{ "arbiter", 1, NULL, 'a' }, { "pool", 1, NULL, 'p' },
		{ "workers", 1, NULL, 'w' }, { "requests", 1, NULL, 'r' },
		{ "system-tokens", 1, NULL, 's' }, { "doc-tokens", 1, NULL, 'd' },
		{ "docs", 1, NULL, 'k' }, { "question-tokens", 1, NULL, 'q' },
		{ "q-heads", 1, NULL, 'H' }, { "gen-tokens", 1, NULL, 'g' },
		{ "verify", 1, NULL, 'v' }, { "batch", 1, NULL, 'b' },
		{ "private-pages", 1, NULL, 'P' }, { "no-share", 0, NULL, 'n' },
		{ "salt", 1, NULL, 'S' }, { "seed", 1, NULL, 'x' },
		{ "model-seed", 1, NULL, 'm' }, { "inflight-wait", 1, NULL, 'W' },
		{ "memory", 1, NULL, 'M' }, { "burst", 0, NULL, 'B' },
		{ "prefill-chunk", 1, NULL, 'C' },
		{ "help", 0, NULL, 'h' }, { NULL, 0, NULL, 0 },
	};
	unsigned int *nums[128] = {
		['w'] = &o->workers, ['r'] = &o->requests, ['s'] = &o->system_tokens,
		['d'] = &o->doc_tokens, ['k'] = &o->docs, ['q'] = &o->question_tokens,
		['H'] = &o->q_heads, ['g'] = &o->gen_tokens, ['v'] = &o->verify,
		['b'] = &o->batch, ['P'] = &o->private_pages,
		['W'] = &o->inflight_wait_ms, ['C'] = &o->prefill_chunk,
	};
	int c, idx = 0;

	while ((c = getopt_long(argc, argv, "", longs, &idx)) != -1) {
		char *end;
		unsigned long v;

		switch (c) {
		case 'a': o->arbiter = optarg; continue;
		case 'p': o->pool = optarg; continue;
		case 'S': o->salt = optarg; continue;
		case 'M':
			if (strcmp(optarg, "host") && strcmp(optarg, "cuda")) {
				fprintf(stderr, "kvserve: --memory: '%s' is neither host "
					"nor cuda\n", optarg);
				return -1;
			}
			o->cuda = !strcmp(optarg, "cuda");
			continue;
		case 'n': o->no_share = true; continue;
		case 'B': o->burst = true; continue;
		case 'h': usage(stdout); exit(0);
		case 'x':
		case 'm':
			*(c == 'x' ? &o->seed : &o->model_seed) = strtoull(optarg, &end, 0);
			if (*end || !*optarg || *optarg == '-')
				goto bad_seed;
			continue;
		case '?':
			usage(stderr);
			return -1;
		}
		errno = 0;
		v = strtoul(optarg, &end, 0);
		if (errno || *end || !*optarg || v > 1000000)
			goto bad;
		*nums[c] = v;
	}
	if (optind < argc) {
		fprintf(stderr, "kvserve: unexpected argument '%s'\n", argv[optind]);
		return -1;
	}
	if (!o->workers || !o->requests || !o->docs || !o->q_heads || !o->gen_tokens ||
	    !o->batch || !(o->system_tokens + o->doc_tokens + o->question_tokens)) {
		fprintf(stderr, "kvserve: workers, requests, docs, q heads, generated tokens, "
			"the batch and the prompt length must not be 0\n");
		return -1;
	}
	if (o->workers > 1024) {
		fprintf(stderr, "kvserve: --workers: at most 1024\n");
		return -1;
	}
	if ((uint64_t)o->system_tokens + o->doc_tokens + o->question_tokens +
	    o->gen_tokens > 1000000) {
		fprintf(stderr, "kvserve: a prompt and its generated tokens must not pass "
			"1000000 tokens\n");
		return -1;
	}
	/* Block keys must name the model: another model's KV is not ours. */
	if (!o->salt) {
		snprintf(o->default_salt, sizeof(o->default_salt),
			 "kvserve:model-seed=%llu,q-heads=%u",
			 (unsigned long long)o->model_seed, o->q_heads);
		o->salt = o->default_salt;
	}
	return 0;
bad_seed:
	fprintf(stderr, "kvserve: --%s: '%s' is not a number in 0..2^64-1\n",
		longs[idx].name, optarg);
	return -1;
bad:
	fprintf(stderr, "kvserve: --%s: '%s' is not a number in 0..1000000\n",
		longs[idx].name, optarg);
	return -1;
}

static void add(struct tally *sum, const struct tally *t)
{
	const uint64_t *a = (const uint64_t *)t;
	uint64_t *s = (uint64_t *)sum;
	struct tally was = *sum;
	size_t i;

	/* Every field is a count to add up but these five. */
	for (i = 0; i < sizeof(*t) / sizeof(uint64_t); i++)
		s[i] += a[i];
	sum->start_ns = was.start_ns && was.start_ns < t->start_ns ? was.start_ns : t->start_ns;
	sum->end_ns = was.end_ns > t->end_ns ? was.end_ns : t->end_ns;
	sum->arbiter_gone = was.arbiter_gone ? was.arbiter_gone : t->arbiter_gone;
	sum->digest = was.digest ^ t->digest;
	for (i = 0; i < 4; i++)
		sum->tol_err[i] = was.tol_err[i] > t->tol_err[i] ? was.tol_err[i] : t->tol_err[i];
}

/*
 * The pool's own view, with its invariants checked.  The check walks every
 * page under the pool lock, so only an admin may ask for it: anyone else
 * gets the counters alone and *checked is false.
 */
static int pool_report(const struct opts *o, struct kvs_pool_stats *st,
		       struct kvs_geometry *geom, bool *checked)
{
	struct kvs_pool_attach info = { 0 };
	struct kv_arbiter *arb;
	int ret;

	ret = kv_arbiter_open(o->arbiter, KV_ARBITER_NO_URING, &arb);
	if (ret)
		return ret;
	ret = kv_arbiter_attach(arb, o->pool, 0, &info);
	*geom = info.geom;
	memset(st, 0, sizeof(*st));
	st->flags = KVS_STATS_CHECK;
	*checked = true;
	if (!ret)
		ret = kv_arbiter_call(arb, KVS_IOC_POOL_STATS, st);
	if (ret == -EPERM) {
		memset(st, 0, sizeof(*st));
		*checked = false;
		ret = kv_arbiter_call(arb, KVS_IOC_POOL_STATS, st);
	}
	kv_arbiter_close(arb);
	return ret;
}

/*
 * Per worker, in memory shared with the parent: its tally, then bitmaps
 * of the pool pages it held at its end (all, and those of the shared part
 * of the prompts).
 */
struct results {
	struct tally *t;
	uint64_t *bitmaps;		/* [workers][2][words] */
	uint64_t *ttft;			/* [workers][requests] */
	volatile uint64_t *go_ns;	/* the release time */
	size_t words;
	uint32_t pool_pages;
};

static uint64_t distinct(const struct opts *o, const struct results *res, unsigned int which)
{
	uint64_t n = 0, m;
	unsigned int i;
	size_t wd;

	for (wd = 0; wd < res->words; wd++) {
		for (m = 0, i = 0; i < o->workers; i++)
			m |= res->bitmaps[(2 * i + which) * res->words + wd];
		n += __builtin_popcountll(m);
	}
	return n;
}

/* Wait until every worker is ready or gone, then release them all at once. */
static void release(const struct opts *o, struct results *res, int ready, int go)
{
	unsigned int n = 0;
	char buf[64];
	ssize_t got;

	while (n < o->workers) {
		got = read(ready, buf, sizeof(buf));
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		n += got;
	}
	*res->go_ns = now_ns();
	close(go);
	close(ready);
}

static int spawn(const struct opts *o, struct results *res, struct tally *sum)
{
	unsigned int i, failed = 0;
	int ready[2], go[2];
	pid_t *pids;

	pids = calloc(o->workers, sizeof(*pids));
	if (!pids)
		return -ENOMEM;
	if (pipe(ready) || pipe(go)) {
		perror("kvserve: pipe");
		free(pids);
		return -errno;
	}
	for (i = 0; i < o->workers; i++) {
		pid_t pid = fork();

		if (pid < 0) {
			failed++;
			break;
		}
		if (!pid) {
			struct worker w = { .o = o, .id = i };
			struct gate g = { ready[1], go[0], res->go_ns };
			int ret;

			close(ready[0]);
			close(go[1]);
			w.bitmap = res->bitmaps + 2 * i * res->words;
			w.prefix_bitmap = w.bitmap + res->words;
			w.bitmap_pages = res->pool_pages;
			w.ttft = res->ttft + (size_t)i * o->requests;
			ret = worker_run(&w, &g);
			res->t[i] = w.t;
			_exit(ret ? 2 : 0);
		}
		pids[i] = pid;
	}
	close(ready[1]);
	close(go[0]);
	release(o, res, ready[0], go[1]);
	for (i = 0; i < o->workers && pids[i]; i++) {
		int st;

		if (waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			failed++;
		else
			add(sum, &res->t[i]);
	}
	free(pids);
	return failed ? -ECHILD : 0;
}

static const char *dtype_name(uint32_t dtype)
{
	return dtype == KVS_DTYPE_BF16 ? "bf16" : dtype == KVS_DTYPE_F16 ? "fp16" :
	       dtype == KVS_DTYPE_F32 ? "fp32" : "?";
}

static double per(uint64_t ns, uint64_t n, double unit)
{
	return n ? ns / unit / n : 0.0;
}

static void report(const struct opts *o, const struct tally *sum,
		   const struct kvs_geometry *g, uint64_t resident, uint64_t resident_prefix)
{
	uint64_t hits = sum->local_hit_pages + sum->remote_hit_pages;
	uint32_t tpp = g->tokens_per_page;
	double scratch = per(sum->verify_prefill_ns, sum->verified_requests, 1e6);
	double served = per(sum->prefill_ns, sum->requests, 1e6);
	double wall = sum->end_ns > sum->start_ns ? (sum->end_ns - sum->start_ns) / 1e9 : 0;
	uint64_t gen = sum->requests * o->gen_tokens;

	printf("kvserve: %u workers x %u requests, prompts of %u tokens "
	       "(%u system + %u of %u documents + %u unique), %u generated\n",
	       o->workers, o->requests, o->system_tokens + o->doc_tokens + o->question_tokens,
	       o->system_tokens, o->doc_tokens, o->docs, o->question_tokens, o->gen_tokens);
	printf("  model                  %u layers, %u q heads over %u KV heads of dim %u, "
	       "%s pages; attention: libkv C reference (%s)%s\n", g->n_layers, o->q_heads,
	       g->n_kv_heads, g->head_dim, dtype_name(g->dtype), kv_attn_ref_isa(),
	       o->cuda ? " for private pages and the recompute" : "");
	if (o->cuda) {
		char name[256];
		int drv = kv_cuda_driver();

		printf("  memory                 cuda: the pool was imported and mapped through "
		       "%s\n", drv == 1 ? "the CUDA driver" : "the CUDA driver STAND-IN "
		       "(tests only, host memory underneath)");
		printf("  attention on the pool  %s\n", model_attn_cuda_name(drv, name,
									   sizeof(name)));
	}
	if (o->no_share)
		printf("  sharing                none (--no-share): each worker caches its own "
		       "prefixes in private pages\n");
	else
		printf("  sharing                prefix pages through the arbiter\n");
	printf("  requests served        %llu\n", (unsigned long long)sum->requests);
	printf("  prompt tokens          %llu (%llu in full pages)\n",
	       (unsigned long long)sum->prompt_tokens, (unsigned long long)sum->page_tokens);
	printf("  pages from the cache   %llu (%.1f%% of full pages): %llu from the "
	       "worker's own tree, %llu found through the arbiter\n",
	       (unsigned long long)hits,
	       sum->page_tokens ? 100.0 * hits * tpp / sum->page_tokens : 0.0,
	       (unsigned long long)sum->local_hit_pages,
	       (unsigned long long)sum->remote_hit_pages);
	printf("  pages computed         %llu (+%llu computed twice in a race, "
	       "deduplicated at PUBLISH)\n",
	       (unsigned long long)sum->computed_pages, (unsigned long long)sum->dup_pages);
	if (o->inflight_wait_ms && !o->no_share)
		printf("  in-flight dedupe       waits up to %u ms; %llu pages claimed while "
		       "computed, %llu claims refused (computed unclaimed)\n",
		       o->inflight_wait_ms, (unsigned long long)sum->claimed_pages,
		       (unsigned long long)sum->claim_conflicts);
	printf("  duplicates / pages     %llu / %llu computed pages\n",
	       (unsigned long long)sum->dup_pages,
	       (unsigned long long)(sum->computed_pages + sum->dup_pages));
	printf("  pages evicted locally  %llu\n", (unsigned long long)sum->evicted_pages);
	printf("  KV pages at the end    %llu resident (%llu of them prompt prefixes "
	       "shared by requests), %.1f held per worker\n",
	       (unsigned long long)resident, (unsigned long long)resident_prefix,
	       (double)sum->held_pages / o->workers);
	printf("  prefill                %llu of %llu prompt tokens computed (%.1f%%), "
	       "%.2f ms a request\n", (unsigned long long)sum->prefill_tokens,
	       (unsigned long long)sum->prompt_tokens,
	       sum->prompt_tokens ? 100.0 * sum->prefill_tokens / sum->prompt_tokens : 0.0,
	       served);
	printf("  decode                 %llu tokens in %llu batched calls (up to %u "
	       "requests a call, %.1f on average), %.1f us a token\n",
	       (unsigned long long)sum->decode_tokens, (unsigned long long)sum->decode_calls,
	       o->batch, sum->decode_calls ? (double)sum->decode_tokens / sum->decode_calls : 0,
	       per(sum->decode_ns, sum->decode_tokens, 1e3));
	if (!o->cuda)
		printf("  verified               %llu requests recomputed from scratch, equal to "
		       "the bit: %llu bytes of KV, every token, the final state\n",
		       (unsigned long long)sum->verified_requests,
		       (unsigned long long)sum->verified_bytes);
	else
		printf("  verified               %llu requests recomputed from scratch (the C "
		       "reference, host memory, served tokens fed back), within tests/attn's "
		       "%s tolerance %.0e: %llu bytes of KV, layer 0 to the bit; worst relative "
		       "error %.2e in KV, %.2e in the final state (abs %.2e, %.2e); %llu greedy "
		       "tokens flipped between near-tied logits\n",
		       (unsigned long long)sum->verified_requests, dtype_name(g->dtype),
		       tol_bound(g->dtype), (unsigned long long)sum->verified_bytes,
		       sum->tol_err[0] / 1e9, sum->tol_err[2] / 1e9, sum->tol_err[1] / 1e9,
		       sum->tol_err[3] / 1e9, (unsigned long long)sum->tol_flips);
	if (sum->verified_requests && served > 0)
		printf("  from-scratch prefill   %.2f ms a request: %.1fx the served "
		       "prefill's time\n", scratch, scratch / served);
	printf("  arbiter failures       %llu requests served without sharing, %llu "
	       "served but not published, %llu arbiter calls failed%s%s\n",
	       (unsigned long long)sum->fallback_requests, (unsigned long long)sum->unpublished,
	       (unsigned long long)sum->arbiter_errors,
	       sum->arbiter_gone ? "; sharing ended: " : "",
	       sum->arbiter_gone ? strerror((int)-sum->arbiter_gone) : "");
	printf("  throughput             %.2f requests/s, %.0f tokens/s (prompt + generated)\n",
	       wall ? sum->requests / wall : 0, wall ? (sum->prompt_tokens + gen) / wall : 0);
	printf("  outputs digest         %016llx\n", (unsigned long long)sum->digest);
	printf("  wall time              %.1f ms (first request to last, all workers)\n",
	       wall * 1e3);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* "median M ms, p90 P, max X" of the non-zero ones of @n values in @v (sorted here). */
static void print_quantiles(uint64_t *v, size_t n)
{
	size_t i, k = 0;

	for (i = 0; i < n; i++)
		if (v[i])
			v[k++] = v[i];
	if (!k) {
		printf("none");
		return;
	}
	qsort(v, k, sizeof(*v), cmp_u64);
	printf("median %.1f ms, p90 %.1f, max %.1f (%zu)", v[(k - 1) / 2] / 1e6,
	       v[(k * 9 + 9) / 10 - 1] / 1e6, v[k - 1] / 1e6, k);
}

/*
 * Where the workers' time went (per worker: wall / CPU ms) and time to
 * first token.  Wall minus CPU in a phase is time waiting: for a core (more
 * workers than cores), an arbiter reply, or pages another worker computes.
 */
static void report_time(const struct opts *o, const struct results *res,
			const struct tally *sum)
{
	uint64_t n = 0, idle = 0, *first, *all;
	uint64_t wall = 0, cpu, parts, parts_cpu;
	unsigned int i;

	for (i = 0; i < o->workers; i++) {
		if (!res->t[i].ok)
			continue;
		n++;
		wall += res->t[i].end_ns - res->t[i].start_ns;
		idle += sum->end_ns - res->t[i].end_ns;
	}
	if (!n)
		return;
	cpu = sum->serve_cpu_ns;
	parts = sum->match_ns + sum->prefill_ns + sum->publish_ns + sum->decode_ns +
		sum->verify_ns;
	parts_cpu = sum->match_cpu_ns + sum->prefill_cpu_ns + sum->publish_cpu_ns +
		    sum->decode_cpu_ns + sum->verify_cpu_ns;
	printf("  time per worker        serving %.0f ms, %.0f on a CPU (wall / CPU ms): "
	       "prefill %.0f / %.0f, decode %.0f / %.0f, match (tree, keys, LOOKUP, "
	       "waits) %.0f / %.0f, publish %.0f / %.0f, verify %.0f / %.0f, other %.0f / %.0f; "
	       "setup %.0f ms before the start, idle %.0f ms after its last request\n",
	       wall / 1e6 / n, cpu / 1e6 / n, sum->prefill_ns / 1e6 / n,
	       sum->prefill_cpu_ns / 1e6 / n, sum->decode_ns / 1e6 / n,
	       sum->decode_cpu_ns / 1e6 / n, sum->match_ns / 1e6 / n,
	       sum->match_cpu_ns / 1e6 / n, sum->publish_ns / 1e6 / n,
	       sum->publish_cpu_ns / 1e6 / n, sum->verify_ns / 1e6 / n,
	       sum->verify_cpu_ns / 1e6 / n,
	       wall > parts ? (wall - parts) / 1e6 / n : 0.0,
	       cpu > parts_cpu ? (cpu - parts_cpu) / 1e6 / n : 0.0,
	       sum->setup_ns / 1e6 / n, idle / 1e6 / n);
	first = calloc(o->workers, sizeof(*first));
	all = malloc((size_t)o->workers * o->requests * sizeof(*all));
	if (!first || !all) {
		free(first);
		return;
	}
	for (i = 0; i < o->workers; i++)
		first[i] = res->t[i].ok ? res->ttft[(size_t)i * o->requests] : 0;
	memcpy(all, res->ttft, (size_t)o->workers * o->requests * sizeof(*all));
	printf("  time to first token    first request of each worker%s, from the "
	       "common start: ", o->burst ? " (--burst: one new document)" : "");
	print_quantiles(first, o->workers);
	printf("; every request, from when its worker took it: ");
	print_quantiles(all, (size_t)o->workers * o->requests);
	printf("\n");
	free(first);
	free(all);
}

/* The pool's size and geometry, before the workers start. */
static int pool_geometry(const struct opts *o, struct kvs_pool_attach *info)
{
	struct kv_arbiter *arb;
	int ret;

	ret = kv_arbiter_open(o->arbiter, KV_ARBITER_NO_URING, &arb);
	if (ret)
		return ret;
	ret = kv_arbiter_attach(arb, o->pool, 0, info);
	kv_arbiter_close(arb);
	return ret;
}

int main(int argc, char **argv)
{
	struct opts o = {
		.pool = "kvserve", .workers = 4, .requests = 24,
		.system_tokens = 1024, .doc_tokens = 2048, .docs = 4,
		.question_tokens = 96, .q_heads = 4, .gen_tokens = 8, .verify = 4, .seed = 1,
		.model_seed = 1, .batch = 8, .prefill_chunk = 512, .inflight_wait_ms = 2000,
	};
	struct kvs_pool_attach info = { 0 };
	struct kvs_geometry geom = { 0 };
	struct kvs_pool_stats st;
	struct tally sum = { 0 };
	struct results res = { 0 };
	uint64_t resident, resident_prefix;
	bool checked = false;
	size_t bytes;
	void *mem;
	int ret, check;

	if (parse(argc, argv, &o))
		return 2;
	ret = pool_geometry(&o, &info);
	if (ret) {
		pool_open_err(&o, 0, ret);
		return 1;
	}
	res.pool_pages = info.n_pages;
	res.words = (info.n_pages + 63) / 64;
	bytes = o.workers * (sizeof(struct tally) + 2 * res.words * sizeof(uint64_t) +
			     (size_t)o.requests * sizeof(uint64_t)) + sizeof(uint64_t);
	mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		perror("kvserve: mmap");
		return 1;
	}
	res.t = mem;
	res.bitmaps = (uint64_t *)(res.t + o.workers);
	res.ttft = res.bitmaps + 2 * o.workers * res.words;
	res.go_ns = res.ttft + (size_t)o.workers * o.requests;
	ret = spawn(&o, &res, &sum);
	/* Pool pages once however many workers hold them; private ones each. */
	resident = distinct(&o, &res, 0) + sum.private_pages;
	resident_prefix = distinct(&o, &res, 1) + sum.private_prefix_pages;
	/* A worker found the arbiter gone: do not wait on it here either. */
	check = sum.arbiter_gone ? sum.arbiter_gone : pool_report(&o, &st, &geom, &checked);
	report(&o, &sum, &info.geom, resident, resident_prefix);
	report_time(&o, &res, &sum);
	if (!check)
		printf("  pool                   %llu cached, %llu shared, %llu free, "
		       "%llu evictions; %s\n",
		       (unsigned long long)st.n_cached, (unsigned long long)st.n_shared,
		       (unsigned long long)st.n_free, (unsigned long long)st.evictions,
		       checked ? "invariants hold" :
		       "invariants not checked (the check is an admin's)");
	else if (sum.arbiter_gone)
		printf("  pool                   not checked: the arbiter is gone (%s)\n",
		       strerror((int)-check));
	else
		printf("  pool                   check failed: %s\n", strerror(-check));
	if (sum.arbiter_gone)
		check = 0;

	if (ret || check || sum.mismatches || sum.errors) {
		fprintf(stderr, "kvserve: FAILED: %llu requests differ from a recompute, "
			"%llu request errors%s%s\n",
			(unsigned long long)sum.mismatches, (unsigned long long)sum.errors,
			ret ? ", a worker failed" : "", check ? ", pool check failed" : "");
		return 1;
	}
	return 0;
}
