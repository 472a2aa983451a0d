/* SPDX-License-Identifier: MIT */
/*
 * Inside the attention code: the C reference's inner loops (one build per
 * instruction set, ref_kern.h), its thread pool, and what they share.
 */
#ifndef KV_ATTN_INTERNAL_H
#define KV_ATTN_INTERNAL_H

#include <stdint.h>
#include <kvshare/attn.h>

/* KV tokens per block of the inner loop: scores for these, then one rescale. */
#define KV_REF_TB	32

/*
 * Attention of @n_rows consecutive query rows of one request (every head)
 * over KV tokens [t0, t1).  Row i sits at position pos0 + i and sees
 * tokens up to and including it.
 */
struct kv_ref_job {
	const uint8_t *kbase;		/* pool base + offset of (layer, K) in a page */
	const uint8_t *vbase;		/* pool base + offset of (layer, V) in a page */
	uint64_t page_bytes;
	uint64_t tok_stride;		/* bytes between token rows of a head */
	const uint32_t *pages;		/* the request's pages */
	uint32_t dtype;
	uint32_t tpp;
	uint32_t n_kv;
	uint32_t group;			/* q heads per KV head */
	uint32_t dim;
	uint32_t t0, t1;
	uint32_t pos0;
	uint32_t n_rows;
	float scale2;			/* scale * log2(e): scores in base 2 */
	const float *q;			/* row 0; rows n_kv * group * dim floats apart */
};

/*
 * Running softmax state of a job, index [h][i][g] (KV head, row, head in
 * group): base-2 maximum m, sum l, unnormalized output acc (dim floats
 * each); q is the scaled query in the same order; s holds scores.
 */
struct kv_ref_state {
	float *m, *l, *acc, *q, *s;
};

/* Floats a state of this shape takes (kv_ref_state_init carves them). */
size_t kv_ref_state_floats(uint32_t n_kv, uint32_t group, uint32_t n_rows,
			   uint32_t dim);
void kv_ref_state_init(struct kv_ref_state *st, float *mem, uint32_t n_kv,
		       uint32_t group, uint32_t n_rows, uint32_t dim);

/* One build of the inner loops. */
struct kv_ref_ops {
	const char *name;
	uint32_t vl;			/* floats per vector: dim must be a multiple */
	void (*attend)(const struct kv_ref_job *job, struct kv_ref_state *st);
};

extern const struct kv_ref_ops kv_ref_ops_base;
#if defined(__x86_64__)
extern const struct kv_ref_ops kv_ref_ops_avx2;
extern const struct kv_ref_ops kv_ref_ops_avx512;
#endif

/* The thread pool: run @n_items calls of @fn, item and thread index. */
typedef void (*kv_work_fn)(void *ctx, uint32_t item, unsigned int thread);

/*
 * Serialize calls on @w (NULL: nothing to lock), and give back a scratch
 * buffer of @bytes owned by @w until kv_workers_end(); NULL if out of
 * memory (the lock is then already dropped).  With @w NULL the buffer is
 * malloc'd and kv_workers_end() frees it.
 */
void *kv_workers_begin(struct kv_attn_workers *w, size_t bytes);
void kv_workers_end(struct kv_attn_workers *w, void *scratch);
void kv_workers_run(struct kv_attn_workers *w, uint32_t n_items,
		    kv_work_fn fn, void *ctx);

#endif /* KV_ATTN_INTERNAL_H */
