// SPDX-License-Identifier: GPL-2.0
/*
 * The arbiter socket: each accepted connection is one arbiter client
 * (kvs_client), released with everything it holds when the connection
 * closes, whatever the reason.
 *
 * Framing (<linux/kvshare.h>, "The kvshared socket"): a request is
 * struct kvs_msg, the command struct (_IOC_SIZE(cmd) bytes) and a data
 * area; pointer fields are offsets from the start of the message.  The
 * reply is the header, the command struct (usize bytes) and, at
 * out_off/out_len, the bytes of the data area the command wrote.
 * Decisions where the header leaves room:
 *
 * - A reply always carries the command struct when the request did
 *   (len >= header + usize): the updated one on success, the request's
 *   own bytes on failure, with nothing written back (out_len 0), as the
 *   ioctl copies nothing back on failure.  A request too short to hold
 *   its struct gets a bare header.  Clients frame replies by len.
 * - The request's result, out_off and out_len must be 0 (EINVAL).
 * - Bad magic, len < header or len > KVS_MSG_MAX cannot be framed: the
 *   connection is closed.  EOF inside a message closes it too.
 * - Descriptors are taken only with POOL_CREATE, and only one, referred
 *   to by mem_fd 0; descriptors sent with any other command, more than
 *   one, or with mem_fd -1 are closed and the command fails with EINVAL
 *   (the header's "descriptors where none belong").  mem_fd 0 without a
 *   descriptor, or mem_fd > 0, is EBADF, as an unopened fd is for the
 *   ioctl.  A descriptor that is not a regular file is EINVAL here, and
 *   the core refuses anything but a memfd sealed against shrinking (as
 *   the module does): a socket could even hold a connection to this
 *   daemon open forever.  For a KVS_POOL_DEVICE_MEM pool the descriptor
 *   is a driver's handle, of whatever type the driver makes: the core
 *   refuses sockets, directories, io_uring and kvshare files and
 *   non-memfd regular files (kvs_host_mem_get()).
 * - Credentials are the peer's at connect: SO_PEERCRED (uid, gid, pid)
 *   and SO_PEERGROUPS (supplementary groups); uid 0 is admin.
 * - Descriptors must be sent with the message's first byte (one sendmsg
 *   per message does that): the daemon reads exactly one message at a
 *   time, so descriptors can never be taken for the wrong message.
 *
 * - The shared ring (RING_SETUP, RING_ENTER; ring.h): a sealed memfd per
 *   connection, counted against max_buffer_total (rings together at most
 *   half of it, one uid's an eighth: they have no stall deadline).  A ring
 *   request is copied out once by ring.c and run by msg_handle() as a
 *   socket request is; only the page commands (EOPNOTSUPP else);
 *   unframeable closes the connection (c->doom on RING_ENTER, so that
 *   nothing is freed under the caller).  Polling and doorbells: ring.c.
 * - WAIT_FD: a bell (a socket pair, bell.h) per connection, rung by the core's waker when the
 *   claim the connection's latest LOOKUP waits on ends (kvs_client_set_
 *   waker(), set at accept), and at once if no wait is pending when it is
 *   made; the client polls it instead of repeating the LOOKUP.
 *
 * One thread, non-blocking sockets: a connection that sends half a
 * message only holds its own buffer, and one that does not read its
 * replies is not read from until it does.  Caps keep one user from
 * taking what the others need (config.h, README.md):
 *
 * - max_connections, and max_connections_per_uid (uid 0 exempt): a
 *   connection over either is accepted and closed at once, so that the
 *   listen backlog drains instead of filling with connections nobody
 *   serves; one rate-limited log line says why.
 * - max_conn_buffer: a message announcing more is not framed (closed).
 *   The buffer grows as bytes arrive (the reply is built in place and is
 *   never longer than its request), so it holds what was really sent.
 * - max_buffer_total: all connections' buffers beyond the first BUF_MIN
 *   bytes of each (which every connection may have, so that small calls
 *   always work); a connection that would exceed it is closed.
 * - stall_timeout_ms: from the first byte of a request to its last, and
 *   from a reply blocked by a full socket to its last byte; a client past
 *   it is closed, whatever it still trickles (slowloris).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/sockios.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "bell.h"
#include "closer.h"
#include "core.h"
#include "kvshared.h"
#include "listen.h"
#include "remote/remote.h"
#include "remote/ctl.h"
#include "ring.h"
#include "server.h"

#define HDR		((uint32_t)sizeof(struct kvs_msg))
#define MAX_OUT_FDS	3		/* RING_SETUP: the ring and its doorbells */
#define BUF_MIN		4096
#define BUF_KEEP	(64u << 10)	/* larger buffers are freed after use */
#define READ_BUDGET	16		/* messages per wakeup, for fairness */
#define MAX_GROUPS	65536		/* NGROUPS_MAX */

struct conn {
	struct kvsd_watch w;
	struct conn *prev, *next;
	struct kvs_client *cl;
	uint64_t id;
	pid_t pid;
	struct kvs_cred cred;
	uint32_t *groups;
	uint8_t *buf;			/* the request, then its reply, in place */
	uint32_t cap;
	uint32_t in_len;		/* request bytes read */
	uint32_t out_len, out_sent;	/* reply bytes to send, sent */
	void *out_mem;			/* ATTACH: memory whose fd goes along */
	int out_fds[MAX_OUT_FDS];	/* sent with the reply, then closed */
	unsigned int n_out_fds;
	struct kvsd_ring *ring;		/* the shared ring, if asked for */
	int wait_bell;			/* WAIT_FD: our end, rung by the core's waker */
	uint64_t ns;			/* ATTACH's namespace, for the remote tier */
	/*
	 * Its uid's close queue (closer.h), where a place is reserved for
	 * the socket and for fds[0]: a client's file is never closed here.
	 */
	struct kvsd_closeq *closeq;
	int fds[1];			/* POOL_CREATE's descriptor */
	unsigned int n_fds;
	bool fds_trunc;			/* descriptors where none belong */
	bool throttled;			/* not read until the closers catch up */
	const char *doom;		/* to be closed, for this reason (ring garbage) */
	char doom_buf[96];
	/*
	 * When the message being read began, or the reply being sent was
	 * blocked by a full socket (0: neither): the stall deadline runs
	 * from there, however slowly bytes trickle in or out.
	 */
	uint64_t busy_since;
};

