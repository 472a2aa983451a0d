// SPDX-License-Identifier: MIT
/*
 * The radix tree wired to the arbiter (struct kv_prefix_cache, see
 * <kvshare/prefix.h>).
 *
 * Holdings.  Every page in the local tree carries exactly one arbiter
 * reference of this process (KV_RADIX_HELD), taken by LOOKUP or kept from
 * PUBLISH; requests lock tree nodes locally and take no references of
 * their own.  A request's pages past its cached prefix are OWNED (ALLOC)
 * until they are published.  So the tree's release callback is always a
 * PUT: of a reference (eviction, destroy) or of an OWNED page (a
 * duplicate of what the local tree had, an unaligned tail).
 *
 * Keys.  A page's chained key depends on every token before it, so the
 * key of each page the tree holds is kept in a table indexed by page:
 * extending a chain (LOOKUP of a request's rest, PUBLISH of new pages)
 * hashes only the new pages.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <kvshare/prefix.h>

#include "grow.h"

#define KV_LOOKUP_FIRST	32	/* pages hashed and asked for in the first LOOKUP */

struct kv_prefix_cache {
	struct kv_arbiter *arb;
	struct kv_radix *tree;
	struct kv_block_hasher hasher;
	const struct kv_extra *extra;
	size_t n_extra;
	uint32_t tpp;
	uint32_t n_pages;
	int wait_ms;			/* in-flight dedupe; 0: off */
	struct kvs_key *keys;		/* [n_pages]: key of each page held */

	struct kvs_key *kbuf;		/* chain keys being built */
	uint32_t *pbuf;			/* page lists */
	struct kvs_publish_entry *ents;
	size_t kcap, pcap, ecap;

	struct kv_prefix_stats st;
};

/* PUT in batches the arbiter accepts. */
static int kv_pc_put(struct kv_prefix_cache *pc, const uint32_t *pages, size_t n)
{
	uint32_t c;
	int ret = 0, r;

	for (; n; n -= c, pages += c) {
		c = n < KVS_MAX_BATCH ? n : KVS_MAX_BATCH;
		r = kv_put(pc->arb, pages, c);
		if (r) {
			pc->st.errors++;
			ret = r;
		} else {
			pc->st.put_pages += c;
		}
	}
	return ret;
}

/* The tree gives pages back: each one is a holding of this process. */
static void kv_pc_release(void *priv, const uint32_t *pages, uint32_t n,
			  unsigned int flags)
{
	if (flags & KV_RADIX_HELD)
		kv_pc_put(priv, pages, n);
}

/* PUBLISH one batch; entries' results become the pages to use. */
static int kv_pc_publish(struct kv_prefix_cache *pc, const struct kvs_key *keys,
			 uint32_t *pages, uint32_t n, uint32_t parent)
{
	struct kvs_publish_entry *e = pc->ents;
	uint32_t i;
	int dups;

	memset(e, 0, n * sizeof(*e));
	for (i = 0; i < n; i++) {
		e[i].page = pages[i];
		e[i].parent = i ? KVS_PARENT_PREV : parent;
		e[i].key = keys[i];
	}
	dups = kv_publish(pc->arb, e, n);
	if (dups < 0) {
		pc->st.errors++;
		return dups;
	}
	/* Indices index our tables: an arbiter out of its pool is an error. */
	for (i = 0; i < n; i++) {
		if (e[i].result >= pc->n_pages) {
			pc->st.errors++;
			return -EPROTO;
		}
	}
	for (i = 0; i < n; i++) {
		pages[i] = e[i].result;
		pc->keys[e[i].result] = keys[i];
	}
	pc->st.published += n;
	pc->st.dup_published += dups;
	return 0;
}

/*
 * adopt(): the request's new full pages are about to enter the tree.  Key
 * them, chained from the tree's page before them, and PUBLISH them; a
 * duplicate hands back the canonical page, which replaces ours (the
 * arbiter has already freed ours).
 */
