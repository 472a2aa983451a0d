// SPDX-License-Identifier: MIT
/*
 * The radix tree of <kvshare/radix.h>.
 *
 * Layout.  A node's tokens and pages live in a segment, one per insert,
 * that the nodes split from it share by reference: a split moves two
 * pointers instead of copying a 128k-token edge.  Children are found
 * through one open-addressing table for the whole tree, keyed by (parent
 * id, first page's tokens), and are also linked in a sibling list for
 * walks.  Unlocked leaves sit in a binary min-heap by (stamp, id), so
 * eviction never scans the tree.
 *
 * All-or-nothing.  Every change first walks without touching anything,
 * then allocates what it will need (a node for a split, the new leaf, room
 * in the table and the heap), and only then changes the tree, so -ENOMEM
 * always leaves the tree as it was.  At most one node is split per walk:
 * a walk ends where a match ends inside a node.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include <kvshare/radix.h>

#include "grow.h"

#define KV_NO_HEAP	UINT32_MAX
#define KV_BATCH	256	/* pages handed to release() at once */

/* Tokens and pages of one insert; nodes split from it share it. */
struct kv_radix_seg {
	size_t refs;
	uint32_t data[];	/* tokens, then pages */
};

struct kv_radix_node {
	struct kv_radix_node *parent;
	struct kv_radix_node *first_child, *last_child;
	struct kv_radix_node *prev, *next;	/* siblings, in insertion order */
	struct kv_radix_seg *seg;
	uint32_t *tokens;		/* n_pages * tokens_per_page */
	uint32_t *pages;
	uint32_t n_pages;
	uint32_t n_children;
	uint32_t lock_ref;
	uint32_t flags;
	uint32_t heap_idx;		/* in the evictable-leaf heap, or KV_NO_HEAP */
	uint64_t last_access;
	uint64_t id;
};

struct kv_child_slot {
	uint64_t hash;
	struct kv_radix_node *child;	/* NULL: empty */
};

struct kv_radix {
	uint32_t tpp;
	struct kv_radix_ops ops;
	struct kv_radix_node root;
	uint64_t clock;
	uint64_t next_id;
	size_t evictable, protected_, total, n_nodes;

	struct kv_child_slot *slots;	/* power-of-two size, at most half full */
	size_t n_slots, slots_used;

	struct kv_radix_node **heap;
	size_t heap_len, heap_cap;

	uint32_t *scratch, *scratch2;	/* page lists of the cache_*_req calls */
	size_t scratch_cap;
};

/* ------------------------------------------------------------------ */
/* Children index                                                      */

static uint64_t kv_child_hash(const struct kv_radix *t, const struct kv_radix_node *parent,
			      const uint32_t *page)
{
	return XXH3_64bits_withSeed(page, (size_t)t->tpp * sizeof(*page), parent->id);
}

static bool kv_page_eq(const struct kv_radix *t, const uint32_t *a, const uint32_t *b)
{
	return !memcmp(a, b, (size_t)t->tpp * sizeof(*a));
}

static struct kv_radix_node *kv_find_child(const struct kv_radix *t,
					   const struct kv_radix_node *parent,
					   const uint32_t *page)
{
	struct kv_radix_node *c;
	size_t mask, i;
	uint64_t h;

	/* Most nodes have a child or two: comparing beats hashing. */
	if (parent->n_children <= 2) {
		for (c = parent->first_child; c; c = c->next)
			if (c->tokens[0] == page[0] && kv_page_eq(t, c->tokens, page))
				return c;
		return NULL;
	}
	h = kv_child_hash(t, parent, page);
	mask = t->n_slots - 1;
	for (i = h & mask; t->slots[i].child; i = (i + 1) & mask) {
		c = t->slots[i].child;
		if (t->slots[i].hash == h && c->parent == parent &&
		    kv_page_eq(t, c->tokens, page))
			return c;
	}
	return NULL;
}

static void kv_slot_put(struct kv_child_slot *slots, size_t n, uint64_t h,
			struct kv_radix_node *child)
{
	size_t i;

	for (i = h & (n - 1); slots[i].child; i = (i + 1) & (n - 1))
		;
	slots[i].hash = h;
	slots[i].child = child;
}

/* Room for @more entries at load <= 1/2; -ENOMEM changes nothing. */
static int kv_slots_reserve(struct kv_radix *t, size_t more)
{
	struct kv_child_slot *s;
	size_t n = t->n_slots, i;

	while ((t->slots_used + more) * 2 > n)
		n *= 2;
	if (n == t->n_slots)
		return 0;
	s = calloc(n, sizeof(*s));
	if (!s)
		return -ENOMEM;
	for (i = 0; i < t->n_slots; i++)
		if (t->slots[i].child)
			kv_slot_put(s, n, t->slots[i].hash, t->slots[i].child);
	free(t->slots);
	t->slots = s;
	t->n_slots = n;
	return 0;
}

