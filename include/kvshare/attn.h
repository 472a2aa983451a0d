/* SPDX-License-Identifier: MIT */
/*
 * Paged attention over a kvshare pool: the KV write for new tokens, decode
 * (one query token per request) and extend (new tokens of a request attend
 * causally to its cached prefix and to themselves; prefill is extend with
 * no prefix).  Grouped-query attention: q head h reads KV head
 * h / (n_q_heads / n_kv_heads).  Softmax in fp32 with the running maximum
 * subtracted, scale 1/sqrt(head_dim) unless given.
 *
 * Two backends with the same semantics:
 *   kv_attn_*_ref()   C, on the CPU: the CPU backend and the test oracle.
 *                     Tensors are fp32; the pool may hold fp16, bf16 or fp32.
 *   kv_attn_*_cuda()  CUDA kernels in build/libkv_cuda.a (link it with
 *                     libcudart_static), or build/libkv_cuda_stub.a where a
 *                     binary must not need CUDA (every call -ENODEV).
 *                     Every pointer, page tables included, is device memory;
 *                     tensors have the pool's dtype (fp16 or bf16).
 *
 * Plain C: no CUDA header is needed to call either.  The layout of the
 * pool memory is <kvshare/kv_layout.h>.  Functions return 0 or -errno.
 */
#ifndef KVSHARE_ATTN_H
#define KVSHARE_ATTN_H

#include <stddef.h>
#include <stdint.h>
#include <kvshare/kv_layout.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One layer of a pool: what the kernels read and write. */
struct kv_attn_kv {
	void *base;			/* pool memory: page p at base + p * page_bytes */
	uint64_t n_pages;		/* page indices must be below this */
	struct kvs_geometry geom;	/* page_bytes: 0, or equal to kv_page_bytes() */
	uint32_t layer;
	uint32_t pad;
};

/*
 * A batch of requests and their page tables (FlashInfer's CSR form, with
 * lengths instead of last-page lengths).  Request r:
 *   pages      pages[page_indptr[r] .. page_indptr[r + 1]): its KV pages in
 *              token order; only the first ceil(seq_lens[r] / T) are read.
 *   seq_lens   tokens in its KV, the new ones included: the KV write for
 *              the new tokens comes first, then decode or extend.
 *   q_indptr   its new tokens are rows q_indptr[r] .. q_indptr[r + 1] of
 *              q, k, v and out, at positions seq_len - n_new .. seq_len - 1.
 *              NULL means one new token per request, row r (decode).
 * Query row i of a request, at position pos, attends to tokens 0..pos.
 * max_seq_len and max_q_len are host-side bounds the CUDA code sizes its
 * grids with (0: unknown); where set, the C reference checks them.
 */
struct kv_attn_batch {
	uint32_t n_reqs;
	uint32_t max_seq_len;		/* decode: splits the KV length; 0 = no split */
	uint32_t max_q_len;		/* extend and write: most new tokens of a request */
	uint32_t pad;
	const uint32_t *page_indptr;	/* [n_reqs + 1] */
	const uint32_t *pages;
	const uint32_t *seq_lens;	/* [n_reqs], each >= 1 */
	const uint32_t *q_indptr;	/* [n_reqs + 1] or NULL */
};

struct kv_attn_workers;

struct kv_attn_params {
	uint32_t n_q_heads;		/* a multiple of geom.n_kv_heads */
	uint32_t kv_split;		/* decode: tokens per split, 0 = choose */
	float scale;			/* 0: 1/sqrt(head_dim) */
	uint32_t pad;
	struct kv_attn_workers *workers;/* ref: threads to use; NULL = caller only */
	void *stream;			/* cuda: cudaStream_t; NULL = default stream */
	void *workspace;		/* cuda: split-KV scratch, or NULL (allocated per call) */
	size_t workspace_bytes;
};

/*
 * Tensor shapes (rows = q_indptr[n_reqs], or n_reqs for decode):
 *   q, out  [rows][n_q_heads][head_dim]
 *   k, v    [rows][n_kv_heads][head_dim]
 *   lse     [rows][n_q_heads], natural log of the softmax denominator with
 *           the scale applied (log sum_j exp(scale * q.k_j)); may be NULL.
 */

/* ---- C reference ---- */

/* Store the new tokens' K and V (converted to the pool's dtype). */
int kv_attn_write_ref(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
		      const float *k, const float *v);
int kv_attn_decode_ref(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
		       const struct kv_attn_params *p, const float *q,
		       float *out, float *lse);
/*
 * Extend is reproducible to the bit: a query row's out and lse depend on
 * its position, q and the KV it sees, not on how a sequence's new tokens
 * were cut into calls (one prefill, chunked prefill, or extend after a
 * cached prefix) nor on the thread count.  Decode is too for a fixed
 * p->kv_split (or no workers); its default split follows the threads.
 */
int kv_attn_extend_ref(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
		       const struct kv_attn_params *p, const float *q,
		       float *out, float *lse);

/*
 * A pool of @n_threads threads (the caller counts as one, so n - 1 are
 * started) for the reference's calls; one call at a time per pool (calls
 * from several threads are serialized).  NULL on failure.
 */
struct kv_attn_workers *kv_attn_workers_create(unsigned int n_threads);
void kv_attn_workers_destroy(struct kv_attn_workers *w);
unsigned int kv_attn_workers_count(const struct kv_attn_workers *w);

/*
 * The reference picks its inner loops by CPU at first use: "avx512",
 * "avx2" (with FMA and F16C) or "base" (any x86-64, or not x86).
 * kv_attn_ref_set_isa() forces one (tests, benchmarks): -ENOTSUP if this
 * CPU cannot run it, -EINVAL for an unknown name; NULL restores the choice.
 */
const char *kv_attn_ref_isa(void);
int kv_attn_ref_set_isa(const char *name);

/* ---- CUDA ---- */

/* Number of CUDA devices; 0, cleanly, with no driver or no device. */
int kv_cuda_available(void);
/* Why the last failing CUDA call failed, or why no device is usable. */
const char *kv_cuda_error(void);
int kv_cuda_device_name(char *buf, size_t len);

/* Thin helpers so that C tests and tools need no CUDA headers. */
int kv_cuda_malloc(void **p, size_t bytes);
int kv_cuda_free(void *p);
int kv_cuda_memcpy(void *dst, const void *src, size_t bytes);	/* any direction */
int kv_cuda_memset(void *p, int byte, size_t bytes);
int kv_cuda_sync(void);

/*
 * The same operations.  Head dims 64, 128 and 256; fp16 and bf16 pools
 * (-EOPNOTSUPP otherwise).  Asynchronous on p->stream (write takes the
 * stream from @p, which may be NULL for the default stream).
 */
int kv_attn_write_cuda(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
		       const struct kv_attn_params *p, const void *k, const void *v);
int kv_attn_decode_cuda(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
			const struct kv_attn_params *p, const void *q,
			void *out, float *lse);
int kv_attn_extend_cuda(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
			const struct kv_attn_params *p, const void *q,
			void *out, float *lse);
/* Workspace decode needs for this batch (0 when it does not split). */
size_t kv_attn_decode_cuda_workspace(const struct kv_attn_kv *kv,
				     const struct kv_attn_batch *b,
				     const struct kv_attn_params *p);

#ifdef __cplusplus
}
#endif

#endif /* KVSHARE_ATTN_H */
