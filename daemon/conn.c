// SPDX-License-Identifier: GPL-2.0
/*
 * A connection's I/O (conn.h): one thread, non-blocking sockets.  A
 * message is read as far as it has arrived, with the descriptors that
 * ride on its first bytes, and handed to server.c once whole; its reply
 * is sent with the descriptors the command made, and a connection that
 * does not read its replies is not read from until it does.  How much a
 * connection may buffer, and when it is read at all, is accept.c's to say.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/sockios.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "closer.h"
#include "conn.h"
#include "ring.h"

#define READ_BUDGET	16		/* messages per wakeup, for fairness */

void kvsd_conn_drop_fds(struct conn *c)
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
void kvsd_sock_close(struct kvsd_closeq *q, int fd)
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
		kvsd_pool_name(kvsd_srv.d, pool_id, name);
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

static void conn_drop_out_fds(struct conn *c)
{
	while (c->n_out_fds)
		close(c->out_fds[--c->n_out_fds]);
}

void kvsd_conn_close(struct conn *c, const char *why)
{
	conn_log_close(c, why);
	kvsd_watch_del(&c->w);
	kvsd_sock_close(c->closeq, c->w.fd);
	kvsd_conn_drop_fds(c);
	kvsd_closeq_put(c->closeq);
	if (c->out_mem)
		kvs_host_mem_put(c->out_mem);
	conn_drop_out_fds(c);
	if (c->ring) {
		kvsd_conn_ring_refund(c, kvsd_ring_size(c->ring));
		kvsd_ring_free(c->ring);
	}
	/* Releasing its holdings may wake others, never itself: then the bell. */
	kvs_client_free(c->cl);
	if (c->wait_bell >= 0)
		close(c->wait_bell);
	kvsd_conn_forget(c);
	free(c->groups);
	free(c);
}

/* ---- sending ------------------------------------------------------------- */

/* 0: all sent; 1: the socket is full; < 0: the connection is broken. */
static int conn_flush(struct conn *c)
{
	union {
		char buf[CMSG_SPACE(KVSD_MAX_OUT_FDS * sizeof(int))];
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
	kvsd_conn_trim_buf(c);
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
	return c->in_len < KVSD_HDR || kvsd_is_cmd(h->cmd, KVS_IOC_POOL_CREATE);
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
	else if (h->len < KVSD_HDR || h->len > KVS_MSG_MAX)
		snprintf(why, why_len, "bad message length %u", h->len);
	else if (h->len > kvsd_srv.d->cfg->max_conn_buffer)
		snprintf(why, why_len, "a %u-byte message, above max_conn_buffer %llu",
			 h->len, (unsigned long long)kvsd_srv.d->cfg->max_conn_buffer);
	else
		return NULL;
	return why;
}

void kvsd_conn_set_events(struct conn *c, uint32_t events)
{
	if (kvsd_watch_mod(&c->w, events))
		kvsd_conn_close(c, "epoll failed");
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

	if (c->in_len < KVSD_HDR) {
		end = KVSD_HDR;
	} else {
		end = h->len;
		if (c->in_len == c->cap) {
			grow = c->cap < end / 2 ? c->cap * 2 : end;
			ret = kvsd_conn_reserve(c, grow, why, why_len);
			if (ret)
				return ret;
		}
	}
	*want = (end < c->cap ? end : c->cap) - c->in_len;
	return 0;
}

/*
 * Read nothing more from @c (and take no more descriptors) until the
 * closers catch up (kvsd_accept_tick()).  A request half read still runs
 * against the stall deadline.
 */
static void conn_throttle(struct conn *c)
{
	if (kvsd_watch_mod(&c->w, 0)) {
		kvsd_conn_close(c, "epoll failed");
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

		if (kvsd_conn_reserve(c, KVSD_HDR, why, sizeof(why)) ||
		    conn_want(c, &want, why, sizeof(why))) {
			kvsd_conn_close(c, why);
			return;
		}
		if (kvsd_conn_closers_behind(c)) {
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
			kvsd_conn_close(c, n < 0 ? why : c->in_len ?
				   "truncated message at EOF" : NULL);
			return;
		}
		if (!c->in_len)
			c->busy_since = kvsd_now_ms();
		c->in_len += n;
		if (c->in_len == KVSD_HDR && header_bad(c, why, sizeof(why))) {
			kvsd_conn_close(c, why);
			return;
		}
		h = (const struct kvs_msg *)c->buf;
		if (c->in_len < KVSD_HDR || c->in_len < h->len)
			continue;
		kvsd_conn_handle(c);
		if (c->doom) {
			kvsd_conn_close(c, c->doom);
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
			kvsd_conn_set_events(c, EPOLLOUT);
			return;
		default:
			kvsd_conn_close(c, "send failed");
			return;
		}
	}
}

void kvsd_conn_event(struct kvsd_watch *w, uint32_t events)
{
	struct conn *c = (struct conn *)((char *)w - offsetof(struct conn, w));

	if (c->throttled) {
		/* Hung up or failed: epoll says so whatever it watches. */
		kvsd_conn_close(c, "hung up while throttled");
		return;
	}
	if (c->out_len) {
		int ret = conn_flush(c);

		if (ret < 0) {
			kvsd_conn_close(c, "send failed");
			return;
		}
		if (ret > 0)
			return;
		c->busy_since = 0;
		if (kvsd_watch_mod(&c->w, EPOLLIN)) {
			kvsd_conn_close(c, "epoll failed");
			return;
		}
	}
	if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
		conn_read(c);
}

