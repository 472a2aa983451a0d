// SPDX-License-Identifier: MIT
/*
 * The daemon's transports.  socket: the kvshared protocol of
 * <linux/kvshare.h> for every command.  daemon ring: the page commands
 * (ALLOC, PUBLISH, LOOKUP, PUT) on the ring kvshared shares with this
 * handle (KVS_SOCK_RING_SETUP), everything else on the socket.  A
 * request is the message header, the command struct and a data area with
 * the arrays the struct points to, the pointers rewritten as offsets; the
 * reply brings the struct back and the bytes the command wrote, which go
 * back to the caller's arrays.  Which fields are arrays, and how long,
 * is the one thing this side must know per command: kv_arrays[] below.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "arbiter_internal.h"

enum { KV_IN = 1, KV_OUT = 2 };

#define KV_MAX_FDS	3		/* descriptors a reply carries: RING_SETUP's */

/* Descriptors that came with a reply. */
struct kv_fds {
	int fd[KV_MAX_FDS];
	unsigned int n;
};

static void kv_fds_close(struct kv_fds *f)
{
	while (f->n)
		close(f->fd[--f->n]);
}

struct kv_array {
	unsigned short ptr;		/* offset of the __u64 pointer field */
	unsigned short count;		/* offset of the __u32 element count */
	unsigned short elem;		/* bytes per element */
	unsigned short dir;		/* KV_IN, KV_OUT or both */
};

struct kv_cmd_arrays {
	unsigned int cmd;
	struct kv_array a[2];
};

#define KV_ARRAY(type, p, c, e, d) \
	{ offsetof(type, p), offsetof(type, c), sizeof(e), d }

static const struct kv_cmd_arrays kv_arrays[] = {
	{ KVS_IOC_ALLOC, { KV_ARRAY(struct kvs_alloc, pages, count, __u32, KV_OUT),
			   KV_ARRAY(struct kvs_alloc, keys, count, struct kvs_key, KV_IN) } },
	{ KVS_IOC_PUBLISH, { KV_ARRAY(struct kvs_publish, entries, count,
				      struct kvs_publish_entry, KV_IN | KV_OUT) } },
	{ KVS_IOC_LOOKUP, { KV_ARRAY(struct kvs_lookup, keys, count, struct kvs_key, KV_IN),
			    KV_ARRAY(struct kvs_lookup, pages, count, __u32, KV_OUT) } },
	{ KVS_IOC_PUT, { KV_ARRAY(struct kvs_put, pages, count, __u32, KV_IN) } },
	{ KVS_IOC_POOL_LIST, { KV_ARRAY(struct kvs_pool_list, pools, count,
					struct kvs_pool_desc, KV_OUT) } },
	{ KVS_IOC_PAGES, { KV_ARRAY(struct kvs_pages, pages, count,
				    struct kvs_page_desc, KV_OUT) } },
};

/* Commands match by number whatever their size bits say. */
static const struct kv_cmd_arrays *kv_cmd_arrays(unsigned int cmd)
{
	size_t i;

	for (i = 0; i < sizeof(kv_arrays) / sizeof(kv_arrays[0]); i++)
		if (_IOC_TYPE(cmd) == _IOC_TYPE(kv_arrays[i].cmd) &&
		    _IOC_NR(cmd) == _IOC_NR(kv_arrays[i].cmd))
			return &kv_arrays[i];
	return NULL;
}

/* One array of a request: where the caller has it, where it goes. */
struct kv_span {
	const struct kv_array *a;
	uint64_t user;			/* the caller's pointer */
	size_t off;			/* its offset in the message */
	size_t len;
};

/* ---- deadlines ----------------------------------------------------------- */

static uint64_t kv_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
}

/* When a call starting now must be over: 0 for never. */
static uint64_t kv_deadline(const struct kv_arbiter *arb)
{
	return arb->timeout_ms ? kv_now_ns() + arb->timeout_ms * 1000000ull : 0;
}

static int kv_set_timeo(int sock, int opt, unsigned int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	return setsockopt(sock, SOL_SOCKET, opt, &tv, sizeof(tv)) ? -errno : 0;
}

