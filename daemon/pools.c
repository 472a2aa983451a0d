// SPDX-License-Identifier: GPL-2.0
/*
 * The configured pools: their memory is made here (mem.c, mem_cuda.c) and
 * registered with the arbiter, which keeps the fd and hands it to every
 * attacher.  In socket mode the arbiter is the core linked into this
 * process; in module mode it is /dev/kvshare, where the pools outlive this
 * process until it destroys them (at exit) and their last user closes.
 *
 * Also the daemon's own view of the arbiter (kvsd_self_cmd), which the
 * metrics and the connection log use.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/fsuid.h>
#include <sys/ioctl.h>

#include "core.h"
#include "kvshared.h"

/* Our own requests hold real addresses in their pointer fields. */
static int self_copy_in(struct kvs_call *call, void *dst, __u64 src, __u64 len)
{
	(void)call;
	if (len && !src)
		return -EFAULT;
	memcpy(dst, (const void *)(uintptr_t)src, len);
	return 0;
}

static int self_copy_out(struct kvs_call *call, __u64 dst, const void *src, __u64 len)
{
	(void)call;
	if (len && !dst)
		return -EFAULT;
	memcpy((void *)(uintptr_t)dst, src, len);
	return 0;
}

static int core_cmd(struct kvsd *d, unsigned int cmd, void *arg,
		    const struct kvs_cred *cred)
{
	union kvs_cmd_buf buf;
	struct kvs_call call = {
		.cred = cred,
		.copy_in = self_copy_in,
		.copy_out = self_copy_out,
	};
	size_t size = kvs_cmd_size(cmd);
	int ret;

	if (!size || size > sizeof(buf))
		return -ENOTTY;
	memcpy(&buf, arg, size);
	ret = kvs_cmd(d->self, cmd, &buf, &call);
	if (call.mem_out)		/* never asked for; do not leak it */
		kvs_host_mem_put(call.mem_out);
	if (!ret)
		memcpy(arg, &buf, size);
	return ret;
}

int kvsd_self_cmd(struct kvsd *d, unsigned int cmd, void *arg)
{
	struct kvs_cred cred = { .uid = getuid(), .gid = getgid(), .admin = 1 };

	if (d->mode == KVSD_MODE_MODULE)
		return ioctl(d->dev_fd, cmd, arg) < 0 ? -errno : 0;
	return core_cmd(d, cmd, arg, &cred);
}

/* The list can grow between counting and fetching: fetch until it fits. */
int kvsd_pool_list(struct kvsd *d, struct kvs_pool_desc **out, uint32_t *n)
{
	struct kvs_pool_desc *descs = NULL, *p;
	struct kvs_pool_list req;
	uint32_t cap = 0;
	int ret;

	for (;;) {
		memset(&req, 0, sizeof(req));
		req.count = cap;
		req.pools = (uintptr_t)descs;
		ret = kvsd_self_cmd(d, KVS_IOC_POOL_LIST, &req);
		if (ret || req.count <= cap)
			break;
		cap = req.count;
		p = realloc(descs, (size_t)cap * sizeof(*descs));
		if (!p) {
			ret = -ENOMEM;
			break;
		}
		descs = p;
	}
	if (ret) {
		free(descs);
		return ret;
	}
	*out = descs;
	*n = req.count;
	return 0;
}

void kvsd_pool_name(struct kvsd *d, uint32_t id, char *buf)
{
	struct kvs_pool_desc *descs = NULL;
	uint32_t i, n = 0;

	snprintf(buf, KVS_NAME_MAX, "#%u", id);
	if (kvsd_pool_list(d, &descs, &n))
		return;
	for (i = 0; i < n; i++)
		if (descs[i].pool_id == id)
			snprintf(buf, KVS_NAME_MAX, "%s", descs[i].name);
	free(descs);
}

/*
 * The module takes the owner from the caller's fsuid/fsgid: switch them
 * for the one call (root only; others can only create pools as
 * themselves).  setfs*id report failure only by not changing.
 */
