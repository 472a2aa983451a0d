// SPDX-License-Identifier: GPL-2.0
/*
 * Pools and clients: the registry of named pools, their lifetime and
 * permissions, and the binding of a client (an open file or a daemon
 * connection) to one pool.
 *
 * Lifetime: the registry holds one reference on a pool until DESTROY,
 * every attached client one more.  DESTROY unlinks the name at once; the
 * pages and memory go with the last reference, as IPC_RMID does.
 */
#include "core_internal.h"

atomic64_t kvs_objects;

static struct {
	struct mutex lock;
	struct kvs_pool **slots;	/* max_pools entries, NULL when unused */
	u32 n_pools;
	u32 next_id;
	u32 next_client_id;
	struct kvs_limits limits;
} kvs_reg;

u64 kvs_core_objects(void)
{
	return atomic64_read(&kvs_objects);
}

int kvs_core_init(const struct kvs_limits *limits)
{
	if (!limits->max_pools || limits->max_pools > KVS_MAX_POOLS ||
	    !limits->max_pool_pages || limits->max_pool_pages > KVS_MAX_POOL_PAGES)
		return -EINVAL;
	if (kvs_users_init(limits))
		return -EINVAL;
	kvs_reg.slots = kvcalloc(limits->max_pools, sizeof(*kvs_reg.slots),
				 GFP_KERNEL);
	if (!kvs_reg.slots)
		return -ENOMEM;
	mutex_init(&kvs_reg.lock);
	kvs_reg.limits = *limits;
	kvs_reg.n_pools = 0;
	kvs_reg.next_id = 1;
	kvs_reg.next_client_id = 1;
	return 0;
}

static void kvs_pool_free(struct kvs_pool *pool)
{
	if (pool->user) {
		kvs_user_uncharge_pool(pool->user, pool->n_pages);
		kvs_user_put(pool->user);
	}
	if (pool->mem)
		kvs_host_mem_put(pool->mem);
	kvfree(pool->index);
	kvfree(pool->pages);
	mutex_destroy(&pool->lock);
	kfree(pool);
	atomic64_dec(&kvs_objects);
}

void kvs_pool_put(struct kvs_pool *pool)
{
	if (refcount_dec_and_test(&pool->ref))
		kvs_pool_free(pool);
}

void kvs_core_exit(void)
{
	u32 i;

	for (i = 0; i < kvs_reg.limits.max_pools; i++) {
		struct kvs_pool *pool = kvs_reg.slots[i];

		if (!pool)
			continue;
		kvs_reg.slots[i] = NULL;
		/* No client may be left: the host frees them all first. */
		WARN_ON_ONCE(refcount_read(&pool->ref) != 1);
		kvs_pool_put(pool);
	}
	kvfree(kvs_reg.slots);
	kvs_reg.slots = NULL;
	mutex_destroy(&kvs_reg.lock);
	kvs_users_exit();
	WARN_ON_ONCE(atomic64_read(&kvs_objects) != 0);
}

struct kvs_client *kvs_client_new(void)
{
	struct kvs_client *cl = kzalloc(sizeof(*cl), GFP_KERNEL_ACCOUNT);

	if (!cl)
		return NULL;
	INIT_LIST_HEAD(&cl->node);
	init_rwsem(&cl->attach_lock);
	atomic64_inc(&kvs_objects);
	return cl;
}

/*
 * Give back everything @cl holds and unbind it from its pool; returns the
 * pool, whose reference the caller drops.  No command may be using the
 * attachment: the caller holds attach_lock for write, or the client is
 * being freed.
 */
static struct kvs_pool *kvs_client_unbind(struct kvs_client *cl)
{
	struct kvs_pool *pool = cl->pool;

	if (!pool)
		return NULL;
	mutex_lock(&pool->lock);
	kvs_arb_release_all(cl);
	list_del_init(&cl->node);
	pool->n_files--;
	mutex_unlock(&pool->lock);
	kvs_user_put(cl->user);
	cl->user = NULL;
	return pool;
}

