// SPDX-License-Identifier: MIT
/*
 * The C reference of paged attention: the CPU backend and the oracle the
 * CUDA kernels are tested against.  This file checks arguments, cuts a
 * call into items and runs them on the thread pool; the inner loops are in
 * ref_kern.h, built once per instruction set and picked at run time.
 *
 * Items: decode is one item per (request, KV split) with every head, so
 * that a thread streams whole token rows (H * D contiguous elements) from
 * each page; splits of one request are merged by their log-sum-exp when
 * the last of them finishes.  Extend is one item per block of query rows
 * of a request, over its whole causal range, longest first.  Blocks start
 * at positions that are multiples of EXTEND_ROWS, whatever the call's first
 * new token: the inner loops' order of operations depends on a block's
 * shape, so this is what makes a row's result the same bits however a
 * prompt is cut into calls (chunked prefill, a cached prefix, or none).
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "attn_internal.h"

#define EXTEND_ROWS	8	/* query rows per extend item: K/V reuse */
#define MIN_SPLIT	256	/* tokens: below this a split costs more than it gives */
#define MAX_Q_HEADS	4096
#define MAX_HEAD_DIM	512
#define NO_PART		UINT32_MAX
#define ALIGN_FLOATS	16	/* 64 bytes */

struct ref_item {
	uint32_t req;
	uint32_t row0;		/* first row of q and out */
	uint32_t n_rows;
	uint32_t t0, t1;
	uint32_t pos0;
	uint32_t part;		/* partial slot of a split decode, or NO_PART */
};

struct ref_call {
	const struct kv_ref_ops *ops;
	struct kv_ref_job tmpl;
	const struct kv_attn_batch *b;
	const struct ref_item *items;
	const float *q;
	float *out, *lse;
	uint32_t nq;
	float *scratch;		/* per thread */
	size_t scratch_floats;
	float *part;		/* per partial slot: m[nq], l[nq], acc[nq][dim] */
	size_t part_floats;
	const uint32_t *part_first;	/* per request, decode */
	const uint32_t *n_splits;
	atomic_uint *pending;
};

static size_t round_floats(size_t n)
{
	return (n + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
}

size_t kv_ref_state_floats(uint32_t n_kv, uint32_t group, uint32_t n_rows,
			   uint32_t dim)
{
	size_t v = (size_t)n_kv * group * n_rows;

	return 2 * round_floats(v) + 2 * round_floats(v * dim) +
	       round_floats((size_t)group * n_rows * KV_REF_TB);
}

void kv_ref_state_init(struct kv_ref_state *st, float *mem, uint32_t n_kv,
		       uint32_t group, uint32_t n_rows, uint32_t dim)
{
	size_t v = (size_t)n_kv * group * n_rows;

	st->m = mem;
	st->l = st->m + round_floats(v);
	st->acc = st->l + round_floats(v);
	st->q = st->acc + round_floats(v * dim);
	st->s = st->q + round_floats(v * dim);
}

/* ---- instruction set ---- */

static const struct kv_ref_ops *_Atomic isa_forced;
static const struct kv_ref_ops *_Atomic isa_auto;

static const struct kv_ref_ops *isa_detect(void)
{
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
	    __builtin_cpu_supports("f16c")) {
		if (__builtin_cpu_supports("avx512f"))
			return &kv_ref_ops_avx512;
		return &kv_ref_ops_avx2;
	}
#endif
	return &kv_ref_ops_base;
}

static const struct kv_ref_ops *isa_current(void)
{
	const struct kv_ref_ops *ops = atomic_load(&isa_forced);

	if (ops)
		return ops;
	ops = atomic_load(&isa_auto);
	if (!ops) {
		ops = isa_detect();
		atomic_store(&isa_auto, ops);
	}
	return ops;
}

/* The current choice, or a narrower one that divides @dim. */
static const struct kv_ref_ops *isa_for_dim(uint32_t dim)
{
	const struct kv_ref_ops *ops = isa_current();

#if defined(__x86_64__)
	if (dim % ops->vl && ops == &kv_ref_ops_avx512)
		ops = &kv_ref_ops_avx2;
#endif
	if (dim % ops->vl)
		ops = &kv_ref_ops_base;
	return ops;
}

const char *kv_attn_ref_isa(void)
{
	return isa_current()->name;
}