static struct {
	struct kvsd *d;
	struct kvsd_watch listen;
	char *path;
	ino_t ino;
	struct conn *conns;
	unsigned int n_conns;
	uint64_t next_id;
	bool accept_paused;
	bool accept_warned;		/* logged once per episode */
	uint64_t buffered;		/* buffer bytes beyond BUF_MIN, all connections */
} srv = { .listen = { .fd = -1 } };

/* ---- connections ------------------------------------------------------- */

static void conn_drop_fds(struct conn *c)
{
	/* Never close() here: the file may be a client's FUSE file. */
	if (c->n_fds)
		kvsd_closeq_close(c->closeq, c->fds[0]);
	c->n_fds = 0;
	c->fds_trunc = false;
}

/*
 * Close a client's socket, in a place reserved in @q.  Descriptors still
 * queued on it would be released by the kernel as it goes, on this
 * thread: then the closers close it.  Once shut for reading, nothing more
 * can be queued (unix_stream_sendmsg() checks under the peer's lock), so
 * an empty queue stays empty and the socket is closed here.
 */
static void sock_close(struct kvsd_closeq *q, int fd)
{
	int inq = 1;

	shutdown(fd, SHUT_RD);
	if (ioctl(fd, SIOCINQ, &inq) || inq) {
		kvsd_closeq_close(q, fd);
		return;
	}
	close(fd);
	kvsd_closeq_unreserve(q, 1);
}

static void conn_log_close(struct conn *c, const char *why)
{
	uint32_t pool_id = kvs_client_pool_id(c->cl);
	uint64_t held = kvs_client_held(c->cl);
	char name[KVS_NAME_MAX], what[KVS_NAME_MAX + 64];

	if (pool_id) {
		kvsd_pool_name(srv.d, pool_id, name);
		snprintf(what, sizeof(what), "released %llu pages of pool '%s'",
			 (unsigned long long)held, name);
	} else {
		snprintf(what, sizeof(what), "not attached");
	}
	kvsd_log_limited(KVSD_LOG_CLOSE, "client %llu (pid %d uid %u) %s%s%s: %s",
		 (unsigned long long)c->id, c->pid, c->cred.uid,
		 why ? "dropped (" : "disconnected", why ? why : "", why ? ")" : "",
		 what);
}

/* What a buffer of @cap bytes counts against max_buffer_total. */
static uint64_t buf_counted(uint32_t cap)
{
	return cap > BUF_MIN ? cap - BUF_MIN : 0;
}

static void conn_free_buf(struct conn *c)
{
	srv.buffered -= buf_counted(c->cap);
	free(c->buf);
	c->buf = NULL;
	c->cap = 0;
}

static void conn_drop_out_fds(struct conn *c)
{
	while (c->n_out_fds)
		close(c->out_fds[--c->n_out_fds]);
}

/* However a connection ends, its client and everything it holds go. */
static void conn_close(struct conn *c, const char *why)
{
	conn_log_close(c, why);
	kvsd_watch_del(&c->w);
	sock_close(c->closeq, c->w.fd);
	conn_drop_fds(c);
	kvsd_closeq_put(c->closeq);
	if (c->out_mem)
		kvs_host_mem_put(c->out_mem);
	conn_drop_out_fds(c);
	if (c->ring) {
		srv.buffered -= kvsd_ring_size(c->ring);
		kvsd_ring_free(c->ring);
	}
	/* Releasing its holdings may wake others, never itself: then the bell. */
	kvs_client_free(c->cl);
	if (c->wait_bell >= 0)
		close(c->wait_bell);
	if (c->prev)
		c->prev->next = c->next;
	else
		srv.conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	srv.n_conns--;
	free(c->groups);
	conn_free_buf(c);
	free(c);
}

/*
 * Room for @need bytes in the buffer.  Every connection may have BUF_MIN
 * (bounded by max_connections); beyond that, the buffers of all
 * connections together stay within max_buffer_total.  -ENOBUFS over it.
 */
static int conn_reserve(struct conn *c, uint32_t need)
{
	uint8_t *p;

	if (c->cap >= need)
		return 0;
	if (need < BUF_MIN)
		need = BUF_MIN;
	if (srv.buffered - buf_counted(c->cap) + buf_counted(need) >
	    srv.d->cfg->max_buffer_total)
		return -ENOBUFS;
	p = realloc(c->buf, need);
	if (!p)
		return -ENOMEM;
	srv.buffered += buf_counted(need) - buf_counted(c->cap);
	c->buf = p;
	c->cap = need;
	return 0;
}

/* ---- copy_in / copy_out: offsets into the request's data area ---------- */

struct req {
	uint8_t *msg;
	uint64_t len;			/* the whole request */
	uint64_t data;			/* where its data area starts */
	uint64_t lo, hi;		/* bytes written by copy_out */
};

static int req_range(const struct req *rq, uint64_t off, uint64_t len)
{
	/* Offset 0 (NULL) is below the data area, like any other header offset. */
	if (off < rq->data || off > rq->len || len > rq->len - off)
		return -EFAULT;
	return 0;
}

static int req_copy_in(struct kvs_call *call, void *dst, __u64 src, __u64 len)
{
	struct req *rq = call->host;

	if (!len)
		return 0;
	if (req_range(rq, src, len))
		return -EFAULT;
	memcpy(dst, rq->msg + src, len);
	return 0;
}