/*
 * Before a blocking send or receive: make SO_SNDTIMEO or SO_RCVTIMEO end
 * it by @deadline.  The option is set only when it is off by more than an
 * eighth, so that a call on a healthy daemon costs no extra system call.
 * 0, or -ETIMEDOUT once the deadline has passed.
 */
static int kv_arm(struct kv_arbiter *arb, int opt, uint64_t deadline)
{
	unsigned int *cur = opt == SO_RCVTIMEO ? &arb->rcvtimeo_ms : &arb->sndtimeo_ms;
	uint64_t now, rem;

	if (!deadline) {
		if (*cur && !kv_set_timeo(arb->fd, opt, 0))
			*cur = 0;
		return 0;
	}
	now = kv_now_ns();
	if (now >= deadline)
		return -ETIMEDOUT;
	rem = (deadline - now + 999999) / 1000000;	/* ms, at least 1 */
	if (!*cur || *cur > rem || *cur + (rem / 8 + 1) < rem) {
		if (kv_set_timeo(arb->fd, opt, rem))
			return -ENOTCONN;
		*cur = rem;
	}
	return 0;
}

int kv_timeout_from_env(unsigned int *ms)
{
	const char *env = getenv("KVSHARE_CALL_TIMEOUT_MS");
	unsigned long v;
	char *end;

	*ms = KV_DEFAULT_TIMEOUT_MS;
	if (!env || !*env)
		return 0;
	errno = 0;
	v = strtoul(env, &end, 10);
	if (errno || *end || env[0] == '-' || v > KV_MAX_TIMEOUT_MS)
		return -EINVAL;
	*ms = v;
	return 0;
}

/* ---- the socket ------------------------------------------------------------ */

static int kv_ring_setup(struct kv_arbiter *arb);

static void kv_sock_close_fds(struct kv_arbiter *arb)
{
	if (arb->sring)
		munmap(arb->sring, arb->sring_map_len);
	if (arb->sq_bell >= 0)
		close(arb->sq_bell);
	if (arb->cq_bell >= 0)
		close(arb->cq_bell);
	if (arb->wait_fd >= 0)
		close(arb->wait_fd);
	close(arb->fd);
}

int kv_sock_open(struct kv_arbiter *arb, const char *path, unsigned int flags)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct ucred peer;
	socklen_t len = sizeof(peer);
	int ret;

	if (strlen(path) >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	strcpy(addr.sun_path, path);
	arb->sq_bell = -1;
	arb->cq_bell = -1;
	arb->wait_fd = KV_WAIT_FD_UNSET;
	arb->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (arb->fd < 0)
		return -errno;
	/*
	 * A unix connect blocks only while the listener's backlog is full,
	 * and then for SO_SNDTIMEO at most, failing with EAGAIN.
	 */
	ret = kv_arm(arb, SO_SNDTIMEO, kv_deadline(arb));
	if (ret)
		goto fail;
	/*
	 * Who listens is who creates the pools this handle attaches by
	 * default (kv_arbiter_default_owner()): the kernel says, not the
	 * daemon.
	 */
	if (connect(arb->fd, (struct sockaddr *)&addr, sizeof(addr)) ||
	    getsockopt(arb->fd, SOL_SOCKET, SO_PEERCRED, &peer, &len)) {
		ret = errno == EAGAIN ? -ETIMEDOUT : -errno;
		goto fail;
	}
	arb->peer_uid = peer.uid;
	arb->ops = &kv_socket_ops;
	if (!(flags & KV_ARBITER_NO_URING)) {
		ret = kv_ring_setup(arb);
		/* A daemon without rings is served by the socket alone. */
		if (ret && arb->dead)
			goto fail;
		if (!ret)
			arb->ops = &kv_ring_ops;
	}
	pthread_mutex_init(&arb->wait_lock, NULL);
	return 0;
fail:
	kv_sock_close_fds(arb);
	return ret;
}

static void kv_sock_close(struct kv_arbiter *arb)
{
	kv_sock_close_fds(arb);
	pthread_mutex_destroy(&arb->wait_lock);
}