static int kv_pc_adopt(void *priv, const uint32_t *tokens, uint32_t first,
		       uint32_t *pages, uint32_t n, uint32_t parent)
{
	struct kv_prefix_cache *pc = priv;
	const struct kvs_key *pk = parent == KVS_NO_PAGE ? NULL : &pc->keys[parent];
	uint32_t done, c;
	long got;
	int ret;

	if (kv_grow(&pc->kbuf, &pc->kcap, n, sizeof(*pc->kbuf), 64) ||
	    kv_grow(&pc->ents, &pc->ecap, n < KVS_MAX_BATCH ? n : KVS_MAX_BATCH,
		    sizeof(*pc->ents), 64))
		return -ENOMEM;
	got = kv_hash_chain(&pc->hasher, pk, tokens + (size_t)first * pc->tpp,
			    (size_t)n * pc->tpp, pc->extra, pc->n_extra, pc->kbuf);
	if (got != n)
		return got < 0 ? (int)got : -EIO;
	/* Batch k > 0 hangs from the page batch k - 1 resulted in. */
	for (done = 0; done < n; done += c) {
		c = n - done < KVS_MAX_BATCH ? n - done : KVS_MAX_BATCH;
		ret = kv_pc_publish(pc, pc->kbuf + done, pages + done, c,
				    done ? pages[done - 1] : parent);
		if (ret)
			return ret;
	}
	return 0;
}

int kv_prefix_create(struct kv_arbiter *arb, const struct kvs_pool_attach *info,
		     const struct kv_prefix_config *cfg,
		     struct kv_prefix_cache **out)
{
	struct kv_radix_ops ops = { .release = kv_pc_release, .adopt = kv_pc_adopt };
	struct kv_prefix_cache *pc;
	int ret;

	if (!arb || !info || !cfg || !info->n_pages || info->n_pages > UINT32_MAX)
		return -EINVAL;
	pc = calloc(1, sizeof(*pc));
	if (!pc)
		return -ENOMEM;
	pc->arb = arb;
	pc->tpp = info->geom.tokens_per_page;
	pc->n_pages = info->n_pages;
	pc->extra = cfg->extra;
	pc->n_extra = cfg->n_extra;
	pc->wait_ms = cfg->inflight_wait_ms > 0 ? cfg->inflight_wait_ms : 0;
	ret = kv_hasher_init_algo(&pc->hasher, cfg->algo, cfg->salt, cfg->salt_len,
				  pc->tpp);
	if (ret)
		goto fail;
	/* Page-indexed; calloc leaves the untouched part unbacked. */
	pc->keys = calloc(pc->n_pages, sizeof(*pc->keys));
	ret = -ENOMEM;
	if (!pc->keys)
		goto fail;
	ops.priv = pc;
	ret = kv_radix_create(pc->tpp, &ops, &pc->tree);
	if (ret)
		goto fail;
	*out = pc;
	return 0;
fail:
	free(pc->keys);
	free(pc);
	return ret;
}

void kv_prefix_destroy(struct kv_prefix_cache *pc)
{
	if (!pc)
		return;
	kv_radix_destroy(pc->tree);	/* PUTs every page it held */
	free(pc->keys);
	free(pc->kbuf);
	free(pc->pbuf);
	free(pc->ents);
	free(pc);
}

struct kv_radix *kv_prefix_tree(struct kv_prefix_cache *pc)
{
	return pc->tree;
}

const struct kv_prefix_stats *kv_prefix_stats(const struct kv_prefix_cache *pc)
{
	return &pc->st;
}

const struct kvs_key *kv_prefix_page_key(const struct kv_prefix_cache *pc,
					 uint32_t page)
{
	return page < pc->n_pages ? &pc->keys[page] : NULL;
}

