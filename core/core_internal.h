/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Internal structures of the arbiter core.  Everything about one pool is
 * protected by pool->lock; the pool registry by the registry lock, which
 * is never taken while a pool lock is held.  A client's attach_lock comes
 * before both.  The per-user usage lock (core_user.c) is a leaf, after all
 * of them.  Lock order: attach_lock, registry, pool, users.
 */
#ifndef _KVS_CORE_INTERNAL_H
#define _KVS_CORE_INTERNAL_H

#include "host.h"
#include "core.h"

/*
 * A list of pages linked through their indices (free list, eviction LRU).
 * Indices instead of pointers keep a page at 64 bytes and let the whole
 * page array be one allocation.
 */
struct kvs_ilist {
	u32 head;			/* oldest / next to take */
	u32 tail;
	u32 len;
};

/* One cache line: a LOOKUP touches one page struct per key. */
struct kvs_page {
	struct kvs_key key;		/* valid while SHARED, CACHED or claimed */
	u64 ns;				/* the same: key namespace */
	u16 state;			/* enum kvs_page_state */
	u16 flags;			/* KVS_PG_* */
	union {
		u32 refcount;		/* SHARED, CACHED: references held by files */
		u32 owner;		/* OWNED: client id */
	};
	u32 parent;			/* KVS_NO_PAGE for a chain root */
	union {
		u32 n_children;		/* published pages naming us parent */
		u32 claimed_at;		/* OWNED, claimed: kvs_now_ms() at ALLOC */
	};
	u32 prev, next;			/* free list or LRU links */
};

/*
 * An OWNED page in flight: its key and namespace are set and it is in the
 * key index, so that other files' LOOKUPs see it (KVS_LOOKUP_WAIT).
 */
#define KVS_PG_CLAIMED		(1u << 0)

/* A slot of a pool's key index: the page and its key's hash. */
struct kvs_slot {
	u32 page;			/* KVS_NO_PAGE: empty slot */
	u32 hash;			/* kvs_index_hash() of the page's key */
};

/* Open-addressed page -> count table, one per client. */
struct kvs_hold {
	u32 page;			/* KVS_NO_PAGE: empty slot */
	u32 count;
};

struct kvs_hold_table {
	struct kvs_hold *slots;
	u32 mask;			/* capacity - 1; capacity is 2^k */
	u32 used;			/* occupied slots */
};

struct kvs_pool {
	struct mutex lock;
	refcount_t ref;			/* registry + attached clients */

	/* Fixed at creation. */
	u32 id;
	char name[KVS_NAME_MAX];
	u32 uid, gid, mode, flags;
	u32 n_pages;
	u32 max_per_file;
	struct kvs_geometry geom;
	void *mem;			/* host memory object, or NULL */
	struct kvs_user *user;		/* the owner's usage, charged until freed */
	u64 seed;			/* keys -> index slots, per pool */

	/* Under lock. */
	struct kvs_page *pages;
	struct kvs_slot *index;		/* open-addressed key -> page */
	u32 index_mask;
	struct kvs_ilist free;
	struct kvs_ilist lru;		/* CACHED pages without children */
	struct list_head clients;
	u64 n_state[4];			/* by enum kvs_page_state */
	u64 n_refs;
	u64 n_held;
	u64 n_files;
	u64 allocs, alloc_fails, publishes, dup_publishes;
	u64 lookups, hits, evictions;
	u64 n_claimed, inflight_waits;
	u32 n_waiting;			/* armed waits, poll and parked */
	struct kvs_chan *chan;		/* the event channel, or NULL (core_chan.c) */
};

struct kvs_client {
	/*
	 * Held for read by every command on the client, for write by
	 * kvs_cmd_undo() of an ATTACH: the attachment (pool, id, ns, quota)
	 * changes back to none only when no command is using it.
	 */
	struct rw_semaphore attach_lock;
	struct kvs_pool *pool;		/* set by ATTACH, cleared only by its undo */
	struct list_head node;		/* in pool->clients, under pool->lock */
	u32 id;
	u32 quota;
	u64 ns;
	u32 uid;			/* the attacher's (MISS records name it) */
	struct kvs_user *user;		/* charged for holdings; NULL: admin */
	u64 held;			/* OWNED pages plus references */
	struct kvs_hold_table holds;

