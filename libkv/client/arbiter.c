// SPDX-License-Identifier: MIT
/*
 * libkv's arbiter client: pick the transport once, at open (the module's
 * device by ioctl or io_uring, kvshared by its ring or its socket: see
 * arbiter_internal.h), and give all four one API through arb->ops.
 */
#include <errno.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "arbiter_internal.h"

#define KV_DEFAULT_DEVICE	"/dev/" KVS_DEVICE_NAME

/* The module when it is there, else the daemon: see kv_arbiter_open(). */
static const char *kv_default_path(void)
{
	const char *env = getenv("KVSHARE_ARBITER");

	if (env && *env)
		return env;
	if (!access(KV_DEFAULT_DEVICE, F_OK))
		return KV_DEFAULT_DEVICE;
	env = getenv("KVSHARE_SOCKET");
	return env && *env ? env : KVS_DAEMON_SOCKET;
}

int kv_arbiter_open(const char *path, unsigned int flags, struct kv_arbiter **out)
{
	struct kv_arbiter *arb;
	struct stat st;
	int ret;

	if (flags & ~KV_ARBITER_NO_URING)
		return -EINVAL;
	if (!path)
		path = kv_default_path();
	if (stat(path, &st))
		return -errno;
	arb = calloc(1, sizeof(*arb));
	if (!arb)
		return -ENOMEM;
	pthread_mutex_init(&arb->lock, NULL);
	ret = kv_timeout_from_env(&arb->timeout_ms);
	if (!ret && S_ISSOCK(st.st_mode))
		ret = kv_sock_open(arb, path, flags);
	else if (!ret)
		ret = kv_dev_open(arb, path, flags);
	if (ret) {
		pthread_mutex_destroy(&arb->lock);
		free(arb);
		return ret;
	}
	*out = arb;
	return 0;
}

void kv_arbiter_close(struct kv_arbiter *arb)
{
	if (!arb)
		return;
	arb->ops->close(arb);
	pthread_mutex_destroy(&arb->lock);
	free(arb);
}

int kv_arbiter_uses_uring(const struct kv_arbiter *arb)
{
	return arb->ops == &kv_uring_ops;
}

int kv_arbiter_uses_ring(const struct kv_arbiter *arb)
{
	return arb->ops == &kv_ring_ops;
}

int kv_arbiter_is_daemon(const struct kv_arbiter *arb)
{
	return arb->ops->daemon;
}

int kv_arbiter_set_timeout(struct kv_arbiter *arb, unsigned int ms)
{
	if (ms > KV_MAX_TIMEOUT_MS)
		return -EINVAL;
	pthread_mutex_lock(&arb->lock);
	__atomic_store_n(&arb->timeout_ms, ms, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&arb->lock);
	return 0;
}

/*
 * Without the lock, which a call holds for its whole exchange: the
 * calls read the field under it, this reader alone needs the atomic.
 */
unsigned int kv_arbiter_timeout(const struct kv_arbiter *arb)
{
	return __atomic_load_n(&arb->timeout_ms, __ATOMIC_RELAXED);
}

int kv_arbiter_broken(struct kv_arbiter *arb)
{
	int ret;

	pthread_mutex_lock(&arb->lock);
	ret = arb->dead ? (arb->broken ? arb->broken : -ENOTCONN) : 0;
	pthread_mutex_unlock(&arb->lock);
	return ret;
}

int kv_arbiter_call(struct kv_arbiter *arb, unsigned long cmd, void *arg)
{
	return arb->ops->call(arb, cmd, arg);
}

static int kv_copy_name(char *dst, size_t size, const char *src)
{
	size_t len = src ? strlen(src) : 0;

	if (len >= size)
		return -ENAMETOOLONG;
	memcpy(dst, src ? src : "", len + 1);
	return 0;
}

