/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A kvserve worker's state, shared by worker.c (serving) and verify.c
 * (checking a served request against a recompute).
 */
#ifndef KVSERVE_WORKER_H
#define KVSERVE_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include <kvshare/arbiter.h>
#include <kvshare/prefix.h>
#include <kvshare/req_table.h>

#include "kvserve.h"
#include "model.h"

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

struct worker;
struct request;

/*
 * Where a request's pages live, behind one set of calls (cache.c): the
 * pool's prefix cache, shared through the arbiter (cache_shared), or the
 * worker's private cache (cache_private).  A request picks one when it is
 * admitted or falls back, and serving it calls these without asking which;
 * only the fallback and the check of a served request look at which.
 * A call that fails through the arbiter says so (arbiter_failed) and gives
 * -EAGAIN: serve the request privately.
 */
struct req_cache {
	/*
	 * Match the prompt (all but its last token) against the cache and
	 * reserve pages for the rest of the request's n_kv tokens: the tokens
	 * matched, or -errno with the request (and its slot) released.
	 */
	long (*match)(struct worker *w, struct request *q);
	/*
	 * Cache the full pages of the first req.n_tokens tokens, or when
	 * @finished the whole request's, giving its pages back: 0 or -errno.
	 */
	int (*cache)(struct worker *w, struct request *q, bool finished);
	/* A call for the request failed with @err: release it; what to return. */
	int (*fail)(struct worker *w, struct request *q, int err);
	/* Give back everything the request holds (nothing if it holds nothing). */
	void (*abort)(struct worker *w, struct request *q);
	/* The memory the request's page indices are into, and its size in pages. */
	void *(*memory)(const struct worker *w, uint64_t *n_pages);
};

extern const struct req_cache cache_shared, cache_private;

/* A request a worker holds, from its prefill to its last token. */
struct request {
	unsigned int r;
	const struct req_cache *cache;	/* where its pages are */
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

static inline uint32_t hid_len(const struct worker *w)
{
	return model_hidden_size(w->model);
}

/* Set up the private cache (once; 0 if it is): 0 or -ENOMEM. */
int pc_setup(struct worker *w);

/*
 * Recompute request @q (served from the pages of @served) from scratch and
 * compare; 0, -EIO on a difference (counted by the caller), or -errno.
 */
int verify_request(struct worker *w, struct request *q, const struct model_seq *served);

#endif
