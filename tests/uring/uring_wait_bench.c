// SPDX-License-Identifier: GPL-2.0
/*
 * uring_wait_bench: how soon a waiter has the pages of a claim that its
 * owner publishes, by the two ways of waiting on the module:
 *
 *   poll    LOOKUP with KVS_LOOKUP_WAIT by ioctl (arms the file's wait),
 *           poll() until readable, LOOKUP again by ioctl;
 *   parked  one LOOKUP with KVS_LOOKUP_WAIT through io_uring, parked in
 *           the kernel and looked up again there; the CQE carries the hits;
 *           on a default ring (task work signalled) and on one with
 *           IORING_SETUP_DEFER_TASKRUN (run by the waiter's own wait).
 *
 * The owner thread claims a new key, waits until the waiter has armed its
 * wait, reads the clock and publishes; the waiter reads the clock when it
 * holds the page.  The two ways alternate round by round, so that both
 * see the same machine; medians and the ratio are printed side by side.
 * Run in the VM by `make vmbench`.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <liburing.h>
#include <linux/kvshare.h>

#define ROUNDS		2000	/* per way */
#define POOL_PAGES	64

enum way { POLL, PARKED, PARKED_DEFER, N_WAYS };

static const char *const way_name[N_WAYS] = {
	"poll() + ioctl LOOKUP again", "parked io_uring LOOKUP",
	"parked, DEFER_TASKRUN ring",
};

struct bench {
	int ctl, owner, waiter;
	int armed, go;			/* eventfds: waiter -> owner, owner -> waiter */
	struct io_uring ring, ring_defer;
	uint64_t t_publish;		/* ns, written by the owner before its signal */
	double lat[N_WAYS][ROUNDS];	/* µs */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
}

static void die(const char *what, int err)
{
	fprintf(stderr, "uring_wait_bench: %s: %s\n", what, strerror(err));
	exit(1);
}

static void xioctl(int fd, unsigned long cmd, void *arg, const char *what)
{
	if (ioctl(fd, cmd, arg) < 0)
		die(what, errno);
}

static struct kvs_key key_of(uint32_t round)
{
	struct kvs_key k;

	memset(&k, 0, sizeof(k));
	k.w[0] = 0x6b76735f62656e63ull;
	k.w[1] = round;
	k.w[2] = (uint64_t)getpid();
	return k;
}

static void sig(int fd)
{
	uint64_t one = 1;

	if (write(fd, &one, sizeof(one)) != sizeof(one))
		die("eventfd write", errno);
}

static void await(int fd)
{
	uint64_t v;

	if (read(fd, &v, sizeof(v)) != sizeof(v))
		die("eventfd read", errno);
}

/* The owner: claim, wait for the waiter to arm, publish, then put. */
static void *owner_fn(void *arg)
{
	struct bench *b = arg;
	uint32_t r;

	for (r = 0; r < ROUNDS * N_WAYS; r++) {
		struct kvs_key k = key_of(r);
		struct kvs_alloc a = { .count = 1, .flags = KVS_ALLOC_CLAIM };
		struct kvs_publish_entry e;
		struct kvs_publish p = { .count = 1 };
		struct kvs_put put = { .count = 1 };
		uint32_t page;

		a.pages = (uintptr_t)&page;
		a.keys = (uintptr_t)&k;
		xioctl(b->owner, KVS_IOC_ALLOC, &a, "owner ALLOC");
		sig(b->go);
		await(b->armed);
		memset(&e, 0, sizeof(e));
		e.page = page;
		e.parent = KVS_NO_PAGE;
		e.key = k;
		p.entries = (uintptr_t)&e;
		__atomic_store_n(&b->t_publish, now_ns(), __ATOMIC_RELEASE);
		xioctl(b->owner, KVS_IOC_PUBLISH, &p, "owner PUBLISH");
		/* Put only once the waiter is done: no lock of ours meets its. */
		await(b->armed);
		put.pages = (uintptr_t)&e.result;
		xioctl(b->owner, KVS_IOC_PUT, &put, "owner PUT");
	}
	return NULL;
}

static void wait_poll(struct bench *b, const struct kvs_key *k, uint32_t *page)
{
	struct kvs_lookup l = { .count = 1, .flags = KVS_LOOKUP_WAIT };
	struct pollfd pfd = { .fd = b->waiter, .events = POLLIN };

	l.keys = (uintptr_t)k;
	l.pages = (uintptr_t)page;
	xioctl(b->waiter, KVS_IOC_LOOKUP, &l, "waiter LOOKUP");
	if (l.n_hit || l.n_inflight != 1)
		die("waiter LOOKUP: key not in flight", EPROTO);
	sig(b->armed);
	do {
		if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
			die("poll", errno);
		memset(&l, 0, sizeof(l));
		l.count = 1;
		l.flags = KVS_LOOKUP_WAIT;
		l.keys = (uintptr_t)k;
		l.pages = (uintptr_t)page;
		xioctl(b->waiter, KVS_IOC_LOOKUP, &l, "waiter LOOKUP again");
	} while (!l.n_hit);
}

