// SPDX-License-Identifier: GPL-2.0
/*
 * An arbiter through libkv's client: /dev/kvshare with the page commands
 * on io_uring (one IORING_OP_URING_CMD each, the rest by ioctl), or the
 * kvshared socket.  Measured beside the core so transports compare row by
 * row.
 */
#include "kvbench.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <kvshare/arbiter.h>

struct uring_target {
	const char *device;
	bool need_uring;		/* refuse a handle without io_uring */
	unsigned int data_flags;	/* kv_arbiter_open()'s, for the data handle */
	struct kv_arbiter *ctl;
	struct kv_arbiter *data;	/* NULL when closed */
};

static int uring_ctl(struct bench_target *t, unsigned int cmd, void *arg)
{
	struct uring_target *ut = t->priv;

	return kv_arbiter_call(ut->ctl, cmd, arg);
}

static int uring_open(struct bench_target *t)
{
	struct uring_target *ut = t->priv;
	int ret = kv_arbiter_open(ut->device, ut->data_flags, &ut->data);

	if (!ret && ut->need_uring && !kv_arbiter_uses_uring(ut->data)) {
		kv_arbiter_close(ut->data);
		ut->data = NULL;
		ret = -EOPNOTSUPP;
	}
	return ret;
}

/* bench_run.c speaks command structs: map them onto libkv's calls. */
static int uring_data(struct bench_target *t, unsigned int cmd, void *arg)
{
	struct kv_arbiter *arb = ((struct uring_target *)t->priv)->data;
	int ret;

	switch (cmd) {
	case KVS_IOC_ALLOC: {
		struct kvs_alloc *a = arg;

		return kv_alloc(arb, a->count, (uint32_t *)(uintptr_t)a->pages);
	}
	case KVS_IOC_PUBLISH: {
		struct kvs_publish *p = arg;

		ret = kv_publish(arb, (void *)(uintptr_t)p->entries, p->count);
		if (ret >= 0)
			p->n_dup = ret;
		return ret < 0 ? ret : 0;
	}
	case KVS_IOC_LOOKUP: {
		struct kvs_lookup *l = arg;

		ret = kv_lookup(arb, (const void *)(uintptr_t)l->keys, l->count,
				(uint32_t *)(uintptr_t)l->pages);
		if (ret >= 0)
			l->n_hit = ret;
		return ret < 0 ? ret : 0;
	}
	case KVS_IOC_PUT: {
		struct kvs_put *p = arg;

		return kv_put(arb, (const uint32_t *)(uintptr_t)p->pages, p->count);
	}
	}
	return kv_arbiter_call(arb, cmd, arg);
}

static void uring_close(struct bench_target *t)
{
	struct uring_target *ut = t->priv;

	kv_arbiter_close(ut->data);
	ut->data = NULL;
}

static void uring_fini(struct bench_target *t)
{
	struct uring_target *ut = t->priv;

	uring_close(t);
	kv_arbiter_close(ut->ctl);
	free(ut);
	t->priv = NULL;
}

static int target_libkv_init(struct bench_target *t, const char *path,
			     const char *name, bool need_uring, unsigned int data_flags)
{
	struct uring_target *ut = calloc(1, sizeof(*ut));
	int ret;

	if (!ut)
		return -ENOMEM;
	ut->device = path;
	ut->need_uring = need_uring;
	ut->data_flags = data_flags;
	ret = kv_arbiter_open(path, KV_ARBITER_NO_URING, &ut->ctl);
	if (ret) {
		free(ut);
		return ret;
	}
	*t = (struct bench_target) {
		.name = name, .ctl = uring_ctl, .open = uring_open,
		.data = uring_data, .close = uring_close, .fini = uring_fini,
		.priv = ut,
	};
	return 0;
}

int target_uring_init(struct bench_target *t, const char *device)
{
	return target_libkv_init(t, device, "uring", true, 0);
}

int target_daemon_init(struct bench_target *t, const char *socket)
{
	return target_libkv_init(t, socket, "daemon", false, 0);
}

int target_socket_init(struct bench_target *t, const char *socket)
{
	return target_libkv_init(t, socket, "socket", false, KV_ARBITER_NO_URING);
}
