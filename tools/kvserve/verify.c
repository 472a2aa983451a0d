// SPDX-License-Identifier: GPL-2.0
/*
 * kvserve's check of a served request: recompute it from scratch in
 * private memory on the C reference and compare, to the bit, or within
 * tests/attn's tolerance for pages the CUDA kernels wrote.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvshare/attn.h>

#include "kvserve.h"
#include "model.h"
#include "tolerance.h"
#include "worker.h"

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
				which == KV_K ? 'K' : 'V', t, l, q->cache == &cache_shared ? "pool" : "private",
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
int verify_request(struct worker *w, struct request *q, const struct model_seq *served)
{
	const struct kvs_geometry *g = &w->geom;
	const uint32_t T = g->tokens_per_page, n_kv = w->n_kv, n_prompt = w->n_prompt;
	const uint32_t n_pages = (n_kv + T - 1) / T;
	const bool dev = w->o->cuda && q->cache == &cache_shared;
	const double bound = tol_bound(g->dtype);
	struct model_seq s = { w->scratch, n_pages, w->scratch_pages, n_pages };
	struct tol_err e = { 0 };
	uint32_t i, next, len, flips = 0;
	const float *hidden;
	uint64_t t0;
	int ret;

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
	ret = verify_kv(w, q, served, &s, dev);
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