	/*
	 * In-flight dedupe, under pool->lock: the claimed page this file's
	 * latest LOOKUP waits on, while @waiting; whoever ends that claim
	 * clears @waiting and calls @wake (the host's readiness signal).
	 * @waiting is read without the lock by the host's poll.
	 * @parked and @park_page are a second wait of the same kind, armed
	 * by a LOOKUP whose call asks for it (struct kvs_call's park): the
	 * host's parked io_uring command, which the poll wait's LOOKUPs
	 * must not disarm.  Both count in pool->n_waiting.
	 */
	bool waiting;
	u32 wait_page;
	bool parked;
	u32 park_page;
	void (*wake)(void *arg);
	void *wake_arg;
	bool is_chan;			/* an event channel's own client */
};

/*
 * A pool's event channel (KVS_IOC_CHAN_OPEN).  Its holdings (references
 * of PUBLISHED records, claims of MISS records) are those of its own
 * client @cl, so they are bounded by that client's quota, checked by
 * kvs_arb_check() and released with it.  All fields under pool->lock.
 */
struct kvs_chan {
	struct kvs_client *cl;
	struct kvs_pool *pool;		/* @cl's pool; the channel keeps its reference */
	struct kvs_event *ring;
	u32 size, head, len;		/* a FIFO of @len records from @head */
	u32 fetch_max;
	u32 *miss_pages;		/* fetch_max entries: scratch of a miss */
	struct kvs_chan_neg *neg;	/* keys the channel gave back unfilled */
	bool gone, gone_read;		/* pool destroyed; its record was read */
	u64 published, missed, dropped_full, dropped_held;
	void (*wake)(void *arg);	/* called under pool->lock: must not sleep */
	void *wake_arg;
};

/*
 * A key whose claim the channel gave back unfilled (PUT: its store had
 * nothing, or would not ask it) is not claimed again by a miss for
 * KVS_CHAN_NEG_MS, so that the LOOKUPs its PUT woke see nothing in flight
 * and compute it, instead of waiting on a new claim of the same key.
 * One entry per slot, the newest wins: a key pushed out is merely asked
 * again.
 */
#define KVS_CHAN_NEG_SLOTS	1024
#define KVS_CHAN_NEG_MS		500

struct kvs_chan_neg {
	u64 tag;			/* 0: empty */
	u32 until;			/* kvs_now_ms() */
};

/* Most holdings any pool may record: keeps every u32 refcount far from wrap. */
#define KVS_POOL_MAX_HELD	(1ull << 31)

/*
 * A millisecond clock for claim timeouts; it wraps, so only differences
 * of its values mean something.
 */
#ifdef __KERNEL__
#include <linux/math64.h>
#include <linux/timekeeping.h>
static inline u32 kvs_now_ms(void)
{
	return (u32)div_u64(ktime_get_coarse_ns(), NSEC_PER_MSEC);
}
#else
#include <time.h>
static inline u32 kvs_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (u32)((u64)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}
#endif

/* core_table.c */
void kvs_ilist_init(struct kvs_ilist *l);
void kvs_ilist_push_tail(struct kvs_page *pages, struct kvs_ilist *l, u32 i);
void kvs_ilist_push_head(struct kvs_page *pages, struct kvs_ilist *l, u32 i);
void kvs_ilist_del(struct kvs_page *pages, struct kvs_ilist *l, u32 i);

int kvs_index_alloc(struct kvs_pool *pool);
u32 kvs_index_hash(const struct kvs_pool *pool, u64 ns, const struct kvs_key *key);
u32 kvs_index_find_hashed(const struct kvs_pool *pool, u32 hash, u64 ns,
			  const struct kvs_key *key);
u32 kvs_index_find(const struct kvs_pool *pool, u64 ns, const struct kvs_key *key);
void kvs_index_insert(struct kvs_pool *pool, u32 page);
void kvs_index_remove(struct kvs_pool *pool, u32 page);

