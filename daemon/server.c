// SPDX-License-Identifier: GPL-2.0
/*
 * The arbiter socket (server.h): each accepted connection is one arbiter
 * client (kvs_client), released with everything it holds when the
 * connection closes, whatever the reason.  This file runs one message of
 * <linux/kvshare.h>'s protocol ("The kvshared socket"), read whole by
 * conn.c or copied out of a shared ring by ring.c, and turns it into its
 * reply in place; conn.h says which file does the rest.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "chan.h"
#include "closer.h"
#include "conn.h"
#include "remote/ctl.h"
#include "ring.h"
#include "server.h"

struct kvsd_srv kvsd_srv;

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

/* A pool made or destroyed: its remote tier, remembered or turned off (remote/ctl.h). */
static void pool_hooks(struct conn *c, unsigned int cmd, union kvs_cmd_buf *arg)
{
	if (kvsd_is_cmd(cmd, KVS_IOC_POOL_DESTROY))
		kvsd_remote_pool_gone(arg->destroy.pool_id);
	else if (kvsd_is_cmd(cmd, KVS_IOC_POOL_CREATE))
		kvsd_remote_pool_created(kvsd_srv.d, c->cred.uid, arg->create.name);
}

/* A pool's bookkeeping is its creator's to pay for (user.h). */
static int pool_charge(struct conn *c, const struct kvs_pool_create *req)
{
	char why[192];
	int ret;

	/* Sizes the core refuses anyway are its to refuse (EINVAL). */
	if (!req->n_pages || req->n_pages > kvsd_srv.d->cfg->max_pool_pages)
		return 0;
	ret = kvsd_user_pool_room(c->user, req->n_pages, why, sizeof(why));
	if (ret)
		kvsd_user_refused(c->user, "POOL_CREATE", why);
	return ret;
}

/*
 * What a command may make the core allocate, charged to the caller's uid
 * before it runs: a new pool's bookkeeping, or a larger hold table.
 */
static int cmd_charge(struct conn *c, unsigned int cmd, const union kvs_cmd_buf *arg)
{
	uint64_t more = 0;
	char why[192];

	if (kvsd_is_cmd(cmd, KVS_IOC_POOL_CREATE))
		return pool_charge(c, &arg->create);
	if (kvsd_is_cmd(cmd, KVS_IOC_ALLOC))
		more = arg->alloc.count;
	else if (kvsd_is_cmd(cmd, KVS_IOC_PUBLISH))
		more = arg->publish.count;
	else if (kvsd_is_cmd(cmd, KVS_IOC_LOOKUP) &&
		 !(arg->lookup.flags & KVS_LOOKUP_PEEK))
		more = arg->lookup.count;
	/* Counts the core refuses (0, above KVS_MAX_BATCH) take nothing. */
	if (!more || more > KVS_MAX_BATCH)
		return 0;
	return kvsd_conn_held_charge(c, more, why, sizeof(why));
}

static int conn_run(struct conn *c, const struct kvs_msg *h, uint32_t usize,
		    struct req *rq)
{
	uint32_t ksize = kvs_cmd_size(h->cmd);
	uint8_t *ustruct = rq->msg + KVSD_HDR;
	union kvs_cmd_buf arg;
	struct kvs_call call = {
		.cred = &c->cred,
		.copy_in = req_copy_in,
		.copy_out = req_copy_out,
		.host = rq,
	};
	bool create = kvsd_is_cmd(h->cmd, KVS_IOC_POOL_CREATE);
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
	ret = cmd_charge(c, h->cmd, &arg);
	if (ret)
		return ret;
	ret = kvs_cmd(c->cl, h->cmd, &arg, &call);
	if (create)
		arg.create.mem_fd = wire_fd;
	if (create && !ret)
		kvsd_user_pool_created(c->user, arg.create.n_pages);
	if (!ret)
		pool_hooks(c, h->cmd, &arg);
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
	return kvsd_is_cmd(cmd, KVS_IOC_ALLOC) || kvsd_is_cmd(cmd, KVS_IOC_PUBLISH) ||
	       kvsd_is_cmd(cmd, KVS_IOC_LOOKUP) || kvsd_is_cmd(cmd, KVS_IOC_PUT);
}

/* @ring: the request came through the ring, which carries no descriptors. */
static int msg_check(const struct conn *c, const struct kvs_msg *h, uint32_t usize,
		     bool ring)
{
	if (!kvs_cmd_size(h->cmd))
		return -ENOTTY;
	if (ring && !ring_cmd_ok(h->cmd))
		return -EOPNOTSUPP;
	if (h->result || h->out_off || h->out_len || h->len < KVSD_HDR + usize)
		return -EINVAL;
	if (!ring && (c->fds_trunc ||
		      (c->n_fds && !kvsd_is_cmd(h->cmd, KVS_IOC_POOL_CREATE))))
		return -EINVAL;
	return 0;
}

/*
 * Turn the request in @buf into its reply: result @ret, the struct's
 * @len bytes (header included), then the data written; the reply's length.
 */
