// SPDX-License-Identifier: GPL-2.0
/*
 * The page state machine of docs/design.md section 3:
 *
 *   FREE --ALLOC--> OWNED --PUBLISH--> SHARED --last PUT--> CACHED
 *     ^               |                  ^                    |
 *     +----PUT--------+                  +----LOOKUP hit------+
 *     +------------------eviction (leaf, LRU)-----------------+
 *
 * Every command validates all of its entries before it changes anything,
 * so a failed command leaves the pool as it found it.  Each holding (an
 * OWNED page or one reference) is recorded in the client's table, which is
 * what lets kvs_arb_release_all() undo a client that went away.
 *
 * In-flight dedupe: ALLOC with KVS_ALLOC_CLAIM puts its OWNED pages in
 * the key index under the keys their owner is computing (KVS_PG_CLAIMED),
 * so that other files' LOOKUP with KVS_LOOKUP_WAIT report them in flight
 * and wait (on the host's readiness, never here) for the claim to end.
 * A claim ends exactly once, in kvs_claim_end(), whichever way: PUBLISH,
 * PUT, release of its file, another key published on the page, or the key
 * published or taken over by another file.  Claims are OWNED pages, so the
 * file's quota and its user's limits bound them.
 *
 * Every kvs_arb_*() command and every helper here runs with pool->lock
 * held and asserts it (lockdep_assert_held(); in user space the stub of
 * host_user.h checks it in the sanitized builds).  The exceptions: the
 * claim-timeout knob and the client's waker accessors just below (a
 * WRITE_ONCE, a READ_ONCE, or set before the client is in use),
 * kvs_arb_init_pages(), which runs before the pool is published, and the
 * predicates on one page (kvs_evictable(), kvs_claim_live()), whose
 * callers hold the lock and assert it.
 */
#include "core_internal.h"

static u32 kvs_claim_timeout_ms = KVS_CLAIM_TIMEOUT_MS;

void kvs_core_set_claim_timeout(__u32 ms)
{
	WRITE_ONCE(kvs_claim_timeout_ms, ms);
}

void kvs_client_set_waker(struct kvs_client *cl, void (*wake)(void *arg), void *arg)
{
	cl->wake = wake;
	cl->wake_arg = arg;
}

void *kvs_client_wake_arg(struct kvs_client *cl)
{
	return cl->wake_arg;
}

int kvs_client_waiting(struct kvs_client *cl)
{
	return READ_ONCE(cl->waiting);
}

int kvs_client_parked(struct kvs_client *cl)
{
	return READ_ONCE(cl->parked);
}

void kvs_arb_init_pages(struct kvs_pool *pool)
{
	u32 i;

	BUILD_BUG_ON(sizeof(struct kvs_page) != 64);

	kvs_ilist_init(&pool->free);
	kvs_ilist_init(&pool->lru);
	for (i = 0; i < pool->n_pages; i++) {
		struct kvs_page *pg = &pool->pages[i];

		pg->state = KVS_PAGE_FREE;
		pg->parent = KVS_NO_PAGE;
		kvs_ilist_push_tail(pool->pages, &pool->free, i);
	}
	pool->n_state[KVS_PAGE_FREE] = pool->n_pages;
}

static void kvs_set_state(struct kvs_pool *pool, struct kvs_page *pg, u32 state)
{
	lockdep_assert_held(&pool->lock);

	pool->n_state[pg->state]--;
	pool->n_state[state]++;
	pg->state = state;
}

static bool kvs_evictable(const struct kvs_page *pg)
{
	return pg->state == KVS_PAGE_CACHED && !pg->n_children;
}

/*
 * Take the coldest evictable page out of the cache onto the free list.
 * Its key, namespace and parent stay in the page until ALLOC hands it
 * out, so that kvs_unevict_one() can put it back exactly.
 */
static void kvs_evict_one(struct kvs_pool *pool)
{
	u32 i = pool->lru.head;
	struct kvs_page *pg = &pool->pages[i];
	u32 parent = pg->parent;

	lockdep_assert_held(&pool->lock);

	kvs_ilist_del(pool->pages, &pool->lru, i);
	kvs_index_remove(pool, i);
	if (parent != KVS_NO_PAGE) {
		struct kvs_page *pp = &pool->pages[parent];

		pp->n_children--;
		/*
		 * The parent just became a leaf.  Its chain below was the
		 * coldest thing in the cache, so it goes to the cold end and
		 * the chain is taken from its tail up, leaf first.
		 */
		if (kvs_evictable(pp))
			kvs_ilist_push_head(pool->pages, &pool->lru, parent);
	}
	kvs_set_state(pool, pg, KVS_PAGE_FREE);
	kvs_ilist_push_head(pool->pages, &pool->free, i);
	pool->evictions++;
}

/*
 * Undo the latest kvs_evict_one(): the page is the head of the free list
 * and, if its eviction made its parent a leaf, the parent is the head of
 * the LRU.  Undoing evictions newest first restores both lists exactly.
 */