static int req_copy_out(struct kvs_call *call, __u64 dst, const void *src, __u64 len)
{
	struct req *rq = call->host;

	if (!len)
		return 0;
	if (req_range(rq, dst, len))
		return -EFAULT;
	memcpy(rq->msg + dst, src, len);
	if (dst < rq->lo)
		rq->lo = dst;
	if (dst + len > rq->hi)
		rq->hi = dst + len;
	return 0;
}

/* ---- one command --------------------------------------------------------- */

static bool all_zero(const uint8_t *p, size_t len)
{
	while (len--)
		if (*p++)
			return false;
	return true;
}

static bool is_cmd(unsigned int cmd, unsigned int ioc)
{
	return _IOC_NR(cmd) == _IOC_NR(ioc);
}

/*
 * POOL_CREATE's mem_fd: 0 names the descriptor sent along, -1 none.  An
 * fd number that cannot be open (INT_MAX) stands for a missing one, so
 * that the core checks the rest of the struct first, as with the ioctl.
 */
static int create_fd(struct conn *c, struct kvs_pool_create *req)
{
	struct statx stx;

	if (c->n_fds > 1 || (c->n_fds && req->mem_fd == -1))
		return -EINVAL;
	if (req->mem_fd < 0)
		return 0;		/* -1, or < -1 which the core refuses */
	if (req->mem_fd > 0 || !c->n_fds) {
		req->mem_fd = INT_MAX;
		return 0;
	}
	/* An O_PATH descriptor is no open file: the module's fget() says EBADF. */
	if (fcntl(c->fds[0], F_GETFL) & O_PATH)
		return -EBADF;
	/*
	 * The file's type, from what the kernel already knows: a plain fstat()
	 * may ask a FUSE server, which need never answer.
	 */
	if (statx(c->fds[0], "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC,
		  STATX_TYPE, &stx))
		return -EINVAL;
	/* Device memory is a driver's handle: the core judges it by exclusion. */
	if (!S_ISREG(stx.stx_mode) && !(req->flags & KVS_POOL_DEVICE_MEM))
		return -EINVAL;
	req->mem_fd = c->fds[0];
	return 0;
}

/* The remote tier (remote/remote.h) sees what a pool's clients publish and miss. */
static void remote_hooks(struct conn *c, unsigned int cmd, union kvs_cmd_buf *arg,
			 struct kvs_call *call)
{
	if (is_cmd(cmd, KVS_IOC_POOL_ATTACH))
		c->ns = arg->attach.ns;
	else if (is_cmd(cmd, KVS_IOC_POOL_DESTROY))
		kvsd_remote_pool_gone(arg->destroy.pool_id);
	else if (is_cmd(cmd, KVS_IOC_PUBLISH))
		kvsd_remote_published(kvs_client_pool_id(c->cl), c->ns, c->cred.uid,
				      call, &arg->publish);
	else if (is_cmd(cmd, KVS_IOC_LOOKUP))
		kvsd_remote_lookup(c->cl, kvs_client_pool_id(c->cl), c->ns,
				   c->cred.uid, call, &arg->lookup);
}

static int conn_run(struct conn *c, const struct kvs_msg *h, uint32_t usize,
		    struct req *rq)
{
	uint32_t ksize = kvs_cmd_size(h->cmd);
	uint8_t *ustruct = rq->msg + HDR;
	union kvs_cmd_buf arg;
	struct kvs_call call = {
		.cred = &c->cred,
		.copy_in = req_copy_in,
		.copy_out = req_copy_out,
		.host = rq,
	};
	bool create = is_cmd(h->cmd, KVS_IOC_POOL_CREATE);
	int32_t wire_fd = 0;
	int ret;

	if (ksize > sizeof(arg))
		return -ENOTTY;
	/* As copy_struct_from_user(): zero-extend, or refuse an unknown tail. */
	if (usize > ksize && !all_zero(ustruct + ksize, usize - ksize))
		return -E2BIG;
	memset(&arg, 0, sizeof(arg));
	memcpy(&arg, ustruct, usize < ksize ? usize : ksize);

	if (create) {
		wire_fd = arg.create.mem_fd;
		ret = create_fd(c, &arg.create);
		if (ret)
			return ret;
	}
	ret = kvs_cmd(c->cl, h->cmd, &arg, &call);
	if (create)
		arg.create.mem_fd = wire_fd;
	if (!ret)
		remote_hooks(c, h->cmd, &arg, &call);
	if (call.mem_out && ret) {
		kvs_host_mem_put(call.mem_out);	/* never, but never leak it */
	} else if (call.mem_out) {
		c->out_mem = call.mem_out;
		arg.attach.mem_fd = 0;	/* the first descriptor of the reply */
	}
	if (!ret)
		memcpy(ustruct, &arg, usize < ksize ? usize : ksize);
	return ret;
}

/* The commands the ring carries: the page commands, as io_uring does. */
static bool ring_cmd_ok(unsigned int cmd)
{
	return is_cmd(cmd, KVS_IOC_ALLOC) || is_cmd(cmd, KVS_IOC_PUBLISH) ||
	       is_cmd(cmd, KVS_IOC_LOOKUP) || is_cmd(cmd, KVS_IOC_PUT);
}

/* @ring: the request came through the ring, which carries no descriptors. */
static int msg_check(const struct conn *c, const struct kvs_msg *h, uint32_t usize,
		     bool ring)
{
	if (!kvs_cmd_size(h->cmd))
		return -ENOTTY;
	if (ring && !ring_cmd_ok(h->cmd))
		return -EOPNOTSUPP;
	if (h->result || h->out_off || h->out_len || h->len < HDR + usize)
		return -EINVAL;
	if (!ring && (c->fds_trunc ||
		      (c->n_fds && !is_cmd(h->cmd, KVS_IOC_POOL_CREATE))))
		return -EINVAL;
	return 0;
}

