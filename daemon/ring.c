// SPDX-License-Identifier: GPL-2.0
/*
 * The shared rings (ring.h).  Everything in a ring's mapping is the
 * client's to scribble on at any time: sq is read once per look, and a
 * request is copied out once, into one scratch buffer for the daemon (as
 * large as the largest request served, at most the largest ring), before
 * anything checks it.  The copy is run by the owner's handle op as a
 * socket request is; a request that cannot be framed drops the owner.
 *
 * Polling: after a ring request the loop's poller (rings_poll) polls the
 * rings for a window of at most ring_poll_us that adapts to the gaps
 * between requests (window_request()), looking at epoll every
 * RING_SLICE_NS, then sets NEED_WAKEUP and looks once more before epoll
 * sleeps.  Doorbells (bell.h): a sleeping daemon is woken by a count on
 * the ring's sq eventfd, which epoll watches, and wakes a client that
 * sleeps for its reply (enter == sq) with a byte on the cq socket.  A
 * doorbell costs a write and a wakeup, which is what the ring pays per
 * call whenever the two share a CPU.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/mman.h>

#include "bell.h"
#include "loop.h"
#include "ring.h"

#define HDR		((uint32_t)sizeof(struct kvs_msg))
#define RING_AREA_OFF	4096u		/* the control block's page, then the area */
#define RING_SLICE_NS	20000		/* polling rings, epoll is looked at this often */
#define RING_WINDOW_MIN	20000		/* the polling window shrinks to this */

/* A connection's ring: the memfd mapped here, and the last sq served. */
struct kvsd_ring {
	struct kvs_ring_ctl *ctl;	/* the mapping, control block first */
	struct kvsd_watch sq_bell;	/* our end of the sq doorbell (-1: gone) */
	int cq_bell;			/* our end of the cq doorbell */
	uint8_t *area;			/* the message area */
	uint32_t size;			/* bytes of the area */
	size_t map_len;
	uint32_t served;		/* the sq last served (our cq) */
	uint32_t uid;			/* the owner's, for the per-uid cap */
	void *owner;
	char why[96];			/* why the owner is dropped (garbage) */
	struct kvsd_ring *prev, *next;	/* rings.list */
};

static struct {
	const struct kvsd_ring_ops *ops;
	struct kvsd_ring *list;
	unsigned int n;
	uint64_t bytes;			/* of all rings */
	bool asleep;			/* NEED_WAKEUP is set in every ring */
	uint64_t active_ns;		/* when a ring request was last served */
	uint64_t poll_ns;		/* ring_poll_us: the window's upper bound */
	uint64_t window_ns;		/* polled this long after a request */
	uint64_t min_ns;		/* the window's lower bound */
	bool open;			/* a request opened a window, not yet passed */
	uint8_t *scratch;		/* a ring request, copied out of the ring */
	uint32_t scratch_cap;
} rings;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* ---- setting up and tearing down ---------------------------------------- */

int kvsd_ring_check(const struct kvs_ring_setup *rs, uint64_t max_size)
{
	if (rs->flags || rs->ring_fd || rs->area_off || rs->sq_bell ||
	    rs->cq_bell || rs->reserved || rs->size % 4096)
		return -EINVAL;
	if (rs->size < KVS_RING_MIN || rs->size > max_size || rs->size > KVS_MSG_MAX)
		return -ERANGE;
	return 0;
}

/* Bytes of the rings of @uid's connections. */
static uint64_t rings_of_uid(uint32_t uid)
{
	struct kvsd_ring *r;
	uint64_t n = 0;

	for (r = rings.list; r; r = r->next)
		if (r->uid == uid)
			n += r->size;
	return n;
}

/*
 * Room for a ring of @size bytes: ENOBUFS past half of @budget for rings
 * in all, or past an eighth for one uid (admin exempt).  A ring lives as
 * long as its connection, with no stall deadline: rings can never leave
 * the requests on the sockets no budget (a connection whose request finds
 * none is closed), and one user cannot take every ring there is, which
 * would send everyone else's page commands to the socket, the slow path.
 */