int kv_attn_ref_set_isa(const char *name)
{
	const struct kv_ref_ops *best = isa_detect(), *ops = NULL;

	if (!name) {
		atomic_store(&isa_forced, NULL);
		return 0;
	}
	if (!strcmp(name, "base"))
		ops = &kv_ref_ops_base;
#if defined(__x86_64__)
	else if (!strcmp(name, "avx2"))
		ops = &kv_ref_ops_avx2;
	else if (!strcmp(name, "avx512"))
		ops = &kv_ref_ops_avx512;
#endif
	else if (strcmp(name, "avx2") && strcmp(name, "avx512"))
		return -EINVAL;
	/* The detected set runs everything narrower than itself. */
	if (!ops || ops->vl > best->vl)
		return -ENOTSUP;
	atomic_store(&isa_forced, ops);
	return 0;
}

/* ---- argument checks ---- */

static int check_kv(const struct kv_attn_kv *kv)
{
	const struct kvs_geometry *g;

	if (!kv || !kv->base || !kv->n_pages)
		return -EINVAL;
	g = &kv->geom;
	if (!g->n_layers || !g->n_kv_heads || !g->head_dim ||
	    !g->tokens_per_page || kv->layer >= g->n_layers)
		return -EINVAL;
	if (g->dtype == KVS_DTYPE_FP8)
		return -EOPNOTSUPP;
	if (g->dtype != KVS_DTYPE_F16 && g->dtype != KVS_DTYPE_BF16 &&
	    g->dtype != KVS_DTYPE_F32)
		return -EINVAL;
	if (g->head_dim % 8 || g->head_dim > MAX_HEAD_DIM)
		return -EOPNOTSUPP;
	if (g->page_bytes && g->page_bytes != kv_page_bytes(g))
		return -EINVAL;
	return 0;
}

static int check_params(const struct kv_attn_kv *kv, const struct kv_attn_params *p)
{
	if (!p || !p->n_q_heads || p->n_q_heads > MAX_Q_HEADS ||
	    p->n_q_heads % kv->geom.n_kv_heads)
		return -EINVAL;
	if (!isfinite(p->scale))
		return -EINVAL;
	return 0;
}

/*
 * Every request's length fits its page list and every page it reads is in
 * the pool; with @use_q, q_indptr (if any) is ordered and no request has
 * more new tokens than tokens.  *rows: the rows its tensors need.
 */
static int check_batch(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
		       bool use_q, uint32_t *rows)
{
	const uint32_t T = kv->geom.tokens_per_page;
	uint32_t r;
	uint64_t j;

	if (!b)
		return -EINVAL;
	*rows = 0;
	if (!b->n_reqs)
		return 0;
	if (!b->page_indptr || !b->pages || !b->seq_lens)
		return -EINVAL;
	for (r = 0; r < b->n_reqs; r++) {
		uint32_t p0 = b->page_indptr[r], p1 = b->page_indptr[r + 1];
		uint32_t seq = b->seq_lens[r];
		uint64_t need = ((uint64_t)seq + T - 1) / T;

		if (p1 < p0 || !seq || need > p1 - p0)
			return -EINVAL;
		if (b->max_seq_len && seq > b->max_seq_len)
			return -EINVAL;
		for (j = p0; j < p0 + need; j++)
			if (b->pages[j] >= kv->n_pages)
				return -EINVAL;
		if (use_q && b->q_indptr) {
			uint32_t q0 = b->q_indptr[r], q1 = b->q_indptr[r + 1];

			if (q1 < q0 || q1 - q0 > seq)
				return -EINVAL;
			if (b->max_q_len && q1 - q0 > b->max_q_len)
				return -EINVAL;
		}
	}
	*rows = use_q && b->q_indptr ? b->q_indptr[b->n_reqs] : b->n_reqs;
	return 0;
}

/* ---- KV write ---- */

static void store_row(uint32_t dtype, uint8_t *dst, const float *src, uint32_t n)
{
	uint32_t d;
	uint16_t h;

	switch (dtype) {
	case KVS_DTYPE_F32:
		memcpy(dst, src, (size_t)n * sizeof(float));
		break;
	case KVS_DTYPE_BF16:
		for (d = 0; d < n; d++) {
			h = kv_f32_to_bf16(src[d]);
			memcpy(dst + 2 * d, &h, 2);
		}
		break;
	case KVS_DTYPE_F16:
		for (d = 0; d < n; d++) {
			h = kv_f32_to_f16(src[d]);
			memcpy(dst + 2 * d, &h, 2);
		}
		break;
	}
}

