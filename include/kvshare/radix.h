/* SPDX-License-Identifier: MIT */
/*
 * A radix tree over token ids with SGLang RadixCache semantics, at page
 * granularity.
 *
 * The tree (struct kv_radix)
 * --------------------------
 * Keys are token ids, values are page indices of the pool: an edge holds
 * whole pages, tokens_per_page tokens and one page index each, and a
 * node's children are told apart by their first page's tokens (with
 * tokens_per_page = 1 this is SGLang's token-granular tree).  Tokens past
 * the last full page of a key are ignored everywhere.  Lengths in tokens
 * are always multiples of tokens_per_page; sizes are counted in pages.
 *
 * - match_prefix walks from the root, splits the node the match ends in so
 *   that the match ends on a node boundary, and returns the pages and that
 *   last node.
 * - insert adds a key's missing tail as one new leaf and returns how many
 *   tokens were already present: the caller's pages for those are
 *   duplicates, which the caller gives back itself.
 * - lock / unlock count references from a node up to the root.  A page is
 *   protected while a locked node covers it, evictable otherwise; both
 *   sizes are kept exact.
 * - evict frees unlocked leaves, least recently used first, and looks at
 *   a parent again when it becomes a leaf.  Unlike SGLang, which drops
 *   whole leaves and may free more than asked, a leaf is trimmed from its
 *   tail, so evict(n) frees exactly min(n, evictable) pages, deepest first.
 * - cache_finished_req / cache_unfinished_req are SGLang's, over a
 *   request-to-token table (<kvshare/req_table.h>).
 *
 * Recency is a logical clock: each match or insert is one tick, and every
 * node on its path (root to last node) gets it.  The part of a split node
 * past the match point keeps its old stamp (it was not used; SGLang stamps
 * it too), so a parent is never older than its children.
 *
 * Pages leave the tree only through the release callback, in the order
 * they should be forgotten (deepest first): eviction, duplicates and
 * unused tails in the cache_*_req calls, and destroy.  Each node keeps the
 * flags its pages were inserted with (e.g. KV_RADIX_HELD: they carry an
 * arbiter reference), and the callback receives them.
 *
 * A tree is used by one thread at a time; it takes no locks.  Node
 * pointers stay valid while the node is locked (splits keep the node that
 * ends where it ended); an unlocked node may be evicted by any later call
 * that evicts.  Every operation is iterative: chains of any depth are
 * fine.
 *
 * The same tree wired to the kvshare arbiter is <kvshare/prefix.h>.
 */
#ifndef KVSHARE_RADIX_H
#define KVSHARE_RADIX_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <linux/kvshare.h>	/* KVS_NO_PAGE */

#include <kvshare/req_table.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kv_radix;
struct kv_radix_node;

/* Node flags, given at insert. */
#define KV_RADIX_HELD	(1u << 0)	/* each page carries an arbiter reference */

struct kv_radix_ops {
	/*
	 * Pages the tree gives back (evicted, duplicates, tails, destroy),
	 * deepest first, with the flags they were inserted with.
	 */
	void (*release)(void *priv, const uint32_t *pages, uint32_t n,
			unsigned int flags);
	/*
	 * Optional, called by cache_*_req after the tree has reserved what
	 * it needs and before it takes @n new pages: pages[] are the
	 * request's own pages for full pages first_page.. of @tokens, and
	 * may be replaced (by the canonical pages of a PUBLISH).
	 * parent_page is the tree's page before them (KVS_NO_PAGE for the
	 * first page of a chain).  Non-zero (-errno) cancels the insert.
	 */
	int (*adopt)(void *priv, const uint32_t *tokens, uint32_t first_page,
		     uint32_t *pages, uint32_t n, uint32_t parent_page);
	void *priv;
};

/* 0, -EINVAL (tokens_per_page 0 or release NULL) or -ENOMEM. */
int kv_radix_create(uint32_t tokens_per_page, const struct kv_radix_ops *ops,
		    struct kv_radix **out);
/* Release every page (locked or not) and free the tree. */
void kv_radix_destroy(struct kv_radix *t);

uint32_t kv_radix_tokens_per_page(const struct kv_radix *t);
struct kv_radix_node *kv_radix_root(const struct kv_radix *t);
size_t kv_radix_evictable_pages(const struct kv_radix *t);
size_t kv_radix_protected_pages(const struct kv_radix *t);
size_t kv_radix_total_pages(const struct kv_radix *t);
size_t kv_radix_node_count(const struct kv_radix *t);	/* root excluded */

struct kv_radix_match {
	size_t len;			/* tokens matched (whole pages) */
	size_t n_pages;			/* len / tokens_per_page */
	struct kv_radix_node *last_node; /* ends at len; the root if 0 */
};

/*
 * Longest cached prefix of @tokens.  @pages (NULL: not wanted) receives
 * n_pages page indices; room for n_tokens / tokens_per_page.  Splits the
 * node the match ends in and stamps the path.  0, or -ENOMEM (a split
 * could not be allocated; nothing changed, @m unset).
 */