/* No call on @cl is in flight any more: the host guarantees it. */
void kvs_client_free(struct kvs_client *cl)
{
	struct kvs_pool *pool = kvs_client_unbind(cl);

	if (pool)
		kvs_pool_put(pool);
	kfree(cl);
	atomic64_dec(&kvs_objects);
}

/*
 * The undo of an ATTACH: wait for the commands other threads are running
 * through the attachment, release what they took, and leave the client
 * as new.  Under the registry lock too, so that an ATTACH racing with us
 * sees the client either attached (EBUSY) or free.
 */
void kvs_pool_detach(struct kvs_client *cl)
{
	struct kvs_pool *pool;

	down_write(&cl->attach_lock);
	pool = kvs_client_unbind(cl);
	mutex_lock(&kvs_reg.lock);
	WRITE_ONCE(cl->pool, NULL);
	cl->id = 0;
	cl->ns = 0;
	cl->quota = 0;
	mutex_unlock(&kvs_reg.lock);
	up_write(&cl->attach_lock);
	if (pool)
		kvs_pool_put(pool);
}

u32 kvs_client_pool_id(struct kvs_client *cl)
{
	struct kvs_pool *pool;
	u32 id;

	down_read(&cl->attach_lock);
	pool = READ_ONCE(cl->pool);
	id = pool ? pool->id : 0;
	up_read(&cl->attach_lock);
	return id;
}

void kvs_client_unpark(struct kvs_client *cl)
{
	struct kvs_pool *pool;

	down_read(&cl->attach_lock);
	pool = READ_ONCE(cl->pool);
	if (pool) {
		mutex_lock(&pool->lock);
		kvs_arb_unpark(cl);
		mutex_unlock(&pool->lock);
	}
	up_read(&cl->attach_lock);
}

u64 kvs_client_held(struct kvs_client *cl)
{
	struct kvs_pool *pool;
	u64 held = 0;

	down_read(&cl->attach_lock);
	pool = READ_ONCE(cl->pool);
	if (pool) {
		mutex_lock(&pool->lock);
		held = cl->held;
		mutex_unlock(&pool->lock);
	}
	up_read(&cl->attach_lock);
	return held;
}

static bool kvs_name_valid(const char *name)
{
	size_t len = strnlen(name, KVS_NAME_MAX), i;

	if (!len || len == KVS_NAME_MAX)
		return false;
	for (i = 0; i < len; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return false;
	}
	/* The rest of the buffer must be zero: it is ABI, not garbage. */
	for (; i < KVS_NAME_MAX; i++)
		if (name[i])
			return false;
	return true;
}

#define KVS_DIM_MAX		65536
#define KVS_PAGE_BYTES_MAX	(1ull << 30)

static int kvs_geometry_check(struct kvs_geometry *g)
{
	u64 bytes = 2;
	u32 dims[] = { g->n_layers, g->n_kv_heads, g->head_dim,
		       g->tokens_per_page, KVS_DTYPE_SIZE(g->dtype) };
	u32 i;

	if (g->pad || g->page_bytes)
		return -EINVAL;
	for (i = 0; i < ARRAY_SIZE(dims); i++) {
		if (!dims[i] || dims[i] > KVS_DIM_MAX)
			return -EINVAL;
		if (check_mul_overflow(bytes, (u64)dims[i], &bytes) ||
		    bytes > KVS_PAGE_BYTES_MAX)
			return -EINVAL;
	}
	g->page_bytes = bytes;
	return 0;
}

/*
 * Names are scoped by owner: (uid, name) is the key, so that a name one
 * user took never stands in the way of, or for, another user's pool.
 */
static struct kvs_pool *kvs_pool_find_name(u32 uid, const char *name)
{
	u32 i;

	for (i = 0; i < kvs_reg.limits.max_pools; i++) {
		struct kvs_pool *pool = kvs_reg.slots[i];

		if (pool && pool->uid == uid &&
		    !strncmp(pool->name, name, KVS_NAME_MAX))
			return pool;
	}
	return NULL;
}

static struct kvs_pool *kvs_pool_find_id(u32 id)
{
	u32 i;