int kv_arbiter_remote_tier(struct kv_arbiter *arb, uint32_t owner,
			   const char *name, const char *tier, const char *ns,
			   int off, uint32_t *pool_id)
{
	struct kvs_remote_tier rt;
	int ret;

	if (!arb->ops->daemon)
		return -EOPNOTSUPP;	/* the module has no remote tier */
	memset(&rt, 0, sizeof(rt));
	if (!name)
		return -EINVAL;
	ret = kv_copy_name(rt.pool, sizeof(rt.pool), name);
	if (!ret)
		ret = kv_copy_name(rt.tier, sizeof(rt.tier), tier);
	if (!ret)
		ret = kv_copy_name(rt.ns, sizeof(rt.ns), ns);
	if (ret)
		return ret;
	rt.owner = owner;
	rt.flags = off ? KVS_REMOTE_TIER_OFF : 0;
	ret = kv_arbiter_call(arb, KVS_SOCK_REMOTE_TIER, &rt);
	if (!ret && pool_id)
		*pool_id = rt.pool_id;
	return ret;
}

/* A user name, through NSS; the buffer grows while glibc says ERANGE. */
static int kv_uid_by_name(const char *name, uint32_t *uid)
{
	struct passwd pw, *found = NULL;
	size_t size = 1024;
	char *buf = NULL;
	int err;

	do {
		char *bigger = realloc(buf, size);

		if (!bigger) {
			free(buf);
			return -ENOMEM;
		}
		buf = bigger;
		err = getpwnam_r(name, &pw, buf, size, &found);
		size *= 2;
	} while (err == ERANGE && size <= (1u << 20));
	if (found)
		*uid = pw.pw_uid;
	free(buf);
	/* Unknown, or NSS could not say: either way not a user we can name. */
	return found ? 0 : -EINVAL;
}

int kv_uid_parse(const char *s, uint32_t *uid)
{
	unsigned long long v;
	char *end;

	if (!s || !*s)
		return -EINVAL;
	/* All digits is a uid; anything else a name ("1abc" may be one). */
	if (s[strspn(s, "0123456789")])
		return kv_uid_by_name(s, uid);
	errno = 0;
	v = strtoull(s, &end, 10);
	/* (uid_t)-1 is "no uid" to the kernel: nobody owns a pool as it. */
	if (errno || *end || v >= UINT32_MAX)
		return -EINVAL;
	*uid = v;
	return 0;
}

int kv_arbiter_default_owner(const struct kv_arbiter *arb, uint32_t *owner)
{
	const char *env = getenv("KVSHARE_POOL_OWNER");

	if (env && *env)
		return kv_uid_parse(env, owner);
	*owner = arb->ops->daemon ? arb->peer_uid : 0;
	return 0;
}

int kv_arbiter_attach_owner(struct kv_arbiter *arb, uint32_t owner,
			    const char *name, uint64_t ns,
			    struct kvs_pool_attach *info)
{
	struct kvs_pool_attach req = { .ns = ns, .owner = owner };
	int ret;

	if (strlen(name) >= sizeof(req.name))
		return -ENAMETOOLONG;
	strcpy(req.name, name);
	if (info)
		req.flags = info->flags;
	ret = kv_arbiter_call(arb, KVS_IOC_POOL_ATTACH, &req);
	if (!ret && info)
		*info = req;
	return ret;
}

int kv_arbiter_attach(struct kv_arbiter *arb, const char *name, uint64_t ns,
		      struct kvs_pool_attach *info)
{
	uint32_t owner;
	int ret = kv_arbiter_default_owner(arb, &owner);

	return ret ? ret : kv_arbiter_attach_owner(arb, owner, name, ns, info);
}

/*
 * A page command; returns @count's value after it ran (0 for commands
 * without one).  On the ring the CQE carries that value itself.
 */
static int kv_page_cmd(struct kv_arbiter *arb, unsigned int cmd, void *arg,
		       size_t size, const uint32_t *count)
{
	int ret;

	if (arb->ops->page_cmd)
		return arb->ops->page_cmd(arb, cmd, arg, size);
	ret = kv_arbiter_call(arb, cmd, arg);
	return ret ? ret : count ? (int)*count : 0;
}

int kv_alloc(struct kv_arbiter *arb, uint32_t count, uint32_t *pages)
{
	struct kvs_alloc req = { .count = count, .pages = (uintptr_t)pages };

	return kv_page_cmd(arb, KVS_IOC_ALLOC, &req, sizeof(req), NULL);
}

int kv_publish(struct kv_arbiter *arb, struct kvs_publish_entry *entries,
	       uint32_t count)
{
	struct kvs_publish req = { .count = count, .entries = (uintptr_t)entries };

	return kv_page_cmd(arb, KVS_IOC_PUBLISH, &req, sizeof(req), &req.n_dup);
}

