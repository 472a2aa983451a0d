// SPDX-License-Identifier: GPL-2.0
/*
 * A pool's event channel on kvshared's socket (KVS_IOC_CHAN_OPEN,
 * <linux/kvshare.h>): the core's channel (core/core_chan.c), carried to
 * its opener over a SOCK_SEQPACKET socket pair.  The opener gets one end
 * with the reply; kvshared keeps the other on its loop:
 *
 * - records: when the core queues one it rings an eventfd (its wake runs
 *   under a pool lock and must not sleep); the loop then moves them out
 *   of the core's ring, CHAN_BATCH at a time, one message each, for as
 *   long as the socket takes them.  A batch the socket refuses waits
 *   (EPOLLOUT) and nothing more leaves the ring meanwhile, so a reader
 *   that does not read fills the ring and the core drops and counts, as
 *   on the module.
 * - requests: PUT, PUBLISH and CHAN_STATS sent on it, framed as on the
 *   socket, one message each, run on the channel's client with the
 *   opener's credentials; the reply is one message on the same socket.
 *   Another command gets ENOTTY; a message that is no request closes the
 *   channel, as garbage closes a connection.
 * - the end: the opener's end closed (however its holder died), the
 *   channel is closed and every reference and claim it held goes back.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include "chan.h"
#include "conn.h"

/* Records of one message: 4 KiB, the module's read batch. */
#define CHAN_BATCH	64
/* A request on the channel, at most: a PUBLISH of about 1300 entries. */
#define CHAN_MSG_MAX	(64u << 10)

struct kvsd_chan {
	struct kvsd_watch sock;		/* our end of the pair */
	struct kvsd_watch bell;		/* eventfd: a record was queued */
	struct kvs_chan *ch;
	atomic_bool rung;		/* bell written, not yet read */
	struct kvs_cred cred;		/* the opener's, without groups */
	uint32_t pool_id;
	uint32_t sock_events;		/* what sock is watched for now */
	struct kvs_event batch[CHAN_BATCH];
	uint32_t batch_n;		/* out of the ring, not yet sent */
	uint8_t *reply;			/* a reply the socket did not take yet */
	uint32_t reply_len;
	uint8_t *buf;			/* CHAN_MSG_MAX: a request, then its reply */
	struct kvsd_chan *prev, *next;
};

static struct kvsd_chan *chans;

/* The core's wake, under the pool's lock, once a record: one write a wakeup. */
static void chan_wake(void *arg)
{
	struct kvsd_chan *kc = arg;
	uint64_t one = 1;

	if (atomic_exchange(&kc->rung, true))
		return;
	if (write(kc->bell.fd, &one, sizeof(one)) < 0) {
		/* EAGAIN: a full count, the loop is woken already. */
	}
}

static void chan_free(struct kvsd_chan *kc, const char *why)
{
	if (why)
		kvsd_log("pool %u: event channel of uid %u closed: %s", kc->pool_id,
			 kc->cred.uid, why);
	if (kc->prev)
		kc->prev->next = kc->next;
	else if (chans == kc)
		chans = kc->next;
	if (kc->next)
		kc->next->prev = kc->prev;
	if (kc->sock.fd >= 0) {
		kvsd_watch_del(&kc->sock);
		close(kc->sock.fd);
	}
	if (kc->bell.fd >= 0) {
		kvsd_watch_del(&kc->bell);
		close(kc->bell.fd);
	}
	/* No wake after this; then every reference and claim goes back. */
	if (kc->ch)
		kvs_chan_close(kc->ch);
	free(kc->reply);
	free(kc->buf);
	free(kc);
}

static void sock_watch(struct kvsd_chan *kc, uint32_t events)
{
	if (events != kc->sock_events && !kvsd_watch_mod(&kc->sock, events))
		kc->sock_events = events;
}

/* 1 sent, 0 the socket is full, -errno the reader is gone. */
static int chan_send(struct kvsd_chan *kc, const void *msg, size_t len)
{
	if (send(kc->sock.fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)len)
		return 1;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
		return 0;
	return -errno;
}

/*
 * Send what waits (a reply first), then records for as long as the
 * socket takes them.  false: the channel was closed.
 */
static bool chan_flush(struct kvsd_chan *kc)
{
	int ret;

	if (kc->reply) {
		ret = chan_send(kc, kc->reply, kc->reply_len);
		if (ret < 0)
			goto gone;
		if (!ret) {
			sock_watch(kc, EPOLLOUT);
			return true;
		}
		free(kc->reply);
		kc->reply = NULL;
	}
	for (;;) {
		if (!kc->batch_n)
			kc->batch_n = kvs_chan_read(kc->ch, kc->batch, CHAN_BATCH);
		if (!kc->batch_n)
			break;
		ret = chan_send(kc, kc->batch, kc->batch_n * sizeof(kc->batch[0]));
		if (ret < 0)
			goto gone;
		if (!ret) {
			sock_watch(kc, EPOLLIN | EPOLLOUT);
			return true;
		}
		kc->batch_n = 0;
	}
	sock_watch(kc, EPOLLIN);
	return true;
gone:
	chan_free(kc, NULL);	/* the reader closed its end */
	return false;
}

