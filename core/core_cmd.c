// SPDX-License-Identifier: GPL-2.0
/*
 * The command set of <linux/kvshare.h>, shared by every transport: the
 * ioctl and uring_cmd paths of the module and the daemon's socket.  Each
 * handler gets the host's copy of the command struct, checks every field
 * the ABI says must be zero, moves the arrays the struct points to through
 * the host's copy_in/copy_out, and runs the arbiter under the pool lock.
 */
#include "core_internal.h"

static bool kvs_zero(const void *p, size_t len)
{
	return !memchr_inv(p, 0, len);
}

static struct kvs_pool *kvs_attached(struct kvs_client *cl)
{
	/* Pairs with the release in kvs_pool_attach(): the pool is complete. */
	return smp_load_acquire(&cl->pool);
}

/*
 * The page commands may be issued from io_uring's inline submission path,
 * which must not sleep: there a contended pool answers EAGAIN and
 * io_uring retries from a worker that may.
 */
static int kvs_lock_pool(struct kvs_pool *pool, struct kvs_call *call)
{
	if (!call->nonblock) {
		mutex_lock(&pool->lock);
		return 0;
	}
	return mutex_trylock(&pool->lock) ? 0 : -EAGAIN;
}

static int kvs_count_check(u32 count)
{
	if (!count)
		return -EINVAL;
	if (count > KVS_MAX_BATCH)
		return -E2BIG;
	return 0;
}

/*
 * What every page command checks first, in this order: its must-be-zero
 * fields (@fields_zero), the batch size, and that the file is attached.
 */
static struct kvs_pool *kvs_batch_start(struct kvs_client *cl, bool fields_zero,
					u32 count, int *err)
{
	struct kvs_pool *pool = kvs_attached(cl);

	*err = fields_zero ? kvs_count_check(count) : -EINVAL;
	if (!*err && !pool)
		*err = -EBADFD;
	return *err ? NULL : pool;
}

static int kvs_cmd_info(struct kvs_client *cl, void *arg, struct kvs_call *call)
{
	struct kvs_info *info = arg;

	/* Apart from flags, every field is out or reserved. */
	if (!kvs_zero(info, sizeof(*info)))
		return -EINVAL;
	kvs_fill_info(info);
	return 0;
}

static int kvs_cmd_create(struct kvs_client *cl, void *arg, struct kvs_call *call)
{
	return kvs_pool_create(arg, call->cred);
}

static int kvs_cmd_attach(struct kvs_client *cl, void *arg, struct kvs_call *call)
{
	return kvs_pool_attach(cl, arg, call);
}

static int kvs_cmd_destroy(struct kvs_client *cl, void *arg, struct kvs_call *call)
{
	return kvs_pool_destroy(arg, call->cred);
}

static int kvs_cmd_list(struct kvs_client *cl, void *arg, struct kvs_call *call)
{
	return kvs_pool_list(arg, call);
}

/* Under pool->lock, so that the counters are one snapshot. */
static void kvs_fill_stats(struct kvs_pool *pool, struct kvs_pool_stats *st)
{
	lockdep_assert_held(&pool->lock);

	st->n_pages = pool->n_pages;
	st->n_free = pool->n_state[KVS_PAGE_FREE];
	st->n_owned = pool->n_state[KVS_PAGE_OWNED];
	st->n_shared = pool->n_state[KVS_PAGE_SHARED];
	st->n_cached = pool->n_state[KVS_PAGE_CACHED];
	st->n_evictable = pool->lru.len;
	st->n_refs = pool->n_refs;
	st->n_held = pool->n_held;
	st->n_files = pool->n_files;
	st->allocs = pool->allocs;
	st->alloc_fails = pool->alloc_fails;
	st->publishes = pool->publishes;
	st->dup_publishes = pool->dup_publishes;
	st->lookups = pool->lookups;
	st->hits = pool->hits;
	st->evictions = pool->evictions;
	st->n_claimed = pool->n_claimed;
	st->inflight_waits = pool->inflight_waits;
}