	for (i = 0; i < kvs_reg.limits.max_pools; i++) {
		struct kvs_pool *pool = kvs_reg.slots[i];

		if (pool && pool->id == id)
			return pool;
	}
	return NULL;
}

static int kvs_pool_validate(struct kvs_pool_create *req)
{
	u32 i;

	for (i = 0; i < ARRAY_SIZE(req->reserved); i++)
		if (req->reserved[i])
			return -EINVAL;
	if (req->pad || req->pool_id || (req->flags & ~KVS_POOL_VALID))
		return -EINVAL;
	if (!kvs_name_valid(req->name))
		return -EINVAL;
	if (!req->n_pages || req->n_pages > kvs_reg.limits.max_pool_pages)
		return -EINVAL;
	if (req->mode & ~0777u)
		return -EINVAL;
	if (req->max_pages_per_file > req->n_pages)
		return -EINVAL;
	if (req->mem_fd < -1)
		return -EBADF;
	/* Device memory is what the pool is for: there is no pool without it. */
	if ((req->flags & KVS_POOL_DEVICE_MEM) && req->mem_fd < 0)
		return -EINVAL;
	return kvs_geometry_check(&req->geom);
}

static struct kvs_pool *kvs_pool_alloc(const struct kvs_pool_create *req,
				       const struct kvs_cred *cred)
{
	struct kvs_pool *pool = kzalloc(sizeof(*pool), GFP_KERNEL_ACCOUNT);

	if (!pool)
		return NULL;
	mutex_init(&pool->lock);
	refcount_set(&pool->ref, 1);
	INIT_LIST_HEAD(&pool->clients);
	memcpy(pool->name, req->name, KVS_NAME_MAX);
	pool->uid = cred->uid;
	pool->gid = cred->gid;
	pool->mode = req->mode;
	pool->flags = req->flags;
	pool->n_pages = req->n_pages;
	pool->max_per_file = req->max_pages_per_file ?: req->n_pages;
	pool->geom = req->geom;
	pool->seed = kvs_host_random();
	atomic64_inc(&kvs_objects);

	pool->pages = kvcalloc(pool->n_pages, sizeof(*pool->pages),
			       GFP_KERNEL_ACCOUNT);
	if (!pool->pages || kvs_index_alloc(pool)) {
		kvs_pool_free(pool);
		return NULL;
	}
	kvs_arb_init_pages(pool);
	return pool;
}

/*
 * Charge a new pool to its owner before building it: a user at its limit
 * must not make the arbiter allocate the bookkeeping first.
 */
static struct kvs_user *kvs_pool_charge(const struct kvs_pool_create *req,
					const struct kvs_cred *cred, int *err)
{
	struct kvs_user *u = kvs_user_get(cred->uid);

	*err = -ENOMEM;
	if (!u)
		return NULL;
	*err = kvs_user_charge_pool(u, req->n_pages, !cred->admin);
	if (*err) {
		kvs_user_put(u);
		return NULL;
	}
	return u;
}

int kvs_pool_create(struct kvs_pool_create *req, const struct kvs_cred *cred)
{
	struct kvs_pool *pool;
	struct kvs_user *user;
	void *mem = NULL;
	u64 bytes;
	int ret, slot;

	ret = kvs_pool_validate(req);
	if (ret)
		return ret;
	user = kvs_pool_charge(req, cred, &ret);
	if (!user)
		return ret;
	if (req->mem_fd >= 0) {
		/* Both bounded (pages by KVS_MAX_POOL_PAGES, bytes by 1 GiB). */
		bytes = req->n_pages * req->geom.page_bytes;
		ret = kvs_host_mem_get(req->mem_fd, bytes,
				       req->flags & KVS_POOL_DEVICE_MEM ?
				       KVS_MEM_DEVICE : KVS_MEM_HOST, &mem);
		if (ret)
			goto uncharge;
	}
	/* Build the pool outside the registry lock: 1M pages take a while. */
	pool = kvs_pool_alloc(req, cred);
	if (!pool) {
		if (mem)
			kvs_host_mem_put(mem);
		ret = -ENOMEM;
		goto uncharge;
	}
	pool->mem = mem;
	/* From here the pool's last put uncharges. */
	pool->user = user;

	mutex_lock(&kvs_reg.lock);
	ret = -EEXIST;
	if (kvs_pool_find_name(cred->uid, req->name))
		goto unlock;
	ret = -ENOSPC;
	for (slot = 0; slot < (int)kvs_reg.limits.max_pools; slot++)
		if (!kvs_reg.slots[slot])
			break;
	if (slot == (int)kvs_reg.limits.max_pools)
		goto unlock;
	pool->id = kvs_reg.next_id++;
	if (!kvs_reg.next_id)		/* 0 means "the attached pool" */
		kvs_reg.next_id = 1;
	kvs_reg.slots[slot] = pool;
	kvs_reg.n_pools++;
	req->pool_id = pool->id;
	ret = 0;
unlock:
	mutex_unlock(&kvs_reg.lock);
	if (ret)
		kvs_pool_put(pool);
	return ret;
uncharge:
	kvs_user_uncharge_pool(user, req->n_pages);
	kvs_user_put(user);
	return ret;
}

