/* SPDX-License-Identifier: MIT */
/*
 * The prefix cache: the radix tree of <kvshare/radix.h> wired to the
 * kvshare arbiter (struct kv_prefix_cache).
 *
 * One tree per process and namespace, whose every page holds one arbiter
 * reference of this process (KV_RADIX_HELD).  A local miss asks the
 * arbiter for the rest of the chain (LOOKUP) and inserts the hits; newly
 * computed full pages are PUBLISHed before they enter the tree (a
 * duplicate comes back as the canonical page, which the tree and the
 * request then use); local eviction PUTs; allocation under pressure
 * evicts locally, then lets the arbiter evict.  Two processes that serve
 * the same prompt so end up on the same physical pages.
 */
#ifndef KVSHARE_PREFIX_H
#define KVSHARE_PREFIX_H

#include <stddef.h>
#include <stdint.h>

#include <kvshare/arbiter.h>
#include <kvshare/blockhash.h>
#include <kvshare/radix.h>
#include <kvshare/req_table.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kv_prefix_cache;

struct kv_prefix_config {
	const void *salt;		/* NULL: none (differs from empty) */
	size_t salt_len;
	unsigned int algo;		/* enum kv_hash_algo: SHA-256 unless trusted */
	const struct kv_extra *extra;	/* on every page (LoRA id, ...); kept by */
	size_t n_extra;			/* pointer: must outlive the cache */
	/*
	 * In-flight dedupe (kv_lookup_wait()), 0: off.  On, kv_prefix_match()
	 * waits up to this long for prompt pages another process is
	 * computing, and claims the full prompt pages it still misses (they
	 * join the request's row, as kv_prefix_reserve() would add them), so
	 * that the others wait for it in turn.  Their claims end when the
	 * pages are published (kv_prefix_cache_{un,}finished: call the
	 * unfinished one right after prefill, or waiters wait out the
	 * decode) or put (kv_prefix_abort).
	 */
	int inflight_wait_ms;
};

struct kv_prefix_stats {
	uint64_t local_hit_pages;	/* pages matched in the local tree */
	uint64_t remote_hit_pages;	/* pages found by LOOKUP */
	uint64_t lookups;		/* LOOKUP calls */
	uint64_t published;		/* pages PUBLISHed */
	uint64_t dup_published;		/* of which another process had first */
	uint64_t local_dups;		/* computed pages the local tree had */
	uint64_t allocated;		/* pages ALLOCated */
	uint64_t alloc_evictions;	/* pages evicted locally to make room */
	uint64_t put_pages;		/* pages PUT (eviction, dups, tails) */
	uint64_t errors;		/* arbiter calls that failed unasked */
	uint64_t claimed;		/* prompt pages claimed (inflight_wait_ms) */
	uint64_t claim_conflicts;	/* claims refused: computed unclaimed */
};

/*
 * A cache over an attached arbiter handle (kv_pool_arbiter(pool) and
 * kv_pool_info(pool), or kv_arbiter_attach's result): tokens per page and
 * the pool size come from @info.  The handle must outlive the cache.  One
 * thread at a time.
 */
int kv_prefix_create(struct kv_arbiter *arb, const struct kvs_pool_attach *info,
		     const struct kv_prefix_config *cfg,
		     struct kv_prefix_cache **out);
/* PUT every page the tree holds and free it. */
void kv_prefix_destroy(struct kv_prefix_cache *pc);

struct kv_radix *kv_prefix_tree(struct kv_prefix_cache *pc);
const struct kv_prefix_stats *kv_prefix_stats(const struct kv_prefix_cache *pc);
/* The key of a page the tree holds (NULL if out of range). */
const struct kvs_key *kv_prefix_page_key(const struct kv_prefix_cache *pc,
					 uint32_t page);

/*
 * Start a request: local match, then LOOKUP of the rest of the chain; the
 * hits enter the tree.  As kv_radix_req_match; returns tokens matched.
 */
long kv_prefix_match(struct kv_prefix_cache *pc, struct kv_req_table *rt,
		     struct kv_radix_req *req, uint32_t n_match);

/*
 * @n pages OWNED by this process: ALLOC; under pressure (ENOSPC, EDQUOT)
 * evict locally (PUT) and try again, letting the arbiter evict what
 * became CACHED, until it works or nothing is left to evict locally.
 */
int kv_prefix_alloc(struct kv_prefix_cache *pc, uint32_t n, uint32_t *pages);

/* Grow the request's row to @new_len tokens with newly allocated pages. */
int kv_prefix_reserve(struct kv_prefix_cache *pc, struct kv_req_table *rt,
		      struct kv_radix_req *req, uint32_t new_len);

/*
 * kv_radix_cache_{finished,unfinished}_req with the request's new full
 * pages PUBLISHed on the way into the tree (their keys chained from the
 * tree's page before them).
 */
int kv_prefix_cache_finished(struct kv_prefix_cache *pc, struct kv_req_table *rt,
			     struct kv_radix_req *req);
int kv_prefix_cache_unfinished(struct kv_prefix_cache *pc, struct kv_req_table *rt,
			       struct kv_radix_req *req);

/* Drop a request without caching anything (errors, aborts). */
void kv_prefix_abort(struct kv_prefix_cache *pc, struct kv_req_table *rt,
		     struct kv_radix_req *req);

#ifdef __cplusplus
}
#endif

#endif /* KVSHARE_PREFIX_H */