static void kvs_unevict_one(struct kvs_pool *pool)
{
	u32 i = pool->free.head;
	struct kvs_page *pg = &pool->pages[i];
	u32 parent = pg->parent;

	lockdep_assert_held(&pool->lock);

	kvs_ilist_del(pool->pages, &pool->free, i);
	if (parent != KVS_NO_PAGE) {
		struct kvs_page *pp = &pool->pages[parent];

		if (kvs_evictable(pp))
			kvs_ilist_del(pool->pages, &pool->lru, parent);
		pp->n_children++;
	}
	kvs_set_state(pool, pg, KVS_PAGE_CACHED);
	kvs_index_insert(pool, i);
	kvs_ilist_push_head(pool->pages, &pool->lru, i);
	pool->evictions--;
}

/* The last reference went: the page stays findable, as CACHED. */
static void kvs_unref(struct kvs_pool *pool, u32 i, u32 n)
{
	struct kvs_page *pg = &pool->pages[i];

	lockdep_assert_held(&pool->lock);

	pg->refcount -= n;
	pool->n_refs -= n;
	if (pg->refcount)
		return;
	kvs_set_state(pool, pg, KVS_PAGE_CACHED);
	if (!pg->n_children)
		kvs_ilist_push_tail(pool->pages, &pool->lru, i);
}

/* Take a reference on a keyed page, reviving it if it was CACHED. */
static void kvs_ref(struct kvs_client *cl, u32 i)
{
	struct kvs_pool *pool = cl->pool;
	struct kvs_page *pg = &pool->pages[i];

	lockdep_assert_held(&pool->lock);

	if (pg->state == KVS_PAGE_CACHED) {
		if (!pg->n_children)
			kvs_ilist_del(pool->pages, &pool->lru, i);
		kvs_set_state(pool, pg, KVS_PAGE_SHARED);
	}
	pg->refcount++;
	pool->n_refs++;
	kvs_holds_add(&cl->holds, i, 1);
}

/*
 * The claim on OWNED page @i ends: out of the index, and every file that
 * waits on it is woken to look its key up again.
 */
static void kvs_claim_end(struct kvs_pool *pool, u32 i)
{
	struct kvs_page *pg = &pool->pages[i];
	struct kvs_client *w;

	lockdep_assert_held(&pool->lock);

	kvs_index_remove(pool, i);
	pg->flags &= ~KVS_PG_CLAIMED;
	pg->claimed_at = 0;
	pool->n_claimed--;
	if (!pool->n_waiting)
		return;
	list_for_each_entry(w, &pool->clients, node) {
		bool woken = false;

		if (w->waiting && w->wait_page == i) {
			WRITE_ONCE(w->waiting, false);
			pool->n_waiting--;
			woken = true;
		}
		if (w->parked && w->park_page == i) {
			WRITE_ONCE(w->parked, false);
			pool->n_waiting--;
			woken = true;
		}
		if (woken && w->wake)
			w->wake(w->wake_arg);
	}
}

/* Disarm @cl's poll wait, if armed. */
static void kvs_wait_disarm(struct kvs_client *cl)
{
	lockdep_assert_held(&cl->pool->lock);

	if (!cl->waiting)
		return;
	WRITE_ONCE(cl->waiting, false);
	cl->pool->n_waiting--;
}

/* Disarm @cl's parked wait, if armed. */
void kvs_arb_unpark(struct kvs_client *cl)
{
	lockdep_assert_held(&cl->pool->lock);

	if (!cl->parked)
		return;
	WRITE_ONCE(cl->parked, false);
	cl->pool->n_waiting--;
}

/* An in-flight page that other files should still wait for. */
static bool kvs_claim_live(const struct kvs_page *pg)
{
	u32 timeout = READ_ONCE(kvs_claim_timeout_ms);

	return pg->state == KVS_PAGE_OWNED && (pg->flags & KVS_PG_CLAIMED) &&
	       timeout && (u32)(kvs_now_ms() - pg->claimed_at) < timeout;
}

/* Give a page that was OWNED back to the free list. */
static void kvs_free_owned(struct kvs_pool *pool, u32 i)
{
	struct kvs_page *pg = &pool->pages[i];

	lockdep_assert_held(&pool->lock);

	if (pg->flags & KVS_PG_CLAIMED)
		kvs_claim_end(pool, i);
	pg->owner = 0;
	pg->ns = 0;
	kvs_set_state(pool, pg, KVS_PAGE_FREE);
	kvs_ilist_push_head(pool->pages, &pool->free, i);
}

/*
 * Can this client take @n more holdings?  If so they are charged to its
 * user already (once for the batch); a caller that then fails gives them
 * back with kvs_uncharge().
 */