int kv_lookup(struct kv_arbiter *arb, const struct kvs_key *keys,
	      uint32_t count, uint32_t *pages)
{
	struct kvs_lookup req = {
		.count = count,
		.keys = (uintptr_t)keys,
		.pages = (uintptr_t)pages,
	};

	return kv_page_cmd(arb, KVS_IOC_LOOKUP, &req, sizeof(req), &req.n_hit);
}

int kv_put(struct kv_arbiter *arb, const uint32_t *pages, uint32_t count)
{
	struct kvs_put req = { .count = count, .pages = (uintptr_t)pages };

	return kv_page_cmd(arb, KVS_IOC_PUT, &req, sizeof(req), NULL);
}

/* An arbiter without KVS_LOOKUP_PEEK: take the run, then give it back. */
static int kv_lookup_then_put(struct kv_arbiter *arb, const struct kvs_key *keys,
			      uint32_t count)
{
	uint32_t *pages;
	int ret, put;

	if (!count || count > KVS_MAX_BATCH)
		return count ? -E2BIG : -EINVAL;
	pages = malloc((size_t)count * sizeof(*pages));
	if (!pages)
		return -ENOMEM;
	ret = kv_lookup(arb, keys, count, pages);
	if (ret > 0) {
		put = kv_put(arb, pages, (uint32_t)ret);
		if (put)
			ret = put;
	}
	free(pages);
	return ret;
}

int kv_lookup_peek(struct kv_arbiter *arb, const struct kvs_key *keys,
		   uint32_t count)
{
	struct kvs_lookup req = {
		.count = count,
		.flags = KVS_LOOKUP_PEEK,
		.keys = (uintptr_t)keys,
	};
	int ret;

	ret = kv_page_cmd(arb, KVS_IOC_LOOKUP, &req, sizeof(req), &req.n_hit);
	/* Only the flag can be new to it: count is checked here first. */
	if (ret == -EINVAL && count && count <= KVS_MAX_BATCH)
		ret = kv_lookup_then_put(arb, keys, count);
	return ret;
}

int kv_alloc_claim(struct kv_arbiter *arb, const struct kvs_key *keys,
		   uint32_t count, uint32_t *pages)
{
	struct kvs_alloc req = {
		.count = count,
		.flags = KVS_ALLOC_CLAIM,
		.pages = (uintptr_t)pages,
		.keys = (uintptr_t)keys,
	};

	return kv_page_cmd(arb, KVS_IOC_ALLOC, &req, sizeof(req), NULL);
}

static int64_t kv_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int kv_lookup_wait(struct kv_arbiter *arb, const struct kvs_key *keys,
		   uint32_t count, uint32_t *pages, int timeout_ms,
		   uint32_t *n_inflight)
{
	int64_t deadline = kv_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	uint32_t done = 0;
	int ret = 0;

	/* On the module's io_uring the LOOKUP parks until the claim ends. */
	if (arb->ops->lookup_park) {
		ret = arb->ops->lookup_park(arb, keys, count, pages, timeout_ms,
					    n_inflight, &done);
		if (ret < 0 && done)
			kv_put(arb, pages, done);
		done = 0;
		if (ret != -EOPNOTSUPP)
			return ret;
		ret = 0;
	}
	for (;;) {
		/* Not parked: LOOKUP, then the transport's wait_ready(). */
		struct kvs_lookup req = {
			.count = count - done,
			.flags = KVS_LOOKUP_WAIT,
			.keys = (uintptr_t)(keys + done),
			.pages = (uintptr_t)(pages + done),
		};
		int64_t left;

		ret = kv_arbiter_call(arb, KVS_IOC_LOOKUP, &req);
		if (ret)
			break;
		done += req.n_hit;
		if (n_inflight)
			*n_inflight = req.n_inflight;
		if (!req.n_inflight || done == count)
			return (int)done;
		left = deadline - kv_now_ms();
		if (left <= 0)
			return (int)done;
		ret = arb->ops->wait_ready(arb, (int)left);
		if (ret)
			break;
	}
	if (done)
		kv_put(arb, pages, done);
	return ret;
}