/*
 * The user what a client will hold is charged to, in *@user (a reference
 * for the client): none for an admin.  0 or -ENOMEM.
 */
static int kvs_holder_user(const struct kvs_cred *cred, struct kvs_user **user)
{
	*user = NULL;
	if (cred->admin)
		return 0;
	*user = kvs_user_get(cred->uid);
	return *user ? 0 : -ENOMEM;
}

/* Unix permission bits of the caller's class: owner, group or other. */
static bool kvs_pool_allows(const struct kvs_pool *pool,
			    const struct kvs_cred *cred, u32 want)
{
	u32 mode = pool->mode;

	if (cred->admin)
		return true;
	if (cred->uid == pool->uid)
		mode >>= 6;
	else if (kvs_host_in_group(cred, pool->gid))
		mode >>= 3;
	return (mode & want) == want;
}

#define KVS_MAY_READ	4
#define KVS_MAY_WRITE	2

int kvs_pool_attach(struct kvs_client *cl, struct kvs_pool_attach *req,
		    struct kvs_call *call)
{
	const struct kvs_cred *cred = call->cred;
	struct kvs_user *user = NULL;
	struct kvs_pool *pool;
	u32 i;
	int ret;

	for (i = 0; i < ARRAY_SIZE(req->reserved); i++)
		if (req->reserved[i])
			return -EINVAL;
	if ((req->flags & ~KVS_ATTACH_VALID) || req->mem_fd || req->pool_id ||
	    req->pool_flags ||
	    req->max_pages_per_file || req->n_pages ||
	    memchr_inv(&req->geom, 0, sizeof(req->geom)))
		return -EINVAL;
	if (!kvs_name_valid(req->name))
		return -EINVAL;
	ret = kvs_holder_user(cred, &user);
	if (ret)
		return ret;

	mutex_lock(&kvs_reg.lock);
	ret = -EBUSY;
	if (cl->pool)
		goto unlock;
	ret = -ENOENT;
	pool = kvs_pool_find_name(req->owner, req->name);
	if (!pool)
		goto unlock;
	ret = -EACCES;
	if (!kvs_pool_allows(pool, cred, KVS_MAY_READ | KVS_MAY_WRITE))
		goto unlock;
	ret = -EINVAL;
	if ((pool->flags & KVS_POOL_NS_PER_UID) && req->ns)
		goto unlock;
	ret = -ENODATA;
	if ((req->flags & KVS_ATTACH_MEM_FD) && !pool->mem)
		goto unlock;

	refcount_inc(&pool->ref);
	cl->id = kvs_reg.next_client_id++;
	/* 0 means "no owner" and U32_MAX is PUBLISH's marker. */
	if (kvs_reg.next_client_id == U32_MAX)
		kvs_reg.next_client_id = 1;
	cl->ns = pool->flags & KVS_POOL_NS_PER_UID ? cred->uid : req->ns;
	cl->uid = cred->uid;
	cl->quota = pool->max_per_file;
	cl->user = user;
	user = NULL;
	mutex_lock(&pool->lock);
	list_add_tail(&cl->node, &pool->clients);
	pool->n_files++;
	mutex_unlock(&pool->lock);
	/* Other threads of the file see the pool only once it is set up. */
	smp_store_release(&cl->pool, pool);