static size_t kv_slot_find(const struct kv_radix *t, uint64_t h,
			   const struct kv_radix_node *child)
{
	size_t mask = t->n_slots - 1, i;

	for (i = h & mask; t->slots[i].child != child; i = (i + 1) & mask)
		;
	return i;
}

/* Backward-shift deletion keeps linear probing free of tombstones. */
static void kv_slot_del(struct kv_radix *t, uint64_t h, const struct kv_radix_node *child)
{
	size_t mask = t->n_slots - 1, i = kv_slot_find(t, h, child), j = i, k;

	for (;;) {
		j = (j + 1) & mask;
		if (!t->slots[j].child)
			break;
		k = t->slots[j].hash & mask;
		/* Move j back to i unless its home lies cyclically in (i, j]. */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		t->slots[i] = t->slots[j];
		i = j;
	}
	t->slots[i].child = NULL;
	t->slots_used--;
}

/* ------------------------------------------------------------------ */
/* Evictable leaves: a min-heap by (last_access, id)                    */

static bool kv_older(const struct kv_radix_node *a, const struct kv_radix_node *b)
{
	return a->last_access < b->last_access ||
	       (a->last_access == b->last_access && a->id < b->id);
}

static void kv_heap_set(struct kv_radix *t, size_t i, struct kv_radix_node *n)
{
	t->heap[i] = n;
	n->heap_idx = i;
}

