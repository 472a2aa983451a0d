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
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/magic.h>
#include <linux/securebits.h>
#include <sys/fsuid.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include "core.h"
#include "kvshared.h"

/* Our own requests hold real addresses in their pointer fields. */
int kvsd_self_copy_in(struct kvs_call *call, void *dst, __u64 src, __u64 len)
{
	(void)call;
	if (len && !src)
		return -EFAULT;
	memcpy(dst, (const void *)(uintptr_t)src, len);
	return 0;
}

int kvsd_self_copy_out(struct kvs_call *call, __u64 dst, const void *src,
		       __u64 len)
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
		.copy_in = kvsd_self_copy_in,
		.copy_out = kvsd_self_copy_out,
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

/* The owner a configured pool must have: its uid=/gid=, else ours. */
static uint32_t pool_uid(const struct kvsd *d, const struct kvsd_pool_cfg *pc)
{
	if (pc->uid >= 0)
		return pc->uid;
	/* The module's owner is the opener's fsuid, which follows euid. */
	return d->mode == KVSD_MODE_MODULE ? geteuid() : getuid();
}

static uint32_t pool_gid(const struct kvsd *d, const struct kvsd_pool_cfg *pc)
{
	if (pc->gid >= 0)
		return pc->gid;
	return d->mode == KVSD_MODE_MODULE ? getegid() : getgid();
}

/*
 * A new /dev/kvshare file opened as the pool's owner: the module judges
 * every command, CREATE's owner included, by the credentials the file was
 * opened with.  fsuid/fsgid are switched for the open() alone (root only;
 * others can only create pools as themselves).  SECBIT_NO_SETUID_FIXUP
 * keeps our capabilities across the switch, so that the device's own mode
 * does not have to admit the owner, and the file stays admin (the daemon's
 * pools are not held to per-user limits).  setfs*id report failure only by
 * not changing.  The fd, or -errno.
 */
static int module_open_as(struct kvsd *d, const struct kvsd_pool_cfg *pc)
{
	uid_t old_uid = setfsuid(-1);
	gid_t old_gid = setfsgid(-1);
	int bits = prctl(PR_GET_SECUREBITS), fd, ret = 0;

	if (bits >= 0)
		prctl(PR_SET_SECUREBITS, bits | SECBIT_NO_SETUID_FIXUP);
	if (pc->gid >= 0 && (setfsgid(pc->gid), (int64_t)setfsgid(-1) != pc->gid))
		ret = -EPERM;
	if (!ret && pc->uid >= 0 &&
	    (setfsuid(pc->uid), (int64_t)setfsuid(-1) != pc->uid))
		ret = -EPERM;
	fd = ret ? ret : open(d->cfg->device, O_RDWR | O_CLOEXEC);
	if (fd < 0 && !ret)
		ret = -errno;
	setfsuid(old_uid);
	setfsgid(old_gid);
	if (bits >= 0)
		prctl(PR_SET_SECUREBITS, bits);
	return ret ? ret : fd;
}

static int module_create(struct kvsd *d, const struct kvsd_pool_cfg *pc,
			 struct kvs_pool_create *req)
{
	int fd, ret;

	if (pc->uid < 0 && pc->gid < 0)
		return ioctl(d->dev_fd, KVS_IOC_POOL_CREATE, req) < 0 ? -errno : 0;
	fd = module_open_as(d, pc);
	if (fd < 0)
		return fd;
	ret = ioctl(fd, KVS_IOC_POOL_CREATE, req) < 0 ? -errno : 0;
	close(fd);
	return ret;
}

/* The KVS_POOL_* flags a pool of @pc is created with. */
static uint32_t pool_flags(const struct kvsd_pool_cfg *pc)
{
	return pc->flags | (pc->mem == KVSD_MEM_CUDA ? KVS_POOL_DEVICE_MEM : 0);
}

/* Why @p is not the pool @pc asks for, into @why; false if it is. */
static bool pool_differs(const struct kvsd *d, const struct kvsd_pool_cfg *pc,
			 const struct kvs_pool_desc *p, char *why, size_t len)
{
	const struct kvs_geometry *g = &p->geom;

	if (p->n_pages != pc->n_pages || g->n_layers != pc->geom.n_layers ||
	    g->n_kv_heads != pc->geom.n_kv_heads || g->head_dim != pc->geom.head_dim ||
	    g->tokens_per_page != pc->geom.tokens_per_page || g->dtype != pc->geom.dtype)
		snprintf(why, len, "its geometry differs (%llu pages, %u layers, "
			 "%u kv heads, head dim %u, %u tokens, %s)",
			 (unsigned long long)p->n_pages, g->n_layers, g->n_kv_heads,
			 g->head_dim, g->tokens_per_page, kvsd_dtype_name(g->dtype));
	else if (!p->has_mem_fd != (pc->mem == KVSD_MEM_NONE))
		snprintf(why, len, "it %s memory", p->has_mem_fd ? "has" : "has no");
	else if (p->mode != pc->mode || p->gid != pool_gid(d, pc))
		snprintf(why, len, "its mode %04o or gid %u differ (want %04o, gid %u)",
			 p->mode, p->gid, pc->mode, pool_gid(d, pc));
	else if (p->flags != pool_flags(pc) ||
		 p->max_pages_per_file != (pc->quota ? pc->quota : p->n_pages))
		snprintf(why, len, "its flags 0x%x or quota %u differ", p->flags,
			 p->max_pages_per_file);
	else
		return false;
	return true;
}