static int kv_send_all(struct kv_arbiter *arb, const char *buf, size_t len, int fd,
		       uint64_t deadline)
{
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { (void *)buf, len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;
	int ret;

	if (fd >= 0) {
		struct cmsghdr *c;

		msg.msg_control = cbuf;
		msg.msg_controllen = sizeof(cbuf);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	while (iov.iov_len) {
		ret = kv_arm(arb, SO_SNDTIMEO, deadline);
		if (ret)
			return ret;
		n = sendmsg(arb->fd, &msg, MSG_NOSIGNAL);
		if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
			continue;	/* kv_arm says whether time is left */
		if (n <= 0)
			return -ENOTCONN;
		iov.iov_base = (char *)iov.iov_base + n;
		iov.iov_len -= n;
		msg.msg_control = NULL;		/* the fd went with the first bytes */
		msg.msg_controllen = 0;
	}
	return 0;
}

/* Read exactly @len bytes; descriptors riding on them land in @fds. */
static int kv_recv_all(struct kv_arbiter *arb, char *buf, size_t len, struct kv_fds *fds,
		       uint64_t deadline)
{
	char cbuf[CMSG_SPACE(KV_MAX_FDS * sizeof(int))];
	struct iovec iov = { buf, len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;
	ssize_t n;
	int ret;

	while (iov.iov_len) {
		ret = kv_arm(arb, SO_RCVTIMEO, deadline);
		if (ret)
			return ret;
		msg.msg_control = cbuf;
		msg.msg_controllen = sizeof(cbuf);
		n = recvmsg(arb->fd, &msg, MSG_CMSG_CLOEXEC);
		if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
			continue;
		if (n <= 0)
			return -ENOTCONN;
		for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
			size_t i, n;

			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (i = 0; i < n; i++) {
				int got;

				memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (fds->n < KV_MAX_FDS)
					fds->fd[fds->n++] = got;
				else
					close(got);	/* more than any reply carries */
			}
		}
		iov.iov_base = (char *)iov.iov_base + n;
		iov.iov_len -= n;
	}
	return 0;
}

static uint64_t kv_get_u64(const void *s, size_t off)
{
	uint64_t v;

	memcpy(&v, (const char *)s + off, sizeof(v));
	return v;
}

static void kv_put_u64(void *s, size_t off, uint64_t v)
{
	memcpy((char *)s + off, &v, sizeof(v));
}

/* Where the request's arrays go; its length, or 0 if it cannot be sent. */
static size_t kv_layout(unsigned int cmd, const void *arg, size_t usize,
			struct kv_span *spans)
{
	const struct kv_cmd_arrays *ca = kv_cmd_arrays(cmd);
	size_t len = sizeof(struct kvs_msg) + usize;
	int i;

	for (i = 0; ca && i < 2 && ca->a[i].elem; i++) {
		const struct kv_array *a = &ca->a[i];
		uint32_t count;

		spans[i].a = a;
		if (a->ptr + 8u > usize || a->count + 4u > usize)
			continue;
		memcpy(&count, (const char *)arg + a->count, sizeof(count));
		spans[i].user = kv_get_u64(arg, a->ptr);
		if (!spans[i].user)
			continue;	/* NULL stays NULL: the arbiter says EFAULT */
		/*
		 * Beyond these counts the arbiter refuses the call (or, for
		 * POOL_LIST, reads no further) before it touches an array:
		 * never read past what it could use.
		 */
		if (count > KVS_MAX_BATCH) {
			if (a->elem != sizeof(struct kvs_pool_desc))
				return 0;
			count = KVS_MAX_POOLS;
		}
		spans[i].off = len;
		spans[i].len = (size_t)count * a->elem;
		len += spans[i].len;
	}
	return len > KVS_MSG_MAX ? 0 : len;
}

/* The request after its header: the struct, then the arrays. */
static void kv_fill(char *buf, const void *arg, size_t usize,
		    const struct kv_span *spans)
{
	int i;

	memcpy(buf + sizeof(struct kvs_msg), arg, usize);
	/*
	 * Output arrays travel too: the arbiter may write back what it read
	 * (it probes a result buffer that way), and whatever it did not
	 * write must come back as the caller had it.
	 */
	for (i = 0; i < 2; i++) {
		if (!spans[i].a || !spans[i].user)
			continue;
		memcpy(buf + spans[i].off, (void *)(uintptr_t)spans[i].user, spans[i].len);
		kv_put_u64(buf + sizeof(struct kvs_msg), spans[i].a->ptr, spans[i].off);
	}
}

/* The bytes the command wrote go back into the caller's arrays. */
static void kv_scatter(const struct kv_span *spans, const char *data,
		       size_t out_off, size_t out_len)
{
	int i;

	for (i = 0; i < 2; i++) {
		const struct kv_span *s = &spans[i];
		size_t lo, hi;

		if (!s->a || !s->user || !(s->a->dir & KV_OUT))
			continue;
		lo = s->off > out_off ? s->off : out_off;
		hi = s->off + s->len < out_off + out_len ? s->off + s->len :
							   out_off + out_len;
		if (lo < hi)
			memcpy((char *)(uintptr_t)s->user + (lo - s->off),
			       data + (lo - out_off), hi - lo);
	}
}

/* The handle is out of step with the daemon for good (see arbiter.h). */
static void kv_break(struct kv_arbiter *arb, int err)
{
	/* Under arb->lock; atomic for the unlocked early checks. */
	__atomic_store_n(&arb->dead, true, __ATOMIC_RELAXED);
	if (!arb->broken)
		arb->broken = err;
}

/* Send one request and wait for its reply, under arb->lock. */
static int kv_exchange(struct kv_arbiter *arb, char *req, size_t len, int send_fd,
		       struct kvs_msg *hdr, char **reply, struct kv_fds *recv_fds)
{
	struct kvs_msg *m = (struct kvs_msg *)req;
	uint64_t deadline = kv_deadline(arb);
	int ret;

	m->magic = KVS_MSG_MAGIC;
	m->len = len;
	m->seq = ++arb->seq;
	ret = kv_send_all(arb, req, len, send_fd, deadline);
	if (!ret)
		ret = kv_recv_all(arb, (char *)hdr, sizeof(*hdr), recv_fds, deadline);
	if (ret)
		return ret;
	if (hdr->magic != KVS_MSG_MAGIC || hdr->seq != m->seq ||
	    hdr->cmd != m->cmd || hdr->len < sizeof(*hdr) || hdr->len > KVS_MSG_MAX)
		return -EPROTO;
	*reply = malloc(hdr->len - sizeof(*hdr) + 1);
	if (!*reply)
		return -ENOMEM;
	return kv_recv_all(arb, *reply, hdr->len - sizeof(*hdr), recv_fds, deadline);
}

/*
 * A reply (header @hdr, then @reply) to the request of @len bytes laid
 * out by @spans: the struct and arrays go back to the caller.  The
 * command's result, or -EPROTO for a reply that does not fit its request.
 */
static int kv_take_reply(void *arg, size_t usize,
			 const struct kv_span *spans, const struct kvs_msg *hdr,
			 char *reply, size_t len, int send_fd)
{
	int i;

	if (hdr->len < sizeof(*hdr) + usize + hdr->out_len ||
	    (hdr->out_len && (hdr->out_off < sizeof(*hdr) + usize ||
			      hdr->out_off + (uint64_t)hdr->out_len > len)))
		return -EPROTO;
	/* The struct comes back whole, but pointers stay the caller's. */
	for (i = 0; i < 2; i++)
		if (spans[i].a && spans[i].a->ptr + 8u <= usize)
			kv_put_u64(reply, spans[i].a->ptr, kv_get_u64(arg, spans[i].a->ptr));
	if (send_fd >= 0)	/* the wire said 0; the caller's fd is its own */
		((struct kvs_pool_create *)reply)->mem_fd = send_fd;
	memcpy(arg, reply, usize);
	kv_scatter(spans, reply + usize, hdr->out_off, hdr->out_len);
	return hdr->result;
}

/* ---- the shared ring ----------------------------------------------------- */

/*
 * How long a caller spins for the daemon's answer on the ring, while the
 * daemon polls on another CPU, before it sleeps on the cq doorbell: while
 * its request is not taken, then while the daemon works on it.  A daemon
 * that does not poll, or polls on the caller's own CPU, is never spun
 * for: that would only keep one of the two from running.
 */
#define KV_RING_TAKE_NS		10000
#define KV_RING_WORK_NS		1000000

#define KV_RING_SIZE		(256u << 10)	/* larger requests use the socket */

static inline void kv_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static bool kv_ring_cmd(unsigned int cmd)
{
	return cmd == KVS_IOC_ALLOC || cmd == KVS_IOC_PUBLISH ||
	       cmd == KVS_IOC_LOOKUP || cmd == KVS_IOC_PUT;
}

/*
 * The cq or wait bell (a unix socket the daemon writes), emptied: its
 * bytes only ever said "look again".
 */
static void kv_bell_drain(int fd)
{
	char buf[64];

	while (read(fd, buf, sizeof(buf)) == (ssize_t)sizeof(buf))
		;
}

/*
 * The doorbells are an eventfd (sq) and a socket (cq).  An older daemon
 * sent pipes, whose sq end raises SIGPIPE once the daemon is gone: its
 * ring is left unused, and the socket serves.
 */
static bool kv_bells_ok(int sq, int cq)
{
	struct stat st;

	return !fstat(sq, &st) && !S_ISFIFO(st.st_mode) &&
	       !fstat(cq, &st) && S_ISSOCK(st.st_mode);
}

/* RING_SETUP's reply: the ring's memfd, then its two doorbells. */
static int kv_ring_map(struct kv_arbiter *arb, const struct kvs_ring_setup *rs,
		       struct kv_fds *fds)
{
	struct stat st;
	void *p;

	if (fds->n != 3 || rs->ring_fd != 0 || rs->sq_bell != 1 || rs->cq_bell != 2 ||
	    !kv_bells_ok(fds->fd[1], fds->fd[2]) ||
	    fstat(fds->fd[0], &st) || rs->size < KVS_RING_MIN ||
	    rs->area_off < sizeof(struct kvs_ring_ctl) || rs->area_off % 64 ||
	    (uint64_t)st.st_size < (uint64_t)rs->area_off + rs->size)
		return -EPROTO;
	p = mmap(NULL, (size_t)rs->area_off + rs->size, PROT_READ | PROT_WRITE,
		 MAP_SHARED, fds->fd[0], 0);
	if (p == MAP_FAILED)
		return -errno;
	arb->sring = p;
	arb->sring_area = (uint8_t *)p + rs->area_off;
	arb->sring_size = rs->size;
	arb->sring_map_len = (size_t)rs->area_off + rs->size;
	arb->sq_bell = fds->fd[1];
	arb->cq_bell = fds->fd[2];
	fds->n = 1;			/* the memfd: closed, the mapping stays */
	return 0;
}

static int kv_sock_call_fds(struct kv_arbiter *arb, unsigned long cmd, void *arg,
			    struct kv_fds *fds);

static int kv_ring_setup(struct kv_arbiter *arb)
{
	struct kvs_ring_setup rs = { .size = KV_RING_SIZE };
	struct kv_fds fds = { .n = 0 };
	int ret;

	ret = kv_sock_call_fds(arb, KVS_SOCK_RING_SETUP, &rs, &fds);
	if (!ret)
		ret = kv_ring_map(arb, &rs, &fds);
	kv_fds_close(&fds);
	return ret;
}

/* ms left until @deadline for poll(): -1 for none, 0 once it has passed. */
static int kv_poll_ms(uint64_t deadline)
{
	uint64_t now;

	if (!deadline)
		return -1;
	now = kv_now_ns();
	if (now >= deadline)
		return 0;
	return (int)((deadline - now + 999999) / 1000000);
}

/*
 * Sleep until the daemon has served request @sq: on the cq doorbell,
 * which it rings for a request whose sq is in enter; the socket is
 * watched too, as it turns readable (EOF) only when the daemon is gone.
 */
static int kv_ring_sleep(struct kv_arbiter *arb, uint32_t sq, uint64_t deadline)
{
	struct pollfd p[2] = {
		{ .fd = arb->cq_bell, .events = POLLIN },
		{ .fd = arb->fd, .events = POLLIN },
	};
	int ms;

	__atomic_store_n(&arb->sring->enter, sq, __ATOMIC_SEQ_CST);
	for (;;) {
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (__atomic_load_n(&arb->sring->cq, __ATOMIC_ACQUIRE) == sq)
			return 0;
		if (p[0].revents & (POLLHUP | POLLERR) || p[1].revents)
			return -ENOTCONN;
		ms = kv_poll_ms(deadline);
		if (!ms)
			return -ETIMEDOUT;
		if (poll(p, 2, ms) < 0 && errno != EINTR)
			return -ENOTCONN;
		if (p[0].revents & POLLIN)
			kv_bell_drain(arb->cq_bell);
	}
}

/*
 * Wait for the daemon to serve request @sq: spin while it polls on
 * another CPU (KV_RING_TAKE_NS for it to take the request, then
 * KV_RING_WORK_NS while it works), else, or past either, sleep.
 */
static int kv_ring_wait(struct kv_arbiter *arb, uint32_t sq, uint64_t start,
			uint64_t deadline)
{
	uint32_t cpu = __atomic_load_n(&arb->sring->daemon_cpu, __ATOMIC_RELAXED);
	uint64_t limit = start + KV_RING_TAKE_NS;
	bool taken = false;
	unsigned int i = 0;

	if (cpu == (uint32_t)sched_getcpu() + 1)
		return kv_ring_sleep(arb, sq, deadline);
	while (__atomic_load_n(&arb->sring->cq, __ATOMIC_ACQUIRE) != sq) {
		kv_cpu_relax();
		if (++i % 32)
			continue;
		if (!taken && __atomic_load_n(&arb->sring->taken, __ATOMIC_ACQUIRE) == sq) {
			taken = true;
			limit = kv_now_ns() + KV_RING_WORK_NS;
		}
		if (kv_now_ns() >= limit)
			return kv_ring_sleep(arb, sq, deadline);
	}
	return 0;
}

/*
 * Wake a daemon that sleeps: add 1 to the sq bell's eventfd count (8
 * bytes; anything shorter is EINVAL).  A count at its limit (EAGAIN) has
 * woken it already.  An eventfd never says EPIPE, so no SIGPIPE: a dead
 * daemon is found by the wait, on the socket.
 */
static void kv_ring_doorbell(struct kv_arbiter *arb)
{
	static const uint64_t one = 1;
	ssize_t n;

	do {
		n = write(arb->sq_bell, &one, sizeof(one));
	} while (n < 0 && errno == EINTR);
}

/*
 * A page command through the ring, under arb->lock: its result, or 1 when
 * the request does not fit in the ring (the socket carries it then).
 */
static int kv_ring_call(struct kv_arbiter *arb, unsigned int cmd, void *arg)
{
	struct kv_span spans[2] = { { 0 } };
	size_t usize = _IOC_SIZE(cmd), len = kv_layout(cmd, arg, usize, spans);
	struct kvs_msg *m = (struct kvs_msg *)arb->sring_area, hdr;
	uint64_t start, deadline, seq;
	uint32_t sq;
	int ret;

	if (!len)
		return -E2BIG;
	if (len > arb->sring_size)
		return 1;
	start = kv_now_ns();
	deadline = arb->timeout_ms ? start + arb->timeout_ms * 1000000ull : 0;
	*m = (struct kvs_msg) {
		.magic = KVS_MSG_MAGIC, .cmd = cmd, .len = len, .seq = seq = ++arb->seq,
	};
	kv_fill((char *)m, arg, usize, spans);
	/*
	 * The ring's own sq, not a count of ours: after fork() parent and
	 * child share the connection (one at a time, as on the socket).
	 */
	sq = __atomic_load_n(&arb->sring->sq, __ATOMIC_RELAXED) + 1;
	__atomic_store_n(&arb->sring->client_cpu, (uint32_t)sched_getcpu() + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&arb->sring->sq, sq, __ATOMIC_SEQ_CST);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&arb->sring->flags, __ATOMIC_SEQ_CST) & KVS_RING_NEED_WAKEUP)
		kv_ring_doorbell(arb);
	ret = kv_ring_wait(arb, sq, start, deadline);
	if (ret)
		return ret;
	memcpy(&hdr, m, sizeof(hdr));
	if (hdr.magic != KVS_MSG_MAGIC || hdr.seq != seq || hdr.cmd != cmd ||
	    hdr.len < sizeof(hdr) || hdr.len > len)
		return -EPROTO;
	return kv_take_reply(arg, usize, spans, &hdr, (char *)(m + 1), len, -1);
}