static int module_create(struct kvsd *d, const struct kvsd_pool_cfg *pc,
			 struct kvs_pool_create *req)
{
	uid_t old_uid = setfsuid(-1);
	gid_t old_gid = setfsgid(-1);
	int ret;

	if (pc->gid >= 0 && (setfsgid(pc->gid), (int64_t)setfsgid(-1) != pc->gid))
		return -EPERM;
	if (pc->uid >= 0 && (setfsuid(pc->uid), (int64_t)setfsuid(-1) != pc->uid)) {
		setfsgid(old_gid);
		return -EPERM;
	}
	ret = ioctl(d->dev_fd, KVS_IOC_POOL_CREATE, req) < 0 ? -errno : 0;
	setfsuid(old_uid);
	setfsgid(old_gid);
	return ret;
}

/*
 * A pool of this name already in the module is ours from an earlier run
 * (the module keeps pools, with their memory, after the daemon exits):
 * adopt it if it is the same pool, so that clients keep working.
 */
static int module_adopt(struct kvsd *d, const struct kvsd_pool_cfg *pc,
			const struct kvs_pool_create *req, uint32_t *id)
{
	struct kvs_pool_desc *descs = NULL;
	uint32_t i, n = 0;
	int ret = -EEXIST;

	if (kvsd_pool_list(d, &descs, &n))
		return -EEXIST;
	for (i = 0; i < n; i++) {
		const struct kvs_pool_desc *p = &descs[i];

		if (strcmp(p->name, pc->name))
			continue;
		if (p->n_pages == req->n_pages &&
		    p->geom.n_layers == req->geom.n_layers &&
		    p->geom.n_kv_heads == req->geom.n_kv_heads &&
		    p->geom.head_dim == req->geom.head_dim &&
		    p->geom.tokens_per_page == req->geom.tokens_per_page &&
		    p->geom.dtype == req->geom.dtype &&
		    p->has_mem_fd == (pc->mem != KVSD_MEM_NONE)) {
			*id = p->pool_id;
			ret = 0;
		}
		break;
	}
	free(descs);
	return ret;
}

static int arbiter_create(struct kvsd *d, const struct kvsd_pool_cfg *pc,
			  struct kvs_pool_create *req)
{
	struct kvs_cred cred = {
		.uid = pc->uid >= 0 ? (uint32_t)pc->uid : getuid(),
		.gid = pc->gid >= 0 ? (uint32_t)pc->gid : getgid(),
		.admin = 1,
	};

	if (d->mode == KVSD_MODE_MODULE)
		return module_create(d, pc, req);
	return core_cmd(d, KVS_IOC_POOL_CREATE, req, &cred);
}

static const char *create_hint(const struct kvsd *d, const struct kvsd_pool_cfg *pc,
			       int err)
{
	switch (err) {
	case -EINVAL:
		if (d->mode == KVSD_MODE_MODULE && pc->mem == KVSD_MEM_CUDA)
			return " (the module takes only regular-file memory; "
			       "memory=cuda needs --mode socket)";
		if (d->mode == KVSD_MODE_MODULE)
			return " (above the module's max_pool_pages?)";
		return "";
	case -ENOSPC:
		return " (max_pools reached)";
	case -EEXIST:
		return " (a different pool of this name exists in the module)";
	case -EPERM:
		return " (uid=/gid= need root in module mode)";
	}
	return "";
}

/* "512 KiB", "8 GiB": sizes as a person reads them. */
static void human_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = { "bytes", "KiB", "MiB", "GiB", "TiB", "PiB" };
	unsigned int u = 0;

	while (u + 1 < ARRAY_SIZE(units) && bytes >= 1024 &&
	       !(bytes & 1023)) {
		bytes >>= 10;
		u++;
	}
	snprintf(buf, len, "%llu %s", (unsigned long long)bytes, units[u]);
}