static int kvs_charge(struct kvs_client *cl, u32 n)
{
	int ret;

	lockdep_assert_held(&cl->pool->lock);

	if (cl->held + n > cl->quota)
		return -EDQUOT;
	if (cl->pool->n_held + n > KVS_POOL_MAX_HELD)
		return -EDQUOT;
	ret = kvs_holds_reserve(&cl->holds, n);
	if (ret)
		return ret;
	return kvs_user_charge_held(cl->user, n, cl->pool->geom.page_bytes);
}

static void kvs_uncharge(struct kvs_client *cl, u64 n)
{
	lockdep_assert_held(&cl->pool->lock);

	kvs_user_uncharge_held(cl->user, n, cl->pool->geom.page_bytes);
}

/*
 * May @cl claim @key?  Not if it is published, or in flight in a live
 * claim (its own included); a claim that timed out may be taken over.
 */
static int kvs_claim_check(struct kvs_client *cl, const struct kvs_key *key)
{
	struct kvs_pool *pool = cl->pool;
	u32 i = kvs_index_find(pool, cl->ns, key);

	lockdep_assert_held(&pool->lock);

	if (i == KVS_NO_PAGE)
		return 0;
	if (pool->pages[i].state != KVS_PAGE_OWNED ||
	    pool->pages[i].owner == cl->id || kvs_claim_live(&pool->pages[i]))
		return -EEXIST;
	return 0;
}

static void kvs_claim(struct kvs_client *cl, u32 i, const struct kvs_key *key,
		      u32 now)
{
	struct kvs_pool *pool = cl->pool;
	struct kvs_page *pg = &pool->pages[i];
	u32 old = kvs_index_find(pool, cl->ns, key);

	lockdep_assert_held(&pool->lock);

	if (old != KVS_NO_PAGE) {
		/* Listed twice in this batch: the first page keeps it. */
		if (pool->pages[old].owner == cl->id)
			return;
		/* Timed out (kvs_claim_check()): taken over. */
		kvs_claim_end(pool, old);
	}
	pg->key = *key;
	pg->ns = cl->ns;
	pg->flags |= KVS_PG_CLAIMED;
	pg->claimed_at = now;
	kvs_index_insert(pool, i);
	pool->n_claimed++;
}

/* @claim: NULL, or the keys to claim the pages under (KVS_ALLOC_CLAIM). */
int kvs_arb_alloc(struct kvs_client *cl, u32 count, u32 *pages,
		  const struct kvs_key *claim)
{
	struct kvs_pool *pool = cl->pool;
	u32 k, evicted, now = kvs_now_ms();
	int ret;

	lockdep_assert_held(&pool->lock);

	ret = kvs_charge(cl, count);
	if (ret)
		return ret;
	for (k = 0; claim && k < count; k++) {
		ret = kvs_claim_check(cl, &claim[k]);
		if (ret) {
			kvs_uncharge(cl, count);
			return ret;
		}
	}
	/*
	 * Evicting a leaf may make its parent evictable, so whether enough
	 * pages can be freed is only known by trying; a failed try is undone.
	 */
	for (evicted = 0; pool->free.len < count && pool->lru.len; evicted++)
		kvs_evict_one(pool);
	if (pool->free.len < count) {
		while (evicted--)
			kvs_unevict_one(pool);
		kvs_uncharge(cl, count);
		pool->alloc_fails++;
		return -ENOSPC;
	}
	for (k = 0; k < count; k++) {
		u32 i = pool->free.head;
		struct kvs_page *pg = &pool->pages[i];

		kvs_ilist_del(pool->pages, &pool->free, i);
		/* An evicted page still carries its old identity: drop it. */
		memset(&pg->key, 0, sizeof(pg->key));
		pg->parent = KVS_NO_PAGE;
		kvs_set_state(pool, pg, KVS_PAGE_OWNED);
		pg->ns = 0;
		pg->owner = cl->id;
		kvs_holds_add(&cl->holds, i, 1);
		pages[k] = i;
		if (claim)
			kvs_claim(cl, i, &claim[k], now);
	}
	cl->held += count;
	pool->n_held += count;
	pool->allocs += count;
	return 0;
}

/*
 * Event channel records (core_chan.c).  A record that cannot be queued,
 * or whose holdings the channel's quota or its opener's limits refuse,
 * is dropped and counted: the client whose call made it never notices.
 */

/* Page @i was just published: a record holding one reference on it. */
static void kvs_chan_published(struct kvs_pool *pool, struct kvs_chan *ch, u32 i)
{
	struct kvs_client *cc = ch->cl;
	struct kvs_page *pg = &pool->pages[i];
	struct kvs_event *ev;

	lockdep_assert_held(&pool->lock);

	if (ch->gone)
		return;
	if (!kvs_chan_room(ch)) {
		ch->dropped_full++;
		return;
	}
	if (kvs_charge(cc, 1)) {
		ch->dropped_held++;
		return;
	}
	kvs_ref(cc, i);
	cc->held++;
	pool->n_held++;
	ev = kvs_chan_push(ch, KVS_EVENT_PUBLISHED);
	ev->page = i;
	ev->ns = pg->ns;
	ev->key = pg->key;
	ev->parent = pg->parent;
	ch->published++;
}