static bool is_sock_cmd(unsigned int cmd)
{
	return cmd == KVS_SOCK_RING_SETUP || cmd == KVS_SOCK_RING_ENTER ||
	       cmd == KVS_SOCK_WAIT_FD || cmd == KVS_SOCK_REMOTE_TIER;
}

/*
 * The core's waker (called with a pool lock held): the claim that this
 * connection's latest LOOKUP waits on has ended.
 */
static void conn_wake(void *arg)
{
	struct conn *c = arg;

	if (c->wait_bell >= 0)
		kvsd_bell_ring(c->wait_bell);
}

static int wait_fd_setup(struct conn *c, struct kvs_wait_fd *wf)
{
	int theirs, ret;

	if (wf->flags || wf->wait_fd || wf->reserved[0] || wf->reserved[1])
		return -EINVAL;
	if (c->wait_bell >= 0)
		return -EBUSY;
	ret = kvsd_bell_new(false, &c->wait_bell, &theirs);
	if (ret)
		return ret;
	/* Readable unless a wait is pending, as the module's file is. */
	if (!kvs_client_waiting(c->cl))
		kvsd_bell_ring(c->wait_bell);
	c->out_fds[c->n_out_fds++] = theirs;
	wf->wait_fd = 0;
	return 0;
}

/*
 * RING_SETUP: the ring comes out of the buffer budget, as a buffer does,
 * and ring.c keeps the rings' share of it.
 */
static int ring_setup(struct conn *c, struct kvs_ring_setup *rs)
{
	const struct kvsd_config *cfg = srv.d->cfg;
	int ret;

	ret = kvsd_ring_check(rs, cfg->max_conn_buffer);
	if (ret)
		return ret;
	if (c->ring)
		return -EBUSY;
	if (srv.buffered + rs->size > cfg->max_buffer_total)
		return -ENOBUFS;
	ret = kvsd_ring_new(c, c->cred.uid, c->cred.admin, cfg->max_buffer_total,
			    rs, c->out_fds + c->n_out_fds, &c->ring);
	if (ret)
		return ret;
	c->n_out_fds += 3;
	srv.buffered += rs->size;
	kvsd_debug("client %llu: ring of %u bytes", (unsigned long long)c->id, rs->size);
	return 0;
}

/* RING_ENTER: unframeable garbage closes the connection once this returns. */
static int ring_enter(struct conn *c, struct kvs_ring_enter *re)
{
	int ret;

	if (re->flags || re->cq || re->reserved[0] || re->reserved[1])
		return -EINVAL;
	if (!c->ring)
		return -ENXIO;
	ret = kvsd_ring_enter(c->ring, re, c->doom_buf, sizeof(c->doom_buf));
	if (ret == -EPROTO)
		c->doom = c->doom_buf;
	return ret;
}

/*
 * The socket-only commands (<linux/kvshare.h>, "The shared ring"), matched
 * by their whole number.
 */
static int sock_cmd(struct conn *c, const struct kvs_msg *h, uint8_t *ustruct)
{
	int ret;

	if (h->result || h->out_off || h->out_len || h->len != HDR + _IOC_SIZE(h->cmd))
		return -EINVAL;
	if (c->fds_trunc || c->n_fds)
		return -EINVAL;
	if (h->cmd == KVS_SOCK_RING_SETUP) {
		struct kvs_ring_setup rs;

		memcpy(&rs, ustruct, sizeof(rs));
		ret = ring_setup(c, &rs);
		if (!ret)
			memcpy(ustruct, &rs, sizeof(rs));
	} else if (h->cmd == KVS_SOCK_REMOTE_TIER) {
		struct kvs_remote_tier rt;

		memcpy(&rt, ustruct, sizeof(rt));
		ret = kvsd_remote_tier_cmd(srv.d, c->cred.uid, c->cred.admin, &rt);
		if (!ret)
			memcpy(ustruct, &rt, sizeof(rt));
	} else if (h->cmd == KVS_SOCK_WAIT_FD) {
		struct kvs_wait_fd wf;

		memcpy(&wf, ustruct, sizeof(wf));
		ret = wait_fd_setup(c, &wf);
		if (!ret)
			memcpy(ustruct, &wf, sizeof(wf));
	} else {
		struct kvs_ring_enter re;

		memcpy(&re, ustruct, sizeof(re));
		ret = ring_enter(c, &re);
		if (!ret)
			memcpy(ustruct, &re, sizeof(re));
	}
	return ret;
}

/*
 * Run the request in @buf (the connection's buffer, or a ring request
 * copied out of the ring) and turn @buf into its reply; its length.
 */
static uint32_t msg_handle(struct conn *c, uint8_t *buf, bool ring)
{
	struct kvs_msg *h = (struct kvs_msg *)buf;
	uint32_t usize = _IOC_SIZE(h->cmd);
	struct req rq = {
		.msg = buf, .len = h->len, .data = (uint64_t)HDR + usize,
		.lo = UINT64_MAX, .hi = 0,
	};
	uint32_t len = h->len >= HDR + usize ? HDR + usize : HDR;
	int ret;

	if (!ring && is_sock_cmd(h->cmd)) {
		ret = sock_cmd(c, h, buf + HDR);
	} else {
		ret = msg_check(c, h, usize, ring);
		if (!ret)
			ret = conn_run(c, h, usize, &rq);
	}
	kvsd_debug("client %llu: %scmd 0x%08x (nr 0x%02x) len %u -> %d",
		   (unsigned long long)c->id, ring ? "ring " : "", h->cmd,
		   _IOC_NR(h->cmd), h->len, ret);

	h->out_off = 0;
	h->out_len = 0;
	if (!ret && rq.hi > rq.lo) {
		/* The data written follows the struct; out_off says where it goes. */
		memmove(buf + len, buf + rq.lo, rq.hi - rq.lo);
		h->out_off = rq.lo;
		h->out_len = rq.hi - rq.lo;
		len += h->out_len;
	}
	h->result = ret;
	h->len = len;
	return len;
}

