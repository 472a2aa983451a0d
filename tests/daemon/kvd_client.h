/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The client side of the daemon tests, over libkv and a raw socket, for
 * tests that start their kvshared with kvd_test.h:
 *
 *   kvd_start_ctl(&d, args, pool, &ctl, &id, why, len)
 *                         kvshared started, a control handle (socket only,
 *                         never attached) and the id of @pool on it
 *   kvd_stop_ctl(&d, kid, ctl, why, len)
 *                         the other way round, judged as kvd_stop() does
 *   kvd_pool_id(), kvd_open_attached(), kvd_raw_send()
 *
 * Nothing here asserts, as in kvd_test.h.
 */
#ifndef KVD_CLIENT_H
#define KVD_CLIENT_H

#include <kvshare/arbiter.h>

#include "kvd_test.h"

/* The id of pool @name on @a, or 0. */
static inline __u32 kvd_pool_id(struct kv_arbiter *a, const char *name)
{
	struct kvs_pool_desc d[16];
	struct kvs_pool_list l;
	__u32 i;

	memset(&l, 0, sizeof(l));
	l.count = 16;
	l.pools = (uintptr_t)d;
	if (kv_arbiter_call(a, KVS_IOC_POOL_LIST, &l))
		return 0;
	for (i = 0; i < l.count && i < 16; i++)
		if (!strcmp(d[i].name, name))
			return d[i].pool_id;
	return 0;
}

/* A handle on @sock attached to root's pool @name; *@a is NULL on failure. */
static inline int kvd_open_attached(const char *sock, const char *name, unsigned int flags,
				    struct kv_arbiter **a)
{
	int ret = kv_arbiter_open(sock, flags, a);

	if (ret)
		return ret;
	ret = kv_arbiter_attach(*a, name, 0, NULL);
	if (ret) {
		kv_arbiter_close(*a);
		*a = NULL;
	}
	return ret;
}

/* @len bytes of @buf on @fd in one sendmsg(), with descriptor @pass_fd unless -1. */
static inline int kvd_raw_send(int fd, const void *buf, size_t len, int pass_fd)
{
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { (void *)buf, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (pass_fd >= 0) {
		struct cmsghdr *c;

		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.b;
		mh.msg_controllen = sizeof(ctl.b);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
	}
	return sendmsg(fd, &mh, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -EIO;
}

/*
 * kvd_start() with @args, then a control handle (no shared ring, whose
 * bytes count against the daemon's budget) and the id of pool @pool.
 * 0, or -errno (-ENOENT: no such pool) with why in @why and nothing left
 * running: no teardown follows a failed fixture setup.
 */
static inline int kvd_start_ctl(struct kvd *d, const char *const *args, const char *pool,
				struct kv_arbiter **ctl, __u32 *pool_id, char *why, size_t len)
{
	int ret;

	*ctl = NULL;
	*pool_id = 0;
	ret = kvd_start(d, args, why, len);
	if (!ret)
		ret = kv_arbiter_open(d->sock, KV_ARBITER_NO_URING, ctl);
	if (!ret) {
		*pool_id = kvd_pool_id(*ctl, pool);
		if (!*pool_id) {
			snprintf(why, len, "pool '%s' not listed", pool);
			ret = -ENOENT;
		}
	}
	if (ret) {
		if (!why[0])
			snprintf(why, len, "%s", strerror(-ret));
		if (*ctl)
			kv_arbiter_close(*ctl);
		*ctl = NULL;
		d->failed = 1;
		kvd_fini(d);
	}
	return ret;
}

/*
 * The end of a test: SIGKILL its child @kid (0: none), SIGCONT a daemon
 * the test stopped, close @ctl, then kvd_stop(): 0 if kvshared ended well.
 */
static inline int kvd_stop_ctl(struct kvd *d, pid_t kid, struct kv_arbiter *ctl,
			       char *why, size_t len)
{
	if (kid > 0) {
		kill(kid, SIGKILL);
		waitpid(kid, NULL, 0);
	}
	if (d->pid > 0)
		kill(d->pid, SIGCONT);
	if (ctl)
		kv_arbiter_close(ctl);
	why[0] = '\0';
	return kvd_stop(d, why, len);
}

#endif