static int ring_budget(uint32_t uid, bool admin, uint64_t budget, uint32_t size)
{
	if (rings.bytes + size > budget / 2)
		return -ENOBUFS;
	if (!admin && rings_of_uid(uid) + size > budget / 8)
		return -ENOBUFS;
	return 0;
}

static void ring_bell(struct kvsd_watch *w, uint32_t events);

/* The ring's doorbells: ours in @r, theirs in @sq and @cq.  0 or -errno. */
static int ring_bells(struct kvsd_ring *r, int *sq, int *cq)
{
	int ret;

	ret = kvsd_bell_new(true, &r->sq_bell.fd, sq);
	if (ret)
		return ret;
	ret = kvsd_bell_new(false, &r->cq_bell, cq);
	if (ret)
		goto fail_sq;
	r->sq_bell.fn = ring_bell;
	ret = kvsd_watch_add(&r->sq_bell, EPOLLIN);
	if (ret)
		goto fail_cq;
	return 0;
fail_cq:
	close(r->cq_bell);
	close(*cq);
fail_sq:
	close(r->sq_bell.fd);
	close(*sq);
	return ret;
}

static void ring_bells_close(struct kvsd_ring *r)
{
	if (r->sq_bell.fd >= 0) {
		kvsd_watch_del(&r->sq_bell);
		close(r->sq_bell.fd);
	}
	close(r->cq_bell);
}

int kvsd_ring_new(void *owner, uint32_t uid, bool admin, uint64_t budget,
		  struct kvs_ring_setup *rs, int fds[3], struct kvsd_ring **out)
{
	size_t map_len = (size_t)RING_AREA_OFF + rs->size;
	struct kvsd_ring *r;
	int fd, ret;
	void *p;

	ret = ring_budget(uid, admin, budget, rs->size);
	if (ret)
		return ret;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	fd = memfd_create("kvshared-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0) {
		ret = -errno;
		free(r);
		return ret == -ENFILE ? -EMFILE : ret;
	}
	/*
	 * Sealed before the client sees it: it cannot shrink the file under
	 * our mapping (SIGBUS here) nor seal it against our writes.
	 */
	if (ftruncate(fd, map_len) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		ret = -errno;
		goto fail;
	}
	ret = ring_bells(r, &fds[1], &fds[2]);
	if (ret)
		goto fail;
	p = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		ret = -errno;
		ring_bells_close(r);
		close(fds[1]);
		close(fds[2]);
		goto fail;
	}
	r->ctl = p;
	r->area = (uint8_t *)p + RING_AREA_OFF;
	r->size = rs->size;
	r->map_len = map_len;
	r->uid = uid;
	r->owner = owner;
	r->next = rings.list;
	if (rings.list)
		rings.list->prev = r;
	rings.list = r;
	rings.n++;
	rings.bytes += r->size;
	fds[0] = fd;
	/* In this order, as the reply's struct says. */
	rs->ring_fd = 0;
	rs->sq_bell = 1;
	rs->cq_bell = 2;
	rs->area_off = RING_AREA_OFF;
	*out = r;
	return 0;
fail:
	close(fd);
	free(r);
	return ret;
}

void kvsd_ring_free(struct kvsd_ring *r)
{
	ring_bells_close(r);
	munmap(r->ctl, r->map_len);
	if (r->prev)
		r->prev->next = r->next;
	else
		rings.list = r->next;
	if (r->next)
		r->next->prev = r->prev;
	rings.n--;
	rings.bytes -= r->size;
	free(r);
}

uint32_t kvsd_ring_size(const struct kvsd_ring *r)
{
	return r->size;
}

/* ---- serving -------------------------------------------------------------- */