/*
 * The memory a pool hands its attachers is what this daemon would have
 * made: a memfd of the configured kind, sealed against shrinking, long
 * enough.  An ATTACH on a file of our own, naming the owner we expect.
 */
static bool pool_mem_differs(struct kvsd *d, const struct kvsd_pool_cfg *pc,
			     uint32_t owner, char *why, size_t len)
{
	struct kvs_pool_attach at;
	struct statfs sfs;
	struct stat st;
	int fd, seals;
	bool huge;

	if (pc->mem == KVSD_MEM_NONE)
		return false;
	fd = open(d->cfg->device, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		snprintf(why, len, "%s: %s", d->cfg->device, strerror(errno));
		return true;
	}
	memset(&at, 0, sizeof(at));
	memcpy(at.name, pc->name, sizeof(at.name));
	at.owner = owner;
	at.flags = KVS_ATTACH_MEM_FD;
	if (ioctl(fd, KVS_IOC_POOL_ATTACH, &at)) {
		snprintf(why, len, "attaching it to check its memory: %s",
			 strerror(errno));
		close(fd);
		return true;
	}
	close(fd);		/* detaches; the memory fd stays ours */
	if (pc->mem == KVSD_MEM_CUDA) {
		/* A driver handle: the module checked what it could at CREATE. */
		if (!(at.pool_flags & KVS_POOL_DEVICE_MEM))
			snprintf(why, len, "its memory is not device memory");
		else
			why[0] = '\0';
		close(at.mem_fd);
		return why[0];
	}
	if (at.pool_flags & KVS_POOL_DEVICE_MEM) {
		snprintf(why, len, "its memory is device memory, not memory=%s",
			 kvsd_mem_name(pc->mem));
		close(at.mem_fd);
		return true;
	}
	huge = !fstatfs(at.mem_fd, &sfs) && sfs.f_type == HUGETLBFS_MAGIC;
	seals = fcntl(at.mem_fd, F_GET_SEALS);
	if (fstat(at.mem_fd, &st) || seals < 0 || !(seals & F_SEAL_SHRINK))
		snprintf(why, len, "its memory is not a memfd sealed against shrinking");
	else if (huge != (pc->mem == KVSD_MEM_HUGETLB))
		snprintf(why, len, "its memory is %s, not memory=%s",
			 huge ? "hugetlb" : "not hugetlb", kvsd_mem_name(pc->mem));
	else if ((uint64_t)st.st_size < pc->n_pages * kvsd_page_bytes(&pc->geom))
		snprintf(why, len, "its memory is only %lld bytes", (long long)st.st_size);
	else
		why[0] = '\0';
	close(at.mem_fd);
	return why[0];
}

/*
 * CREATE said EEXIST: the pool's owner already has a pool of this name
 * (names are scoped by owner), normally ours from an earlier run (the
 * module keeps pools, with their memory, after the daemon exits).  Adopt
 * it only if it is owned by the uid we expect and is the pool we would
 * have created; anything else is refused (the caller exits non-zero), as
 * clients would otherwise attach to a pool whose mode, gid or memory is
 * not what the configuration says.  0, or -EEXIST after logging why.
 */
static int module_adopt(struct kvsd *d, const struct kvsd_pool_cfg *pc,
			const struct kvs_pool_create *req, uint32_t *id)
{
	struct kvs_pool_desc *descs = NULL;
	uint32_t i, n = 0, owner = pool_uid(d, pc);
	const struct kvs_pool_desc *p = NULL;
	char why[256], found[32] = "none";
	int ret;

	(void)req;
	ret = kvsd_pool_list(d, &descs, &n);
	if (ret) {
		kvsd_log("pool '%s': refusing to adopt it: listing the module's pools: %s",
			 pc->name, strerror(-ret));
		return -EEXIST;
	}
	for (i = 0; i < n; i++) {
		if (strcmp(descs[i].name, pc->name))
			continue;
		snprintf(found, sizeof(found), "uid %u", descs[i].uid);
		if (descs[i].uid == owner) {
			p = &descs[i];
			break;
		}
	}
	if (!p)
		snprintf(why, sizeof(why), "no pool of that name is owned by the "
			 "expected owner");
	else if (!pool_differs(d, pc, p, why, sizeof(why)) &&
		 !pool_mem_differs(d, pc, owner, why, sizeof(why)))
		*id = p->pool_id;
	free(descs);
	if (*id)
		return 0;
	kvsd_log("pool '%s': refusing to adopt the pool of that name in the module "
		 "(owner %s, expected uid %u): %s", pc->name, found, owner, why);
	return -EEXIST;
}