/*
 * @cl's LOOKUP stopped at keys[0], its last hit on page @parent
 * (KVS_NO_PAGE: none): the channel claims the keys nobody has from
 * there, up to its fetch_max, as ALLOC with KVS_ALLOC_CLAIM would (so
 * they are in flight for every file of @cl's namespace), one MISS record
 * each.  All or nothing.  The first record names @parent, which the
 * channel takes a reference on, so that the tier can publish the fetched
 * chain under it as the compute it stands in for would; where the
 * channel's bound has no room for that reference, the chain is a root.
 */
static void kvs_chan_missed(struct kvs_client *cl, struct kvs_chan *ch,
			    const struct kvs_key *keys, u32 count, u32 parent)
{
	struct kvs_pool *pool = cl->pool;
	struct kvs_client *cc = ch->cl;
	u32 k, n, max = min(count, ch->fetch_max);

	lockdep_assert_held(&pool->lock);

	if (ch->gone)
		return;
	for (n = 0; n < max; n++)
		if (kvs_index_find(pool, cl->ns, &keys[n]) != KVS_NO_PAGE)
			break;
	if (!n || kvs_chan_neg_hit(ch, cl->ns, &keys[0]))
		return;
	if (kvs_chan_room(ch) < n) {
		ch->dropped_full++;
		return;
	}
	/* The channel has no namespace of its own: claims take the caller's. */
	cc->ns = cl->ns;
	if (kvs_arb_alloc(cc, n, ch->miss_pages, keys)) {
		ch->dropped_held++;
		return;
	}
	/* Referenced by @cl's LOOKUP just now: SHARED, and stays so while held. */
	if (parent != KVS_NO_PAGE && !kvs_charge(cc, 1)) {
		kvs_ref(cc, parent);
		cc->held++;
		pool->n_held++;
	} else {
		parent = KVS_NO_PAGE;
	}
	for (k = 0; k < n; k++) {
		struct kvs_event *ev = kvs_chan_push(ch, KVS_EVENT_MISS);

		ev->page = ch->miss_pages[k];
		ev->k = k;
		ev->n = n;
		ev->ns = cl->ns;
		ev->key = keys[k];
		ev->parent = k ? KVS_NO_PAGE : parent;
		ev->uid = cl->uid;
	}
	ch->missed += n;
}

/*
 * Index lookups are bound by cache misses at large pools: the index slot,
 * then the page it names.  PUBLISH and LOOKUP start the misses of the
 * keys SLOT_AHEAD and PAGE_AHEAD entries ahead of the one they work on.
 */
#define KVS_SLOT_AHEAD	32
#define KVS_PAGE_AHEAD	16

/*
 * While PUBLISH validates, each entry's page is marked by this owner value
 * so that a page listed twice is caught; client ids never take it.
 */
#define KVS_OWNER_PENDING	U32_MAX

static int kvs_publish_check(struct kvs_client *cl, struct kvs_publish_entry *e,
			     u32 k)
{
	struct kvs_pool *pool = cl->pool;
	struct kvs_page *pg;
	u32 parent = e->parent;

	lockdep_assert_held(&pool->lock);

	if (e->flags || e->result)
		return -EINVAL;
	if (e->page >= pool->n_pages)
		return -ENOENT;
	e->page = array_index_nospec(e->page, pool->n_pages);
	pg = &pool->pages[e->page];
	if (pg->state != KVS_PAGE_OWNED)
		return -ENOENT;
	if (pg->owner == KVS_OWNER_PENDING)
		return -EINVAL;
	if (pg->owner != cl->id)
		return -ENOENT;

	if (parent == KVS_PARENT_PREV) {
		if (!k)
			return -EINVAL;
	} else if (parent != KVS_NO_PAGE) {
		if (parent >= pool->n_pages)
			return -ENOENT;
		e->parent = parent = array_index_nospec(parent, pool->n_pages);
		if (pool->pages[parent].state != KVS_PAGE_SHARED ||
		    !kvs_holds_get(&cl->holds, parent))
			return -ENOENT;
	}
	pg->owner = KVS_OWNER_PENDING;
	return 0;
}