/*
 * The polling window adapts, as NAPI's and io_uring's hybrid polling do,
 * so that polling earns its keep: a request that came @now, within
 * ring_poll_us of the one before, would have been caught by a window of
 * twice that gap, which the window grows towards (at most doubling per
 * request, never past ring_poll_us); a window that passes with nothing
 * caught is halved (window_idle()).  A burst of calls keeps the window
 * open, and calls a millisecond apart (engines computing between them)
 * shrink it to RING_WINDOW_MIN, where a spin per call is a few tens of
 * microseconds instead of ring_poll_us.
 */
static void window_request(uint64_t now)
{
	uint64_t gap = now - rings.active_ns, want = 2 * gap;

	rings.active_ns = now;
	rings.open = true;
	if (gap >= rings.poll_ns || want <= rings.window_ns)
		return;
	if (want > 2 * rings.window_ns)
		want = 2 * rings.window_ns;
	rings.window_ns = want < rings.poll_ns ? want : rings.poll_ns;
}

static void window_idle(void)
{
	if (!rings.open)
		return;		/* the loop came round with no window open */
	rings.open = false;
	rings.window_ns /= 2;
	if (rings.window_ns < rings.min_ns)
		rings.window_ns = rings.min_ns;
}

static bool scratch_reserve(uint32_t len)
{
	uint8_t *p;

	if (rings.scratch_cap >= len)
		return true;
	p = realloc(rings.scratch, len);
	if (!p)
		return false;
	rings.scratch = p;
	rings.scratch_cap = len;
	return true;
}

/*
 * Serve the ring's pending request, if any: 1 served, 0 none, -1 the
 * request cannot be framed (r->why says why; the caller drops the owner).
 */
static int ring_serve(struct kvsd_ring *r)
{
	uint32_t sq = __atomic_load_n(&r->ctl->sq, __ATOMIC_ACQUIRE);
	struct kvs_msg h, *m;
	uint32_t out;

	if (sq == r->served)
		return 0;
	/* Copied once, then only the copy is looked at. */
	memcpy(&h, r->area, HDR);
	if (h.magic != KVS_MSG_MAGIC || h.len < HDR || h.len > r->size) {
		snprintf(r->why, sizeof(r->why), h.magic != KVS_MSG_MAGIC ?
			 "ring: bad magic 0x%08x" : "ring: bad message length %u",
			 h.magic != KVS_MSG_MAGIC ? h.magic : h.len);
		return -1;
	}
	if (!scratch_reserve(h.len)) {
		snprintf(r->why, sizeof(r->why), "out of memory");
		return -1;
	}
	memcpy(rings.scratch, r->area, h.len);
	__atomic_store_n(&r->ctl->taken, sq, __ATOMIC_RELEASE);
	m = (struct kvs_msg *)rings.scratch;
	*m = h;			/* what was checked, whatever the ring says now */
	out = rings.ops->handle(r->owner, rings.scratch);
	memcpy(r->area, rings.scratch, out);	/* a reply is never longer */
	r->served = sq;
	/*
	 * Awake now, and polling for a while before the next sleep (which
	 * sets the flag again and looks once more): the client's next
	 * request, which comes at once in a burst, needs no doorbell.
	 */
	if (rings.poll_ns)
		__atomic_store_n(&r->ctl->flags, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&r->ctl->cq, sq, __ATOMIC_RELEASE);
	/*
	 * A client that sleeps for this reply stored sq in enter before it
	 * looked at cq: between its store and its look, and ours, one of us
	 * sees the other's.
	 */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&r->ctl->enter, __ATOMIC_RELAXED) == sq)
		kvsd_bell_ring(r->cq_bell);
	/*
	 * Poll for the next one a while, unless the client runs on this
	 * CPU: polling would only keep it from running.
	 */
	if (__atomic_load_n(&r->ctl->client_cpu, __ATOMIC_RELAXED) != (uint32_t)sched_getcpu() + 1)
		window_request(kvsd_now_ns());
	return 1;
}