static int arbiter_create(struct kvsd *d, const struct kvsd_pool_cfg *pc,
			  struct kvs_pool_create *req)
{
	struct kvs_cred cred = {
		.uid = pool_uid(d, pc),
		.gid = pool_gid(d, pc),
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
		if (pc->mem == KVSD_MEM_CUDA && d->mode == KVSD_MODE_MODULE)
			return " (a kvshare.ko older than this kvshared does not "
			       "know KVS_POOL_DEVICE_MEM; or the driver's handle is "
			       "a kind of file the arbiter refuses: docs/gpu.md)";
		if (pc->mem == KVSD_MEM_CUDA)
			return " (the driver's handle is a kind of file the "
			       "arbiter refuses: docs/gpu.md)";
		if (d->mode == KVSD_MODE_MODULE)
			return " (above the module's max_pool_pages?)";
		return "";
	case -EPERM:
		if (d->mode == KVSD_MODE_MODULE && (pc->uid >= 0 || pc->gid >= 0))
			return " (uid=/gid= need root in module mode)";
		return " (the memory is not sealed against shrinking)";
	case -ERANGE:
		return " (the memory is shorter than the pool)";
	case -ENOSPC:
		return " (max_pools reached)";
	case -EDQUOT:
		return " (a per-user limit of the owner: see KVS_IOC_USER_LIMITS)";
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

static void log_created(const struct kvsd *d, const struct kvsd_pool_cfg *pc,
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
		 "owner %u:%u, mode %04o%s", pc->name,
		 adopted ? "adopted from the module" : "created",
		 req->pool_id, (unsigned long long)req->n_pages,
		 (unsigned long long)req->geom.page_bytes,
		 kvsd_dtype_name(req->geom.dtype), req->geom.n_layers,
		 req->geom.n_kv_heads, req->geom.head_dim, req->geom.tokens_per_page,
		 adopted ? "memory as registered before" : memdesc,
		 pool_uid(d, pc), pool_gid(d, pc), pc->mode,
		 pc->flags & KVS_POOL_NS_PER_UID ? ", namespace per uid" : "");
}

/*
 * 0 when the pool was created or adopted, or skipped for a reason of its
 * own (memory, limits: logged, the others are still served); -EEXIST
 * when the module holds a pool of its name that we must not adopt.
 */
static int pool_create(struct kvsd *d, const struct kvsd_pool_cfg *pc)
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
	req.flags = pool_flags(pc);
	req.max_pages_per_file = pc->quota;

	ret = kvsd_mem_create(pc, kvsd_page_bytes(&pc->geom), &mem, err, sizeof(err));
	if (ret) {
		kvsd_log("pool '%s': memory=%s: %s", pc->name, kvsd_mem_name(pc->mem), err);
		return 0;
	}
	req.mem_fd = mem.fd;
	ret = arbiter_create(d, pc, &req);
	/* The arbiter holds its own reference on the memory now. */
	kvsd_mem_close(&mem);
	if (ret == -EEXIST && d->mode == KVSD_MODE_MODULE) {
		req.pool_id = 0;
		if (module_adopt(d, pc, &req, &req.pool_id))
			return -EEXIST;
		req.geom.page_bytes = kvsd_page_bytes(&pc->geom);
		adopted = true;
		ret = 0;
	}
	if (ret) {
		kvsd_log("pool '%s': creating it failed: %s%s", pc->name,
			 strerror(-ret), create_hint(d, pc, ret));
		return 0;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		kvsd_log("pool '%s': out of memory", pc->name);
		return 0;
	}
	memcpy(p->name, pc->name, sizeof(p->name));
	p->pool_id = req.pool_id;
	p->next = d->pools;
	d->pools = p;
	log_created(d, pc, &req, &mem, adopted);
	return 0;
}

int kvsd_pools_create(struct kvsd *d)
{
	unsigned int i;
	int ret;

	for (i = 0; i < d->cfg->n_pools; i++) {
		ret = pool_create(d, &d->cfg->pools[i]);
		if (ret)
			return ret;
	}
	return 0;
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