int kv_radix_match_prefix(struct kv_radix *t, const uint32_t *tokens,
			  size_t n_tokens, uint32_t *pages,
			  struct kv_radix_match *m);

/*
 * The same without changing anything (no split, no stamp): tokens matched,
 * and their pages in @pages if not NULL.  For schedulers ranking waiting
 * requests by prefix length.
 */
size_t kv_radix_peek(const struct kv_radix *t, const uint32_t *tokens,
		     size_t n_tokens, uint32_t *pages);

/*
 * Insert the full pages of @tokens with values @pages.  Returns the tokens
 * that were already present: the tree took pages[len / tokens_per_page..]
 * and the caller still owns the ones before.  -ENOMEM: nothing changed.
 * @last (NULL: not wanted) receives the node that ends at the key's end.
 */
long kv_radix_insert(struct kv_radix *t, const uint32_t *tokens,
		     size_t n_tokens, const uint32_t *pages, unsigned int flags,
		     struct kv_radix_node **last);

/*
 * inc_lock_ref / dec_lock_ref: from @node up to the root (the root itself
 * is always locked).  Return the change of the evictable size in pages
 * (<= 0 for lock, >= 0 for unlock); unlock of an unlocked node returns
 * -EINVAL and changes nothing.
 */
long kv_radix_lock(struct kv_radix *t, struct kv_radix_node *node);
long kv_radix_unlock(struct kv_radix *t, struct kv_radix_node *node);

/* Evict up to @n_pages pages; returns the number evicted. */
size_t kv_radix_evict(struct kv_radix *t, size_t n_pages);

/* What a node is, for walkers and printers. */
struct kv_radix_node_info {
	uint64_t id;			/* unique in the tree, 0 = root */
	uint64_t parent_id;
	uint64_t last_access;		/* logical clock */
	size_t depth;			/* tokens from the root to the node's start */
	const uint32_t *tokens;		/* n_pages * tokens_per_page */
	const uint32_t *pages;
	uint32_t n_pages;
	uint32_t lock_ref;
	uint32_t n_children;
	uint32_t flags;
	unsigned int level;		/* edges from the root */
};

/*
 * Visit every node but the root, parents before children (pre-order),
 * children in the order they were added.  A non-zero return of @fn stops
 * the walk and is returned.
 */
int kv_radix_walk(const struct kv_radix *t,
		  int (*fn)(void *arg, const struct kv_radix_node_info *ni),
		  void *arg);
void kv_radix_node_info(const struct kv_radix *t, const struct kv_radix_node *node,
			struct kv_radix_node_info *ni);

/*
 * Pretty-print the tree, one node a line indented by level: id, token
 * range, first @max_tokens tokens, pages, lock count, stamp.  For
 * debugging and for kvctl.  Returns 0 or -errno of the write.
 */
int kv_radix_print(const struct kv_radix *t, FILE *f, unsigned int max_tokens);

/* Recount everything and compare (tests): 0 or -EUCLEAN. */
int kv_radix_check(const struct kv_radix *t);

/*
 * A request as the tree sees it (SGLang's Req fields for the cache).
 *   tokens      prompt + output so far (the caller keeps them)
 *   n_tokens    tokens whose KV the row holds (the row's length)
 *   cached_len  leading tokens whose pages are the tree's, locked through
 *               last_node (SGLang's prefix_indices / cache_protected_len)
 */
struct kv_radix_req {
	int slot;			/* row in the kv_req_table */
	const uint32_t *tokens;
	uint32_t n_tokens;
	uint32_t cached_len;
	struct kv_radix_node *last_node;
};

/*
 * Start a request in row req->slot: match tokens[0..n_match), lock the
 * last node, write the pages into the row, set cached_len = n_tokens =
 * the match.  (Pass n_match = prompt length - 1 if the last token's logits
 * must be computed anyway.)  Returns the tokens matched or -errno.
 */
long kv_radix_req_match(struct kv_radix *t, struct kv_req_table *rt,
			struct kv_radix_req *req, uint32_t n_match);

/*
 * cache_finished_req: insert the row's full pages, give back the
 * request's duplicates and its partial last page, unlock, free the row.
 * On error (-ENOMEM, or from adopt) every page the request owned is
 * released instead, and the rest is done all the same.
 */
int kv_radix_cache_finished_req(struct kv_radix *t, struct kv_req_table *rt,
				struct kv_radix_req *req, unsigned int flags);

/*
 * cache_unfinished_req (chunked prefill): insert the row's full pages,
 * give back duplicates, point the row at the tree's pages, and move the
 * lock to the new last node; cached_len becomes the full-page length.  The
 * partial last page stays the request's.  On error nothing changed.
 */
int kv_radix_cache_unfinished_req(struct kv_radix *t, struct kv_req_table *rt,
				  struct kv_radix_req *req, unsigned int flags);

#ifdef __cplusplus
}
#endif

#endif /* KVSHARE_RADIX_H */