static int kvs_cmd_stats(struct kvs_client *cl, void *arg, struct kvs_call *call)
{
	struct kvs_pool_stats *st = arg;
	struct kvs_pool *pool;
	int ret = 0;

	if ((st->flags & ~KVS_STATS_VALID) ||
	    !kvs_zero(&st->n_pages, sizeof(*st) - offsetof(struct kvs_pool_stats, n_pages)))
		return -EINVAL;
	/* The check walks every page under the pool lock: not for everyone. */
	if ((st->flags & KVS_STATS_CHECK) && !call->cred->admin)
		return -EPERM;
	pool = kvs_pool_get_readable(cl, st->pool_id, call->cred, &ret);
	if (!pool)
		return ret;
	mutex_lock(&pool->lock);
	kvs_fill_stats(pool, st);
	if (st->flags & KVS_STATS_CHECK)
		ret = kvs_arb_check(pool);
	mutex_unlock(&pool->lock);
	kvs_pool_put(pool);
	return ret;
}

/* Keys and namespaces (salts) keep tenants apart: only for @reveal. */
static void kvs_describe_page(const struct kvs_page *pg, u32 i,
			      struct kvs_page_desc *d, bool reveal)
{
	memset(d, 0, sizeof(*d));
	d->index = i;
	d->state = pg->state;
	/* An OWNED page keeps its owner and claim time in these two. */
	if (pg->state != KVS_PAGE_OWNED) {
		d->refcount = pg->refcount;
		d->n_children = pg->n_children;
	}
	d->parent = pg->parent;
	if (reveal &&
	    (pg->state == KVS_PAGE_SHARED || pg->state == KVS_PAGE_CACHED)) {
		d->ns = pg->ns;
		d->key = pg->key;
	}
}

/* Pages PAGES describes per hold of the pool lock. */
#define KVS_PAGES_CHUNK	256

/*
 * Describe pages [start, start + n): the pool lock is dropped between
 * chunks, so a large request never stalls the pool's users.  A listing
 * is then not one snapshot, as it never was across calls either.
 */
static void kvs_describe_pages(struct kvs_pool *pool, u64 start, u32 n,
			       struct kvs_page_desc *descs, bool reveal)
{
	u32 i, j, end;

	for (i = 0; i < n; i = end) {
		end = min_t(u32, n, i + KVS_PAGES_CHUNK);
		mutex_lock(&pool->lock);
		for (j = i; j < end; j++) {
			u32 idx = array_index_nospec(start + j, (u64)pool->n_pages);

			kvs_describe_page(&pool->pages[idx], idx, &descs[j], reveal);
		}
		mutex_unlock(&pool->lock);
		cond_resched();
	}
}

static int kvs_cmd_pages(struct kvs_client *cl, void *arg, struct kvs_call *call)
{
	struct kvs_pages *req = arg;
	struct kvs_page_desc *descs;
	struct kvs_pool *pool;
	u32 n;
	int ret = 0;

	if (req->flags || req->pad || !kvs_zero(req->reserved, sizeof(req->reserved)))
		return -EINVAL;
	ret = kvs_count_check(req->count);
	if (ret)
		return ret;
	pool = kvs_pool_get_readable(cl, req->pool_id, call->cred, &ret);
	if (!pool)
		return ret;
	ret = -EINVAL;
	if (req->start >= pool->n_pages)
		goto put;
	n = min_t(u64, req->count, pool->n_pages - req->start);
	ret = -ENOMEM;
	descs = kvmalloc_array(n, sizeof(*descs), GFP_KERNEL);
	if (!descs)
		goto put;
	kvs_describe_pages(pool, req->start, n, descs,
			   call->cred->admin || call->cred->uid == pool->uid);
	ret = call->copy_out(call, req->pages, descs, (u64)n * sizeof(*descs));
	if (!ret)
		req->count = n;
	kvfree(descs);
put:
	kvs_pool_put(pool);
	return ret;
}