static void bell_event(struct kvsd_watch *w, uint32_t events)
{
	struct kvsd_chan *kc = (struct kvsd_chan *)((char *)w - offsetof(struct kvsd_chan, bell));
	uint64_t v;

	(void)events;
	/* Cleared before the ring is read: a record after this rings again. */
	atomic_store(&kc->rung, false);
	if (read(w->fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		return;
	chan_flush(kc);
}

/* KVS_IOC_CHAN_STATS on the channel: the struct only, no data area. */
static uint32_t chan_stats(struct kvsd_chan *kc, uint8_t *buf, uint32_t len)
{
	struct kvs_msg *h = (struct kvs_msg *)buf;
	struct kvs_chan_stats st;
	int ret = -EINVAL;

	if (len == KVSD_HDR + sizeof(st) && !h->result && !h->out_off && !h->out_len) {
		memcpy(&st, buf + KVSD_HDR, sizeof(st));
		ret = kvs_chan_stats(kc->ch, &st);
		if (!ret)
			memcpy(buf + KVSD_HDR, &st, sizeof(st));
	}
	h->result = ret;
	h->len = ret ? KVSD_HDR : KVSD_HDR + sizeof(st);
	return h->len;
}

/* One request read whole; false: the channel was closed. */
static bool chan_request(struct kvsd_chan *kc)
{
	struct kvs_msg *h = (struct kvs_msg *)kc->buf;
	uint32_t len;
	ssize_t n;
	int ret;

	n = recv(kc->sock.fd, kc->buf, CHAN_MSG_MAX, MSG_DONTWAIT | MSG_TRUNC);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR;
	if (!n) {
		chan_free(kc, NULL);	/* the holder closed it, or died */
		return false;
	}
	if ((size_t)n < KVSD_HDR || h->magic != KVS_MSG_MAGIC) {
		chan_free(kc, "a message that is no request");
		return false;
	}
	if ((size_t)n > CHAN_MSG_MAX || h->len != (uint64_t)n) {
		/* Framed, but not whole or too large: the header says why. */
		h->result = (size_t)n > CHAN_MSG_MAX ? -EMSGSIZE : -EINVAL;
		h->len = KVSD_HDR;
		h->out_off = h->out_len = 0;
		len = KVSD_HDR;
	} else if (h->cmd == KVS_IOC_CHAN_STATS) {
		len = chan_stats(kc, kc->buf, h->len);
	} else {
		len = kvsd_chan_msg(kvs_chan_client(kc->ch), &kc->cred, kc->buf);
	}
	kvsd_debug("pool %u: channel cmd 0x%08x len %zd -> %d", kc->pool_id,
		   h->cmd, n, h->result);
	ret = chan_send(kc, kc->buf, len);
	if (ret < 0) {
		chan_free(kc, NULL);
		return false;
	}
	if (!ret) {
		/* Read no more requests until this reply is out. */
		kc->reply = malloc(len);
		if (!kc->reply) {
			chan_free(kc, "no memory for a reply");
			return false;
		}
		memcpy(kc->reply, kc->buf, len);
		kc->reply_len = len;
		sock_watch(kc, EPOLLOUT);
	}
	return true;
}

static void sock_event(struct kvsd_watch *w, uint32_t events)
{
	struct kvsd_chan *kc = (struct kvsd_chan *)((char *)w - offsetof(struct kvsd_chan, sock));

	if ((events & EPOLLIN) && !kc->reply && !chan_request(kc))
		return;
	if (events & (EPOLLHUP | EPOLLERR) && !(events & EPOLLIN)) {
		chan_free(kc, NULL);
		return;
	}
	if (events & EPOLLOUT)
		chan_flush(kc);
}

int kvsd_chan_open(struct conn *c, struct kvs_chan_open *req)
{
	struct kvsd_chan *kc;
	int sv[2], ret;

	if (c->n_out_fds == KVSD_MAX_OUT_FDS)
		return -EINVAL;
	kc = calloc(1, sizeof(*kc));
	if (!kc)
		return -ENOMEM;
	kc->sock.fd = kc->bell.fd = -1;
	kc->sock.fn = sock_event;
	kc->bell.fn = bell_event;
	kc->cred = c->cred;
	kc->cred.groups = NULL;		/* the connection's; PUT and PUBLISH need none */
	kc->cred.n_groups = 0;
	kc->pool_id = req->pool_id;
	kc->buf = malloc(CHAN_MSG_MAX);
	ret = -ENOMEM;
	if (!kc->buf)
		goto fail;
	kc->bell.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (kc->bell.fd < 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
		ret = -errno;
		goto fail;
	}
	kc->sock.fd = sv[0];
	/* The core judges the request: EINVAL, ENOENT, EPERM, EBUSY. */
	ret = kvs_chan_open(req, &c->cred, chan_wake, kc, &kc->ch);
	if (ret) {
		close(sv[1]);
		goto fail;
	}
	kc->sock_events = EPOLLIN;
	if (kvsd_watch_add(&kc->sock, EPOLLIN) || kvsd_watch_add(&kc->bell, EPOLLIN)) {
		ret = -errno;
		close(sv[1]);
		goto fail;
	}
	kc->next = chans;
	if (chans)
		chans->prev = kc;
	chans = kc;
	/* The reply's descriptor; closed unsent, it closes the channel. */
	req->fd = c->n_out_fds;
	c->out_fds[c->n_out_fds++] = sv[1];
	kvsd_log("pool %u: event channel opened by uid %u (ring %u, fetch_max %u)",
		 req->pool_id, c->cred.uid, req->ring, req->fetch_max);
	return 0;
fail:
	chan_free(kc, NULL);
	return ret;
}

void kvsd_chans_stop(void)
{
	while (chans)
		chan_free(chans, NULL);
}