/* ---- waiting for a claim --------------------------------------------------- */

/*
 * The connection's KVS_SOCK_WAIT_FD bell (a socket), asked for the first time a
 * LOOKUP has to wait: KV_WAIT_FD_NONE from a daemon that has none, -errno
 * when the call failed (the handle is broken if that was a timeout).  The
 * daemon makes it readable at once when no wait is pending, so a claim
 * that ended before the bell existed is not missed.
 */
static int kv_sock_wait_fd(struct kv_arbiter *arb)
{
	struct kvs_wait_fd wf = { .flags = 0 };
	struct kv_fds fds = { .n = 0 };
	int ret, fd;

	pthread_mutex_lock(&arb->wait_lock);
	fd = arb->wait_fd;
	if (fd != KV_WAIT_FD_UNSET)
		goto out;
	ret = kv_sock_call_fds(arb, KVS_SOCK_WAIT_FD, &wf, &fds);
	if (!ret && fds.n == 1 && wf.wait_fd == 0) {
		fd = arb->wait_fd = fds.fd[0];
		fds.n = 0;
	} else if (ret == -ENOTTY) {
		fd = arb->wait_fd = KV_WAIT_FD_NONE;
	} else {
		/* EMFILE, say: asked again next time. */
		fd = ret ? ret : -EPROTO;
	}
	kv_fds_close(&fds);
out:
	pthread_mutex_unlock(&arb->wait_lock);
	return fd;
}