/* What ring.c runs: a request of @owner's ring, copied out of it. */
static uint32_t ring_handle(void *owner, uint8_t *msg)
{
	return msg_handle(owner, msg, true);
}

static void ring_drop(void *owner, const char *why)
{
	conn_close(owner, why);
}

static const struct kvsd_ring_ops ring_ops = {
	.handle = ring_handle,
	.drop = ring_drop,
};

/* Run the request in c->buf and turn c->buf into its reply. */
static void conn_handle(struct conn *c)
{
	c->out_len = msg_handle(c, c->buf, false);
	conn_drop_fds(c);
	c->out_sent = 0;
	c->in_len = 0;
}

/* ---- sending ------------------------------------------------------------- */

/* 0: all sent; 1: the socket is full; < 0: the connection is broken. */
static int conn_flush(struct conn *c)
{
	union {
		char buf[CMSG_SPACE(MAX_OUT_FDS * sizeof(int))];
		struct cmsghdr align;
	} ctl;

	while (c->out_sent < c->out_len) {
		struct iovec iov = {
			.iov_base = c->buf + c->out_sent,
			.iov_len = c->out_len - c->out_sent,
		};
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t n;

		if (c->out_mem || c->n_out_fds) {
			unsigned int n = c->out_mem ? 1 : c->n_out_fds;
			struct cmsghdr *cm;

			memset(&ctl, 0, sizeof(ctl));
			mh.msg_control = ctl.buf;
			mh.msg_controllen = CMSG_SPACE(n * sizeof(int));
			cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(n * sizeof(int));
			if (c->out_mem) {
				int fd = kvs_host_mem_fd(c->out_mem);

				memcpy(CMSG_DATA(cm), &fd, sizeof(fd));
			} else {
				memcpy(CMSG_DATA(cm), c->out_fds, n * sizeof(int));
			}
		}
		n = sendmsg(c->w.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 1;
			return -errno;
		}
		/* The descriptor went with the first bytes. */
		if (c->out_mem) {
			kvs_host_mem_put(c->out_mem);
			c->out_mem = NULL;
		}
		conn_drop_out_fds(c);
		c->out_sent += n;
	}
	c->out_len = 0;
	c->out_sent = 0;
	if (c->cap > BUF_KEEP)
		conn_free_buf(c);
	return 0;
}

/* ---- receiving ----------------------------------------------------------- */

/*
 * Whether a descriptor arriving now may be kept: only POOL_CREATE carries
 * one, and it comes with the message's first bytes, read while the
 * command is not yet known.  Any other is closed (by the closers), and
 * the request refused.
 */
static bool conn_fd_keep(const struct conn *c)
{
	const struct kvs_msg *h = (const struct kvs_msg *)c->buf;

	if (c->n_fds || c->fds_trunc)
		return false;
	return c->in_len < HDR || is_cmd(h->cmd, KVS_IOC_POOL_CREATE);
}

/*
 * The descriptors recvmsg() returned in @mh, for which @room places are
 * reserved in the close queue: the first of a POOL_CREATE is kept (with
 * its place), the others go to the closers, and the places left over are
 * given back.  MSG_CTRUNC: the kernel dropped some (a full descriptor
 * table; room for KVSD_RECV_FDS was given).
 */
static void conn_take_fds(struct conn *c, struct msghdr *mh, unsigned int room)
{
	struct cmsghdr *cm;
	unsigned int i, n;
	int fd;

	if (mh->msg_flags & MSG_CTRUNC)
		c->fds_trunc = true;
	for (cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
		    cm->cmsg_len < CMSG_LEN(0))
			continue;
		n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < n && room; i++, room--) {
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
			if (conn_fd_keep(c)) {
				c->fds[0] = fd;
				c->n_fds = 1;
				continue;
			}
			c->fds_trunc = true;
			kvsd_closeq_close(c->closeq, fd);
		}
	}
	if (room)
		kvsd_closeq_unreserve(c->closeq, room);
}

/*
 * Never past the current message: its descriptors are then its own.
 * Room for as many descriptors as one message may carry (SCM_MAX_FD), so
 * that the kernel drops none here (it would release them on this
 * thread), each with its place reserved in the close queue.
 */