int kvs_arb_publish(struct kvs_client *cl, struct kvs_publish_entry *ents,
		    u32 count, u32 *n_dup)
{
	struct kvs_pool *pool = cl->pool;
	struct kvs_chan *ch = pool->chan;
	u32 k, prev = KVS_NO_PAGE;
	int ret = 0;

	lockdep_assert_held(&pool->lock);

	/* A tier publishing what it fetched is not news to itself. */
	if (cl->is_chan)
		ch = NULL;
	for (k = 0; k < count; k++) {
		ret = kvs_publish_check(cl, &ents[k], k);
		if (ret)
			break;
	}
	if (!ret)
		ret = kvs_holds_reserve(&cl->holds, count);
	if (ret) {
		while (k--)
			pool->pages[ents[k].page].owner = cl->id;
		return ret;
	}

	*n_dup = 0;
	for (k = 0; k < count; k++) {
		struct kvs_publish_entry *e = &ents[k];
		struct kvs_page *pg = &pool->pages[e->page];
		u32 canon, parent = e->parent;
		/* A channel publishes its claims in the namespace they name. */
		u64 ns = cl->is_chan ? pg->ns : cl->ns;

		/* Each key misses in the index once: start that miss early. */
		if (k + KVS_SLOT_AHEAD < count)
			prefetch(&pool->index[kvs_index_hash(pool, cl->ns,
							    &ents[k + KVS_SLOT_AHEAD].key) &
					      pool->index_mask]);

		if (parent == KVS_PARENT_PREV)
			parent = prev;
		/* Our holding of the OWNED page becomes a reference. */
		kvs_holds_sub(&cl->holds, e->page, 1);

		canon = kvs_index_find(pool, ns, &e->key);
		if (canon == e->page) {
			/* Our own claim on this key: published in place. */
			kvs_claim_end(pool, canon);
			canon = KVS_NO_PAGE;
		} else {
			if (pg->flags & KVS_PG_CLAIMED)
				kvs_claim_end(pool, e->page);
			/* In flight elsewhere: the first to publish wins. */
			if (canon != KVS_NO_PAGE &&
			    pool->pages[canon].state == KVS_PAGE_OWNED) {
				kvs_claim_end(pool, canon);
				canon = KVS_NO_PAGE;
			}
		}
		if (canon != KVS_NO_PAGE) {
			/* Someone was first: use theirs, give ours back. */
			kvs_free_owned(pool, e->page);
			kvs_ref(cl, canon);
			e->flags = KVS_PUBLISHED_DUP;
			(*n_dup)++;
			pool->dup_publishes++;
		} else {
			canon = e->page;
			pg->key = e->key;
			pg->ns = ns;
			pg->parent = parent;
			if (parent != KVS_NO_PAGE)
				pool->pages[parent].n_children++;
			kvs_index_insert(pool, canon);
			kvs_set_state(pool, pg, KVS_PAGE_SHARED);
			pg->refcount = 1;
			pool->n_refs++;
			kvs_holds_add(&cl->holds, canon, 1);
			if (unlikely(ch))
				kvs_chan_published(pool, ch, canon);
		}
		e->result = canon;
		prev = canon;
		pool->publishes++;
	}
	return 0;
}


/*
 * LOOKUP's pipeline: the hash of key k + SLOT_AHEAD is computed (into
 * pages[], scratch until written) and its slot prefetched, the page of key
 * k + PAGE_AHEAD is prefetched from its slot, and key k is found in cache.
 */
static void kvs_lookup_slot_ahead(struct kvs_pool *pool, u64 ns,
				  const struct kvs_key *keys, u32 *hashes, u32 k)
{
	lockdep_assert_held(&pool->lock);

	hashes[k] = kvs_index_hash(pool, ns, &keys[k]);
	prefetch(&pool->index[hashes[k] & pool->index_mask]);
}

/*
 * Arm @cl's poll wait, or with @park_ms its parked wait, on claimed page
 * @i, and say in *@park_ms how long that claim has left to live.
 */
static void kvs_wait_arm(struct kvs_client *cl, u32 i, u32 *park_ms)
{
	struct kvs_pool *pool = cl->pool;

	lockdep_assert_held(&pool->lock);

	if (park_ms) {
		u32 age = (u32)(kvs_now_ms() - pool->pages[i].claimed_at);
		u32 timeout = READ_ONCE(kvs_claim_timeout_ms);

		*park_ms = timeout > age ? timeout - age : 0;
		cl->park_page = i;
		WRITE_ONCE(cl->parked, true);
	} else {
		cl->wait_page = i;
		WRITE_ONCE(cl->waiting, true);
	}
	pool->n_waiting++;
	pool->inflight_waits++;
}

/*
 * KVS_LOOKUP_WAIT after a run that stopped at keys[0]: count the keys in
 * flight in other files' live claims from there, and wait on the first.
 */
static u32 kvs_lookup_inflight(struct kvs_client *cl, const struct kvs_key *keys,
			       u32 count, u32 *park_ms)
{
	struct kvs_pool *pool = cl->pool;
	u32 k;

	lockdep_assert_held(&pool->lock);

	for (k = 0; k < count; k++) {
		u32 i = kvs_index_find(pool, cl->ns, &keys[k]);

		if (i == KVS_NO_PAGE || !kvs_claim_live(&pool->pages[i]) ||
		    pool->pages[i].owner == cl->id)
			break;
		if (!k)
			kvs_wait_arm(cl, i, park_ms);
	}
	return k;
}

