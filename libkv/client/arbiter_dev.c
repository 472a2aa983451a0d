// SPDX-License-Identifier: MIT
/*
 * The device transports.  ioctl: every command by ioctl.  io_uring, when
 * the module offers IORING_OP_URING_CMD: control commands by ioctl, the
 * page commands (ALLOC, PUBLISH, LOOKUP, PUT) through one io_uring SQE
 * each, so that a whole prefix is looked up or released in one
 * submission, and an in-flight wait (kv_uring_lookup_park()) parks one
 * LOOKUP in the kernel until the claim ends, on a ring of the calling
 * thread's own.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "arbiter_internal.h"

static int kv_dev_call(struct kv_arbiter *arb, unsigned long cmd, void *arg)
{
	return ioctl(arb->fd, cmd, arg) < 0 ? -errno : 0;
}

/* A ring whose SQEs can carry the command structs, if the module takes them. */
static bool kv_dev_try_uring(struct kv_arbiter *arb)
{
	struct kvs_info info = { 0 };

	if (kv_dev_call(arb, KVS_IOC_INFO, &info) ||
	    !(info.features & KVS_FEAT_URING_CMD))
		return false;
	/* No io_uring here (seccomp, sysctl, old kernel): ioctl it is. */
	return io_uring_queue_init(8, &arb->ring, IORING_SETUP_SQE128) >= 0;
}

int kv_dev_open(struct kv_arbiter *arb, const char *path, unsigned int flags)
{
	arb->fd = open(path, O_RDWR | O_CLOEXEC);
	if (arb->fd < 0)
		return -errno;
	if (!(flags & KV_ARBITER_NO_URING) && kv_dev_try_uring(arb))
		arb->ops = &kv_uring_ops;
	else
		arb->ops = &kv_ioctl_ops;
	return 0;
}

static void kv_ioctl_close(struct kv_arbiter *arb)
{
	close(arb->fd);
}

static void kv_uring_close(struct kv_arbiter *arb)
{
	io_uring_queue_exit(&arb->ring);
	close(arb->fd);
}

/* The device file turns readable when the claim waited on ends. */
static int kv_dev_wait_ready(struct kv_arbiter *arb, int ms)
{
	struct pollfd p = { .fd = arb->fd, .events = POLLIN };

	poll(&p, 1, ms);
	return 0;
}

/* One page command through the ring: its CQE's result. */
static int kv_uring_page_cmd(struct kv_arbiter *arb, unsigned int cmd, void *arg,
			     size_t size)
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


/*
 * The calling thread's ring for parked LOOKUPs (SQE128 and CQE32, for
 * n_inflight in res2).  Not arb->ring: that one is shared under arb->lock,
 * which a wait of up to seconds must not hold.  Freed when the thread
 * exits; NULL where io_uring cannot make one (tried once per thread).
 */
static pthread_key_t kv_wait_key;
static pthread_once_t kv_wait_once = PTHREAD_ONCE_INIT;
static int kv_wait_key_ok;
static __thread int kv_wait_failed;

static void kv_wait_ring_free(void *ring)
{
	io_uring_queue_exit(ring);
	free(ring);
}

static void kv_wait_key_init(void)
{
	kv_wait_key_ok = !pthread_key_create(&kv_wait_key, kv_wait_ring_free);
}

static struct io_uring *kv_wait_ring(void)
{
	struct io_uring *ring;

	pthread_once(&kv_wait_once, kv_wait_key_init);
	if (!kv_wait_key_ok || kv_wait_failed)
		return NULL;
	ring = pthread_getspecific(kv_wait_key);
	if (ring)
		return ring;
	ring = calloc(1, sizeof(*ring));
	if (ring && io_uring_queue_init(2, ring,
					IORING_SETUP_SQE128 | IORING_SETUP_CQE32) < 0) {
		free(ring);
		ring = NULL;
	}
	if (ring && pthread_setspecific(kv_wait_key, ring)) {
		kv_wait_ring_free(ring);
		ring = NULL;
	}
	kv_wait_failed = !ring;
	return ring;
}