/* LOOKUP, making room in our quota by local eviction once if it must. */
static int kv_pc_lookup(struct kv_prefix_cache *pc, const struct kvs_key *keys,
			uint32_t n, uint32_t *pages)
{
	int hits;

	pc->st.lookups++;
	hits = pc->wait_ms ? kv_lookup_wait(pc->arb, keys, n, pages, pc->wait_ms, NULL)
			   : kv_lookup(pc->arb, keys, n, pages);
	if (hits == -EDQUOT && kv_radix_evict(pc->tree, n)) {
		pc->st.lookups++;
		hits = kv_lookup(pc->arb, keys, n, pages);
	}
	if (hits < 0 && hits != -EDQUOT)
		pc->st.errors++;
	return hits;
}

/*
 * The arbiter's hits for full pages [from, to) of @tokens, chained from
 * the key of @parent: pages into pc->pbuf[from..].  Asks in growing
 * batches, so a miss costs the hashing of one small batch, not the rest of
 * a 128k-token prompt.  Returns the number of hits (references taken).
 */
static uint32_t kv_pc_remote(struct kv_prefix_cache *pc, const uint32_t *tokens,
			     uint32_t from, uint32_t to, uint32_t parent)
{
	const struct kvs_key *pk = parent == KVS_NO_PAGE ? NULL : &pc->keys[parent];
	uint32_t done = 0, batch = KV_LOOKUP_FIRST, c, i;
	long got;
	int hits;

	if (kv_grow(&pc->kbuf, &pc->kcap, to - from, sizeof(*pc->kbuf), 64))
		return 0;
	while (from + done < to) {
		c = to - from - done;
		if (c > batch)
			c = batch;
		got = kv_hash_chain(&pc->hasher, pk,
				    tokens + (size_t)(from + done) * pc->tpp,
				    (size_t)c * pc->tpp, pc->extra, pc->n_extra,
				    pc->kbuf + done);
		if (got != c)
			break;
		hits = kv_pc_lookup(pc, pc->kbuf + done, c, pc->pbuf + from + done);
		if (hits <= 0)
			break;
		for (i = 0; i < (uint32_t)hits; i++) {
			if (pc->pbuf[from + done + i] >= pc->n_pages) {
				/* Out of the pool: give the run back, use none. */
				pc->st.errors++;
				kv_pc_put(pc, pc->pbuf + from, done + hits);
				return 0;
			}
		}
		for (i = 0; i < (uint32_t)hits; i++)
			pc->keys[pc->pbuf[from + done + i]] = pc->kbuf[done + i];
		done += hits;
		if ((uint32_t)hits < c)
			break;
		pk = &pc->kbuf[done - 1];
		batch = batch < KVS_MAX_BATCH / 4 ? batch * 4 : KVS_MAX_BATCH;
	}
	return done;
}

/*
 * In-flight dedupe: claim the request's full prompt pages [from, want)
 * that the arbiter missed, and grow its row with them.  A refused claim
 * (someone claimed or published a key since the LOOKUP) leaves the row
 * as it was (-EEXIST: look again); the caller then reserves and computes
 * as without dedupe.
 */
static int kv_pc_claim(struct kv_prefix_cache *pc, struct kv_req_table *rt,
		       struct kv_radix_req *req, uint32_t from, uint32_t want,
		       bool last_try)
{
	const struct kvs_key *pk = NULL;
	uint32_t n = want - from;
	long got;
	int ret;

	if (n > KVS_MAX_BATCH)
		n = KVS_MAX_BATCH;
	if (req->n_tokens != from * pc->tpp ||
	    kv_req_pages_needed(rt, req->slot, (from + n) * pc->tpp) != n ||
	    kv_grow(&pc->kbuf, &pc->kcap, n, sizeof(*pc->kbuf), 64) ||
	    kv_grow(&pc->pbuf, &pc->pcap, n, sizeof(*pc->pbuf), 64))
		return -ENOMEM;
	if (from)
		pk = &pc->keys[kv_req_page(rt, req->slot, from - 1)];
	got = kv_hash_chain(&pc->hasher, pk, req->tokens + (size_t)from * pc->tpp,
			    (size_t)n * pc->tpp, pc->extra, pc->n_extra, pc->kbuf);
	if (got != n)
		return -EIO;
	ret = kv_alloc_claim(pc->arb, pc->kbuf, n, pc->pbuf);
	if (ret == -ENOSPC || ret == -EDQUOT) {
		pc->st.alloc_evictions += kv_radix_evict(pc->tree, n);
		ret = kv_alloc_claim(pc->arb, pc->kbuf, n, pc->pbuf);
	}
	if (ret) {
		if (ret != -EEXIST || last_try)
			pc->st.claim_conflicts += n;
		return ret;
	}
	if (kv_req_extend(rt, req->slot, (from + n) * pc->tpp, pc->pbuf)) {
		kv_pc_put(pc, pc->pbuf, n);
		return -ENOMEM;
	}
	req->n_tokens = (from + n) * pc->tpp;
	pc->st.allocated += n;
	pc->st.claimed += n;
	return 0;
}

