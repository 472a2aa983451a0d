// SPDX-License-Identifier: GPL-2.0
/*
 * kvserve's model (model.h): projections in plain C, attention through
 * libkv's C reference, or the CUDA kernels on a device pool (model_cuda.c).  Weights are [in][out] so that every projection is
 * y += x[i] * W[i][:], a loop the compiler vectorizes without reordering
 * a sum: the bits do not depend on the build's vector width either.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "model_cuda.h"

#define VOCAB		512	/* greedy choice among this many tokens */
#define MAX_HIDDEN	8192

struct layer_w {
	float *wq, *wk, *wv, *wo;
};

struct model {
	struct kvs_geometry g;
	uint32_t nq, hid, kvw;		/* q heads; nq * D; n_kv * D */
	uint32_t max_tokens;
	uint64_t seed;
	struct layer_w *lw;
	float *wout;			/* [hid][VOCAB] */
	float *freq;			/* [hid]: the position encoding's frequencies */
	float *x, *xn, *q, *k, *v, *o;	/* activations, max_tokens rows */
	uint32_t *seq_lens;		/* decode: max_tokens requests */
	struct model_cuda *cuda;	/* device buffers, at the first call on dev_pool */
	float hidden[MAX_HIDDEN];	/* last row, normalized */
	float logits[VOCAB];
};

/*
 * The device pool whose calls run on the CUDA kernels (model_attn_cuda()),
 * and whether the kernels are the CPU stand-in's: tests/simt/simt_runtime.cc
 * defines this symbol, the CUDA runtime does not.
 */
static const void *dev_pool;
extern const char kv_simt_runtime[] __attribute__((weak));

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float uniform(uint64_t *s)
{
	return (float)(splitmix64(s) >> 40) * 0x1p-23f - 1.0f;
}

/* @in x @out weights, variance 1 / @in: activations keep their size. */
static float *weights(uint32_t in, uint32_t out, uint64_t *s)
{
	float *w = malloc((size_t)in * out * sizeof(float));
	float a = sqrtf(3.0f / in);
	size_t i;

	for (i = 0; w && i < (size_t)in * out; i++)
		w[i] = uniform(s) * a;
	return w;
}

void model_destroy(struct model *m)
{
	uint32_t l;

	if (!m)
		return;
	for (l = 0; m->lw && l < m->g.n_layers; l++) {
		free(m->lw[l].wq);
		free(m->lw[l].wk);
		free(m->lw[l].wv);
		free(m->lw[l].wo);
	}
	free(m->lw);
	free(m->wout);
	free(m->freq);
	free(m->x);
	free(m->xn);
	free(m->q);
	free(m->k);
	free(m->v);
	free(m->o);
	free(m->seq_lens);
	model_cuda_destroy(m->cuda);
	free(m);
}