int kv_attn_write_ref(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
		      const float *k, const float *v)
{
	const struct kvs_geometry *g = &kv->geom;
	uint32_t rows, r, i, h;
	int ret;

	ret = check_kv(kv);
	if (!ret)
		ret = check_batch(kv, b, true, &rows);
	if (ret)
		return ret;
	if (rows && (!k || !v))
		return -EINVAL;
	for (r = 0; r < b->n_reqs; r++) {
		uint32_t row0 = b->q_indptr ? b->q_indptr[r] : r;
		uint32_t n_new = b->q_indptr ? b->q_indptr[r + 1] - row0 : 1;
		const uint32_t *pages = b->pages + b->page_indptr[r];

		for (i = 0; i < n_new; i++) {
			uint32_t pos = b->seq_lens[r] - n_new + i;
			uint32_t page = pages[pos / g->tokens_per_page];
			uint32_t slot = pos % g->tokens_per_page;

			for (h = 0; h < g->n_kv_heads; h++) {
				size_t src = ((size_t)(row0 + i) * g->n_kv_heads + h) * g->head_dim;
				uint8_t *base = kv->base;

				store_row(g->dtype, base + kv_offset(g, page, kv->layer, KV_K, slot, h, 0),
					  k + src, g->head_dim);
				store_row(g->dtype, base + kv_offset(g, page, kv->layer, KV_V, slot, h, 0),
					  v + src, g->head_dim);
			}
		}
	}
	return 0;
}

/* ---- running items ---- */

/* Normalized output and LSE of a finished item's rows. */
static void finish_rows(const struct ref_call *c, const struct kv_ref_state *st,
			const struct ref_item *it)
{
	const uint32_t D = c->tmpl.dim, G = c->tmpl.group;
	uint32_t h, i, g, d;
	size_t v = 0;

	for (h = 0; h < c->tmpl.n_kv; h++)
		for (i = 0; i < it->n_rows; i++)
			for (g = 0; g < G; g++, v++) {
				size_t row = (size_t)(it->row0 + i) * c->nq + h * G + g;
				const float *a = st->acc + v * D;
				float *o = c->out + row * D;
				float inv = 1.0f / st->l[v];

				for (d = 0; d < D; d++)
					o[d] = a[d] * inv;
				if (c->lse)
					c->lse[row] = (st->m[v] + log2f(st->l[v])) * (float)M_LN2;
			}
}

/* Combine a request's splits by their base-2 log-sum-exp. */
static void merge_splits(const struct ref_call *c, uint32_t req)
{
	const uint32_t D = c->tmpl.dim, nq = c->nq, ns = c->n_splits[req];
	const float *first = c->part + c->part_first[req] * c->part_floats;
	uint32_t hq, s, d;

	for (hq = 0; hq < nq; hq++) {
		float *o = c->out + ((size_t)req * nq + hq) * D;
		float mx = -INFINITY, sum = 0, inv;

		for (s = 0; s < ns; s++) {
			float m = first[s * c->part_floats + hq];

			mx = m > mx ? m : mx;
		}
		memset(o, 0, D * sizeof(float));
		for (s = 0; s < ns; s++) {
			const float *pt = first + s * c->part_floats;
			const float *acc = pt + 2 * nq + (size_t)hq * D;
			float w = exp2f(pt[hq] - mx);

			sum += pt[nq + hq] * w;
			for (d = 0; d < D; d++)
				o[d] += acc[d] * w;
		}
		inv = 1.0f / sum;
		for (d = 0; d < D; d++)
			o[d] *= inv;
		if (c->lse)
			c->lse[(size_t)req * nq + hq] = (mx + log2f(sum)) * (float)M_LN2;
	}
}

static void save_partial(const struct ref_call *c, const struct kv_ref_state *st,
			 uint32_t slot)
{
	float *pt = c->part + slot * c->part_floats;
	uint32_t nq = c->nq;

	memcpy(pt, st->m, nq * sizeof(float));
	memcpy(pt + nq, st->l, nq * sizeof(float));
	memcpy(pt + 2 * nq, st->acc, (size_t)nq * c->tmpl.dim * sizeof(float));
}

static void run_item(void *ctx, uint32_t index, unsigned int thread)
{
	const struct ref_call *c = ctx;
	const struct ref_item *it = &c->items[index];
	struct kv_ref_job jb = c->tmpl;
	struct kv_ref_state st;

	kv_ref_state_init(&st, c->scratch + thread * c->scratch_floats, jb.n_kv,
			  jb.group, it->n_rows, jb.dim);
	jb.pages = c->b->pages + c->b->page_indptr[it->req];
	jb.t0 = it->t0;
	jb.t1 = it->t1;
	jb.pos0 = it->pos0;
	jb.n_rows = it->n_rows;
	jb.q = c->q + (size_t)it->row0 * c->nq * jb.dim;
	c->ops->attend(&jb, &st);
	if (it->part == NO_PART) {
		finish_rows(c, &st, it);
		return;
	}
	save_partial(c, &st, it->part);
	/* The last split of a request to finish merges them all. */
	if (atomic_fetch_sub(&c->pending[it->req], 1) == 1)
		merge_splits(c, it->req);
}