/*
 * The arbiter's part of a match: the request's row holds @m pages, all in
 * the tree; look up full pages [m, want) and take the hits into the tree
 * and the row.  Returns the tokens now matched.
 */
static long kv_pc_more(struct kv_prefix_cache *pc, struct kv_req_table *rt,
		       struct kv_radix_req *req, uint32_t m, uint32_t want)
{
	struct kv_radix_node *last;
	uint32_t h, i;

	if (m == want || kv_grow(&pc->pbuf, &pc->pcap, want, sizeof(*pc->pbuf), 64))
		return (long)m * pc->tpp;
	for (i = 0; i < m; i++)
		pc->pbuf[i] = kv_req_page(rt, req->slot, i);
	h = kv_pc_remote(pc, req->tokens, m, want, m ? pc->pbuf[m - 1] : KVS_NO_PAGE);
	if (!h)
		return (long)m * pc->tpp;
	/* The hits carry their references into the tree. */
	if (kv_radix_insert(pc->tree, req->tokens, (size_t)(m + h) * pc->tpp,
			    pc->pbuf, KV_RADIX_HELD, &last) < 0) {
		kv_pc_put(pc, pc->pbuf + m, h);
		return (long)m * pc->tpp;
	}
	kv_radix_lock(pc->tree, last);
	kv_radix_unlock(pc->tree, req->last_node);
	req->last_node = last;
	kv_req_write_pages(rt, req->slot, m * pc->tpp, pc->pbuf + m, h * pc->tpp);
	req->cached_len = req->n_tokens = (m + h) * pc->tpp;
	kv_req_set_len(rt, req->slot, req->n_tokens);
	pc->st.remote_hit_pages += h;
	return req->n_tokens;
}

/* Claims refused for a key claimed meanwhile are retried this often. */
#define KV_CLAIM_TRIES	4

long kv_prefix_match(struct kv_prefix_cache *pc, struct kv_req_table *rt,
		     struct kv_radix_req *req, uint32_t n_match)
{
	uint32_t max = kv_req_table_max_context(rt), want, tries;
	long ret;

	ret = kv_radix_req_match(pc->tree, rt, req, n_match);
	if (ret < 0)
		return ret;
	want = (n_match < max ? n_match : max) / pc->tpp;
	pc->st.local_hit_pages += ret / pc->tpp;
	ret = kv_pc_more(pc, rt, req, ret / pc->tpp, want);
	/*
	 * In-flight dedupe: claim what is still missing.  A key claimed by
	 * another process since our LOOKUP refuses the claim: look again
	 * (waiting for that claim), then claim what is left.
	 */
	for (tries = 1; pc->wait_ms && !(ret % pc->tpp) && ret / pc->tpp < want; tries++) {
		if (kv_pc_claim(pc, rt, req, ret / pc->tpp, want, tries == KV_CLAIM_TRIES) !=
		    -EEXIST || tries == KV_CLAIM_TRIES)
			break;
		ret = kv_pc_more(pc, rt, req, ret / pc->tpp, want);
	}
	return ret;
}