/* On the connection's wait bell (KVS_SOCK_WAIT_FD), else a short sleep. */
static int kv_sock_wait_ready(struct kv_arbiter *arb, int ms)
{
	struct pollfd p[2] = {
		{ .events = POLLIN },
		{ .fd = arb->fd, .events = POLLIN },	/* EOF: the daemon is gone */
	};
	unsigned int limit;

	if (ms < 1)
		return 0;
	p[0].fd = kv_sock_wait_fd(arb);
	if (p[0].fd < 0 && __atomic_load_n(&arb->dead, __ATOMIC_RELAXED))
		return p[0].fd == KV_WAIT_FD_NONE ? -ENOTCONN : p[0].fd;
	if (p[0].fd < 0) {
		struct timespec ts = { 0, 1000000 };

		nanosleep(&ts, NULL);
		return 0;
	}
	/*
	 * No longer than a call's deadline: a stopped daemon rings nothing,
	 * and the LOOKUP after this one then times out.
	 */
	limit = kv_arbiter_timeout(arb);	/* without arb->lock here */
	if (limit && (unsigned int)ms > limit)
		ms = limit;
	if (poll(p, 2, ms) > 0 && (p[0].revents & POLLIN))
		kv_bell_drain(p[0].fd);
	return 0;
}

/* ---- one call ------------------------------------------------------------ */