int model_create(const struct kvs_geometry *g, uint32_t n_q_heads, uint64_t seed,
		 uint32_t max_tokens, struct model **out)
{
	struct model *m;
	uint64_t s = seed;
	size_t rows = max_tokens;
	uint32_t l;

	*out = NULL;
	if (!g->n_layers || !g->n_kv_heads || !n_q_heads || n_q_heads % g->n_kv_heads ||
	    !max_tokens || (uint64_t)n_q_heads * g->head_dim > MAX_HIDDEN ||
	    !kv_dtype_size(g->dtype))
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->g = *g;
	m->g.page_bytes = kv_page_bytes(g);
	m->nq = n_q_heads;
	m->hid = n_q_heads * g->head_dim;
	m->kvw = g->n_kv_heads * g->head_dim;
	m->max_tokens = max_tokens;
	m->seed = seed;
	m->lw = calloc(g->n_layers, sizeof(*m->lw));
	if (!m->lw)
		goto nomem;
	for (l = 0; l < g->n_layers; l++) {
		m->lw[l].wq = weights(m->hid, m->hid, &s);
		m->lw[l].wk = weights(m->hid, m->kvw, &s);
		m->lw[l].wv = weights(m->hid, m->kvw, &s);
		m->lw[l].wo = weights(m->hid, m->hid, &s);
		if (!m->lw[l].wq || !m->lw[l].wk || !m->lw[l].wv || !m->lw[l].wo)
			goto nomem;
	}
	m->wout = weights(m->hid, VOCAB, &s);
	m->freq = malloc(m->hid * sizeof(float));
	for (l = 0; m->freq && l < m->hid; l++)
		m->freq[l] = powf(10000.0f, -(float)(l & ~1u) / m->hid);
	m->x = malloc(rows * m->hid * sizeof(float));
	m->xn = malloc(rows * m->hid * sizeof(float));
	m->q = malloc(rows * m->hid * sizeof(float));
	m->o = malloc(rows * m->hid * sizeof(float));
	m->k = malloc(rows * m->kvw * sizeof(float));
	m->v = malloc(rows * m->kvw * sizeof(float));
	m->seq_lens = malloc(rows * sizeof(uint32_t));
	if (!m->seq_lens || !m->wout || !m->freq || !m->x || !m->xn || !m->q || !m->o || !m->k || !m->v)
		goto nomem;
	*out = m;
	return 0;
nomem:
	model_destroy(m);
	return -ENOMEM;
}

/* Token @tok at position @pos: a random vector per token plus sin/cos of the position. */
static void embed(const struct model *m, uint32_t tok, uint32_t pos, float *x)
{
	uint64_t s = m->seed ^ ((uint64_t)tok * 0xd1b54a32d192ed03ull);
	uint32_t i;

	for (i = 0; i < m->hid; i++)
		x[i] = uniform(&s) + ((i & 1) ? cosf(pos * m->freq[i]) : sinf(pos * m->freq[i]));
}

static void rmsnorm(const float *x, float *y, uint32_t n)
{
	float ss = 0, inv;
	uint32_t i;

	for (i = 0; i < n; i++)
		ss += x[i] * x[i];
	inv = 1.0f / sqrtf(ss / n + 1e-5f);
	for (i = 0; i < n; i++)
		y[i] = x[i] * inv;
}

/* y[r] = x[r] W for @rows rows; W is [in][out]. */
static void project(const float *x, const float *w, float *y, uint32_t rows,
		    uint32_t in, uint32_t out)
{
	uint32_t r, i, j;

	for (r = 0; r < rows; r++) {
		const float *xr = x + (size_t)r * in;
		float *yr = y + (size_t)r * out;

		memset(yr, 0, out * sizeof(float));
		for (i = 0; i < in; i++) {
			const float a = xr[i], *wi = w + (size_t)i * out;

			for (j = 0; j < out; j++)
				yr[j] += a * wi[j];
		}
	}
}

/*
 * The rows in m->x (embedded) through every layer: @b says whose pages
 * each row's KV goes to and reads from (extend: one request, @n rows;
 * decode: @n requests, one row each).  Row r's greedy next token goes to
 * next[r] for every r in [first_out, n); its final state to m->hidden (the
 * last row) and to hidden_out (row r at hidden_out + (r - first_out) * hid)
 * when that is not NULL.  Every row is computed by the same operations in
 * the same order whatever the other rows are: a request's bits do not
 * depend on the batch it is in.
 */
/* One layer's KV write and attention, by the C reference. */
static int attend_ref(struct model *m, const struct kv_attn_kv *kv,
		      const struct kv_attn_batch *b, const struct kv_attn_params *p, bool decode)
{
	int ret = kv_attn_write_ref(kv, b, m->k, m->v);

	if (ret)
		return ret;
	return decode ? kv_attn_decode_ref(kv, b, p, m->q, m->o, NULL)
		      : kv_attn_extend_ref(kv, b, p, m->q, m->o, NULL);
}