int kvs_holds_reserve(struct kvs_hold_table *t, u32 more);
u32 kvs_holds_get(const struct kvs_hold_table *t, u32 page);
void kvs_holds_add(struct kvs_hold_table *t, u32 page, u32 n);
bool kvs_holds_sub(struct kvs_hold_table *t, u32 page, u32 n);
void kvs_holds_free(struct kvs_hold_table *t);

/* core_arbiter.c: all called with pool->lock held (asserted), but init_pages. */
int kvs_arb_alloc(struct kvs_client *cl, u32 count, u32 *pages,
		  const struct kvs_key *claim);
int kvs_arb_publish(struct kvs_client *cl, struct kvs_publish_entry *ents,
		    u32 count, u32 *n_dup);
/*
 * @n_inflight NULL: a plain LOOKUP.  Else KVS_LOOKUP_WAIT: with @park_ms
 * NULL it arms the poll wait; else the parked one, and *@park_ms is how
 * long the claim waited on stays in flight unless it ends first.
 */
int kvs_arb_lookup(struct kvs_client *cl, const struct kvs_key *keys,
		   u32 count, u32 *pages, u32 *n_hit, u32 *n_inflight,
		   u32 *park_ms);
/*
 * KVS_LOOKUP_PEEK: the length of the run LOOKUP would hit, changing
 * nothing; @scratch holds @count entries and is overwritten.
 */
u32 kvs_arb_peek(struct kvs_client *cl, const struct kvs_key *keys,
		 u32 count, u32 *scratch);
void kvs_arb_unpark(struct kvs_client *cl);
int kvs_arb_put(struct kvs_client *cl, const u32 *pages, u32 count);
void kvs_arb_release_all(struct kvs_client *cl);
int kvs_arb_check(struct kvs_pool *pool);
void kvs_arb_init_pages(struct kvs_pool *pool);

/* core_chan.c: with pool->lock held */
static inline u32 kvs_chan_room(const struct kvs_chan *ch)
{
	return ch->size - ch->len;
}
struct kvs_event *kvs_chan_push(struct kvs_chan *ch, u32 type);
void kvs_chan_pool_gone(struct kvs_pool *pool);
void kvs_chan_neg_add(struct kvs_chan *ch, u64 ns, const struct kvs_key *key);
bool kvs_chan_neg_hit(struct kvs_chan *ch, u64 ns, const struct kvs_key *key);

/* core_pool.c */
extern atomic64_t kvs_objects;
int kvs_pool_create(struct kvs_pool_create *req, const struct kvs_cred *cred);
int kvs_pool_attach(struct kvs_client *cl, struct kvs_pool_attach *req,
		    struct kvs_call *call);
void kvs_pool_undo_create(const struct kvs_pool_create *req,
			  const struct kvs_cred *cred);
void kvs_pool_detach(struct kvs_client *cl);
int kvs_pool_destroy(const struct kvs_pool_destroy *req, const struct kvs_cred *cred);
int kvs_pool_list(struct kvs_pool_list *req, struct kvs_call *call);
struct kvs_pool *kvs_pool_get_readable(struct kvs_client *cl, u32 pool_id,
				       const struct kvs_cred *cred, int *err);
void kvs_pool_put(struct kvs_pool *pool);
int kvs_pool_attach_chan(struct kvs_chan *ch, u32 pool_id, const struct kvs_cred *cred);
void kvs_fill_info(struct kvs_info *info);

/* core_user.c */
struct kvs_user;
int kvs_users_init(const struct kvs_limits *limits);
void kvs_users_exit(void);
struct kvs_user *kvs_user_get(u32 uid);
void kvs_user_put(struct kvs_user *u);
int kvs_user_charge_pool(struct kvs_user *u, u64 n_pages, bool limited);
void kvs_user_uncharge_pool(struct kvs_user *u, u64 n_pages);
int kvs_user_charge_held(struct kvs_user *u, u32 n, u64 page_bytes);
void kvs_user_uncharge_held(struct kvs_user *u, u64 n, u64 page_bytes);
int kvs_user_limits(struct kvs_user_limits *req, const struct kvs_cred *cred);

#endif /* _KVS_CORE_INTERNAL_H */