static void call_init(struct ref_call *c, const struct kv_attn_kv *kv,
		      const struct kv_attn_batch *b, const struct kv_attn_params *p,
		      const float *q, float *out, float *lse)
{
	const struct kvs_geometry *g = &kv->geom;
	const uint8_t *base = kv->base;
	float scale = p->scale ? p->scale : 1.0f / sqrtf((float)g->head_dim);

	memset(c, 0, sizeof(*c));
	c->ops = isa_for_dim(g->head_dim);
	c->b = b;
	c->q = q;
	c->out = out;
	c->lse = lse;
	c->nq = p->n_q_heads;
	c->tmpl.kbase = base + kv_block_offset(g, kv->layer, KV_K);
	c->tmpl.vbase = base + kv_block_offset(g, kv->layer, KV_V);
	c->tmpl.page_bytes = kv_page_bytes(g);
	c->tmpl.tok_stride = kv_token_stride(g);
	c->tmpl.dtype = g->dtype;
	c->tmpl.tpp = g->tokens_per_page;
	c->tmpl.n_kv = g->n_kv_heads;
	c->tmpl.group = p->n_q_heads / g->n_kv_heads;
	c->tmpl.dim = g->head_dim;
	c->tmpl.scale2 = scale * (float)M_LOG2E;
}

struct call_mem {
	struct ref_item *items;
	uint32_t *part_first;
	uint32_t *n_splits;
	atomic_uint *pending;
	void *buf;
};

