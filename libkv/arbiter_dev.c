// SPDX-License-Identifier: MIT
/*
 * The device transport: control commands by ioctl; the page commands
 * (ALLOC, PUBLISH, LOOKUP, PUT) through one io_uring SQE each when the
 * module offers IORING_OP_URING_CMD, so that a whole prefix is looked up
 * or released in one submission, and by ioctl otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "arbiter_internal.h"

int kv_dev_call(struct kv_arbiter *arb, unsigned long cmd, void *arg)
{
	return ioctl(arb->fd, cmd, arg) < 0 ? -errno : 0;
}

/* A ring whose SQEs can carry the command structs, if the module takes them. */
static void kv_dev_try_uring(struct kv_arbiter *arb)
{
	struct kvs_info info = { 0 };

	if (kv_dev_call(arb, KVS_IOC_INFO, &info) ||
	    !(info.features & KVS_FEAT_URING_CMD))
		return;
	if (io_uring_queue_init(8, &arb->ring, IORING_SETUP_SQE128) < 0)
		return;		/* no io_uring here (seccomp, sysctl, old kernel) */
	arb->uring = true;
}

int kv_dev_open(struct kv_arbiter *arb, const char *path, unsigned int flags)
{
	arb->fd = open(path, O_RDWR | O_CLOEXEC);
	if (arb->fd < 0)
		return -errno;
	if (!(flags & KV_ARBITER_NO_URING))
		kv_dev_try_uring(arb);
	return 0;
}

void kv_dev_close(struct kv_arbiter *arb)
{
	if (arb->uring)
		io_uring_queue_exit(&arb->ring);
	close(arb->fd);
}

/* One page command through the ring: its CQE's result. */
static int kv_dev_uring_cmd(struct kv_arbiter *arb, unsigned int cmd,
			    const void *arg, size_t size)
{
	struct io_uring_cqe *cqe;
	struct io_uring_sqe *sqe;
	int ret;

	pthread_mutex_lock(&arb->lock);
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
	pthread_mutex_unlock(&arb->lock);
	return ret;
}

int kv_dev_page_cmd(struct kv_arbiter *arb, unsigned int cmd, void *arg,
		    size_t size)
{
	if (arb->uring)
		return kv_dev_uring_cmd(arb, cmd, arg, size);
	return kv_dev_call(arb, cmd, arg);
}