/* One parked LOOKUP of up to @ms: its hits, *@n_inflight from res2. */
static int kv_dev_park(struct kv_arbiter *arb, struct io_uring *ring,
		       const struct kvs_key *keys, uint32_t count, uint32_t *pages,
		       uint32_t ms, uint32_t *n_inflight)
{
	struct kvs_uring_lookup req = {
		.lookup = {
			.count = count,
			.flags = KVS_LOOKUP_WAIT,
			.keys = (uintptr_t)keys,
			.pages = (uintptr_t)pages,
		},
		.timeout_ms = ms,
	};
	struct io_uring_cqe *cqe;
	struct io_uring_sqe *sqe;
	int ret;

	sqe = io_uring_get_sqe(ring);
	if (!sqe)
		return -EBUSY;
	memset(sqe, 0, 2 * sizeof(*sqe));	/* a 128-byte SQE */
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = arb->fd;
	sqe->cmd_op = KVS_IOC_LOOKUP;
	memcpy(sqe->cmd, &req, sizeof(req));
	ret = io_uring_submit(ring);
	if (ret < 0)
		return ret;
	/* The kernel answers by @ms at the latest, whatever happens. */
	do {
		ret = io_uring_wait_cqe(ring, &cqe);
	} while (ret == -EINTR);
	if (ret < 0)
		return ret;
	ret = cqe->res;
	*n_inflight = ret < 0 ? 0 : (uint32_t)cqe->big_cqe[0];
	io_uring_cqe_seen(ring, cqe);
	return ret;
}

static int64_t kv_dev_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * kv_lookup_wait() with the wait parked in the kernel: woken by the
 * claim's end itself, and the lookup again done there, so one system call
 * per claim waited on instead of a LOOKUP, a poll() and a LOOKUP.  Waits
 * longer than the kernel allows at once are several parks.  Returns the
 * hits (*@n_inflight: keys still in flight after them), or -errno with
 * *@n_held hits still held in @pages, which the caller puts (this file
 * only moves commands: the page calls are arbiter.c's).  -EOPNOTSUPP where
 * it cannot park (@timeout_ms < 1, another thread of the handle parked
 * already, an older module): the caller then waits by poll().
 */
static int kv_uring_lookup_park(struct kv_arbiter *arb, const struct kvs_key *keys,
				uint32_t count, uint32_t *pages, int timeout_ms,
				uint32_t *n_inflight, uint32_t *n_held)
{
	int64_t deadline = kv_dev_now_ms() + timeout_ms;
	struct io_uring *ring;
	uint32_t done = 0, inflight = 0;
	int ret;

	*n_held = 0;
	if (timeout_ms < 1)
		return -EOPNOTSUPP;
	ring = kv_wait_ring();
	if (!ring)
		return -EOPNOTSUPP;
	for (;;) {
		int64_t left = deadline - kv_dev_now_ms();
		uint32_t ms = left < 1 ? 1 : left > KVS_URING_WAIT_MAX_MS ?
			      KVS_URING_WAIT_MAX_MS : (uint32_t)left;

		ret = kv_dev_park(arb, ring, keys + done, count - done, pages + done,
				  ms, &inflight);
		if (ret < 0)
			break;
		done += ret;
		if (!inflight || done == count || kv_dev_now_ms() >= deadline) {
			if (n_inflight)
				*n_inflight = inflight;
			return (int)done;
		}
	}
	*n_held = done;
	/* Another thread of the handle has the one parked LOOKUP. */
	return ret == -EBUSY ? -EOPNOTSUPP : ret;
}

const struct kv_transport_ops kv_ioctl_ops = {
	.name		= "ioctl",
	.call		= kv_dev_call,
	.wait_ready	= kv_dev_wait_ready,
	.close		= kv_ioctl_close,
};

const struct kv_transport_ops kv_uring_ops = {
	.name		= "io_uring",
	.call		= kv_dev_call,
	.page_cmd	= kv_uring_page_cmd,
	.lookup_park	= kv_uring_lookup_park,
	.wait_ready	= kv_dev_wait_ready,
	.close		= kv_uring_close,
};