static ssize_t conn_recv(struct conn *c, size_t want)
{
	union {
		char buf[CMSG_SPACE(KVSD_RECV_FDS * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = c->buf + c->in_len, .iov_len = want };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf),
	};
	ssize_t n;
	int ret;

	ret = kvsd_closeq_reserve(c->closeq, KVSD_RECV_FDS);
	if (ret)
		return ret;
	n = recvmsg(c->w.fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (n < 0) {
		n = -errno;
		kvsd_closeq_unreserve(c->closeq, KVSD_RECV_FDS);
		return n;
	}
	conn_take_fds(c, &mh, KVSD_RECV_FDS);
	return n;
}

/* A header is complete: can the message be framed? */
static const char *header_bad(struct conn *c, char *why, size_t why_len)
{
	const struct kvs_msg *h = (const struct kvs_msg *)c->buf;

	if (h->magic != KVS_MSG_MAGIC)
		snprintf(why, why_len, "bad magic 0x%08x", h->magic);
	else if (h->len < HDR || h->len > KVS_MSG_MAX)
		snprintf(why, why_len, "bad message length %u", h->len);
	else if (h->len > srv.d->cfg->max_conn_buffer)
		snprintf(why, why_len, "a %u-byte message, above max_conn_buffer %llu",
			 h->len, (unsigned long long)srv.d->cfg->max_conn_buffer);
	else
		return NULL;
	return why;
}

static void conn_set_events(struct conn *c, uint32_t events)
{
	if (kvsd_watch_mod(&c->w, events))
		conn_close(c, "epoll failed");
}

/*
 * How many bytes to ask for next, growing the buffer as they come: a
 * message is buffered as far as it has arrived, not as far as its header
 * announces, so that announcing 8 MiB and sending 100 bytes costs little.
 * 0, or -errno with @why set.
 */
static int conn_want(struct conn *c, uint32_t *want, char *why, size_t why_len)
{
	const struct kvs_msg *h = (const struct kvs_msg *)c->buf;
	uint32_t end, grow;
	int ret;

	if (c->in_len < HDR) {
		end = HDR;
	} else {
		end = h->len;
		if (c->in_len == c->cap) {
			grow = c->cap < end / 2 ? c->cap * 2 : end;
			ret = conn_reserve(c, grow);
			if (ret == -ENOBUFS)
				snprintf(why, why_len, "buffer budget exhausted: %llu "
					 "bytes buffered, max_buffer_total %llu",
					 (unsigned long long)srv.buffered,
					 (unsigned long long)srv.d->cfg->max_buffer_total);
			else if (ret)
				snprintf(why, why_len, "out of memory");
			if (ret)
				return ret;
		}
	}
	*want = (end < c->cap ? end : c->cap) - c->in_len;
	return 0;
}

/*
 * Whether the closers are too far behind for @c to be read: its uid has
 * KVSD_CLOSE_QUEUE_UID descriptors waiting for them, or some and all uids
 * KVSD_CLOSE_QUEUE_MAX.  A message under way (whose first bytes may have
 * brought the last of them) is read to its end, unless it brings another
 * KVSD_RECV_FDS, so a uid's queue stays below KVSD_CLOSE_QUEUE_UID +
 * 2 * KVSD_RECV_FDS.
 */
static bool conn_closers_behind(const struct conn *c)
{
	unsigned int more = c->in_len ? KVSD_RECV_FDS : 0;

	unsigned int mine = kvsd_closeq_len(c->closeq);

	/*
	 * The cap on all queues stops only uids that have some queued: one
	 * uid whose closers are stuck must not stop the others' service.
	 */
	return mine >= KVSD_CLOSE_QUEUE_UID + more ||
	       (mine && kvsd_closer_queued() >= KVSD_CLOSE_QUEUE_MAX + more);
}

/*
 * Read nothing more from @c (and take no more descriptors) until the
 * closers catch up (kvsd_server_tick()).  A request half read still runs
 * against the stall deadline.
 */
static void conn_throttle(struct conn *c)
{
	if (kvsd_watch_mod(&c->w, 0)) {
		conn_close(c, "epoll failed");
		return;
	}
	c->throttled = true;
}

static void conn_read(struct conn *c)
{
	int budget = READ_BUDGET;
	char why[128];
	ssize_t n;

	while (budget > 0) {
		const struct kvs_msg *h;
		uint32_t want;

		if (conn_reserve(c, HDR)) {
			conn_close(c, "out of memory");
			return;
		}
		if (conn_want(c, &want, why, sizeof(why))) {
			conn_close(c, why);
			return;
		}
		if (conn_closers_behind(c)) {
			conn_throttle(c);
			return;
		}
		n = conn_recv(c, want);
		if (n == -EINTR)
			continue;
		if (n == -EAGAIN || n == -EWOULDBLOCK)
			return;
		if (n <= 0) {
			if (n < 0)
				snprintf(why, sizeof(why), "%s", strerror((int)-n));
			conn_close(c, n < 0 ? why : c->in_len ?
				   "truncated message at EOF" : NULL);
			return;
		}
		if (!c->in_len)
			c->busy_since = kvsd_now_ms();
		c->in_len += n;
		if (c->in_len == HDR && header_bad(c, why, sizeof(why))) {
			conn_close(c, why);
			return;
		}
		h = (const struct kvs_msg *)c->buf;
		if (c->in_len < HDR || c->in_len < h->len)
			continue;
		conn_handle(c);
		if (c->doom) {
			conn_close(c, c->doom);
			return;
		}
		budget--;
		switch (conn_flush(c)) {
		case 0:
			c->busy_since = 0;
			break;
		case 1:
			/* The deadline now runs for the reply. */
			c->busy_since = kvsd_now_ms();
			conn_set_events(c, EPOLLOUT);
			return;
		default:
			conn_close(c, "send failed");
			return;
		}
	}
}

static void conn_event(struct kvsd_watch *w, uint32_t events)
{
	struct conn *c = (struct conn *)((char *)w - offsetof(struct conn, w));

	if (c->throttled) {
		/* Hung up or failed: epoll says so whatever it watches. */
		conn_close(c, "hung up while throttled");
		return;
	}
	if (c->out_len) {
		int ret = conn_flush(c);

		if (ret < 0) {
			conn_close(c, "send failed");
			return;
		}
		if (ret > 0)
			return;
		c->busy_since = 0;
		if (kvsd_watch_mod(&c->w, EPOLLIN)) {
			conn_close(c, "epoll failed");
			return;
		}
	}
	if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
		conn_read(c);
}

/* ---- accepting ----------------------------------------------------------- */

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS	59		/* Linux 4.13; older glibc lacks the name */
#endif

/*
 * Supplementary groups, which SO_PEERCRED does not give: SO_PEERGROUPS
 * returns those the peer had when it connected, from the kernel, as
 * SO_PEERCRED does its uid (a connection's credentials are fixed then, as
 * a file's are at open).  Reading /proc/PID/status instead would see the
 * groups the process has by the time we accept, or those of whatever
 * process reused the pid.  ERANGE says how much room is needed.
 * 0 or -errno (the connection is then refused: guessing no groups could
 * deny, never grant, but a daemon that cannot read credentials is broken).
 */
static int conn_read_groups(struct conn *c)
{
	socklen_t len = 64 * sizeof(uint32_t);	/* gid_t: 32 bits */
	uint32_t *g = NULL, *n;

	for (;;) {
		n = realloc(g, len ? len : sizeof(*g));
		if (!n) {
			free(g);
			return -ENOMEM;
		}
		g = n;
		if (!getsockopt(c->w.fd, SOL_SOCKET, SO_PEERGROUPS, g, &len))
			break;
		if (errno != ERANGE || len > MAX_GROUPS * sizeof(*g)) {
			int ret = -errno;

			free(g);
			return ret;
		}
		/* len now says what is needed; groups may grow meanwhile. */
	}
	c->groups = g;
	c->cred.n_groups = len / sizeof(*g);
	c->cred.groups = c->groups;
	return 0;
}

/*
 * Is a connection from @uc over a cap?  Then it is closed at once (so the
 * backlog drains rather than filling), with the reason in @why.  uid 0 is
 * exempt from the per-uid cap, as admin is from every per-user limit.
 */
static bool conn_over_cap(const struct ucred *uc, char *why, size_t len)
{
	const struct kvsd_config *cfg = srv.d->cfg;
	unsigned int n = 0;
	struct conn *c;

	if (srv.n_conns >= cfg->max_connections) {
		snprintf(why, len, "max_connections %u reached", cfg->max_connections);
		return true;
	}
	if (!uc->uid)
		return false;
	for (c = srv.conns; c; c = c->next)
		n += c->cred.uid == uc->uid;
	if (n >= cfg->max_connections_per_uid) {
		snprintf(why, len, "uid %u has max_connections_per_uid %u connections",
			 uc->uid, cfg->max_connections_per_uid);
		return true;
	}
	return false;
}

/*
 * A connection refused at accept may already hold descriptors: the
 * closers close it like any other.  Only out of memory, with nowhere to
 * queue it, is it closed here.
 */
static void refuse_close(uint32_t uid, int fd)
{
	struct kvsd_closeq *q = kvsd_closeq_get(uid);

	if (q && !kvsd_closeq_reserve(q, 1)) {
		sock_close(q, fd);
		kvsd_closeq_put(q);
		return;
	}
	if (q)
		kvsd_closeq_put(q);
	close(fd);
}

static void conn_new(int fd)
{
	struct ucred uc = { .uid = (uid_t)-1 };
	socklen_t len = sizeof(uc);
	struct conn *c;
	char why[96];
	int ret;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len)) {
		kvsd_log("accept: SO_PEERCRED: %s", strerror(errno));
		refuse_close(uc.uid, fd);
		return;
	}
	/*
	 * Out-of-band data inline: a byte sent with MSG_OOB is otherwise
	 * skipped by our reads, and the kernel releases the descriptors it
	 * carries right there, on this thread, where a client's FUSE file
	 * may wait forever.  Inline, they arrive as any others do.  The flag
	 * is read at each read, so one queued before this call is covered.
	 */
	if (setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &(int){ 1 }, sizeof(int))) {
		kvsd_log("accept: SO_OOBINLINE: %s", strerror(errno));
		refuse_close(uc.uid, fd);
		return;
	}
	if (conn_over_cap(&uc, why, sizeof(why))) {
		kvsd_log_limited(KVSD_LOG_REFUSED, "client (pid %d uid %u) refused: %s",
				 uc.pid, uc.uid, why);
		refuse_close(uc.uid, fd);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		goto err_oom;
	c->cl = kvs_client_new();
	if (!c->cl)
		goto err_free_conn;
	c->closeq = kvsd_closeq_get(uc.uid);
	if (!c->closeq)
		goto err_free_client;
	if (kvsd_closeq_reserve(c->closeq, 1))
		goto err_put_closeq;
	c->w.fd = fd;
	c->w.fn = conn_event;
	c->wait_bell = -1;
	kvs_client_set_waker(c->cl, conn_wake, c);
	c->id = ++srv.next_id;
	c->pid = uc.pid;
	c->cred.uid = uc.uid;
	c->cred.gid = uc.gid;
	/* uid 0 is admin: the daemon's counterpart of CAP_SYS_ADMIN. */
	c->cred.admin = uc.uid == 0;
	ret = conn_read_groups(c);
	if (ret) {
		kvsd_log("accept: SO_PEERGROUPS: %s (pid %d uid %u refused)",
			 strerror(-ret), uc.pid, uc.uid);
		goto err_close;
	}
	ret = kvsd_watch_add(&c->w, EPOLLIN);
	if (ret) {
		kvsd_log("accept: epoll: %s", strerror(-ret));
		goto err_close;
	}
	c->next = srv.conns;
	if (srv.conns)
		srv.conns->prev = c;
	srv.conns = c;
	srv.n_conns++;
	kvsd_log_limited(KVSD_LOG_CONNECT, "client %llu connected (pid %d uid %u gid %u)",
			 (unsigned long long)c->id, c->pid, uc.uid, uc.gid);
	return;

err_close:
	/* The descriptor goes through the close slot reserved above. */
	kvs_client_free(c->cl);
	free(c->groups);
	sock_close(c->closeq, fd);
	kvsd_closeq_put(c->closeq);
	free(c);
	return;
err_put_closeq:
	kvsd_closeq_put(c->closeq);
err_free_client:
	kvs_client_free(c->cl);
err_free_conn:
	free(c);
err_oom:
	kvsd_log("accept: out of memory (pid %d uid %u refused)", uc.pid, uc.uid);
	refuse_close(uc.uid, fd);
}

