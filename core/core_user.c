// SPDX-License-Identifier: GPL-2.0
/*
 * Per-user limits: what one uid may take from everyone else sharing the
 * arbiter.  Each uid that owns a pool or has a (non-admin) client attached
 * has one usage object:
 *
 * - n_pools, pool_pages: the pools it owns and their pages, charged at
 *   CREATE and uncharged when the pool is freed (after DESTROY and the
 *   last close), since its bookkeeping memory lives until then;
 * - held, held_bytes: OWNED pages plus references of all its clients in
 *   every pool, charged when a batch takes holdings (ALLOC, LOOKUP) and
 *   uncharged when they go (PUT, close, undo).
 *
 * The counters are atomics charged with a compare-and-exchange loop (as
 * io_uring charges locked memory), once per batch: no lock is added to
 * the page commands.  Admin callers are not limited, and their clients
 * are not charged at all.
 *
 * Locking: kvs_users.lock protects the list and the objects' lifetime
 * only.  It is a leaf: taken with or without the registry lock or a pool
 * lock held, and nothing is taken under it.
 */
#include "core_internal.h"

struct kvs_user {
	struct list_head node;		/* in kvs_users.list, under its lock */
	refcount_t ref;			/* pools it owns, clients charged to it */
	u32 uid;
	atomic64_t n_pools;
	atomic64_t pool_pages;
	atomic64_t held;
	atomic64_t held_bytes;
};

static struct {
	struct mutex lock;
	struct list_head list;
	struct kvs_limits lim;
} kvs_users;

int kvs_users_init(const struct kvs_limits *limits)
{
	if (limits->max_user_pools > KVS_MAX_POOLS)
		return -EINVAL;
	mutex_init(&kvs_users.lock);
	INIT_LIST_HEAD(&kvs_users.list);
	kvs_users.lim = *limits;
	return 0;
}

void kvs_users_exit(void)
{
	/* Every pool and client is gone, and with them every reference. */
	WARN_ON_ONCE(!list_empty(&kvs_users.list));
	mutex_destroy(&kvs_users.lock);
}

static struct kvs_user *kvs_user_find(u32 uid)
{
	struct kvs_user *u;

	lockdep_assert_held(&kvs_users.lock);
	list_for_each_entry(u, &kvs_users.list, node)
		if (u->uid == uid)
			return u;
	return NULL;
}

/* The usage object of @uid, created on first use, with a reference. */
struct kvs_user *kvs_user_get(u32 uid)
{
	struct kvs_user *u;

	mutex_lock(&kvs_users.lock);
	u = kvs_user_find(uid);
	if (u) {
		refcount_inc(&u->ref);
	} else {
		u = kzalloc(sizeof(*u), GFP_KERNEL_ACCOUNT);
		if (u) {
			refcount_set(&u->ref, 1);
			u->uid = uid;
			list_add_tail(&u->node, &kvs_users.list);
			atomic64_inc(&kvs_objects);
		}
	}
	mutex_unlock(&kvs_users.lock);
	return u;
}

void kvs_user_put(struct kvs_user *u)
{
	if (!u)
		return;
	/* Under the lock: kvs_user_get() must not find it at 0 and revive it. */
	mutex_lock(&kvs_users.lock);
	if (refcount_dec_and_test(&u->ref)) {
		list_del_init(&u->node);
		WARN_ON_ONCE(atomic64_read(&u->n_pools) ||
			     atomic64_read(&u->held));
		kfree(u);
		atomic64_dec(&kvs_objects);
	}
	mutex_unlock(&kvs_users.lock);
}

/* Add @n to @v unless that takes it past @max (0: no limit). */
static bool kvs_try_charge(atomic64_t *v, u64 n, u64 max)
{
	s64 old = atomic64_read(v);

	do {
		if (max && ((u64)old > max || n > max - (u64)old))
			return false;
	} while (!atomic64_try_cmpxchg(v, &old, old + (s64)n));
	return true;
}

/* A new pool of @n_pages owned by @u; @limited unless its creator is admin. */
int kvs_user_charge_pool(struct kvs_user *u, u64 n_pages, bool limited)
{
	const struct kvs_limits *lim = &kvs_users.lim;

	if (!kvs_try_charge(&u->n_pools, 1, limited ? lim->max_user_pools : 0))
		return -EDQUOT;
	if (!kvs_try_charge(&u->pool_pages, n_pages,
			    limited ? lim->max_user_pool_pages : 0)) {
		atomic64_dec(&u->n_pools);
		return -EDQUOT;
	}
	return 0;
}

void kvs_user_uncharge_pool(struct kvs_user *u, u64 n_pages)
{
	atomic64_sub(n_pages, &u->pool_pages);
	atomic64_dec(&u->n_pools);
}

/* @n more holdings of @page_bytes each for a client of @u (NULL: admin). */
int kvs_user_charge_held(struct kvs_user *u, u32 n, u64 page_bytes)
{
	const struct kvs_limits *lim = &kvs_users.lim;

	if (!u || !n)
		return 0;
	if (!kvs_try_charge(&u->held, n, lim->max_user_held))
		return -EDQUOT;
	if (!kvs_try_charge(&u->held_bytes, (u64)n * page_bytes,
			    lim->max_user_held_bytes)) {
		atomic64_sub(n, &u->held);
		return -EDQUOT;
	}
	return 0;
}

void kvs_user_uncharge_held(struct kvs_user *u, u64 n, u64 page_bytes)
{
	if (!u || !n)
		return;
	atomic64_sub(n * page_bytes, &u->held_bytes);
	atomic64_sub(n, &u->held);
}

int kvs_user_limits(struct kvs_user_limits *req, const struct kvs_cred *cred)
{
	const struct kvs_limits *lim = &kvs_users.lim;
	struct kvs_user *u;

	if ((req->flags & ~KVS_USER_VALID) ||
	    memchr_inv(req->reserved, 0, sizeof(req->reserved)))
		return -EINVAL;
	if (!(req->flags & KVS_USER_UID)) {
		if (req->uid)
			return -EINVAL;
		req->uid = cred->uid;
	} else if (req->uid != cred->uid && !cred->admin) {
		return -EPERM;
	}
	req->n_pools = 0;
	req->pool_pages = 0;
	req->held = 0;
	req->held_bytes = 0;
	mutex_lock(&kvs_users.lock);
	u = kvs_user_find(req->uid);
	if (u) {
		req->n_pools = atomic64_read(&u->n_pools);
		req->pool_pages = atomic64_read(&u->pool_pages);
		req->held = atomic64_read(&u->held);
		req->held_bytes = atomic64_read(&u->held_bytes);
	}
	mutex_unlock(&kvs_users.lock);
	req->max_pools = lim->max_user_pools;
	req->max_pool_pages = lim->max_user_pool_pages;
	req->max_held = lim->max_user_held;
	req->max_held_bytes = lim->max_user_held_bytes;
	return 0;
}