static void kv_heap_up(struct kv_radix *t, size_t i)
{
	struct kv_radix_node *n = t->heap[i];

	while (i && kv_older(n, t->heap[(i - 1) / 2])) {
		kv_heap_set(t, i, t->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	kv_heap_set(t, i, n);
}

static void kv_heap_down(struct kv_radix *t, size_t i)
{
	struct kv_radix_node *n = t->heap[i];
	size_t c;

	while ((c = 2 * i + 1) < t->heap_len) {
		if (c + 1 < t->heap_len && kv_older(t->heap[c + 1], t->heap[c]))
			c++;
		if (!kv_older(t->heap[c], n))
			break;
		kv_heap_set(t, i, t->heap[c]);
		i = c;
	}
	kv_heap_set(t, i, n);
}

static void kv_heap_del(struct kv_radix *t, struct kv_radix_node *n)
{
	size_t i = n->heap_idx;
	struct kv_radix_node *last = t->heap[--t->heap_len];

	n->heap_idx = KV_NO_HEAP;
	if (last == n)
		return;
	kv_heap_set(t, i, last);
	kv_heap_up(t, i);
	kv_heap_down(t, last->heap_idx);
}

/* Room for a heap entry per node: pushes then never fail. */
static int kv_heap_reserve(struct kv_radix *t, size_t nodes)
{
	return kv_grow(&t->heap, &t->heap_cap, nodes, sizeof(*t->heap), 64);
}

static bool kv_evictable_leaf(const struct kv_radix *t, const struct kv_radix_node *n)
{
	return n != &t->root && !n->lock_ref && !n->n_children && n->n_pages;
}

/* Put @n in the heap or take it out, whichever its state asks for. */
static void kv_heap_sync(struct kv_radix *t, struct kv_radix_node *n)
{
	bool want = kv_evictable_leaf(t, n);

	if (want && n->heap_idx == KV_NO_HEAP) {
		t->heap_len++;
		kv_heap_set(t, t->heap_len - 1, n);
		kv_heap_up(t, n->heap_idx);
	} else if (!want && n->heap_idx != KV_NO_HEAP) {
		kv_heap_del(t, n);
	}
}

/* ------------------------------------------------------------------ */
/* Nodes                                                               */

static struct kv_radix_node *kv_node_new(struct kv_radix *t)
{
	struct kv_radix_node *n = calloc(1, sizeof(*n));

	if (n) {
		n->heap_idx = KV_NO_HEAP;
		n->id = t->next_id++;
	}
	return n;
}

static void kv_seg_put(struct kv_radix_seg *seg)
{
	if (seg && !--seg->refs)
		free(seg);
}

/* A leaf with its own segment holding a copy of @n_pages pages of tokens. */
static struct kv_radix_node *kv_leaf_new(struct kv_radix *t, const uint32_t *tokens,
					 uint32_t n_pages)
{
	size_t nt = (size_t)n_pages * t->tpp;
	struct kv_radix_node *n;
	struct kv_radix_seg *seg;

	seg = malloc(sizeof(*seg) + (nt + n_pages) * sizeof(uint32_t));
	n = seg ? kv_node_new(t) : NULL;
	if (!n) {
		free(seg);
		return NULL;
	}
	seg->refs = 1;
	memcpy(seg->data, tokens, nt * sizeof(uint32_t));
	n->seg = seg;
	n->tokens = seg->data;
	n->pages = seg->data + nt;
	n->n_pages = n_pages;
	return n;
}

static void kv_link_child(struct kv_radix_node *parent, struct kv_radix_node *c)
{
	c->parent = parent;
	c->next = NULL;
	c->prev = parent->last_child;
	if (parent->last_child)
		parent->last_child->next = c;
	else
		parent->first_child = c;
	parent->last_child = c;
	parent->n_children++;
}

static void kv_unlink_child(struct kv_radix_node *c)
{
	struct kv_radix_node *p = c->parent;

	if (c->prev)
		c->prev->next = c->next;
	else
		p->first_child = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		p->last_child = c->prev;
	p->n_children--;
}

/* @nn takes @c's place in its parent's sibling list. */
static void kv_replace_child(struct kv_radix_node *c, struct kv_radix_node *nn)
{
	struct kv_radix_node *p = c->parent;

	nn->parent = p;
	nn->prev = c->prev;
	nn->next = c->next;
	if (c->prev)
		c->prev->next = nn;
	else
		p->first_child = nn;
	if (c->next)
		c->next->prev = nn;
	else
		p->last_child = nn;
}

/*
 * _split_node: @nn (preallocated) takes the first @k pages of @c and its
 * place under the parent; @c keeps the rest, its identity and its
 * children, so a request's lock on @c still ends where it ended.
 */
static struct kv_radix_node *kv_split(struct kv_radix *t, struct kv_radix_node *c,
				      uint32_t k, struct kv_radix_node *nn)
{
	uint64_t h = kv_child_hash(t, c->parent, c->tokens);

	t->slots[kv_slot_find(t, h, c)].child = nn;
	kv_replace_child(c, nn);
	nn->seg = c->seg;
	nn->seg->refs++;
	nn->tokens = c->tokens;
	nn->pages = c->pages;
	nn->n_pages = k;
	nn->lock_ref = c->lock_ref;
	nn->flags = c->flags;
	nn->last_access = c->last_access;

	c->tokens += (size_t)k * t->tpp;
	c->pages += k;
	c->n_pages -= k;
	nn->first_child = nn->last_child = NULL;
	nn->n_children = 0;
	kv_link_child(nn, c);
	kv_slot_put(t->slots, t->n_slots, kv_child_hash(t, nn, c->tokens), c);
	t->slots_used++;
	t->n_nodes++;
	return nn;
}

/* Give a childless node's memory back; its pages are already released. */
static void kv_delete_leaf(struct kv_radix *t, struct kv_radix_node *n)
{
	struct kv_radix_node *p = n->parent;

	if (n->heap_idx != KV_NO_HEAP)
		kv_heap_del(t, n);
	kv_slot_del(t, kv_child_hash(t, p, n->tokens), n);
	kv_unlink_child(n);
	kv_seg_put(n->seg);
	free(n);
	t->n_nodes--;
}

/* ------------------------------------------------------------------ */
/* Releasing pages in batches                                          */

struct kv_batch {
	uint32_t pages[KV_BATCH];
	uint32_t n;
	unsigned int flags;
};

static void kv_batch_flush(struct kv_radix *t, struct kv_batch *b)
{
	if (b->n)
		t->ops.release(t->ops.priv, b->pages, b->n, b->flags);
	b->n = 0;
}

/* Pages [from, to) of @pages, last first. */
static void kv_batch_add(struct kv_radix *t, struct kv_batch *b, const uint32_t *pages,
			 size_t from, size_t to, unsigned int flags)
{
	if (b->n && b->flags != flags)
		kv_batch_flush(t, b);
	b->flags = flags;
	while (to > from) {
		if (b->n == KV_BATCH)
			kv_batch_flush(t, b);
		b->pages[b->n++] = pages[--to];
	}
}

/* ------------------------------------------------------------------ */
/* Walking down                                                        */

/*
 * First index where @a and @b differ, or @n.  glibc's memcmp is vectorised
 * but only says whether; narrow the block that differs down in steps.
 */
static size_t kv_first_diff(const uint32_t *a, const uint32_t *b, size_t n)
{
	size_t i = 0, step;

	for (step = 1024; step >= 16; step /= 8)
		while (n - i >= step && !memcmp(a + i, b + i, step * sizeof(*a)))
			i += step;
	while (i < n && a[i] == b[i])
		i++;
	return i;
}

/* Whole pages of @c that @key matches, knowing its first page does. */
static uint32_t kv_common_pages(const struct kv_radix *t, const struct kv_radix_node *c,
				const uint32_t *key, size_t max_pages)
{
	size_t lim = c->n_pages < max_pages ? c->n_pages : max_pages;
	size_t d;

	if (lim <= 1)
		return lim;
	d = kv_first_diff(c->tokens + t->tpp, key + t->tpp, (lim - 1) * t->tpp);
	return 1 + d / t->tpp;
}

/* Where a walk for a key ended. */
struct kv_walk {
	struct kv_radix_node *node;	/* deepest node matched whole */
	struct kv_radix_node *child;	/* its child matched for k pages, or NULL */
	uint32_t k;
	size_t pos;			/* pages matched in all */
};

/* Walk without changing anything; the matched pages go to @pages. */
static void kv_descend(const struct kv_radix *t, const uint32_t *tokens,
		       size_t n_pages, uint32_t *pages, struct kv_walk *w)
{
	struct kv_radix_node *node = (struct kv_radix_node *)&t->root, *c;
	size_t pos = 0;
	uint32_t m;

	w->child = NULL;
	w->k = 0;
	while (pos < n_pages) {
		c = kv_find_child(t, node, tokens + pos * t->tpp);
		if (!c)
			break;
		m = kv_common_pages(t, c, tokens + pos * t->tpp, n_pages - pos);
		if (pages)
			memcpy(pages + pos, c->pages, (size_t)m * sizeof(*pages));
		pos += m;
		if (m < c->n_pages) {
			w->child = c;
			w->k = m;
			break;
		}
		node = c;
	}
	w->node = node;
	w->pos = pos;
}

/* The tree's page before position w->pos, or KVS_NO_PAGE. */
static uint32_t kv_walk_last_page(const struct kv_walk *w)
{
	if (w->child)
		return w->child->pages[w->k - 1];
	return w->pos ? w->node->pages[w->node->n_pages - 1] : KVS_NO_PAGE;
}

/* Stamp @node and every ancestor with a new tick of the clock. */
static void kv_touch_path(struct kv_radix *t, struct kv_radix_node *node)
{
	uint64_t now = ++t->clock;

	for (; node; node = node->parent) {
		node->last_access = now;
		if (node->heap_idx != KV_NO_HEAP)
			kv_heap_down(t, node->heap_idx);
	}
}

/* ------------------------------------------------------------------ */
/* Insert, in two steps                                                */

struct kv_ins {
	struct kv_walk w;
	size_t n_pages;
	struct kv_radix_node *split;	/* for w.child */
	struct kv_radix_node *leaf;	/* for pages w.pos.. */
};

static void kv_ins_abort(struct kv_ins *in)
{
	if (in->leaf)
		kv_seg_put(in->leaf->seg);
	free(in->leaf);
	free(in->split);
}

/* Walk and allocate; -ENOMEM changes nothing. */
static int kv_ins_prepare(struct kv_radix *t, const uint32_t *tokens, size_t n_pages,
			  uint32_t *tree_pages, struct kv_ins *in)
{
	size_t more = 0;

	memset(in, 0, sizeof(*in));
	in->n_pages = n_pages;
	kv_descend(t, tokens, n_pages, tree_pages, &in->w);
	if (in->w.child) {
		in->split = kv_node_new(t);
		if (!in->split)
			return -ENOMEM;
		more++;
	}
	if (in->w.pos < n_pages) {
		if (n_pages - in->w.pos > UINT32_MAX) {
			kv_ins_abort(in);
			return -E2BIG;
		}
		in->leaf = kv_leaf_new(t, tokens + in->w.pos * t->tpp,
				       n_pages - in->w.pos);
		if (!in->leaf) {
			kv_ins_abort(in);
			return -ENOMEM;
		}
		more++;
	}
	if (kv_slots_reserve(t, more) || kv_heap_reserve(t, t->n_nodes + more)) {
		kv_ins_abort(in);
		return -ENOMEM;
	}
	return 0;
}

/*
 * Apply a prepared insert with @pages for the new pages (w.pos..).  Returns
 * the node that ends at the key's end.  Cannot fail.
 */
static struct kv_radix_node *kv_ins_commit(struct kv_radix *t, struct kv_ins *in,
					   const uint32_t *pages, unsigned int flags)
{
	struct kv_radix_node *node = in->w.node, *leaf = in->leaf;

	if (in->w.child)
		node = kv_split(t, in->w.child, in->w.k, in->split);
	if (leaf) {
		memcpy(leaf->pages, pages, (size_t)leaf->n_pages * sizeof(*pages));
		leaf->flags = flags;
		kv_link_child(node, leaf);
		kv_slot_put(t->slots, t->n_slots, kv_child_hash(t, node, leaf->tokens), leaf);
		t->slots_used++;
		t->n_nodes++;
		t->total += leaf->n_pages;
		t->evictable += leaf->n_pages;
		kv_heap_sync(t, node);		/* no longer a leaf */
		node = leaf;
	}
	kv_touch_path(t, node);
	kv_heap_sync(t, node);
	return node;
}

long kv_radix_insert(struct kv_radix *t, const uint32_t *tokens,
		     size_t n_tokens, const uint32_t *pages, unsigned int flags,
		     struct kv_radix_node **last)
{
	struct kv_radix_node *node;
	struct kv_ins in;
	int ret;

	ret = kv_ins_prepare(t, tokens, n_tokens / t->tpp, NULL, &in);
	if (ret)
		return ret;
	node = kv_ins_commit(t, &in, pages + in.w.pos, flags);
	if (last)
		*last = node;
	return (long)(in.w.pos * t->tpp);
}

/* ------------------------------------------------------------------ */
/* Match                                                               */

int kv_radix_match_prefix(struct kv_radix *t, const uint32_t *tokens,
			  size_t n_tokens, uint32_t *pages,
			  struct kv_radix_match *m)
{
	struct kv_radix_node *node, *nn = NULL;
	struct kv_walk w;

	kv_descend(t, tokens, n_tokens / t->tpp, pages, &w);
	node = w.node;
	if (w.child) {
		nn = kv_node_new(t);
		if (!nn || kv_slots_reserve(t, 1) || kv_heap_reserve(t, t->n_nodes + 1)) {
			free(nn);
			return -ENOMEM;
		}
		node = kv_split(t, w.child, w.k, nn);
	}
	kv_touch_path(t, node);
	m->len = w.pos * t->tpp;
	m->n_pages = w.pos;
	m->last_node = node;
	return 0;
}

size_t kv_radix_peek(const struct kv_radix *t, const uint32_t *tokens,
		     size_t n_tokens, uint32_t *pages)
{
	struct kv_walk w;

	kv_descend(t, tokens, n_tokens / t->tpp, pages, &w);
	return w.pos * t->tpp;
}

/* ------------------------------------------------------------------ */
/* Locks                                                               */

long kv_radix_lock(struct kv_radix *t, struct kv_radix_node *node)
{
	long delta = 0;

	for (; node && node != &t->root; node = node->parent) {
		if (!node->lock_ref++) {
			t->evictable -= node->n_pages;
			t->protected_ += node->n_pages;
			delta -= node->n_pages;
			kv_heap_sync(t, node);
		}
	}
	return delta;
}

long kv_radix_unlock(struct kv_radix *t, struct kv_radix_node *node)
{
	struct kv_radix_node *n;
	long delta = 0;

	if (!node || node == &t->root)
		return 0;
	/* The path's counts only grow towards the root: check the bottom. */
	if (!node->lock_ref)
		return -EINVAL;
	for (n = node; n != &t->root; n = n->parent) {
		if (!--n->lock_ref) {
			t->evictable += n->n_pages;
			t->protected_ -= n->n_pages;
			delta += n->n_pages;
			kv_heap_sync(t, n);
		}
	}
	return delta;
}

/* ------------------------------------------------------------------ */
/* Eviction                                                            */

size_t kv_radix_evict(struct kv_radix *t, size_t n_pages)
{
	struct kv_batch b = { .n = 0 };
	struct kv_radix_node *leaf, *p;
	size_t done = 0, k;

	while (done < n_pages && t->heap_len) {
		leaf = t->heap[0];
		k = n_pages - done;
		if (k > leaf->n_pages)
			k = leaf->n_pages;
		/* Trim the tail: the deepest pages go first. */
		kv_batch_add(t, &b, leaf->pages, leaf->n_pages - k, leaf->n_pages,
			     leaf->flags);
		leaf->n_pages -= k;
		t->evictable -= k;
		t->total -= k;
		done += k;
		if (leaf->n_pages)
			continue;
		p = leaf->parent;
		kv_delete_leaf(t, leaf);
		kv_heap_sync(t, p);	/* a parent that became a leaf */
	}
	kv_batch_flush(t, &b);
	return done;
}

/* ------------------------------------------------------------------ */
/* Life                                                                */

int kv_radix_create(uint32_t tokens_per_page, const struct kv_radix_ops *ops,
		    struct kv_radix **out)
{
	struct kv_radix *t;

	if (!tokens_per_page || !ops || !ops->release)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->tpp = tokens_per_page;
	t->ops = *ops;
	t->root.lock_ref = 1;		/* the root is never evicted */
	t->root.heap_idx = KV_NO_HEAP;
	t->next_id = 1;
	t->n_slots = 64;
	t->slots = calloc(t->n_slots, sizeof(*t->slots));
	if (!t->slots || kv_heap_reserve(t, 64)) {
		free(t->slots);
		free(t);
		return -ENOMEM;
	}
	*out = t;
	return 0;
}

/* Post-order without a stack: children go as they are visited. */
void kv_radix_destroy(struct kv_radix *t)
{
	struct kv_batch b = { .n = 0 };
	struct kv_radix_node *n, *p;

	if (!t)
		return;
	for (n = &t->root;;) {
		while (n->first_child)
			n = n->first_child;
		if (n == &t->root)
			break;
		p = n->parent;
		kv_batch_add(t, &b, n->pages, 0, n->n_pages, n->flags);
		kv_unlink_child(n);
		kv_seg_put(n->seg);
		free(n);
		n = p;
	}
	kv_batch_flush(t, &b);
	free(t->slots);
	free(t->heap);
	free(t->scratch);
	free(t->scratch2);
	free(t);
}

uint32_t kv_radix_tokens_per_page(const struct kv_radix *t)
{
	return t->tpp;
}

struct kv_radix_node *kv_radix_root(const struct kv_radix *t)
{
	return (struct kv_radix_node *)&t->root;
}

size_t kv_radix_evictable_pages(const struct kv_radix *t)
{
	return t->evictable;
}

size_t kv_radix_protected_pages(const struct kv_radix *t)
{
	return t->protected_;
}

size_t kv_radix_total_pages(const struct kv_radix *t)
{
	return t->total;
}

size_t kv_radix_node_count(const struct kv_radix *t)
{
	return t->n_nodes;
}

/* ------------------------------------------------------------------ */
/* Walks                                                               */

void kv_radix_node_info(const struct kv_radix *t, const struct kv_radix_node *n,
			struct kv_radix_node_info *ni)
{
	const struct kv_radix_node *a;

	memset(ni, 0, sizeof(*ni));
	ni->id = n == &t->root ? 0 : n->id;
	ni->parent_id = n->parent && n->parent != &t->root ? n->parent->id : 0;
	ni->last_access = n->last_access;
	ni->tokens = n->tokens;
	ni->pages = n->pages;
	ni->n_pages = n->n_pages;
	ni->lock_ref = n->lock_ref;
	ni->n_children = n->n_children;
	ni->flags = n->flags;
	for (a = n->parent; a; a = a->parent) {
		ni->depth += (size_t)a->n_pages * t->tpp;
		ni->level++;
	}
}

/*
 * Pre-order successor of @n, iteratively: chains may be as deep as the
 * pool is large.  @depth (tokens above the node) and @level follow.
 */
static const struct kv_radix_node *kv_preorder_next(const struct kv_radix *t,
						   const struct kv_radix_node *n,
						   size_t *depth, unsigned int *level)
{
	if (n->first_child) {
		*depth += (size_t)n->n_pages * t->tpp;
		++*level;
		return n->first_child;
	}
	while (!n->next && n->parent != &t->root) {
		n = n->parent;
		*depth -= (size_t)n->n_pages * t->tpp;
		--*level;
	}
	return n->next;
}

int kv_radix_walk(const struct kv_radix *t,
		  int (*fn)(void *arg, const struct kv_radix_node_info *ni),
		  void *arg)
{
	const struct kv_radix_node *n = t->root.first_child;
	struct kv_radix_node_info ni;
	unsigned int level = 1;
	size_t depth = 0;
	int ret;

	for (; n; n = kv_preorder_next(t, n, &depth, &level)) {
		memset(&ni, 0, sizeof(ni));
		ni.id = n->id;
		ni.parent_id = n->parent != &t->root ? n->parent->id : 0;
		ni.last_access = n->last_access;
		ni.depth = depth;
		ni.tokens = n->tokens;
		ni.pages = n->pages;
		ni.n_pages = n->n_pages;
		ni.lock_ref = n->lock_ref;
		ni.n_children = n->n_children;
		ni.flags = n->flags;
		ni.level = level;
		ret = fn(arg, &ni);
		if (ret)
			return ret;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Self-check                                                          */

struct kv_check {
	size_t nodes, total, evictable, protected_, leaves;
};

static int kv_check_node(const struct kv_radix *t, const struct kv_radix_node *n,
			 struct kv_check *c)
{
	const struct kv_radix_node *p = n->parent, *s;
	uint32_t kids = 0, locks = 0;

	if (!n->n_pages || !p || kv_find_child(t, p, n->tokens) != n ||
	    p->last_access < n->last_access)
		return -EUCLEAN;
	/* Found through the table too, whatever the sibling fast path says. */
	if (t->slots[kv_slot_find(t, kv_child_hash(t, p, n->tokens), n)].child != n)
		return -EUCLEAN;
	for (s = n->first_child; s; s = s->next) {
		if (s->parent != n || (s->next && s->next->prev != s))
			return -EUCLEAN;
		kids++;
		locks += s->lock_ref;
	}
	if (kids != n->n_children || n->lock_ref < locks)
		return -EUCLEAN;
	if (kv_evictable_leaf(t, n) != (n->heap_idx != KV_NO_HEAP))
		return -EUCLEAN;
	if (n->heap_idx != KV_NO_HEAP &&
	    (n->heap_idx >= t->heap_len || t->heap[n->heap_idx] != n))
		return -EUCLEAN;
	c->nodes++;
	c->total += n->n_pages;
	if (n->lock_ref)
		c->protected_ += n->n_pages;
	else
		c->evictable += n->n_pages;
	c->leaves += n->heap_idx != KV_NO_HEAP;
	return 0;
}

int kv_radix_check(const struct kv_radix *t)
{
	const struct kv_radix_node *n = t->root.first_child;
	struct kv_check c = { 0 };
	unsigned int level = 1;
	size_t depth = 0, i, root_kids = 0;
	int ret;

	if (t->root.lock_ref != 1 || t->root.heap_idx != KV_NO_HEAP)
		return -EUCLEAN;
	for (; n; n = kv_preorder_next(t, n, &depth, &level)) {
		ret = kv_check_node(t, n, &c);
		if (ret)
			return ret;
		root_kids += n->parent == &t->root;
	}
	if (root_kids != t->root.n_children || c.nodes != t->n_nodes ||
	    c.nodes != t->slots_used || c.total != t->total ||
	    c.evictable != t->evictable || c.protected_ != t->protected_ ||
	    c.leaves != t->heap_len)
		return -EUCLEAN;
	for (i = 1; i < t->heap_len; i++)
		if (kv_older(t->heap[i], t->heap[(i - 1) / 2]))
			return -EUCLEAN;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Requests (SGLang's cache_finished_req / cache_unfinished_req)       */

/* Both scratch lists hold at least @n pages. */
static int kv_scratch(struct kv_radix *t, size_t n)
{
	size_t cap = t->scratch_cap, cap2 = t->scratch_cap;

	if (kv_grow(&t->scratch, &cap, n, sizeof(*t->scratch), 256) ||
	    kv_grow(&t->scratch2, &cap2, n, sizeof(*t->scratch2), 256))
		return -ENOMEM;
	t->scratch_cap = cap;
	return 0;
}

static uint32_t kv_div_up(uint32_t a, uint32_t b)
{
	return a / b + !!(a % b);
}

long kv_radix_req_match(struct kv_radix *t, struct kv_req_table *rt,
			struct kv_radix_req *req, uint32_t n_match)
{
	struct kv_radix_match m;
	uint32_t max = kv_req_table_max_context(rt);
	int ret;

	if (!kv_req_row(rt, req->slot) || kv_req_table_tokens_per_page(rt) != t->tpp)
		return -EINVAL;
	if (n_match > max)
		n_match = max;
	ret = kv_scratch(t, n_match / t->tpp);
	if (!ret)
		ret = kv_radix_match_prefix(t, req->tokens, n_match, t->scratch, &m);
	if (ret)
		return ret;
	kv_radix_lock(t, m.last_node);
	kv_req_write_pages(rt, req->slot, 0, t->scratch, m.len);
	kv_req_set_len(rt, req->slot, m.len);
	req->cached_len = req->n_tokens = m.len;
	req->last_node = m.last_node;
	return (long)m.len;
}

/*
 * Insert the request's first @full pages (t->scratch), through adopt()
 * for the ones the tree lacks.  The tree's pages of the part already
 * present go to t->scratch2, the node of the last page to *@last (unless
 * NULL).  -errno changes nothing in the tree (adopt may have changed
 * t->scratch).
 */
static int kv_req_insert(struct kv_radix *t, const struct kv_radix_req *req,
			 uint32_t full, unsigned int flags, size_t *present,
			 struct kv_radix_node **last)
{
	struct kv_radix_node *node;
	struct kv_ins in;
	size_t pos;
	int ret;

	ret = kv_ins_prepare(t, req->tokens, full, t->scratch2, &in);
	if (ret)
		return ret;
	pos = in.w.pos;
	/* The locked prefix is there unless the caller changed its tokens. */
	if (pos < req->cached_len / t->tpp) {
		kv_ins_abort(&in);
		return -EINVAL;
	}
	if (pos < full && t->ops.adopt) {
		ret = t->ops.adopt(t->ops.priv, req->tokens, pos, t->scratch + pos,
				   full - pos, kv_walk_last_page(&in.w));
		if (ret) {
			kv_ins_abort(&in);
			return ret;
		}
	}
	node = kv_ins_commit(t, &in, t->scratch + pos, flags);
	if (last)
		*last = node;
	*present = pos;
	return 0;
}

/* Give back t->scratch[from, to) with @flags. */
static void kv_release_range(struct kv_radix *t, size_t from, size_t to,
			     unsigned int flags)
{
	struct kv_batch b = { .n = 0 };

	if (from < to) {
		kv_batch_add(t, &b, t->scratch, from, to, flags);
		kv_batch_flush(t, &b);
	}
}

/*
 * The start of both cache_*_req(): check @req, then its row's pages
 * [0, @n) into t->scratch.  -errno leaves the request and the tree as they
 * were.
 */
static int kv_req_start(struct kv_radix *t, struct kv_req_table *rt,
			const struct kv_radix_req *req, uint32_t n)
{
	uint32_t i;
	int ret;

	if (!kv_req_row(rt, req->slot) || req->cached_len % t->tpp ||
	    req->cached_len > req->n_tokens ||
	    req->n_tokens > kv_req_table_max_context(rt))
		return -EINVAL;
	ret = kv_scratch(t, kv_div_up(req->n_tokens, t->tpp));
	if (ret)
		return ret;
	for (i = 0; i < n; i++)
		t->scratch[i] = kv_req_page(rt, req->slot, i);
	return 0;
}

int kv_radix_cache_finished_req(struct kv_radix *t, struct kv_req_table *rt,
				struct kv_radix_req *req, unsigned int flags)
{
	uint32_t full = req->n_tokens / t->tpp;
	uint32_t all = kv_div_up(req->n_tokens, t->tpp);
	uint32_t cached = req->cached_len / t->tpp;
	size_t present;
	int ret;

	ret = kv_req_start(t, rt, req, all);
	if (ret)
		return ret;
	ret = kv_req_insert(t, req, full, flags, &present, NULL);
	if (ret) {
		kv_release_range(t, cached, all, flags);
	} else {
		/* The unaligned tail, then the duplicates of what was there. */
		kv_release_range(t, full, all, flags);
		kv_release_range(t, cached, present, flags);
	}
	kv_radix_unlock(t, req->last_node);
	kv_req_free(rt, req->slot);
	req->last_node = NULL;
	req->slot = -1;
	return ret;
}

int kv_radix_cache_unfinished_req(struct kv_radix *t, struct kv_req_table *rt,
				  struct kv_radix_req *req, unsigned int flags)
{
	uint32_t full = req->n_tokens / t->tpp;
	uint32_t cached = req->cached_len / t->tpp;
	struct kv_radix_node *last;
	size_t present;
	int ret;

	ret = kv_req_start(t, rt, req, full);
	if (ret)
		return ret;
	ret = kv_req_insert(t, req, full, flags, &present, &last);
	if (ret) {
		/* adopt may have swapped pages for canonical ones: keep them. */
		kv_req_write_pages(rt, req->slot, 0, t->scratch, full * t->tpp);
		return ret;
	}
	kv_release_range(t, cached, present, flags);
	/* The row now reads the tree's pages: present ones, then adopted. */
	memcpy(t->scratch + cached, t->scratch2 + cached,
	       (present - cached) * sizeof(uint32_t));
	kv_req_write_pages(rt, req->slot, cached * t->tpp, t->scratch + cached,
			   (full - cached) * t->tpp);
	kv_radix_lock(t, last);
	kv_radix_unlock(t, req->last_node);
	req->last_node = last;
	req->cached_len = full * t->tpp;
	return 0;
}
