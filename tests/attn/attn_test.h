/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the attention suites share: a test case (geometry, batch, lengths),
 * the pool and page tables built from it, and a naive dense attention in
 * double precision to compare against.
 *
 * Every pool starts filled with NaN in its storage type, page tables are
 * random permutations of a pool larger than the batch needs (so they are
 * never the identity and unused pages stay NaN), and every request's page
 * list carries one more entry, an unused NaN page, past the pages its
 * length needs: a kernel that reads a slot it should not returns NaN, and
 * NaN fails every comparison.
 */
#ifndef KVS_TESTS_ATTN_TEST_H
#define KVS_TESTS_ATTN_TEST_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvshare/attn.h>

#define AT_MAX_REQS	256
#define AT_UNUSED	__attribute__((unused))

struct at_case {
	uint32_t dtype, dim, tpp, n_kv, group;
	uint32_t n_layers, layer;
	uint32_t n_reqs;
	uint32_t seq[AT_MAX_REQS];	/* tokens per request, new ones included */
	uint32_t n_new[AT_MAX_REQS];	/* extend: new tokens; 0 means 1 (decode) */
	uint32_t shared_pages;		/* requests 1.. share request 0's first pages */
	float qscale;			/* queries uniform in +-qscale (0: 1) */
	uint64_t seed;
};

struct at_env {
	struct at_case c;
	struct kv_attn_kv kv;
	struct kv_attn_batch b;		/* decode (q_indptr NULL) */
	struct kv_attn_batch bx;	/* extend: q_indptr set */
	uint8_t *mem;
	size_t mem_bytes;
	uint32_t *page_indptr, *pages, *seq_lens, *q_indptr;
	uint32_t *tok_off;		/* request r's tokens start here in K, V */
	float *K, *V;			/* [token][n_kv][dim], values as stored */
	uint32_t n_tok;
	uint32_t nq;			/* q heads */
	uint32_t rows_dec, rows_ext;
	float *q_dec, *q_ext;		/* [rows][nq][dim] */
	uint64_t rng;
};