/* The batch's page tables to the device, on a device pool; db unused otherwise. */
static int cuda_begin(struct model *m, const struct model_seq *s,
		      const struct kv_attn_batch *b, struct kv_attn_batch *db, bool *on_dev)
{
	int ret;

	*on_dev = dev_pool && s->pool_base == dev_pool;
	if (!*on_dev)
		return 0;
	if (!m->cuda) {
		ret = model_cuda_create(&m->g, m->nq, m->max_tokens, &m->cuda);
		if (ret)
			return ret;
	}
	return model_cuda_tables(m->cuda, b, db);
}

static int forward(struct model *m, const struct model_seq *s,
		   const struct kv_attn_batch *b, uint32_t n, bool decode,
		   uint32_t first_out, uint32_t *next, float *hidden_out)
{
	struct kv_attn_params p = { .n_q_heads = m->nq };
	struct kv_attn_kv kv = { .base = s->pool_base, .n_pages = s->pool_pages, .geom = m->g };
	struct kv_attn_batch db;
	uint32_t l, r, i;
	bool on_dev;
	int ret;

	ret = cuda_begin(m, s, b, &db, &on_dev);
	if (ret)
		return ret;
	for (l = 0; l < m->g.n_layers; l++) {
		const struct layer_w *w = &m->lw[l];

		for (r = 0; r < n; r++)
			rmsnorm(m->x + (size_t)r * m->hid, m->xn + (size_t)r * m->hid, m->hid);
		project(m->xn, w->wq, m->q, n, m->hid, m->hid);
		project(m->xn, w->wk, m->k, n, m->hid, m->kvw);
		project(m->xn, w->wv, m->v, n, m->hid, m->kvw);
		kv.layer = l;
		ret = on_dev ? model_cuda_layer(m->cuda, &kv, &db, &p, decode, n, m->q, m->k,
						m->v, m->o)
			     : attend_ref(m, &kv, b, &p, decode);
		if (ret)
			return ret;
		/* The residual: x += o Wo (q is free again: it takes o Wo). */
		project(m->o, w->wo, m->q, n, m->hid, m->hid);
		for (i = 0; i < n * m->hid; i++)
			m->x[i] += m->q[i];
	}
	for (r = first_out; r < n; r++) {
		uint32_t best = 0;

		rmsnorm(m->x + (size_t)r * m->hid, m->hidden, m->hid);
		project(m->hidden, m->wout, m->logits, 1, m->hid, VOCAB);
		for (i = 1; i < VOCAB; i++)
			if (m->logits[i] > m->logits[best])
				best = i;
		next[r - first_out] = best;
		if (hidden_out)
			memcpy(hidden_out + (size_t)(r - first_out) * m->hid, m->hidden,
			       m->hid * sizeof(float));
	}
	return 0;
}

static int check_seq(const struct model *m, const struct model_seq *s, uint32_t pos,
		     uint32_t n)
{
	uint32_t T = m->g.tokens_per_page;

	if (!n || n > m->max_tokens || (uint64_t)pos + n > UINT32_MAX ||
	    ((uint64_t)pos + n + T - 1) / T > s->n_pages)
		return -EINVAL;
	return 0;
}

int model_prefill(struct model *m, const struct model_seq *s, const uint32_t *tokens,
		  uint32_t pos, uint32_t n, uint32_t *next)
{
	uint32_t indptr[2] = { 0, s->n_pages }, q_indptr[2] = { 0, n }, seq = pos + n;
	struct kv_attn_batch b = {
		.n_reqs = 1, .max_seq_len = seq, .max_q_len = n, .page_indptr = indptr,
		.pages = s->pages, .seq_lens = &seq, .q_indptr = q_indptr,
	};
	uint32_t r;
	int ret = check_seq(m, s, pos, n);

	if (ret)
		return ret;
	for (r = 0; r < n; r++)
		embed(m, tokens[pos + r], pos + r, m->x + (size_t)r * m->hid);
	return forward(m, s, &b, n, false, n - 1, next, NULL);
}

