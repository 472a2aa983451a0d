/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvserve's model: a small decoder-only transformer with random weights,
 * the compute its workers run over shared KV pages.  It is untrained and
 * says nothing, but it has a decoder's data flow: token embedding (with a
 * sinusoidal position), then per layer RMSNorm, q/k/v projections, the
 * KV write into the request's pages, paged attention over everything
 * before (libkv's C reference), and the output projection added to the
 * residual; a greedy next token from the last row.  From layer 1 on, K and
 * V depend on every earlier token through attention, so a page computed
 * by another process is right only if that whole prefix, and the sharing,
 * are right.
 *
 * Every process that creates a model with the same seed and geometry gets
 * the same weights, and the same tokens give the same bits in any pages:
 * the reference's extend does not depend on how a prompt is cut into
 * calls (see <kvshare/attn.h>).  That is what makes a served request
 * checkable against a recompute from scratch, to the bit.
 *
 * With model_attn_cuda(), attention on a device pool runs on the CUDA
 * kernels instead (model_cuda.c): they reduce in another order and take
 * fp16/bf16 tensors, so a request served there is checked against the C
 * reference within tolerances, not to the bit.
 */
#ifndef KVSERVE_MODEL_H
#define KVSERVE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <kvshare/attn.h>

struct model;

/*
 * A model over pools of geometry @g (layers, KV heads, head dim) with
 * @n_q_heads query heads, weights from @seed, activations for up to
 * @max_tokens tokens in one call.  0 or -errno (-EINVAL for a shape the
 * attention code does not take).
 */
int model_create(const struct kvs_geometry *g, uint32_t n_q_heads, uint64_t seed,
		 uint32_t max_tokens, struct model **out);
void model_destroy(struct model *m);

/* One request's view of a pool: its memory and the request's pages in token order. */
struct model_seq {
	void *pool_base;
	uint64_t pool_pages;
	const uint32_t *pages;		/* ceil(tokens / tokens_per_page) of them */
	uint32_t n_pages;
};

/*
 * Prefill tokens[pos .. pos + n) (n >= 1) of a sequence whose KV for
 * tokens [0, pos) is in its pages already: their KV is written, layer by
 * layer, and *next is the greedy token after tokens[pos + n - 1].
 */
int model_prefill(struct model *m, const struct model_seq *s, const uint32_t *tokens,
		  uint32_t pos, uint32_t n, uint32_t *next);

/* One decode step: token @tok at position @pos, through the decode kernel. */
int model_decode(struct model *m, const struct model_seq *s, uint32_t tok, uint32_t pos,
		 uint32_t *next);

/* Several requests in one pool: request r's pages are pages[page_indptr[r] ..]. */
struct model_batch {
	void *pool_base;
	uint64_t pool_pages;
	uint32_t n_reqs;		/* at most the model's max_tokens */
	const uint32_t *page_indptr;	/* [n_reqs + 1] */
	const uint32_t *pages;
};

/*
 * One decode step for a batch (one call of the decode kernel per layer for
 * all of them): request r feeds toks[r] at position pos[r] and gets its
 * greedy next token in next[r], and its final hidden state at hidden +
 * r * model_hidden_size() when @hidden is not NULL.  A request's results
 * are the same bits as model_decode() alone: the batch does not change
 * them (the C reference's decode runs without workers here, one item per
 * request, and the projections work row by row).  On the CUDA kernels
 * (model_attn_cuda()) they agree within tolerance only: decode splits the
 * KV by the batch's longest request.
 */
int model_decode_batch(struct model *m, const struct model_batch *b, const uint32_t *toks,
		       const uint32_t *pos, uint32_t *next, float *hidden);

/*
 * From now on, this process's models run attention on the CUDA kernels for
 * every call whose pool memory is @dev_base (kv_page_addr(pool, 0) of a
 * device pool, mapped through the driver libkv reports as @driver: 1 real,
 * 0 the tests' stand-in); calls on other memory (private host pages, the
 * verification's recompute) keep the C reference.  Process-wide, as
 * kvserve's workers are processes of one pool each.  0, or -errno with
 * the reason in @why: no kernels in this build or no device, or kernels
 * and driver that do not go together (the GPU cannot read the stand-in's
 * host memory; the kernels' stand-in cannot read a GPU's).
 */
int model_attn_cuda(const void *dev_base, int driver, char *why, size_t len);

/* What runs attention on a device pool mapped through @driver, in words. */
const char *model_attn_cuda_name(int driver, char *buf, size_t len);

/* The last call's final hidden state (after the last RMSNorm), and its length. */
const float *model_last_hidden(const struct model *m, uint32_t *len);

/* The last call's logits of its last row (model_vocab() of them). */
const float *model_last_logits(const struct model *m);
uint32_t model_vocab(void);

/* Floats in a final hidden state. */
uint32_t model_hidden_size(const struct model *m);

/* Multiply-adds of one token through the projections (for throughput figures). */
uint64_t model_macs_per_token(const struct model *m);

#endif /* KVSERVE_MODEL_H */