static size_t round_bytes(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

/*
 * One scratch buffer for a call: items, per-request split bookkeeping,
 * one softmax state per thread, the partials of split requests.  From the
 * pool when there is one (grown once, then reused every layer).
 */
static int call_alloc(struct ref_call *c, struct kv_attn_workers *w,
		      uint32_t n_items, uint32_t max_rows, uint32_t n_part,
		      struct call_mem *m)
{
	unsigned int n_threads = kv_attn_workers_count(w);
	size_t n_reqs = c->b->n_reqs;
	size_t items_b = round_bytes(n_items * sizeof(struct ref_item));
	size_t u32_b = round_bytes(n_reqs * sizeof(uint32_t));
	size_t pend_b = round_bytes(n_reqs * sizeof(atomic_uint));
	size_t state_f = kv_ref_state_floats(c->tmpl.n_kv, c->tmpl.group,
					     max_rows, c->tmpl.dim);
	size_t part_f = round_floats((size_t)c->nq * (c->tmpl.dim + 2));
	size_t head = items_b + 2 * u32_b + pend_b;
	uint8_t *buf;

	buf = kv_workers_begin(w, head + (n_threads * state_f + n_part * part_f) *
				  sizeof(float));
	if (!buf)
		return -ENOMEM;
	m->buf = buf;
	m->items = (struct ref_item *)buf;
	m->part_first = (uint32_t *)(buf + items_b);
	m->n_splits = (uint32_t *)(buf + items_b + u32_b);
	m->pending = (atomic_uint *)(buf + items_b + 2 * u32_b);
	c->items = m->items;
	c->part_first = m->part_first;
	c->n_splits = m->n_splits;
	c->pending = m->pending;
	c->scratch = (float *)(buf + head);
	c->scratch_floats = state_f;
	c->part = c->scratch + n_threads * state_f;
	c->part_floats = part_f;
	return 0;
}

static void call_run(struct ref_call *c, struct kv_attn_workers *w,
		     uint32_t n_items, struct call_mem *m)
{
	kv_workers_run(w, n_items, run_item, c);
	kv_workers_end(w, m->buf);
}

/*
 * Tokens per decode split: the caller's, or about 16 items per thread, so
 * that threads that do not run at the same speed (SMT siblings, a busy
 * neighbour) still finish a call together.  The split changes the rounding
 * of the result, never its meaning; a fixed kv_split makes it independent
 * of the thread count.
 */
static uint64_t decode_chunk(const struct kv_attn_params *p,
			     unsigned int n_threads, uint64_t total)
{
	uint64_t c;

	if (p->kv_split)
		return p->kv_split;
	if (n_threads == 1)
		return UINT32_MAX;
	c = total / (16 * n_threads);
	if (c < MIN_SPLIT)
		c = MIN_SPLIT;
	return (c + 63) & ~(uint64_t)63;
}

#define MAX_ITEMS	(1u << 24)

int kv_attn_decode_ref(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
		       const struct kv_attn_params *p, const float *q,
		       float *out, float *lse)
{
	uint64_t total = 0, n_items = 0, n_part = 0, chunk;
	struct ref_call c;
	struct call_mem m;
	uint32_t rows, r, s, slot = 0, it = 0;
	int ret;

	ret = check_kv(kv);
	if (!ret)
		ret = check_params(kv, p);
	if (!ret)
		ret = check_batch(kv, b, false, &rows);
	if (ret || !rows)
		return ret;
	if (!q || !out)
		return -EINVAL;
	call_init(&c, kv, b, p, q, out, lse);
	for (r = 0; r < b->n_reqs; r++)
		total += b->seq_lens[r];
	chunk = decode_chunk(p, kv_attn_workers_count(p->workers), total);
	for (r = 0; r < b->n_reqs; r++) {
		uint64_t ns = (b->seq_lens[r] + chunk - 1) / chunk;

		n_items += ns;
		if (ns > 1)
			n_part += ns;
	}
	if (n_items > MAX_ITEMS)
		return -E2BIG;
	ret = call_alloc(&c, p->workers, n_items, 1, n_part, &m);
	if (ret)
		return ret;
	for (r = 0; r < b->n_reqs; r++) {
		uint32_t seq = b->seq_lens[r];
		uint32_t ns = (seq + chunk - 1) / chunk;

		m.n_splits[r] = ns;
		m.part_first[r] = slot;
		atomic_init(&m.pending[r], ns);
		for (s = 0; s < ns; s++, it++) {
			struct ref_item *x = &m.items[it];

			x->req = r;
			x->row0 = r;
			x->n_rows = 1;
			x->t0 = s * chunk;
			x->t1 = seq - x->t0 > chunk ? x->t0 + chunk : seq;
			x->pos0 = seq - 1;
			x->part = ns > 1 ? slot++ : NO_PART;
		}
	}
	call_run(&c, p->workers, n_items, &m);
	return 0;
}

/* Longest causal range first, so that the tail of a call is short items. */
static int cmp_item(const void *a, const void *b)
{
	const struct ref_item *x = a, *y = b;

	return x->t1 < y->t1 ? 1 : x->t1 > y->t1 ? -1 : 0;
}

int kv_attn_extend_ref(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
		       const struct kv_attn_params *p, const float *q,
		       float *out, float *lse)
{
	uint64_t n_items = 0;
	struct ref_item *x;
	struct ref_call c;
	struct call_mem m;
	uint32_t rows, r, i, it = 0;
	int ret;

	ret = check_kv(kv);
	if (!ret)
		ret = check_params(kv, p);
	if (!ret)
		ret = check_batch(kv, b, true, &rows);
	if (ret || !rows)
		return ret;
	if (!q || !out)
		return -EINVAL;
	call_init(&c, kv, b, p, q, out, lse);
	for (r = 0; r < b->n_reqs; r++) {
		uint32_t n_new = b->q_indptr ? b->q_indptr[r + 1] - b->q_indptr[r] : 1;
		uint32_t pos = b->seq_lens[r] - n_new;

		if (n_new)
			n_items += (pos + n_new - 1) / EXTEND_ROWS - pos / EXTEND_ROWS + 1;
	}
	if (n_items > MAX_ITEMS)
		return -E2BIG;
	ret = call_alloc(&c, p->workers, n_items, EXTEND_ROWS, 0, &m);
	if (ret)
		return ret;
	for (r = 0; r < b->n_reqs; r++) {
		uint32_t row0 = b->q_indptr ? b->q_indptr[r] : r;
		uint32_t n_new = b->q_indptr ? b->q_indptr[r + 1] - row0 : 1;
		uint32_t seq = b->seq_lens[r];

		for (i = 0; i < n_new; i += x->n_rows, it++) {
			uint32_t pos = seq - n_new + i;
			uint32_t upto = EXTEND_ROWS - pos % EXTEND_ROWS;

			x = &m.items[it];
			x->req = r;
			x->row0 = row0 + i;
			x->n_rows = n_new - i < upto ? n_new - i : upto;
			x->pos0 = pos;
			x->t0 = 0;
			x->t1 = x->pos0 + x->n_rows;
			x->part = NO_PART;
		}
	}
	qsort(m.items, n_items, sizeof(*m.items), cmp_item);
	call_run(&c, p->workers, n_items, &m);
	return 0;
}