int model_decode(struct model *m, const struct model_seq *s, uint32_t tok, uint32_t pos,
		 uint32_t *next)
{
	uint32_t indptr[2] = { 0, s->n_pages };
	struct model_batch b = {
		.pool_base = s->pool_base, .pool_pages = s->pool_pages, .n_reqs = 1,
		.page_indptr = indptr, .pages = s->pages,
	};

	return model_decode_batch(m, &b, &tok, &pos, next, NULL);
}

int model_decode_batch(struct model *m, const struct model_batch *b, const uint32_t *toks,
		       const uint32_t *pos, uint32_t *next, float *hidden)
{
	const uint32_t T = m->g.tokens_per_page;
	struct model_seq s = { b->pool_base, b->pool_pages, NULL, 0 };
	struct kv_attn_batch ab = {
		.n_reqs = b->n_reqs, .max_q_len = 1, .page_indptr = b->page_indptr,
		.pages = b->pages, .seq_lens = m->seq_lens,
	};
	uint32_t r;

	if (!b->n_reqs || b->n_reqs > m->max_tokens)
		return -EINVAL;
	for (r = 0; r < b->n_reqs; r++) {
		if (pos[r] == UINT32_MAX ||
		    pos[r] / T >= b->page_indptr[r + 1] - b->page_indptr[r])
			return -EINVAL;
		m->seq_lens[r] = pos[r] + 1;
		if (m->seq_lens[r] > ab.max_seq_len)
			ab.max_seq_len = m->seq_lens[r];
		embed(m, toks[r], pos[r], m->x + (size_t)r * m->hid);
	}
	return forward(m, &s, &ab, b->n_reqs, true, 0, next, hidden);
}

const float *model_last_hidden(const struct model *m, uint32_t *len)
{
	*len = m->hid;
	return m->hidden;
}

const float *model_last_logits(const struct model *m)
{
	return m->logits;
}

uint32_t model_vocab(void)
{
	return VOCAB;
}

uint32_t model_hidden_size(const struct model *m)
{
	return m->hid;
}

uint64_t model_macs_per_token(const struct model *m)
{
	return (uint64_t)m->g.n_layers * m->hid * (2ull * m->hid + 2ull * m->kvw);
}

int model_attn_cuda(const void *dev_base, int driver, char *why, size_t len)
{
	bool simt = kv_simt_runtime != NULL;

	if (kv_cuda_available() <= 0) {
		snprintf(why, len, "no CUDA kernels to run: %s (build/kvserve is built "
			 "without them: run build/kvserve-cuda, which make builds where nvcc "
			 "is, on a GPU)", kv_cuda_error());
		return -ENODEV;
	}
	if (driver == 1 && simt) {
		snprintf(why, len, "the pool is on a real GPU, but these CUDA kernels are "
			 "the CPU stand-in of the tests (tests/simt): run build/kvserve-cuda");
		return -EOPNOTSUPP;
	}
	if (driver != 1 && !simt) {
		snprintf(why, len, "the pool was mapped by the CUDA driver stand-in (host "
			 "memory): the GPU's kernels cannot read it");
		return -EOPNOTSUPP;
	}
	dev_pool = dev_base;
	return 0;
}

const char *model_attn_cuda_name(int driver, char *buf, size_t len)
{
	char dev[128];

	if (kv_simt_runtime)
		snprintf(buf, len, "CUDA kernels on the CPU STAND-IN tests/simt + %s",
			 driver == 1 ? "the real CUDA driver" : "driver stand-in tests/gpu/cudastub");
	else if (kv_cuda_device_name(dev, sizeof(dev)))
		snprintf(buf, len, "CUDA kernels (no device: %s)", kv_cuda_error());
	else
		snprintf(buf, len, "CUDA kernels on %s", dev);
	return buf;
}