/*
 * The longest run of @keys, from the first, published in namespace @ns;
 * their pages go to pages[0..run), and the rest of @pages is scratch.
 * Only reads the pool.
 */
static u32 kvs_lookup_run(struct kvs_pool *pool, u64 ns,
			  const struct kvs_key *keys, u32 count, u32 *pages)
{
	u32 k, hits;

	lockdep_assert_held(&pool->lock);

	for (k = 0; k < min(count, KVS_SLOT_AHEAD); k++)
		kvs_lookup_slot_ahead(pool, ns, keys, pages, k);
	for (hits = 0; hits < count; hits++) {
		u32 i;

		if (hits + KVS_SLOT_AHEAD < count)
			kvs_lookup_slot_ahead(pool, ns, keys, pages,
					      hits + KVS_SLOT_AHEAD);
		if (hits + KVS_PAGE_AHEAD < count) {
			u32 ahead = pages[hits + KVS_PAGE_AHEAD] & pool->index_mask;

			i = READ_ONCE(pool->index[ahead].page);
			if (i != KVS_NO_PAGE)
				prefetch(&pool->pages[i]);
		}
		i = kvs_index_find_hashed(pool, pages[hits], ns, &keys[hits]);
		/* A claimed page is in flight, not published: a miss. */
		if (i == KVS_NO_PAGE || pool->pages[i].state == KVS_PAGE_OWNED)
			break;
		pages[hits] = i;
	}
	return hits;
}

u32 kvs_arb_peek(struct kvs_client *cl, const struct kvs_key *keys,
		 u32 count, u32 *scratch)
{
	lockdep_assert_held(&cl->pool->lock);

	/*
	 * Side-effect free: no reference, no charge, no counter, and the
	 * file's wait is left as it is (a peek is not "a LOOKUP" for it).
	 */
	return kvs_lookup_run(cl->pool, cl->ns, keys, count, scratch);
}

int kvs_arb_lookup(struct kvs_client *cl, const struct kvs_key *keys,
		   u32 count, u32 *pages, u32 *n_hit, u32 *n_inflight,
		   u32 *park_ms)
{
	struct kvs_pool *pool = cl->pool;
	u32 k, hits;
	int ret;

	lockdep_assert_held(&pool->lock);

	/* Every LOOKUP disarms the wait the previous one of its kind armed. */
	if (park_ms)
		kvs_arb_unpark(cl);
	else
		kvs_wait_disarm(cl);
	hits = kvs_lookup_run(pool, cl->ns, keys, count, pages);
	pool->lookups += count;
	pool->hits += hits;
	ret = kvs_charge(cl, hits);
	if (ret)
		return ret;
	for (k = 0; k < hits; k++)
		kvs_ref(cl, pages[k]);
	cl->held += hits;
	pool->n_held += hits;
	*n_hit = hits;
	if (unlikely(pool->chan) && hits < count && !cl->is_chan)
		kvs_chan_missed(cl, pool->chan, keys + hits, count - hits,
				hits ? pages[hits - 1] : KVS_NO_PAGE);
	if (n_inflight)
		*n_inflight = kvs_lookup_inflight(cl, keys + hits, count - hits,
						  park_ms);
	return 0;
}

int kvs_arb_put(struct kvs_client *cl, const u32 *pages, u32 count)
{
	struct kvs_pool *pool = cl->pool;
	u32 k;

	lockdep_assert_held(&pool->lock);

	/*
	 * Take the holdings out of the table first: a page listed more often
	 * than it is held then fails, and nothing has touched a page yet.
	 */
	for (k = 0; k < count; k++) {
		if (pages[k] >= pool->n_pages ||
		    !kvs_holds_sub(&cl->holds, pages[k], 1))
			break;
	}
	if (k < count) {
		while (k--)
			kvs_holds_add(&cl->holds, pages[k], 1);
		return -ENOENT;
	}

	for (k = 0; k < count; k++) {
		u32 i = array_index_nospec(pages[k], pool->n_pages);

		if (pool->pages[i].state == KVS_PAGE_OWNED) {
			/* A claim the channel gave back unfilled: not asked again soon. */
			if (unlikely(cl->is_chan) &&
			    (pool->pages[i].flags & KVS_PG_CLAIMED) && pool->chan)
				kvs_chan_neg_add(pool->chan, pool->pages[i].ns,
						 &pool->pages[i].key);
			kvs_free_owned(pool, i);
		} else {
			kvs_unref(pool, i, 1);
		}
	}
	cl->held -= count;
	pool->n_held -= count;
	kvs_uncharge(cl, count);
	return 0;
}

