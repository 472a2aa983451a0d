// SPDX-License-Identifier: GPL-2.0
/*
 * The arbiter's containers: index-linked page lists, the key index of a
 * pool and the per-client holdings table.  Both tables are open-addressed
 * with linear probing, kept at most half full, and delete by backward
 * shift so that no tombstones accumulate.  All callers hold pool->lock,
 * but kvs_index_alloc()'s, which runs before the pool is published; the
 * key index's lookups and changes assert it (its hash reads only the
 * pool's seed, fixed at creation; the holdings table does not know its
 * pool).
 */
#include "core_internal.h"

void kvs_ilist_init(struct kvs_ilist *l)
{
	l->head = KVS_NO_PAGE;
	l->tail = KVS_NO_PAGE;
	l->len = 0;
}

/* Link page @i between @prev and @next (KVS_NO_PAGE: an end), as __list_add(). */
static void kvs_ilist_link(struct kvs_page *pages, struct kvs_ilist *l, u32 i,
			   u32 prev, u32 next)
{
	pages[i].prev = prev;
	pages[i].next = next;
	if (prev == KVS_NO_PAGE)
		l->head = i;
	else
		pages[prev].next = i;
	if (next == KVS_NO_PAGE)
		l->tail = i;
	else
		pages[next].prev = i;
	l->len++;
}

void kvs_ilist_push_tail(struct kvs_page *pages, struct kvs_ilist *l, u32 i)
{
	kvs_ilist_link(pages, l, i, l->tail, KVS_NO_PAGE);
}

void kvs_ilist_push_head(struct kvs_page *pages, struct kvs_ilist *l, u32 i)
{
	kvs_ilist_link(pages, l, i, KVS_NO_PAGE, l->head);
}

void kvs_ilist_del(struct kvs_page *pages, struct kvs_ilist *l, u32 i)
{
	u32 prev = pages[i].prev, next = pages[i].next;

	if (prev == KVS_NO_PAGE)
		l->head = next;
	else
		pages[prev].next = next;
	if (next == KVS_NO_PAGE)
		l->tail = prev;
	else
		pages[next].prev = prev;
	pages[i].prev = KVS_NO_PAGE;
	pages[i].next = KVS_NO_PAGE;
	l->len--;
}

/*
 * Keys are hashes already, but a client may choose them: the per-pool
 * random seed keeps one member of a pool from aiming keys at one probe
 * run of the index.
 */
u32 kvs_index_hash(const struct kvs_pool *pool, u64 ns, const struct kvs_key *key)
{
	u64 h = (key->w[0] ^ pool->seed) * 0x9e3779b97f4a7c15ull;

	h ^= (key->w[1] + ns) * 0xc2b2ae3d27d4eb4full;
	h ^= key->w[2] * 0x165667b19e3779f9ull;
	h ^= key->w[3] * 0x27d4eb2f165667c5ull;
	h ^= h >> 29;
	h *= 0x94d049bb133111ebull;
	h ^= h >> 32;
	return (u32)h;
}

/* Slots of the key index of a pool of @n_pages: at most half full. */
static u64 kvs_index_cap(u64 n_pages)
{
	u64 cap = 16;

	while (cap < 2 * n_pages)
		cap <<= 1;
	return cap;
}

int kvs_index_alloc(struct kvs_pool *pool)
{
	u32 cap = kvs_index_cap(pool->n_pages), i;

	pool->index = kvcalloc(cap, sizeof(*pool->index), GFP_KERNEL_ACCOUNT);
	if (!pool->index)
		return -ENOMEM;
	for (i = 0; i < cap; i++)
		pool->index[i].page = KVS_NO_PAGE;
	pool->index_mask = cap - 1;
	return 0;
}

static bool kvs_key_eq(const struct kvs_key *a, const struct kvs_key *b)
{
	return !((a->w[0] ^ b->w[0]) | (a->w[1] ^ b->w[1]) |
		 (a->w[2] ^ b->w[2]) | (a->w[3] ^ b->w[3]));
}

/*
 * Find a key whose hash the caller computed already.  The hash kept in
 * each slot answers most mismatches without touching the page.
 */
u32 kvs_index_find_hashed(const struct kvs_pool *pool, u32 hash, u64 ns,
			  const struct kvs_key *key)
{
	u32 slot = hash & pool->index_mask;

	lockdep_assert_held(&pool->lock);

	for (;; slot = (slot + 1) & pool->index_mask) {
		const struct kvs_slot *s = &pool->index[slot];
		const struct kvs_page *pg;

		if (s->page == KVS_NO_PAGE)
			return KVS_NO_PAGE;
		if (s->hash != hash)
			continue;
		pg = &pool->pages[s->page];
		if (pg->ns == ns && kvs_key_eq(&pg->key, key))
			return s->page;
	}
}

u32 kvs_index_find(const struct kvs_pool *pool, u64 ns, const struct kvs_key *key)
{
	lockdep_assert_held(&pool->lock);

	return kvs_index_find_hashed(pool, kvs_index_hash(pool, ns, key), ns, key);
}

/* The page's key must not be in the index yet; there is always room. */
void kvs_index_insert(struct kvs_pool *pool, u32 page)
{
	const struct kvs_page *pg = &pool->pages[page];
	u32 hash = kvs_index_hash(pool, pg->ns, &pg->key);
	u32 slot = hash & pool->index_mask;

	lockdep_assert_held(&pool->lock);

	while (pool->index[slot].page != KVS_NO_PAGE)
		slot = (slot + 1) & pool->index_mask;
	pool->index[slot].page = page;
	pool->index[slot].hash = hash;
}