/* A call; the descriptors its reply carried are left in @fds. */
static int kv_sock_call_fds(struct kv_arbiter *arb, unsigned long cmd, void *arg,
			    struct kv_fds *fds)
{
	struct kv_span spans[2] = { { 0 } };
	size_t usize = _IOC_SIZE(cmd), len;
	int send_fd = -1, ret;
	struct kvs_msg hdr;
	char *req = NULL, *reply = NULL;
	void *wire;

	if (__atomic_load_n(&arb->dead, __ATOMIC_RELAXED))
		return -ENOTCONN;
	len = kv_layout(cmd, arg, usize, spans);
	if (!len)
		return -E2BIG;
	req = calloc(1, len);
	if (!req)
		return -ENOMEM;
	kv_fill(req, arg, usize, spans);
	((struct kvs_msg *)req)->cmd = cmd;
	wire = req + sizeof(struct kvs_msg);
	if (_IOC_NR(cmd) == _IOC_NR(KVS_IOC_POOL_CREATE) &&
	    usize >= offsetof(struct kvs_pool_create, mem_fd) + 4) {
		struct kvs_pool_create *pc = wire;

		if (pc->mem_fd >= 0) {
			/* As the ioctl would: a bad fd is the caller's EBADF. */
			if (fcntl(pc->mem_fd, F_GETFD) < 0) {
				free(req);
				return -EBADF;
			}
			send_fd = pc->mem_fd;
			pc->mem_fd = 0;		/* the first descriptor sent */
		}
	}