/* The client is going away: drop every holding it recorded. */
void kvs_arb_release_all(struct kvs_client *cl)
{
	struct kvs_pool *pool = cl->pool;
	struct kvs_hold_table *t = &cl->holds;
	u32 s;

	lockdep_assert_held(&pool->lock);

	for (s = 0; t->slots && s <= t->mask; s++) {
		struct kvs_hold *h = &t->slots[s];

		if (h->page == KVS_NO_PAGE)
			continue;
		if (pool->pages[h->page].state == KVS_PAGE_OWNED)
			kvs_free_owned(pool, h->page);
		else
			kvs_unref(pool, h->page, h->count);
		pool->n_held -= h->count;
		if (!(s & 1023))
			cond_resched();
	}
	kvs_holds_free(t);
	kvs_uncharge(cl, cl->held);
	cl->held = 0;
	kvs_wait_disarm(cl);
	kvs_arb_unpark(cl);
}

static int kvs_check_fail(struct kvs_pool *pool, const char *what, u32 page)
{
	lockdep_assert_held(&pool->lock);

	pr_warn("pool %s: invariant broken: %s (page %u)\n", pool->name, what, page);
	return -EUCLEAN;
}

static int kvs_check_lists(struct kvs_pool *pool)
{
	u32 i, n;

	lockdep_assert_held(&pool->lock);

	for (n = 0, i = pool->free.head; i != KVS_NO_PAGE && n <= pool->n_pages;
	     i = pool->pages[i].next, n++)
		if (pool->pages[i].state != KVS_PAGE_FREE)
			return kvs_check_fail(pool, "non-free page on free list", i);
	if (n != pool->free.len || n != pool->n_state[KVS_PAGE_FREE])
		return kvs_check_fail(pool, "free list length", n);

	for (n = 0, i = pool->lru.head; i != KVS_NO_PAGE && n <= pool->n_pages;
	     i = pool->pages[i].next, n++)
		if (!kvs_evictable(&pool->pages[i]))
			return kvs_check_fail(pool, "unevictable page on LRU", i);
	if (n != pool->lru.len)
		return kvs_check_fail(pool, "LRU length", n);
	return 0;
}

/* Every recorded holding must match the page it names. */
static int kvs_check_holds(struct kvs_pool *pool, u32 *refs)
{
	struct kvs_client *cl;
	u64 held_total = 0;
	u32 s;

	lockdep_assert_held(&pool->lock);

	list_for_each_entry(cl, &pool->clients, node) {
		const struct kvs_hold_table *t = &cl->holds;
		u64 held = 0;

		for (s = 0; t->slots && s <= t->mask; s++) {
			const struct kvs_hold *h = &t->slots[s];
			const struct kvs_page *pg;

			if (h->page == KVS_NO_PAGE)
				continue;
			if (h->page >= pool->n_pages || !h->count)
				return kvs_check_fail(pool, "bad holding", h->page);
			pg = &pool->pages[h->page];
			if (pg->state == KVS_PAGE_OWNED) {
				if (pg->owner != cl->id || h->count != 1)
					return kvs_check_fail(pool, "owned page holding", h->page);
			} else if (pg->state == KVS_PAGE_SHARED) {
				refs[h->page] += h->count;
			} else {
				return kvs_check_fail(pool, "held page neither owned nor shared",
						      h->page);
			}
			held += h->count;
		}
		if (held != cl->held)
			return kvs_check_fail(pool, "client held count", cl->id);
		held_total += held;
	}
	if (held_total != pool->n_held)
		return kvs_check_fail(pool, "pool held count", 0);
	return 0;
}

static bool kvs_check_wait_page(struct kvs_pool *pool, u32 i)
{
	lockdep_assert_held(&pool->lock);

	return i < pool->n_pages && (pool->pages[i].flags & KVS_PG_CLAIMED);
}

/* Armed waits are counted, and each waits on a page in flight or OWNED. */
static int kvs_check_waiting(struct kvs_pool *pool)
{
	struct kvs_client *cl;
	u32 n = 0;

	lockdep_assert_held(&pool->lock);

	list_for_each_entry(cl, &pool->clients, node) {
		if (cl->waiting) {
			n++;
			if (!kvs_check_wait_page(pool, cl->wait_page))
				return kvs_check_fail(pool, "wait on a page not in flight",
						      cl->wait_page);
		}
		if (cl->parked) {
			n++;
			if (!kvs_check_wait_page(pool, cl->park_page))
				return kvs_check_fail(pool, "parked on a page not in flight",
						      cl->park_page);
		}
	}
	if (n != pool->n_waiting)
		return kvs_check_fail(pool, "waiting count", n);
	return 0;
}

/* What the page walk counts, to compare with the pool's own counters. */
struct kvs_check_tally {
	u64 count[4];			/* pages by state */
	u64 refsum, keyed, evictable, claimed;
};

/* An OWNED page: an owner, no references, no parent; a claim is indexed. */
static bool kvs_check_owned(struct kvs_pool *pool, const struct kvs_page *pg,
			    u32 i, const u32 *refs, struct kvs_check_tally *t)
{
	lockdep_assert_held(&pool->lock);

	/* owner and claimed_at share refcount's and n_children's room. */
	if (!pg->owner || refs[i])
		return false;
	if (pg->flags & KVS_PG_CLAIMED) {
		t->claimed++;
		if (kvs_index_find(pool, pg->ns, &pg->key) != i)
			return false;
	} else if (pg->claimed_at) {
		return false;
	}
	return pg->parent == KVS_NO_PAGE;
}