int kvsd_ring_enter(struct kvsd_ring *r, struct kvs_ring_enter *re,
		    char *why, size_t why_len)
{
	if (ring_serve(r) < 0) {
		snprintf(why, why_len, "%s", r->why);
		return -EPROTO;
	}
	re->cq = r->served;
	return 0;
}

/*
 * Serve @r's pending request, if any: 1 if one was served, 0 if none (@r
 * is gone if its request could not be framed).  A client sleeping in
 * RING_ENTER is answered by the loop, which reads its socket within
 * RING_SLICE_NS while polling: reading every client's socket after every
 * request would cost the doorbell clients a system call each.
 */
static int ring_poke(struct kvsd_ring *r)
{
	int ret = ring_serve(r);

	if (ret < 0) {
		rings.ops->drop(r->owner, r->why);
		return 0;
	}
	return ret;
}

/* Serve every ring once; how many requests were served. */
static unsigned int rings_serve_all(void)
{
	struct kvsd_ring *r, *next;
	unsigned int n = 0;

	for (r = rings.list; r; r = next) {
		next = r->next;
		n += ring_poke(r);
	}
	return n;
}

/*
 * The sq doorbell rang.  It is an eventfd the daemon holds a copy of, so
 * it never hangs up, whatever the client closes.
 */
static void ring_bell(struct kvsd_watch *w, uint32_t events)
{
	struct kvsd_ring *r = (struct kvsd_ring *)((char *)w - offsetof(struct kvsd_ring, sq_bell));

	(void)events;
	kvsd_bell_drain(w->fd);
	__atomic_store_n(&r->ctl->daemon_cpu, (uint32_t)sched_getcpu() + 1, __ATOMIC_RELAXED);
	ring_poke(r);
}

/* ---- polling ---------------------------------------------------------------- */

static void rings_set_flags(uint32_t flags)
{
	struct kvsd_ring *r;

	for (r = rings.list; r; r = r->next)
		__atomic_store_n(&r->ctl->flags, flags, __ATOMIC_SEQ_CST);
}

/* Where we poll, for clients to see (0: not polling). */
static void rings_set_cpu(uint32_t cpu)
{
	struct kvsd_ring *r;

	for (r = rings.list; r; r = r->next)
		if (__atomic_load_n(&r->ctl->daemon_cpu, __ATOMIC_RELAXED) != cpu)
			__atomic_store_n(&r->ctl->daemon_cpu, cpu, __ATOMIC_RELAXED);
}

/*
 * The loop's poller: serve the rings, keep polling them for the window
 * (window_request()) after the last request, and before sleeping ask for
 * doorbells (KVS_RING_NEED_WAKEUP), then look once more.  true: do not
 * block in epoll (only look at it, then come back).
 */
static bool rings_poll(void)
{
	uint64_t start, now;

	if (!rings.n)
		return false;
	if (rings.asleep) {
		rings_set_flags(0);
		rings.asleep = false;
	}
	start = kvsd_now_ns();
	rings_set_cpu(sched_getcpu() + 1);
	for (;;) {
		rings_serve_all();
		now = kvsd_now_ns();
		if (now - rings.active_ns >= rings.window_ns) {
			window_idle();
			break;
		}
		if (now - start >= RING_SLICE_NS)
			return true;
		cpu_relax();
	}
	rings_set_flags(KVS_RING_NEED_WAKEUP);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	rings.asleep = true;
	return rings_serve_all() > 0;
}

void kvsd_rings_start(const struct kvsd_ring_ops *ops, uint32_t poll_us)
{
	rings.ops = ops;
	rings.poll_ns = (uint64_t)poll_us * 1000;
	rings.min_ns = rings.poll_ns < RING_WINDOW_MIN ? rings.poll_ns : RING_WINDOW_MIN;
	rings.window_ns = rings.poll_ns;
	kvsd_loop_set_poller(rings_poll);
}

void kvsd_rings_stop(void)
{
	kvsd_loop_set_poller(NULL);
	free(rings.scratch);
	rings.scratch = NULL;
	rings.scratch_cap = 0;
}