	pthread_mutex_lock(&arb->lock);
	ret = arb->dead ? -ENOTCONN :
	      kv_exchange(arb, req, len, send_fd, &hdr, &reply, fds);
	if (ret)
		kv_break(arb, ret);
	pthread_mutex_unlock(&arb->lock);
	if (!ret)
		ret = kv_take_reply(arg, usize, spans, &hdr, reply, len, send_fd);
	free(reply);
	free(req);
	return ret;
}

static int kv_fd_at(const struct kv_fds *f, unsigned int i)
{
	return i < f->n ? f->fd[i] : -1;
}

/* The descriptors a reply carried go to the caller's struct. */
static int kv_sock_call(struct kv_arbiter *arb, unsigned long cmd, void *arg)
{
	struct kv_fds fds = { .n = 0 };
	int ret = kv_sock_call_fds(arb, cmd, arg, &fds);
	unsigned int kept = 0;

	if (!ret && _IOC_NR(cmd) == _IOC_NR(KVS_IOC_POOL_ATTACH) &&
	    _IOC_SIZE(cmd) >= offsetof(struct kvs_pool_attach, mem_fd) + 4) {
		struct kvs_pool_attach *at = arg;

		at->mem_fd = kv_fd_at(&fds, kept++);
		/* The daemon attached, but its fd could not be received here. */
		if ((at->flags & KVS_ATTACH_MEM_FD) && at->mem_fd < 0)
			ret = -EMFILE;
	} else if (!ret && cmd == KVS_SOCK_RING_SETUP) {
		struct kvs_ring_setup *rs = arg;

		rs->ring_fd = kv_fd_at(&fds, kept++);
		rs->sq_bell = kv_fd_at(&fds, kept++);
		rs->cq_bell = kv_fd_at(&fds, kept++);
	} else if (!ret && cmd == KVS_SOCK_WAIT_FD) {
		((struct kvs_wait_fd *)arg)->wait_fd = kv_fd_at(&fds, kept++);
	} else if (!ret && cmd == KVS_IOC_CHAN_OPEN) {
		struct kvs_chan_open *co = arg;

		/* The daemon's channel: its end of a socket pair. */
		co->fd = kv_fd_at(&fds, kept++);
		if (co->fd < 0)
			ret = -EMFILE;
	}
	while (fds.n > kept)
		close(fds.fd[--fds.n]);
	return ret;
}