/*
 * Out of descriptors or memory, or the close queues are full: a pending
 * connection stays queued and would wake us forever, so stop accepting
 * until a tick finds things better.
 */
static void accept_pause(const char *why)
{
	if (!srv.accept_warned)
		kvsd_log("accept: %s; retrying every second", why);
	srv.accept_warned = true;
	kvsd_watch_del(&srv.listen);
	srv.accept_paused = true;
}

static void srv_accept(struct kvsd_watch *w, uint32_t events)
{
	int i, fd;

	(void)events;
	for (i = 0; i < 16; i++) {
		/* Even a refused connection may leave its socket to the closers. */
		if (kvsd_closer_full()) {
			accept_pause("the close queues are full");
			return;
		}
		fd = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			if (srv.accept_warned)
				kvsd_log("accept: accepting again");
			srv.accept_warned = false;
			conn_new(fd);
			continue;
		}
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			accept_pause(strerror(errno));
		return;
	}
}

/*
 * Drop every connection stalled past the deadline: in the middle of a
 * request (slowloris), or with a reply it does not read.  Each holds a
 * buffer, and a connection slot, that nobody else can use.
 */
static void conn_expire(void)
{
	uint64_t now = kvsd_now_ms(), limit = srv.d->cfg->stall_timeout_ms;
	struct conn *c, *next;
	char why[96];

	for (c = srv.conns; c; c = next) {
		next = c->next;
		if (!c->busy_since || now - c->busy_since < limit)
			continue;
		snprintf(why, sizeof(why), c->out_len ?
			 "did not read its reply for %llu ms" :
			 "stalled for %llu ms in the middle of a message",
			 (unsigned long long)(now - c->busy_since));
		conn_close(c, why);
	}
}