static int kvs_cmd_quota(struct kvs_client *cl, void *arg, struct kvs_call *call)
{
	struct kvs_quota *q = arg;
	struct kvs_pool *pool = kvs_attached(cl);
	int ret = 0;

	if ((q->flags & ~KVS_QUOTA_VALID) || q->held || q->pad ||
	    !kvs_zero(q->reserved, sizeof(q->reserved)))
		return -EINVAL;
	if (!(q->flags & KVS_QUOTA_SET) && q->max_pages)
		return -EINVAL;
	if (!pool)
		return -EBADFD;
	mutex_lock(&pool->lock);
	if (q->flags & KVS_QUOTA_SET) {
		if (q->max_pages > pool->max_per_file || q->max_pages < cl->held)
			ret = -EINVAL;
		else
			cl->quota = q->max_pages;
	}
	q->max_pages = cl->quota;
	q->held = cl->held;
	mutex_unlock(&pool->lock);
	return ret;
}

/*
 * Fail before acting if the results could not be written back: read the
 * caller's result buffer and write the same bytes back.  Only a buffer
 * unmapped concurrently can still fail the final write.
 */
static int kvs_probe_out(struct kvs_call *call, u64 dst, void *buf, u64 len)
{
	int ret = call->copy_in(call, buf, dst, len);

	return ret ? ret : call->copy_out(call, dst, buf, len);
}

/*
 * The results of a command that took effect could not be written back:
 * drop what it gave this file, so that the file holds none of the pages
 * it cannot have heard of.  Another thread of the file may have dropped
 * some already, knowing the numbers somehow; that is fine too.
 */
static void kvs_undo_holdings(struct kvs_client *cl, struct kvs_pool *pool,
			      const u32 *pages, u32 count)
{
	mutex_lock(&pool->lock);
	kvs_arb_put(cl, pages, count);
	mutex_unlock(&pool->lock);
}

static int kvs_cmd_alloc(struct kvs_client *cl, void *arg, struct kvs_call *call)
{
	struct kvs_alloc *req = arg;
	u64 len = (u64)req->count * sizeof(u32);
	bool claim = req->flags & KVS_ALLOC_CLAIM;
	struct kvs_key *keys = NULL;
	struct kvs_pool *pool;
	u32 *pages;
	int ret;

	pool = kvs_batch_start(cl, !(req->flags & ~KVS_ALLOC_VALID) &&
			       (claim || !req->keys) &&
			       kvs_zero(req->reserved, sizeof(req->reserved)),
			       req->count, &ret);
	if (!pool)
		return ret;
	pages = kvmalloc_array(req->count, sizeof(*pages), GFP_KERNEL);
	if (!pages)
		return -ENOMEM;
	if (claim) {
		ret = -ENOMEM;
		keys = kvmalloc_array(req->count, sizeof(*keys), GFP_KERNEL);
		if (!keys)
			goto out;
		ret = call->copy_in(call, keys, req->keys,
				    (u64)req->count * sizeof(*keys));
		if (ret)
			goto out;
	}
	ret = kvs_probe_out(call, req->pages, pages, len);
	if (ret)
		goto out;
	ret = kvs_lock_pool(pool, call);
	if (ret)
		goto out;
	ret = kvs_arb_alloc(cl, req->count, pages, keys);
	mutex_unlock(&pool->lock);
	if (ret)
		goto out;
	ret = call->copy_out(call, req->pages, pages, len);
	if (ret)
		kvs_undo_holdings(cl, pool, pages, req->count);
out:
	kvfree(keys);
	kvfree(pages);
	return ret;
}