static AT_UNUSED uint64_t at_rand(uint64_t *s)
{
	/* xorshift64*: plenty for test data, and the same on every machine. */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

static AT_UNUSED float at_uniform(uint64_t *s)
{
	return (float)((at_rand(s) >> 40) * 0x1p-24 * 2.0 - 1.0);
}

static AT_UNUSED uint32_t at_below(uint64_t *s, uint32_t n)
{
	return (uint32_t)((at_rand(s) >> 32) % n);
}

/* A float as the pool stores it. */
static AT_UNUSED float at_round(uint32_t dtype, float x)
{
	if (dtype == KVS_DTYPE_BF16)
		return kv_bf16_to_f32(kv_f32_to_bf16(x));
	if (dtype == KVS_DTYPE_F16)
		return kv_f16_to_f32(kv_f32_to_f16(x));
	return x;
}

static AT_UNUSED void at_fill_nan(uint32_t dtype, void *p, size_t bytes)
{
	uint16_t h = dtype == KVS_DTYPE_BF16 ? 0x7fc1 : 0x7e01;
	float f = nanf("");
	size_t i;

	if (dtype == KVS_DTYPE_F32) {
		for (i = 0; i + 4 <= bytes; i += 4)
			memcpy((uint8_t *)p + i, &f, 4);
		return;
	}
	for (i = 0; i + 2 <= bytes; i += 2)
		memcpy((uint8_t *)p + i, &h, 2);
}

static AT_UNUSED void at_env_free(struct at_env *e)
{
	free(e->mem);
	free(e->page_indptr);
	free(e->pages);
	free(e->seq_lens);
	free(e->q_indptr);
	free(e->tok_off);
	free(e->K);
	free(e->V);
	free(e->q_dec);
	free(e->q_ext);
	memset(e, 0, sizeof(*e));
}

static AT_UNUSED uint32_t at_new(const struct at_case *c, uint32_t r)
{
	return c->n_new[r] ? c->n_new[r] : 1;
}

/* Page lists: a random permutation of a pool with unused pages in it. */
static int at_page_tables(struct at_env *e)
{
	const struct at_case *c = &e->c;
	uint32_t r, j, need_total = 0, n_pages, *perm, used = 0, shared = c->shared_pages;

	for (r = 0; r < c->n_reqs; r++) {
		uint32_t need = (c->seq[r] + c->tpp - 1) / c->tpp;

		/* Shared pages are full pages of request 0, and fit every request. */
		if (r && (shared > need || shared * c->tpp > c->seq[0]))
			return -1;
		need_total += need - (r ? shared : 0);
	}
	n_pages = need_total + need_total / 4 + c->n_reqs + 3;
	perm = malloc(n_pages * sizeof(*perm));
	e->page_indptr = calloc(c->n_reqs + 1, sizeof(uint32_t));
	e->pages = malloc((need_total + shared * c->n_reqs + c->n_reqs) * sizeof(uint32_t));
	if (!perm || !e->page_indptr || !e->pages) {
		free(perm);
		return -1;
	}
	for (j = 0; j < n_pages; j++)
		perm[j] = j;
	for (j = n_pages - 1; j > 0; j--) {
		uint32_t k = at_below(&e->rng, j + 1), t = perm[j];

		perm[j] = perm[k];
		perm[k] = t;
	}
	for (r = 0; r < c->n_reqs; r++) {
		uint32_t need = (c->seq[r] + c->tpp - 1) / c->tpp;
		uint32_t *list = e->pages + e->page_indptr[r];

		for (j = 0; j < need; j++)
			list[j] = r && j < shared ? e->pages[j] : perm[used++];
		/* One more entry, never to be read: an unused page (all NaN). */
		list[need] = perm[need_total + r % (n_pages - need_total)];
		e->page_indptr[r + 1] = e->page_indptr[r] + need + 1;
	}
	free(perm);
	e->kv.n_pages = n_pages;
	return 0;
}

/*
 * Build everything for @c: pool (NaN), page tables, K/V (written into the
 * pool with kv_attn_write_ref, and kept as stored for the naive), queries.
 */
static AT_UNUSED int at_env_init(struct at_env *e, const struct at_case *c)
{
	struct kvs_geometry *g = &e->kv.geom;
	struct kv_attn_batch wb;
	uint32_t r, i, n, rows;
	size_t kvn, qn;
	int ret;

	memset(e, 0, sizeof(*e));
	e->c = *c;
	e->rng = c->seed ? c->seed : 0x9e3779b97f4a7c15ull;
	g->n_layers = c->n_layers ? c->n_layers : 1;
	g->n_kv_heads = c->n_kv;
	g->head_dim = c->dim;
	g->tokens_per_page = c->tpp;
	g->dtype = c->dtype;
	g->page_bytes = kv_page_bytes(g);
	e->kv.layer = c->layer;
	e->nq = c->n_kv * c->group;
	if (c->n_reqs > AT_MAX_REQS || at_page_tables(e))
		goto fail;
	e->mem_bytes = e->kv.n_pages * g->page_bytes;
	e->mem = aligned_alloc(64, (e->mem_bytes + 63) & ~(size_t)63);
	if (!e->mem)
		goto fail;
	at_fill_nan(c->dtype, e->mem, e->mem_bytes);
	e->kv.base = e->mem;

	e->seq_lens = malloc(c->n_reqs * sizeof(uint32_t));
	e->tok_off = malloc((c->n_reqs + 1) * sizeof(uint32_t));
	e->q_indptr = malloc((c->n_reqs + 1) * sizeof(uint32_t));
	if (!e->seq_lens || !e->tok_off || !e->q_indptr)
		goto fail;
	e->tok_off[0] = 0;
	e->q_indptr[0] = 0;
	for (r = 0; r < c->n_reqs; r++) {
		e->seq_lens[r] = c->seq[r];
		e->tok_off[r + 1] = e->tok_off[r] + c->seq[r];
		e->q_indptr[r + 1] = e->q_indptr[r] + at_new(c, r);
		e->b.max_seq_len = c->seq[r] > e->b.max_seq_len ? c->seq[r] : e->b.max_seq_len;
		e->b.max_q_len = at_new(c, r) > e->b.max_q_len ? at_new(c, r) : e->b.max_q_len;
	}
	e->n_tok = e->tok_off[c->n_reqs];
	kvn = (size_t)e->n_tok * c->n_kv * c->dim;
	e->K = malloc(kvn * sizeof(float));
	e->V = malloc(kvn * sizeof(float));
	if (!e->K || !e->V)
		goto fail;
	for (i = 0; i < kvn; i++) {
		e->K[i] = at_round(c->dtype, at_uniform(&e->rng));
		e->V[i] = at_round(c->dtype, at_uniform(&e->rng));
	}
	/* A shared prefix holds the same tokens in every request. */
	for (r = 1; r < c->n_reqs; r++) {
		n = c->shared_pages * c->tpp;
		n = n < c->seq[r] ? n : c->seq[r];
		n = n < c->seq[0] ? n : c->seq[0];
		memcpy(e->K + (size_t)e->tok_off[r] * c->n_kv * c->dim, e->K,
		       (size_t)n * c->n_kv * c->dim * sizeof(float));
		memcpy(e->V + (size_t)e->tok_off[r] * c->n_kv * c->dim, e->V,
		       (size_t)n * c->n_kv * c->dim * sizeof(float));
	}

	e->b.n_reqs = c->n_reqs;
	e->b.page_indptr = e->page_indptr;
	e->b.pages = e->pages;
	e->b.seq_lens = e->seq_lens;
	e->bx = e->b;
	e->bx.q_indptr = e->q_indptr;

	/* Every token of every request is "new" to one write. */
	wb = e->b;
	wb.q_indptr = e->tok_off;
	wb.max_q_len = 0;
	ret = kv_attn_write_ref(&e->kv, &wb, e->K, e->V);
	if (ret)
		goto fail;

	e->rows_dec = c->n_reqs;
	e->rows_ext = e->q_indptr[c->n_reqs];
	rows = e->rows_dec + e->rows_ext;
	qn = (size_t)rows * e->nq * c->dim;
	e->q_dec = malloc(qn * sizeof(float));
	e->q_ext = malloc(qn * sizeof(float));
	if (!e->q_dec || !e->q_ext)
		goto fail;
	for (i = 0; i < qn; i++) {
		e->q_dec[i] = at_uniform(&e->rng) * (c->qscale ? c->qscale : 1.0f);
		e->q_ext[i] = at_uniform(&e->rng) * (c->qscale ? c->qscale : 1.0f);
	}
	return 0;
fail:
	at_env_free(e);
	return -1;
}

/*
 * Naive dense attention in double over the stored K/V of request @r:
 * query row @qrow at position @pos, every q head.  out [nq][dim], lse [nq].
 */
static AT_UNUSED void at_naive_row(const struct at_env *e, uint32_t r, const float *qrow,
				   uint32_t pos, double scale, double *out, double *lse,
				   double *sbuf)
{
	const struct at_case *c = &e->c;
	uint32_t hq, j, d;

	for (hq = 0; hq < e->nq; hq++) {
		uint32_t h = hq / c->group;
		const float *qv = qrow + (size_t)hq * c->dim;
		double mx = -INFINITY, sum = 0;
		double *o = out + (size_t)hq * c->dim;

		for (j = 0; j <= pos; j++) {
			const float *k = e->K + (((size_t)e->tok_off[r] + j) * c->n_kv + h) * c->dim;
			double s = 0;

			for (d = 0; d < c->dim; d++)
				s += (double)qv[d] * k[d];
			sbuf[j] = s * scale;
			mx = sbuf[j] > mx ? sbuf[j] : mx;
		}
		memset(o, 0, c->dim * sizeof(double));
		for (j = 0; j <= pos; j++) {
			const float *v = e->V + (((size_t)e->tok_off[r] + j) * c->n_kv + h) * c->dim;
			double p = exp(sbuf[j] - mx);

			sum += p;
			for (d = 0; d < c->dim; d++)
				o[d] += p * v[d];
		}
		for (d = 0; d < c->dim; d++)
			o[d] /= sum;
		lse[hq] = mx + log(sum);
	}
}

/* The naive for every row: decode (@extend false) or extend. */
static AT_UNUSED int at_naive(const struct at_env *e, bool extend, double *out, double *lse)
{
	const struct at_case *c = &e->c;
	double scale = 1.0 / sqrt((double)c->dim);
	uint32_t r, i, maxseq = 0;
	double *sbuf;

	for (r = 0; r < c->n_reqs; r++)
		maxseq = c->seq[r] > maxseq ? c->seq[r] : maxseq;
	sbuf = malloc(maxseq * sizeof(double));
	if (!sbuf)
		return -1;
	for (r = 0; r < c->n_reqs; r++) {
		uint32_t n = extend ? at_new(c, r) : 1;
		uint32_t row0 = extend ? e->q_indptr[r] : r;
		const float *q = extend ? e->q_ext : e->q_dec;

		for (i = 0; i < n; i++) {
			size_t row = row0 + i;

			at_naive_row(e, r, q + row * e->nq * c->dim, c->seq[r] - n + i,
				     scale, out + row * e->nq * c->dim, lse + row * e->nq,
				     sbuf);
		}
	}
	free(sbuf);
	return 0;
}

struct at_err {
	double rel_frob;	/* ||out - ref|| / ||ref|| */
	double max_abs;
	double lse_abs;		/* max |lse - ref lse| */
	size_t not_finite;	/* outputs that are NaN or Inf */
};

static AT_UNUSED struct at_err at_compare(const float *out, const double *ref, size_t n,
					  const float *lse, const double *ref_lse, size_t n_lse)
{
	struct at_err e = { 0 };
	double num = 0, den = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		double d = out[i] - ref[i];

		if (!isfinite(out[i]))
			e.not_finite++;
		num += d * d;
		den += ref[i] * ref[i];
		if (fabs(d) > e.max_abs || isnan(d))
			e.max_abs = fabs(d);
	}
	e.rel_frob = den > 0 ? sqrt(num / den) : sqrt(num);
	for (i = 0; lse && i < n_lse; i++) {
		double d = fabs(lse[i] - ref_lse[i]);

		if (!isfinite(lse[i]))
			e.not_finite++;
		if (d > e.lse_abs || isnan(d))
			e.lse_abs = d;
	}
	return e;
}

static AT_UNUSED const char *at_dtype_name(uint32_t dtype)
{
	switch (dtype) {
	case KVS_DTYPE_F16:
		return "f16";
	case KVS_DTYPE_BF16:
		return "bf16";
	case KVS_DTYPE_F32:
		return "f32";
	}
	return "?";
}

#endif /* KVS_TESTS_ATTN_TEST_H */