static void wait_parked(struct bench *b, struct io_uring *ring,
			const struct kvs_key *k, uint32_t *page)
{
	struct kvs_uring_lookup req = {
		.lookup = { .count = 1, .flags = KVS_LOOKUP_WAIT },
		.timeout_ms = KVS_URING_WAIT_MAX_MS,
	};
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	struct io_uring_cqe *cqe;
	int ret;

	if (!sqe)
		die("io_uring_get_sqe", EBUSY);
	req.lookup.keys = (uintptr_t)k;
	req.lookup.pages = (uintptr_t)page;
	memset(sqe, 0, 2 * sizeof(*sqe));
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = b->waiter;
	sqe->cmd_op = KVS_IOC_LOOKUP;
	memcpy(sqe->cmd, &req, sizeof(req));
	if (io_uring_submit(ring) != 1)
		die("io_uring_submit", EIO);
	/* Parked by now: the submission ran the LOOKUP inline. */
	sig(b->armed);
	do {
		ret = io_uring_wait_cqe(ring, &cqe);
	} while (ret == -EINTR);
	if (ret)
		die("io_uring_wait_cqe", -ret);
	ret = cqe->res;
	io_uring_cqe_seen(ring, cqe);
	if (ret != 1)
		die("parked LOOKUP", ret < 0 ? -ret : EPROTO);
}

static void waiter_run(struct bench *b)
{
	uint32_t r;

	for (r = 0; r < ROUNDS * N_WAYS; r++) {
		struct kvs_key k = key_of(r);
		struct kvs_put put = { .count = 1 };
		enum way w = r % N_WAYS;
		uint32_t page;

		await(b->go);
		if (w == POLL)
			wait_poll(b, &k, &page);
		else
			wait_parked(b, w == PARKED ? &b->ring : &b->ring_defer, &k, &page);
		b->lat[w][r / N_WAYS] = (now_ns() -
				    __atomic_load_n(&b->t_publish, __ATOMIC_ACQUIRE)) / 1000.0;
		put.pages = (uintptr_t)&page;
		xioctl(b->waiter, KVS_IOC_PUT, &put, "waiter PUT");
		sig(b->armed);
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int open_attached(const char *name)
{
	struct kvs_pool_attach a;
	int fd = open("/dev/kvshare", O_RDWR | O_CLOEXEC);

	if (fd < 0)
		die("open /dev/kvshare", errno);
	memset(&a, 0, sizeof(a));
	snprintf(a.name, sizeof(a.name), "%s", name);
	a.ns = 1;
	xioctl(fd, KVS_IOC_POOL_ATTACH, &a, "ATTACH");
	return fd;
}

int main(void)
{
	struct kvs_pool_create pc;
	struct kvs_pool_destroy d;
	static struct bench b;
	double med[N_WAYS];
	pthread_t t;
	int w, ret;

	b.ctl = open("/dev/kvshare", O_RDWR | O_CLOEXEC);
	if (b.ctl < 0)
		die("open /dev/kvshare", errno);
	memset(&pc, 0, sizeof(pc));
	snprintf(pc.name, sizeof(pc.name), "uwbench-%d", (int)getpid());
	pc.n_pages = POOL_PAGES;
	pc.geom.n_layers = 1;
	pc.geom.n_kv_heads = 1;
	pc.geom.head_dim = 16;
	pc.geom.tokens_per_page = 16;
	pc.geom.dtype = KVS_DTYPE_F16;
	pc.mode = 0600;
	pc.mem_fd = -1;
	xioctl(b.ctl, KVS_IOC_POOL_CREATE, &pc, "POOL_CREATE");
	b.owner = open_attached(pc.name);
	b.waiter = open_attached(pc.name);
	b.armed = eventfd(0, EFD_CLOEXEC);
	b.go = eventfd(0, EFD_CLOEXEC);
	if (b.armed < 0 || b.go < 0)
		die("eventfd", errno);
	ret = io_uring_queue_init(4, &b.ring, IORING_SETUP_SQE128 | IORING_SETUP_CQE32);
	if (ret)
		die("io_uring_queue_init(SQE128|CQE32)", -ret);
	/* Task work run only by this thread's own wait, without a signal. */
	ret = io_uring_queue_init(4, &b.ring_defer, IORING_SETUP_SQE128 | IORING_SETUP_CQE32 |
				  IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN);
	if (ret)
		die("io_uring_queue_init(DEFER_TASKRUN)", -ret);
	ret = pthread_create(&t, NULL, owner_fn, &b);
	if (ret)
		die("pthread_create", ret);
	waiter_run(&b);
	pthread_join(t, NULL);

	printf("uring_wait_bench: claim published -> waiter holds the page, %d rounds each, alternating\n",
	       ROUNDS);
	printf("  %-30s %10s %10s %10s\n", "way", "median_us", "p10_us", "p90_us");
	for (w = 0; w < N_WAYS; w++) {
		qsort(b.lat[w], ROUNDS, sizeof(double), cmp_double);
		med[w] = b.lat[w][ROUNDS / 2];
		printf("  %-30s %10.1f %10.1f %10.1f\n", way_name[w], med[w],
		       b.lat[w][ROUNDS / 10], b.lat[w][ROUNDS * 9 / 10]);
	}
	printf("  median ratio poll / parked: %.2f, poll / parked DEFER_TASKRUN: %.2f\n",
	       med[POLL] / med[PARKED], med[POLL] / med[PARKED_DEFER]);

	io_uring_queue_exit(&b.ring);
	io_uring_queue_exit(&b.ring_defer);
	close(b.owner);
	close(b.waiter);
	memset(&d, 0, sizeof(d));
	d.pool_id = pc.pool_id;
	xioctl(b.ctl, KVS_IOC_POOL_DESTROY, &d, "POOL_DESTROY");
	close(b.ctl);
	return 0;
}