static uint32_t msg_reply(uint8_t *buf, const struct req *rq, int ret, uint32_t len)
{
	struct kvs_msg *h = (struct kvs_msg *)buf;

	h->out_off = 0;
	h->out_len = 0;
	if (!ret && rq->hi > rq->lo) {
		/* The data written follows the struct; out_off says where it goes. */
		memmove(buf + len, buf + rq->lo, rq->hi - rq->lo);
		h->out_off = rq->lo;
		h->out_len = rq->hi - rq->lo;
		len += h->out_len;
	}
	h->result = ret;
	h->len = len;
	return len;
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
		.msg = buf, .len = h->len, .data = (uint64_t)KVSD_HDR + usize,
		.lo = UINT64_MAX, .hi = 0,
	};
	uint32_t len = h->len >= KVSD_HDR + usize ? KVSD_HDR + usize : KVSD_HDR;
	int ret;

	if (!ring && kvsd_is_sock_cmd(h->cmd)) {
		ret = kvsd_sock_cmd(c, h, buf + KVSD_HDR);
	} else {
		ret = msg_check(c, h, usize, ring);
		if (!ret)
			ret = conn_run(c, h, usize, &rq);
	}
	kvsd_debug("client %llu: %scmd 0x%08x (nr 0x%02x) len %u -> %d",
		   (unsigned long long)c->id, ring ? "ring " : "", h->cmd,
		   _IOC_NR(h->cmd), h->len, ret);

	return msg_reply(buf, &rq, ret, len);
}

/*
 * A request on an event channel's socket (chan.c), framed as on this
 * socket: PUT or PUBLISH on the channel's client @cl, with the opener's
 * @cred; @buf (h->len bytes, checked by the caller) becomes the reply,
 * whose length this returns.
 */
uint32_t kvsd_chan_msg(struct kvs_client *cl, const struct kvs_cred *cred, uint8_t *buf)
{
	struct kvs_msg *h = (struct kvs_msg *)buf;
	uint32_t usize = _IOC_SIZE(h->cmd), ksize = kvs_cmd_size(h->cmd);
	struct req rq = {
		.msg = buf, .len = h->len, .data = (uint64_t)KVSD_HDR + usize,
		.lo = UINT64_MAX, .hi = 0,
	};
	struct kvs_call call = {
		.cred = cred,
		.copy_in = req_copy_in,
		.copy_out = req_copy_out,
		.host = &rq,
	};
	uint8_t *ustruct = buf + KVSD_HDR;
	uint32_t len = h->len >= KVSD_HDR + usize ? KVSD_HDR + usize : KVSD_HDR;
	union kvs_cmd_buf arg;
	int ret = -ENOTTY;

	if (!kvs_chan_cmd_ok(h->cmd) || ksize > sizeof(arg))
		goto reply;
	ret = -EINVAL;
	if (h->result || h->out_off || h->out_len || h->len < KVSD_HDR + usize)
		goto reply;
	ret = -E2BIG;
	if (usize > ksize && !all_zero(ustruct + ksize, usize - ksize))
		goto reply;
	memset(&arg, 0, sizeof(arg));
	memcpy(&arg, ustruct, usize < ksize ? usize : ksize);
	ret = kvs_cmd(cl, h->cmd, &arg, &call);
	if (!ret)
		memcpy(ustruct, &arg, usize < ksize ? usize : ksize);
reply:
	return msg_reply(buf, &rq, ret, len);
}

/* What ring.c runs: a request of @owner's ring, copied out of it. */
static uint32_t ring_handle(void *owner, uint8_t *msg)
{
	return msg_handle(owner, msg, true);
}

static void ring_drop(void *owner, const char *why)
{
	kvsd_conn_close(owner, why);
}

static const struct kvsd_ring_ops ring_ops = {
	.handle = ring_handle,
	.drop = ring_drop,
};

void kvsd_conn_handle(struct conn *c)
{
	c->out_len = msg_handle(c, c->buf, false);
	kvsd_conn_drop_fds(c);
	c->out_sent = 0;
	c->in_len = 0;
}

/* ---- the server ----------------------------------------------------------- */

/*
 * recvmsg() installs what a client sends only while the descriptor table
 * has room, and the kernel releases the rest on this thread.  Each
 * connection holds up to seven (socket, wait bell, the ring's two
 * doorbells, and the three descriptors RING_SETUP's reply carries until
 * it is sent), the close queues KVSD_CLOSE_QUEUE_MAX and three reads'
 * more (kvsd_conn_closers_behind()), each pool one, and the rest fewer
 * than 64: say so if the limit is lower.
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
	int ret;

	kvsd_srv.d = d;
	kvsd_users_init(d);
	nofile_check(d->cfg);
	kvsd_rings_start(&ring_ops, d->cfg->ring_poll_us);
	ret = kvsd_closer_start();
	if (ret)
		return ret;
	return kvsd_accept_start(path);
}

void kvsd_server_stop(void)
{
	kvsd_chans_stop();
	while (kvsd_srv.conns)
		kvsd_conn_close(kvsd_srv.conns, "daemon shutting down");
	kvsd_rings_stop();
	kvsd_accept_stop();
}

void kvsd_server_tick(void)
{
	if (!kvsd_srv.d)	/* module mode: no socket, no connections */
		return;
	kvsd_accept_tick();
}

unsigned int kvsd_server_n_conns(void)
{
	return kvsd_srv.n_conns;
}

void kvsd_server_for_each(void (*fn)(const struct kvsd_conn_info *ci, void *arg),
			  void *arg)
{
	struct conn *c;

	for (c = kvsd_srv.conns; c; c = c->next) {
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