/*
 * A FREE, SHARED or CACHED page: references as the holdings say, a key in
 * the index and a keyed parent when SHARED or CACHED, none when FREE.
 */
static bool kvs_check_unowned(struct kvs_pool *pool, const struct kvs_page *pg,
			      u32 i, const u32 *refs, u32 *children,
			      struct kvs_check_tally *t)
{
	bool keyed = pg->state == KVS_PAGE_SHARED || pg->state == KVS_PAGE_CACHED;

	lockdep_assert_held(&pool->lock);

	if (pg->flags || pg->refcount != refs[i])
		return false;
	if ((pg->state == KVS_PAGE_SHARED) != (pg->refcount > 0))
		return false;
	if (pg->state == KVS_PAGE_FREE && (pg->ns || pg->n_children))
		return false;
	if (keyed) {
		t->keyed++;
		if (kvs_index_find(pool, pg->ns, &pg->key) != i)
			return false;
		if (pg->parent != KVS_NO_PAGE) {
			if (pg->parent >= pool->n_pages ||
			    pool->pages[pg->parent].state < KVS_PAGE_SHARED)
				return false;
			children[pg->parent]++;
		}
	} else if (pg->parent != KVS_NO_PAGE) {
		return false;
	}
	t->evictable += kvs_evictable(pg);
	t->refsum += pg->refcount;
	return true;
}

/* Every page on its own: -EUCLEAN at the first one that is wrong. */
static int kvs_check_pages(struct kvs_pool *pool, const u32 *refs, u32 *children,
			   struct kvs_check_tally *t)
{
	u32 i;

	lockdep_assert_held(&pool->lock);

	for (i = 0; i < pool->n_pages; i++) {
		const struct kvs_page *pg = &pool->pages[i];
		bool ok;

		if (pg->state > KVS_PAGE_CACHED || (pg->flags & ~KVS_PG_CLAIMED))
			return kvs_check_fail(pool, "page state", i);
		t->count[pg->state]++;
		if (pg->state == KVS_PAGE_OWNED)
			ok = kvs_check_owned(pool, pg, i, refs, t);
		else
			ok = kvs_check_unowned(pool, pg, i, refs, children, t);
		if (!ok)
			return kvs_check_fail(pool, "page state", i);
		if (!(i & 4095))
			cond_resched();
	}
	return 0;
}

/* The walk's counts against the pool's: children, states, index, totals. */
static int kvs_check_totals(struct kvs_pool *pool, const u32 *children,
			    const struct kvs_check_tally *t)
{
	u64 keyed = t->keyed + t->claimed;
	u32 i;

	lockdep_assert_held(&pool->lock);

	for (i = 0; i < pool->n_pages; i++) {
		if (pool->pages[i].state != KVS_PAGE_OWNED &&
		    children[i] != pool->pages[i].n_children)
			return kvs_check_fail(pool, "child count", i);
	}
	for (i = 0; i < 4; i++) {
		if (t->count[i] != pool->n_state[i])
			return kvs_check_fail(pool, "state count", i);
	}
	for (i = 0; i <= pool->index_mask; i++)
		keyed -= pool->index[i].page != KVS_NO_PAGE;
	if (keyed || t->claimed != pool->n_claimed || t->refsum != pool->n_refs ||
	    t->evictable != pool->lru.len ||
	    pool->n_held != pool->n_refs + pool->n_state[KVS_PAGE_OWNED])
		return kvs_check_fail(pool, "totals", 0);
	return 0;
}

/*
 * Verify the invariants of docs/design.md section 3.9 and of this file's
 * structures, a named step each: the holdings, the waits, every page, the
 * totals, the lists.  O(n_pages); for tests and tools, not for the fast path.
 */
int kvs_arb_check(struct kvs_pool *pool)
{
	struct kvs_check_tally t = {};
	u32 *refs, *children;
	int ret;

	lockdep_assert_held(&pool->lock);

	refs = kvcalloc(pool->n_pages, sizeof(*refs), GFP_KERNEL_ACCOUNT);
	children = kvcalloc(pool->n_pages, sizeof(*children), GFP_KERNEL_ACCOUNT);
	ret = -ENOMEM;
	if (!refs || !children)
		goto out;
	ret = kvs_check_holds(pool, refs);
	if (!ret)
		ret = kvs_check_waiting(pool);
	if (!ret)
		ret = kvs_check_pages(pool, refs, children, &t);
	if (!ret)
		ret = kvs_check_totals(pool, children, &t);
	if (!ret)
		ret = kvs_check_lists(pool);
out:
	kvfree(refs);
	kvfree(children);
	return ret;
}