/* The page commands on the ring; the rest, and what does not fit, on the socket. */
static int kv_ring_or_sock_call(struct kv_arbiter *arb, unsigned long cmd, void *arg)
{
	int ret;

	if (kv_ring_cmd(cmd)) {
		if (__atomic_load_n(&arb->dead, __ATOMIC_RELAXED))
			return -ENOTCONN;
		pthread_mutex_lock(&arb->lock);
		ret = arb->dead ? -ENOTCONN : kv_ring_call(arb, cmd, arg);
		/* Only the command's own errors leave the handle usable. */
		if (ret == -ETIMEDOUT || ret == -ENOTCONN || ret == -EPROTO)
			kv_break(arb, ret);
		pthread_mutex_unlock(&arb->lock);
		if (ret <= 0)
			return ret;
	}
	return kv_sock_call(arb, cmd, arg);
}

const struct kv_transport_ops kv_socket_ops = {
	.name		= "socket",
	.daemon		= true,
	.call		= kv_sock_call,
	.wait_ready	= kv_sock_wait_ready,
	.close		= kv_sock_close,
};

const struct kv_transport_ops kv_ring_ops = {
	.name		= "daemon ring",
	.daemon		= true,
	.call		= kv_ring_or_sock_call,
	.wait_ready	= kv_sock_wait_ready,
	.close		= kv_sock_close,
};