	req->mem_fd = -1;
	req->pool_id = pool->id;
	req->max_pages_per_file = pool->max_per_file;
	req->n_pages = pool->n_pages;
	req->geom = pool->geom;
	req->pool_flags = pool->flags;
	if (req->flags & KVS_ATTACH_MEM_FD) {
		kvs_host_mem_dup(pool->mem);
		call->mem_out = pool->mem;
	}
	ret = 0;
unlock:
	mutex_unlock(&kvs_reg.lock);
	kvs_user_put(user);
	return ret;
}

/*
 * Bind an event channel's client to pool @pool_id, as ATTACH binds a file
 * (quota max_pages_per_file, charged to the opener unless admin), and
 * make it the pool's channel.  Only the owner or an admin may.
 */
int kvs_pool_attach_chan(struct kvs_chan *ch, u32 pool_id, const struct kvs_cred *cred)
{
	struct kvs_client *cl = ch->cl;
	struct kvs_user *user = NULL;
	struct kvs_pool *pool;
	int ret;

	ret = kvs_holder_user(cred, &user);
	if (ret)
		return ret;
	mutex_lock(&kvs_reg.lock);
	ret = -ENOENT;
	pool = pool_id ? kvs_pool_find_id(pool_id) : NULL;
	if (!pool)
		goto unlock;
	ret = -EPERM;
	if (!cred->admin && cred->uid != pool->uid)
		goto unlock;
	mutex_lock(&pool->lock);
	ret = -EBUSY;
	if (pool->chan) {
		mutex_unlock(&pool->lock);
		goto unlock;
	}
	refcount_inc(&pool->ref);
	cl->id = kvs_reg.next_client_id++;
	if (kvs_reg.next_client_id == U32_MAX)
		kvs_reg.next_client_id = 1;
	cl->quota = pool->max_per_file;
	cl->user = user;
	user = NULL;
	cl->pool = pool;
	ch->pool = pool;
	list_add_tail(&cl->node, &pool->clients);
	pool->n_files++;
	pool->chan = ch;
	mutex_unlock(&pool->lock);
	ret = 0;
unlock:
	mutex_unlock(&kvs_reg.lock);
	kvs_user_put(user);
	return ret;
}

/* Take @pool's name out of the registry; its reference goes to the caller. */
static void kvs_reg_unlink(struct kvs_pool *pool)
{
	int slot;

	lockdep_assert_held(&kvs_reg.lock);
	for (slot = 0; kvs_reg.slots[slot] != pool; slot++)
		;
	kvs_reg.slots[slot] = NULL;
	kvs_reg.n_pools--;
}

int kvs_pool_destroy(const struct kvs_pool_destroy *req,
		     const struct kvs_cred *cred)
{
	struct kvs_pool *pool;
	int ret;

	if (req->flags || req->reserved[0] || req->reserved[1])
		return -EINVAL;
	mutex_lock(&kvs_reg.lock);
	ret = -ENOENT;
	pool = req->pool_id ? kvs_pool_find_id(req->pool_id) : NULL;
	if (!pool)
		goto unlock;
	ret = -EPERM;
	if (!cred->admin && cred->uid != pool->uid)
		goto unlock;
	kvs_reg_unlink(pool);
	mutex_lock(&pool->lock);
	kvs_chan_pool_gone(pool);
	mutex_unlock(&pool->lock);
	ret = 0;
unlock:
	mutex_unlock(&kvs_reg.lock);
	if (!ret)
		kvs_pool_put(pool);
	return ret;
}

/*
 * The undo of a CREATE: the pool goes as DESTROY would take it (files
 * that attached meanwhile keep it until they close).  Only the pool this
 * CREATE made: its id, owner and name must still match.
 */