static void log_created(const struct kvsd_pool_cfg *pc,
			const struct kvs_pool_create *req,
			const struct kvsd_mem *mem, bool adopted)
{
	char memdesc[96] = "no memory", size[32];

	if (pc->mem != KVSD_MEM_NONE) {
		human_size(mem->bytes, size, sizeof(size));
		snprintf(memdesc, sizeof(memdesc), "memory=%s %s", kvsd_mem_name(pc->mem),
			 size);
	}
	kvsd_log("pool '%s' %s: id %u, %llu pages of %llu bytes "
		 "(%s, %u layers, %u kv heads, head dim %u, %u tokens), %s, "
		 "mode %04o%s", pc->name, adopted ? "adopted from the module" : "created",
		 req->pool_id, (unsigned long long)req->n_pages,
		 (unsigned long long)req->geom.page_bytes,
		 kvsd_dtype_name(req->geom.dtype), req->geom.n_layers,
		 req->geom.n_kv_heads, req->geom.head_dim, req->geom.tokens_per_page,
		 adopted ? "memory as registered before" : memdesc, pc->mode,
		 pc->flags & KVS_POOL_NS_PER_UID ? ", namespace per uid" : "");
}

static void pool_create(struct kvsd *d, const struct kvsd_pool_cfg *pc)
{
	struct kvs_pool_create req;
	struct kvsd_mem mem;
	struct kvsd_pool *p;
	bool adopted = false;
	char err[384];
	int ret;

	memset(&req, 0, sizeof(req));
	memcpy(req.name, pc->name, sizeof(req.name));
	req.n_pages = pc->n_pages;
	req.geom = pc->geom;
	req.geom.page_bytes = 0;
	req.mode = pc->mode;
	req.flags = pc->flags;
	req.max_pages_per_file = pc->quota;

	ret = kvsd_mem_create(pc, kvsd_page_bytes(&pc->geom), &mem, err, sizeof(err));
	if (ret) {
		kvsd_log("pool '%s': memory=%s: %s", pc->name, kvsd_mem_name(pc->mem), err);
		return;
	}
	req.mem_fd = mem.fd;
	ret = arbiter_create(d, pc, &req);
	if (ret == -EEXIST && d->mode == KVSD_MODE_MODULE &&
	    !module_adopt(d, pc, &req, &req.pool_id)) {
		req.geom.page_bytes = kvsd_page_bytes(&pc->geom);
		adopted = true;
		ret = 0;
	}
	/* The arbiter holds its own reference on the memory now. */
	kvsd_mem_close(&mem);
	if (ret) {
		kvsd_log("pool '%s': creating it failed: %s%s", pc->name,
			 strerror(-ret), create_hint(d, pc, ret));
		return;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		kvsd_log("pool '%s': out of memory", pc->name);
		return;
	}
	memcpy(p->name, pc->name, sizeof(p->name));
	p->pool_id = req.pool_id;
	p->next = d->pools;
	d->pools = p;
	log_created(pc, &req, &mem, adopted);
}

void kvsd_pools_create(struct kvsd *d)
{
	unsigned int i;

	for (i = 0; i < d->cfg->n_pools; i++)
		pool_create(d, &d->cfg->pools[i]);
}

void kvsd_pools_destroy(struct kvsd *d)
{
	struct kvsd_pool *p, *next;

	for (p = d->pools; p; p = next) {
		next = p->next;
		if (d->mode == KVSD_MODE_MODULE) {
			struct kvs_pool_destroy req = { .pool_id = p->pool_id };
			int ret = kvsd_self_cmd(d, KVS_IOC_POOL_DESTROY, &req);

			if (ret && ret != -ENOENT)
				kvsd_log("pool '%s': destroying it failed: %s", p->name,
					 strerror(-ret));
			else if (!ret)
				kvsd_log("pool '%s' destroyed (it goes when its last "
					 "user closes)", p->name);
		}
		free(p);
	}
	d->pools = NULL;
}