static int kvs_cmd_publish(struct kvs_client *cl, void *arg, struct kvs_call *call)
{
	struct kvs_publish *req = arg;
	struct kvs_publish_entry *ents;
	u64 len = (u64)req->count * sizeof(*ents);
	struct kvs_pool *pool;
	u32 n_dup = 0;
	int ret;

	pool = kvs_batch_start(cl, !req->flags && !req->n_dup && !req->pad &&
			       kvs_zero(req->reserved, sizeof(req->reserved)),
			       req->count, &ret);
	if (!pool)
		return ret;
	ents = kvmalloc_array(req->count, sizeof(*ents), GFP_KERNEL);
	if (!ents)
		return -ENOMEM;
	/* Copied once: the arbiter never reads the caller's memory twice. */
	ret = call->copy_in(call, ents, req->entries, len);
	if (!ret)
		ret = call->copy_out(call, req->entries, ents, len);
	if (ret)
		goto out;
	ret = kvs_lock_pool(pool, call);
	if (ret)
		goto out;
	ret = kvs_arb_publish(cl, ents, req->count, &n_dup);
	mutex_unlock(&pool->lock);
	if (ret)
		goto out;
	req->n_dup = n_dup;
	ret = call->copy_out(call, req->entries, ents, len);
	if (ret) {
		u32 k, *results = (u32 *)ents;

		/* In place: result k is read before slot k is written. */
		for (k = 0; k < req->count; k++)
			results[k] = ents[k].result;
		kvs_undo_holdings(cl, pool, results, req->count);
	}
out:
	kvfree(ents);
	return ret;
}

static int kvs_cmd_lookup(struct kvs_client *cl, void *arg, struct kvs_call *call)
{
	struct kvs_lookup *req = arg;
	struct kvs_pool *pool;
	struct kvs_key *keys;
	u32 *pages, n_hit = 0, n_inflight = 0;
	bool peek = req->flags & KVS_LOOKUP_PEEK;
	int ret;

	/* A peek takes nothing, so it has nothing to wait for either. */
	pool = kvs_batch_start(cl, !(req->flags & ~KVS_LOOKUP_VALID) &&
			       !(peek && (req->flags & KVS_LOOKUP_WAIT)) &&
			       !req->n_hit && !req->n_inflight &&
			       kvs_zero(req->reserved, sizeof(req->reserved)),
			       req->count, &ret);
	if (!pool)
		return ret;
	keys = kvmalloc_array(req->count, sizeof(*keys), GFP_KERNEL);
	pages = kvmalloc_array(req->count, sizeof(*pages), GFP_KERNEL);
	ret = -ENOMEM;
	if (!keys || !pages)
		goto out;
	ret = call->copy_in(call, keys, req->keys, (u64)req->count * sizeof(*keys));
	/* A peek's caller may have no pages array: never touch it. */
	if (!ret && !peek)
		ret = kvs_probe_out(call, req->pages, pages,
				    (u64)req->count * sizeof(*pages));
	if (ret)
		goto out;
	ret = kvs_lock_pool(pool, call);
	if (ret)
		goto out;
	if (peek) {
		n_hit = kvs_arb_peek(cl, keys, req->count, pages);
		mutex_unlock(&pool->lock);
		goto out;
	}
	ret = kvs_arb_lookup(cl, keys, req->count, pages, &n_hit,
			     req->flags & KVS_LOOKUP_WAIT ? &n_inflight : NULL,
			     call->park ? &call->park_ms : NULL);
	mutex_unlock(&pool->lock);
	if (ret || !n_hit)
		goto out;
	ret = call->copy_out(call, req->pages, pages, (u64)n_hit * sizeof(*pages));
	if (ret) {
		kvs_undo_holdings(cl, pool, pages, n_hit);
		n_hit = 0;
		n_inflight = 0;
	}
out:
	req->n_hit = n_hit;
	req->n_inflight = n_inflight;
	kvfree(keys);
	kvfree(pages);
	return ret;
}

static int kvs_cmd_put(struct kvs_client *cl, void *arg, struct kvs_call *call)
{
	struct kvs_put *req = arg;
	struct kvs_pool *pool;
	u32 *pages;
	int ret;

	pool = kvs_batch_start(cl, !req->flags &&
			       kvs_zero(req->reserved, sizeof(req->reserved)),
			       req->count, &ret);
	if (!pool)
		return ret;
	pages = kvmalloc_array(req->count, sizeof(*pages), GFP_KERNEL);
	if (!pages)
		return -ENOMEM;
	ret = call->copy_in(call, pages, req->pages, (u64)req->count * sizeof(*pages));
	if (!ret)
		ret = kvs_lock_pool(pool, call);
	if (!ret) {
		ret = kvs_arb_put(cl, pages, req->count);
		mutex_unlock(&pool->lock);
	}
	kvfree(pages);
	return ret;
}