void kvs_pool_undo_create(const struct kvs_pool_create *req,
			  const struct kvs_cred *cred)
{
	struct kvs_pool *pool;

	mutex_lock(&kvs_reg.lock);
	pool = req->pool_id ? kvs_pool_find_id(req->pool_id) : NULL;
	if (pool && (pool->uid != cred->uid ||
		     strncmp(pool->name, req->name, KVS_NAME_MAX)))
		pool = NULL;
	if (pool)
		kvs_reg_unlink(pool);
	mutex_unlock(&kvs_reg.lock);
	if (pool)
		kvs_pool_put(pool);
}

static void kvs_pool_describe(struct kvs_pool *pool, struct kvs_pool_desc *d)
{
	memset(d, 0, sizeof(*d));
	memcpy(d->name, pool->name, KVS_NAME_MAX);
	d->pool_id = pool->id;
	d->mode = pool->mode;
	d->uid = pool->uid;
	d->gid = pool->gid;
	d->n_pages = pool->n_pages;
	d->geom = pool->geom;
	d->flags = pool->flags;
	d->max_pages_per_file = pool->max_per_file;
	d->has_mem_fd = !!pool->mem;
	mutex_lock(&pool->lock);
	d->n_files = pool->n_files;
	mutex_unlock(&pool->lock);
}

int kvs_pool_list(struct kvs_pool_list *req, struct kvs_call *call)
{
	struct kvs_pool_desc *descs = NULL;
	u32 i, n = 0, cap = req->count;
	int ret = 0;

	if (req->flags || req->reserved[0] || req->reserved[1])
		return -EINVAL;
	if (cap > kvs_reg.limits.max_pools)
		cap = kvs_reg.limits.max_pools;
	if (cap) {
		descs = kvmalloc_array(cap, sizeof(*descs), GFP_KERNEL);
		if (!descs)
			return -ENOMEM;
	}
	mutex_lock(&kvs_reg.lock);
	/* Slots are reused: walk in id order for a stable listing. */
	for (i = 0; i < kvs_reg.limits.max_pools; i++) {
		struct kvs_pool *pool = kvs_reg.slots[i];
		u32 j;

		if (!pool)
			continue;
		if (n < cap) {
			for (j = n; j > 0 && descs[j - 1].pool_id > pool->id; j--)
				descs[j] = descs[j - 1];
			kvs_pool_describe(pool, &descs[j]);
		}
		n++;
	}
	mutex_unlock(&kvs_reg.lock);
	if (min(n, cap))
		ret = call->copy_out(call, req->pools, descs,
				     (u64)min(n, cap) * sizeof(*descs));
	kvfree(descs);
	req->count = n;
	return ret;
}

/*
 * The pool a stats or pages request names: the attached pool for id 0,
 * else any pool the caller may read.  Returns it with a reference.
 */
struct kvs_pool *kvs_pool_get_readable(struct kvs_client *cl, u32 pool_id,
				       const struct kvs_cred *cred, int *err)
{
	/* Pairs with the release in kvs_pool_attach(). */
	struct kvs_pool *pool = smp_load_acquire(&cl->pool);

	if (!pool_id) {
		if (!pool) {
			*err = -EBADFD;
			return NULL;
		}
		refcount_inc(&pool->ref);
		return pool;
	}
	mutex_lock(&kvs_reg.lock);
	pool = kvs_pool_find_id(pool_id);
	if (!pool) {
		*err = -ENOENT;
	} else if (!kvs_pool_allows(pool, cred, KVS_MAY_READ)) {
		*err = -EACCES;
		pool = NULL;
	} else {
		refcount_inc(&pool->ref);
	}
	mutex_unlock(&kvs_reg.lock);
	return pool;
}

void kvs_fill_info(struct kvs_info *info)
{
	info->abi_version = KVS_ABI_VERSION;
	info->features = kvs_reg.limits.features;
	info->max_pool_pages = kvs_reg.limits.max_pool_pages;
	info->max_batch = KVS_MAX_BATCH;
	info->max_pools = kvs_reg.limits.max_pools;
	mutex_lock(&kvs_reg.lock);
	info->n_pools = kvs_reg.n_pools;
	mutex_unlock(&kvs_reg.lock);
	info->n_objects = kvs_core_objects();
}
