// SPDX-License-Identifier: MIT
/*
 * libkv's arbiter client over /dev/kvshare.  Control commands go by ioctl;
 * the page commands (ALLOC, PUBLISH, LOOKUP, PUT) go through one io_uring
 * SQE each when the module offers IORING_OP_URING_CMD, so that a whole
 * prefix is looked up or released in one submission, and by ioctl
 * otherwise.  Callers see one API either way.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <liburing.h>

#include <kvshare/arbiter.h>

#define KV_DEFAULT_DEVICE	"/dev/kvshare"

struct kv_arbiter {
	int fd;
	bool uring;
	pthread_mutex_t ring_lock;	/* one submission in flight per handle */
	struct io_uring ring;
};

static int kv_ioctl(struct kv_arbiter *arb, unsigned long cmd, void *arg)
{
	return ioctl(arb->fd, cmd, arg) < 0 ? -errno : 0;
}

/* A ring whose SQEs can carry the command structs, if the module takes them. */
static void kv_try_uring(struct kv_arbiter *arb)
{
	struct kvs_info info = { 0 };

	if (kv_ioctl(arb, KVS_IOC_INFO, &info) ||
	    !(info.features & KVS_FEAT_URING_CMD))
		return;
	if (io_uring_queue_init(8, &arb->ring, IORING_SETUP_SQE128) < 0)
		return;		/* no io_uring here (seccomp, sysctl, old kernel) */
	arb->uring = true;
}

int kv_arbiter_open(const char *path, unsigned int flags, struct kv_arbiter **out)
{
	struct kv_arbiter *arb;

	if (flags & ~KV_ARBITER_NO_URING)
		return -EINVAL;
	if (!path)
		path = getenv("KVSHARE_DEVICE");
	if (!path || !*path)
		path = KV_DEFAULT_DEVICE;
	arb = calloc(1, sizeof(*arb));
	if (!arb)
		return -ENOMEM;
	arb->fd = open(path, O_RDWR | O_CLOEXEC);
	if (arb->fd < 0) {
		int err = -errno;

		free(arb);
		return err;
	}
	pthread_mutex_init(&arb->ring_lock, NULL);
	if (!(flags & KV_ARBITER_NO_URING))
		kv_try_uring(arb);
	*out = arb;
	return 0;
}

void kv_arbiter_close(struct kv_arbiter *arb)
{
	if (!arb)
		return;
	if (arb->uring)
		io_uring_queue_exit(&arb->ring);
	pthread_mutex_destroy(&arb->ring_lock);
	close(arb->fd);
	free(arb);
}

int kv_arbiter_uses_uring(const struct kv_arbiter *arb)
{
	return arb->uring;
}

int kv_arbiter_call(struct kv_arbiter *arb, unsigned long cmd, void *arg)
{
	return kv_ioctl(arb, cmd, arg);
}

int kv_arbiter_attach(struct kv_arbiter *arb, const char *name, uint64_t ns,
		      struct kvs_pool_attach *info)
{
	struct kvs_pool_attach req = { .ns = ns };
	int ret;

	if (strlen(name) >= sizeof(req.name))
		return -ENAMETOOLONG;
	strcpy(req.name, name);
	ret = kv_ioctl(arb, KVS_IOC_POOL_ATTACH, &req);
	if (!ret && info)
		*info = req;
	return ret;
}

/* One page command through the ring: its CQE's result. */
static int kv_uring_cmd(struct kv_arbiter *arb, unsigned int cmd,
			const void *arg, size_t size)
{
	struct io_uring_cqe *cqe;
	struct io_uring_sqe *sqe;
	int ret;

	pthread_mutex_lock(&arb->ring_lock);
	sqe = io_uring_get_sqe(&arb->ring);
	if (!sqe) {
		ret = -EBUSY;
		goto out;
	}
	memset(sqe, 0, 2 * sizeof(*sqe));	/* a 128-byte SQE */
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = arb->fd;
	sqe->cmd_op = cmd;
	memcpy(sqe->cmd, arg, size);
	ret = io_uring_submit(&arb->ring);
	if (ret < 0)
		goto out;
	do {
		ret = io_uring_wait_cqe(&arb->ring, &cqe);
	} while (ret == -EINTR);
	if (ret < 0)
		goto out;
	ret = cqe->res;
	io_uring_cqe_seen(&arb->ring, cqe);
out:
	pthread_mutex_unlock(&arb->ring_lock);
	return ret;
}

int kv_alloc(struct kv_arbiter *arb, uint32_t count, uint32_t *pages)
{
	struct kvs_alloc req = { .count = count, .pages = (uintptr_t)pages };

	if (arb->uring)
		return kv_uring_cmd(arb, KVS_IOC_ALLOC, &req, sizeof(req));
	return kv_ioctl(arb, KVS_IOC_ALLOC, &req);
}

int kv_publish(struct kv_arbiter *arb, struct kvs_publish_entry *entries,
	       uint32_t count)
{
	struct kvs_publish req = { .count = count, .entries = (uintptr_t)entries };
	int ret;

	if (arb->uring)
		return kv_uring_cmd(arb, KVS_IOC_PUBLISH, &req, sizeof(req));
	ret = kv_ioctl(arb, KVS_IOC_PUBLISH, &req);
	return ret ? ret : (int)req.n_dup;
}

int kv_lookup(struct kv_arbiter *arb, const struct kvs_key *keys,
	      uint32_t count, uint32_t *pages)
{
	struct kvs_lookup req = {
		.count = count,
		.keys = (uintptr_t)keys,
		.pages = (uintptr_t)pages,
	};
	int ret;

	if (arb->uring)
		return kv_uring_cmd(arb, KVS_IOC_LOOKUP, &req, sizeof(req));
	ret = kv_ioctl(arb, KVS_IOC_LOOKUP, &req);
	return ret ? ret : (int)req.n_hit;
}

int kv_put(struct kv_arbiter *arb, const uint32_t *pages, uint32_t count)
{
	struct kvs_put req = { .count = count, .pages = (uintptr_t)pages };

	if (arb->uring)
		return kv_uring_cmd(arb, KVS_IOC_PUT, &req, sizeof(req));
	return kv_ioctl(arb, KVS_IOC_PUT, &req);
}