/* True if @home lies cyclically in (@hole, @slot]: the entry may not move. */
static bool kvs_in_run(u32 home, u32 hole, u32 slot)
{
	if (hole <= slot)
		return home > hole && home <= slot;
	return home > hole || home <= slot;
}

void kvs_index_remove(struct kvs_pool *pool, u32 page)
{
	const struct kvs_page *pg = &pool->pages[page];
	u32 mask = pool->index_mask;
	u32 hole = kvs_index_hash(pool, pg->ns, &pg->key) & mask;
	u32 slot;

	lockdep_assert_held(&pool->lock);

	while (pool->index[hole].page != page) {
		if (WARN_ON_ONCE(pool->index[hole].page == KVS_NO_PAGE))
			return;
		hole = (hole + 1) & mask;
	}
	for (slot = (hole + 1) & mask; pool->index[slot].page != KVS_NO_PAGE;
	     slot = (slot + 1) & mask) {
		if (kvs_in_run(pool->index[slot].hash & mask, hole, slot))
			continue;
		pool->index[hole] = pool->index[slot];
		hole = slot;
	}
	pool->index[hole].page = KVS_NO_PAGE;
}

static u32 kvs_holds_home(const struct kvs_hold_table *t, u32 page)
{
	return (page * 2654435761u) & t->mask;
}

static struct kvs_hold *kvs_holds_slot(const struct kvs_hold_table *t, u32 page)
{
	u32 slot;

	if (!t->slots)
		return NULL;
	for (slot = kvs_holds_home(t, page);; slot = (slot + 1) & t->mask) {
		struct kvs_hold *h = &t->slots[slot];

		if (h->page == page)
			return h;
		if (h->page == KVS_NO_PAGE)
			return NULL;
	}
}

static void kvs_holds_place(struct kvs_hold_table *t, u32 page, u32 count)
{
	u32 slot = kvs_holds_home(t, page);

	while (t->slots[slot].page != KVS_NO_PAGE)
		slot = (slot + 1) & t->mask;
	t->slots[slot].page = page;
	t->slots[slot].count = count;
	t->used++;
}

/* Slots of a hold table for @n pages: at most half full. */
static u64 kvs_holds_cap(u64 n)
{
	u64 cap = 16;

	while (cap < 2 * n)
		cap <<= 1;
	return cap;
}

/*
 * Make room for @more new pages so that the adds of one command cannot
 * fail half way.  The only step of a command that may fail for memory.
 */
int kvs_holds_reserve(struct kvs_hold_table *t, u32 more)
{
	struct kvs_hold_table old = *t;
	u64 cap = kvs_holds_cap((u64)t->used + more);
	u32 i;

	if (t->slots && cap <= (u64)t->mask + 1)
		return 0;
	if (cap > (1u << 31))
		return -ENOMEM;
	t->slots = kvmalloc_array(cap, sizeof(*t->slots), GFP_KERNEL_ACCOUNT);
	if (!t->slots) {
		*t = old;
		return -ENOMEM;
	}
	if (!old.slots)
		atomic64_inc(&kvs_objects);
	t->mask = cap - 1;
	t->used = 0;
	for (i = 0; i < cap; i++)
		t->slots[i].page = KVS_NO_PAGE;
	for (i = 0; old.slots && i <= old.mask; i++)
		if (old.slots[i].page != KVS_NO_PAGE)
			kvs_holds_place(t, old.slots[i].page, old.slots[i].count);
	kvfree(old.slots);
	return 0;
}

u32 kvs_holds_get(const struct kvs_hold_table *t, u32 page)
{
	const struct kvs_hold *h = kvs_holds_slot(t, page);

	return h ? h->count : 0;
}

/* Room was reserved, or the page is already held. */
void kvs_holds_add(struct kvs_hold_table *t, u32 page, u32 n)
{
	struct kvs_hold *h = kvs_holds_slot(t, page);

	if (h) {
		h->count += n;
		return;
	}
	if (WARN_ON_ONCE(!t->slots || 2 * ((u64)t->used + 1) > (u64)t->mask + 1))
		return;
	kvs_holds_place(t, page, n);
}

/* Drop @n holdings of @page; false (and nothing changed) if fewer are held. */
bool kvs_holds_sub(struct kvs_hold_table *t, u32 page, u32 n)
{
	struct kvs_hold *h = kvs_holds_slot(t, page);
	u32 hole, slot;

	if (!h || h->count < n)
		return false;
	h->count -= n;
	if (h->count)
		return true;

	hole = h - t->slots;
	for (slot = (hole + 1) & t->mask; t->slots[slot].page != KVS_NO_PAGE;
	     slot = (slot + 1) & t->mask) {
		if (kvs_in_run(kvs_holds_home(t, t->slots[slot].page), hole, slot))
			continue;
		t->slots[hole] = t->slots[slot];
		hole = slot;
	}
	t->slots[hole].page = KVS_NO_PAGE;
	t->used--;
	return true;
}

void kvs_holds_free(struct kvs_hold_table *t)
{
	if (t->slots)
		atomic64_dec(&kvs_objects);
	kvfree(t->slots);
	t->slots = NULL;
	t->mask = 0;
	t->used = 0;
}

u64 kvs_pool_meta_bytes(u64 n_pages)
{
	return sizeof(struct kvs_pool) + n_pages * sizeof(struct kvs_page) +
	       kvs_index_cap(n_pages) * sizeof(struct kvs_slot);
}

u64 kvs_client_meta_bytes(u64 n_held)
{
	/* Growing, the table briefly has its old copy beside the new one. */
	return sizeof(struct kvs_client) +
	       (n_held ? kvs_holds_cap(n_held) * 3 / 2 * sizeof(struct kvs_hold) : 0);
}