/* One ALLOC batch; under pressure evict locally and let the arbiter evict. */
static int kv_pc_alloc(struct kv_prefix_cache *pc, uint32_t n, uint32_t *pages)
{
	size_t ev;
	int ret;

	for (;;) {
		ret = kv_alloc(pc->arb, n, pages);
		if (ret != -ENOSPC && ret != -EDQUOT)
			break;
		/*
		 * Our PUTs turn pages CACHED that no one else holds, which the
		 * next ALLOC may evict; pages others hold stay, so go on until
		 * it works or we hold nothing evictable.
		 */
		ev = kv_radix_evict(pc->tree, n);
		if (!ev)
			break;
		pc->st.alloc_evictions += ev;
	}
	if (ret) {
		pc->st.errors += ret != -ENOSPC && ret != -EDQUOT;
		return ret;
	}
	for (ev = 0; ev < n; ev++) {
		if (pages[ev] >= pc->n_pages) {
			pc->st.errors++;
			kv_pc_put(pc, pages, n);
			return -EPROTO;
		}
	}
	pc->st.allocated += n;
	return 0;
}

int kv_prefix_alloc(struct kv_prefix_cache *pc, uint32_t n, uint32_t *pages)
{
	uint32_t done, c;
	int ret;

	for (done = 0; done < n; done += c) {
		c = n - done < KVS_MAX_BATCH ? n - done : KVS_MAX_BATCH;
		ret = kv_pc_alloc(pc, c, pages + done);
		if (ret) {
			kv_pc_put(pc, pages, done);	/* all or nothing */
			return ret;
		}
	}
	return 0;
}

int kv_prefix_reserve(struct kv_prefix_cache *pc, struct kv_req_table *rt,
		      struct kv_radix_req *req, uint32_t new_len)
{
	uint32_t need;
	int ret;

	if (!kv_req_row(rt, req->slot) || kv_req_len(rt, req->slot) != req->n_tokens)
		return -EINVAL;
	if (new_len <= req->n_tokens)
		return 0;
	if (new_len > kv_req_table_max_context(rt))
		return -E2BIG;
	need = kv_req_pages_needed(rt, req->slot, new_len);
	if (kv_grow(&pc->pbuf, &pc->pcap, need, sizeof(*pc->pbuf), 64))
		return -ENOMEM;
	ret = kv_prefix_alloc(pc, need, pc->pbuf);
	if (ret)
		return ret;
	ret = kv_req_extend(rt, req->slot, new_len, pc->pbuf);
	if (ret) {
		kv_pc_put(pc, pc->pbuf, need);
		return ret;
	}
	req->n_tokens = new_len;
	return 0;
}

int kv_prefix_cache_finished(struct kv_prefix_cache *pc, struct kv_req_table *rt,
			     struct kv_radix_req *req)
{
	return kv_radix_cache_finished_req(pc->tree, rt, req, KV_RADIX_HELD);
}

int kv_prefix_cache_unfinished(struct kv_prefix_cache *pc, struct kv_req_table *rt,
			       struct kv_radix_req *req)
{
	return kv_radix_cache_unfinished_req(pc->tree, rt, req, KV_RADIX_HELD);
}

void kv_prefix_abort(struct kv_prefix_cache *pc, struct kv_req_table *rt,
		     struct kv_radix_req *req)
{
	uint32_t all, i;

	if (!kv_req_row(rt, req->slot))
		return;
	all = req->n_tokens / pc->tpp + !!(req->n_tokens % pc->tpp);
	if (!kv_grow(&pc->pbuf, &pc->pcap, all, sizeof(*pc->pbuf), 64)) {
		for (i = req->cached_len / pc->tpp; i < all; i++)
			pc->pbuf[i] = kv_req_page(rt, req->slot, i);
		kv_pc_put(pc, pc->pbuf + req->cached_len / pc->tpp,
			  all - req->cached_len / pc->tpp);
	}
	kv_radix_unlock(pc->tree, req->last_node);
	kv_req_free(rt, req->slot);
	req->last_node = NULL;
	req->slot = -1;
}