/* Read again from connections whose uid's closers have caught up. */
static void conn_unthrottle(void)
{
	struct conn *c, *next;

	for (c = srv.conns; c; c = next) {
		next = c->next;
		if (!c->throttled || conn_closers_behind(c))
			continue;
		c->throttled = false;
		conn_set_events(c, EPOLLIN);
	}
}

void kvsd_server_tick(void)
{
	if (!srv.d)		/* module mode: no socket, no connections */
		return;
	conn_expire();
	conn_unthrottle();
	if (!srv.accept_paused || kvsd_closer_full())
		return;
	if (!kvsd_watch_add(&srv.listen, EPOLLIN))
		srv.accept_paused = false;
}

/*
 * recvmsg() installs what a client sends only while the descriptor table
 * has room, and the kernel releases the rest on this thread.  Each
 * connection holds up to seven (socket, wait bell, the ring's two
 * doorbells, and the three descriptors RING_SETUP's reply carries until
 * it is sent), the close
 * queues KVSD_CLOSE_QUEUE_MAX and three reads' more
 * (conn_closers_behind()), each pool one, and the rest fewer than 64:
 * say so if the limit is lower.
 */
static void nofile_check(const struct kvsd_config *cfg)
{
	uint64_t need = (uint64_t)cfg->max_connections * 7 +
			KVSD_CLOSE_QUEUE_MAX + 3 * KVSD_RECV_FDS + cfg->max_pools + 64;
	struct rlimit rl;

	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < need)
		kvsd_log("RLIMIT_NOFILE %llu is below the %llu descriptors that "
			 "max_connections %u may need: a client's descriptors may "
			 "then be dropped on the event loop (LimitNOFILE=)",
			 (unsigned long long)rl.rlim_cur, (unsigned long long)need,
			 cfg->max_connections);
}

int kvsd_server_start(struct kvsd *d, const char *path)
{
	int fd;

	srv.d = d;
	nofile_check(d->cfg);
	kvsd_rings_start(&ring_ops, d->cfg->ring_poll_us);
	fd = kvsd_closer_start();
	if (fd)
		return fd;
	srv.path = strdup(path);
	if (!srv.path)
		return -ENOMEM;
	/* Anyone may connect: each pool's mode decides who may attach. */
	fd = kvsd_unix_listen(path, 0666, &srv.ino);
	if (fd < 0)
		return fd;
	srv.listen.fd = fd;
	srv.listen.fn = srv_accept;
	if (kvsd_watch_add(&srv.listen, EPOLLIN)) {
		int ret = -errno;

		close(fd);
		srv.listen.fd = -1;
		return ret;
	}
	kvsd_log("listening on %s (max_connections %u, %u per uid; buffers "
		 "%llu bytes per connection, %llu in all; stall timeout %u ms)",
		 path, d->cfg->max_connections, d->cfg->max_connections_per_uid,
		 (unsigned long long)d->cfg->max_conn_buffer,
		 (unsigned long long)d->cfg->max_buffer_total,
		 d->cfg->stall_timeout_ms);
	return 0;
}

/*
 * Connections not yet accepted would go with the listening socket, and
 * what they hold be released as they go: shut it (connect() is refused
 * from then on), refuse each, and close it once none is left.  Unable to
 * empty it, the closers close it.
 */
static void listen_close(int fd)
{
	struct ucred uc;
	socklen_t len;
	int c;

	shutdown(fd, SHUT_RD);
	for (;;) {
		c = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (c < 0 && (errno == EINTR || errno == ECONNABORTED))
			continue;
		if (c < 0)
			break;
		len = sizeof(uc);
		if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &uc, &len))
			uc.uid = (uid_t)-1;
		refuse_close(uc.uid, c);
	}
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINVAL)
		close(fd);
	else
		refuse_close(0, fd);
}

void kvsd_server_stop(void)
{
	while (srv.conns)
		conn_close(srv.conns, "daemon shutting down");
	kvsd_rings_stop();
	if (srv.listen.fd >= 0) {
		if (!srv.accept_paused)
			kvsd_watch_del(&srv.listen);
		kvsd_unix_unlink(srv.path, srv.ino);
		listen_close(srv.listen.fd);
		srv.listen.fd = -1;
	}
	free(srv.path);
	srv.path = NULL;
}

unsigned int kvsd_server_n_conns(void)
{
	return srv.n_conns;
}

void kvsd_server_for_each(void (*fn)(const struct kvsd_conn_info *ci, void *arg),
			  void *arg)
{
	struct conn *c;

	for (c = srv.conns; c; c = c->next) {
		struct kvsd_conn_info ci = {
			.id = c->id,
			.pid = c->pid,
			.uid = c->cred.uid,
			.pool_id = kvs_client_pool_id(c->cl),
			.held = kvs_client_held(c->cl),
		};

		fn(&ci, arg);
	}
}