static int kvs_cmd_user_limits(struct kvs_client *cl, void *arg,
			       struct kvs_call *call)
{
	return kvs_user_limits(arg, call->cred);
}

struct kvs_cmd_desc {
	u32 size;
	int (*fn)(struct kvs_client *cl, void *arg, struct kvs_call *call);
};

#define KVS_CMD(ioc, handler) \
	[_IOC_NR(ioc)] = { .size = _IOC_SIZE(ioc), .fn = handler }

static const struct kvs_cmd_desc kvs_cmds[] = {
	KVS_CMD(KVS_IOC_INFO, kvs_cmd_info),
	KVS_CMD(KVS_IOC_POOL_CREATE, kvs_cmd_create),
	KVS_CMD(KVS_IOC_POOL_ATTACH, kvs_cmd_attach),
	KVS_CMD(KVS_IOC_POOL_DESTROY, kvs_cmd_destroy),
	KVS_CMD(KVS_IOC_POOL_LIST, kvs_cmd_list),
	KVS_CMD(KVS_IOC_POOL_STATS, kvs_cmd_stats),
	KVS_CMD(KVS_IOC_PAGES, kvs_cmd_pages),
	KVS_CMD(KVS_IOC_QUOTA, kvs_cmd_quota),
	KVS_CMD(KVS_IOC_USER_LIMITS, kvs_cmd_user_limits),
	KVS_CMD(KVS_IOC_ALLOC, kvs_cmd_alloc),
	KVS_CMD(KVS_IOC_PUBLISH, kvs_cmd_publish),
	KVS_CMD(KVS_IOC_LOOKUP, kvs_cmd_lookup),
	KVS_CMD(KVS_IOC_PUT, kvs_cmd_put),
};

static const struct kvs_cmd_desc *kvs_cmd_find(unsigned int cmd)
{
	unsigned int nr = _IOC_NR(cmd);

	if (_IOC_TYPE(cmd) != KVS_IOC_MAGIC ||
	    _IOC_DIR(cmd) != (_IOC_READ | _IOC_WRITE) ||
	    nr >= ARRAY_SIZE(kvs_cmds) || !kvs_cmds[nr].fn)
		return NULL;
	return &kvs_cmds[array_index_nospec(nr, ARRAY_SIZE(kvs_cmds))];
}

u32 kvs_cmd_size(unsigned int cmd)
{
	const struct kvs_cmd_desc *desc = kvs_cmd_find(cmd);

	return desc ? desc->size : 0;
}

int kvs_cmd(struct kvs_client *cl, unsigned int cmd, void *arg,
	    struct kvs_call *call)
{
	const struct kvs_cmd_desc *desc = kvs_cmd_find(cmd);
	int ret;

	if (!desc)
		return -ENOTTY;
	/* Keeps the attachment (and so the pool) for the whole command. */
	if (!call->nonblock)
		down_read(&cl->attach_lock);
	else if (!down_read_trylock(&cl->attach_lock))
		return -EAGAIN;
	ret = desc->fn(cl, arg, call);
	up_read(&cl->attach_lock);
	return ret;
}

static bool kvs_cmd_is(unsigned int cmd, unsigned int ioc)
{
	return kvs_cmd_find(cmd) && _IOC_NR(cmd) == _IOC_NR(ioc);
}

void kvs_cmd_undo(struct kvs_client *cl, unsigned int cmd, void *arg,
		  const struct kvs_cred *cred)
{
	if (kvs_cmd_is(cmd, KVS_IOC_POOL_CREATE))
		kvs_pool_undo_create(arg, cred);
	else if (kvs_cmd_is(cmd, KVS_IOC_POOL_ATTACH))
		kvs_pool_detach(cl);
}
