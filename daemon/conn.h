/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The arbiter socket's connections, shared by the files that serve them
 * (private to them: the rest of kvshared sees server.h):
 *
 *   server.c    one message: framing checks, the request's data area as
 *               the core's copy_in/copy_out, dispatch to kvs_cmd(), the
 *               reply built in place; the server's start, stop and tick
 *   sock_cmd.c  the socket-only commands (KVS_SOCK_*), with one copy-in
 *               and copy-out sized from the command
 *   conn.c      a connection's I/O: reading messages with the descriptors
 *               that ride on them, sending replies with theirs, closing
 *   accept.c    accept and buffer policy: the caps on connections, the
 *               buffer budget, the stall deadline, throttling a uid whose
 *               closers are behind
 *
 * The protocol itself is <linux/kvshare.h>'s ("The kvshared socket").
 * accept.c makes the connections that conn.c serves, and answers conn.c's
 * questions of policy (room in the buffer budget, whether to read); conn.c
 * hands each message it has read whole to server.c (kvsd_conn_handle(),
 * which sock_cmd.c serves the KVS_SOCK_* ones of) and sends the reply.
 */
#ifndef _KVSHARED_CONN_H
#define _KVSHARED_CONN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core.h"
#include "kvshared.h"
#include "user.h"

#define KVSD_HDR		((uint32_t)sizeof(struct kvs_msg))
#define KVSD_MAX_OUT_FDS	3	/* RING_SETUP: the ring and its doorbells */
#define KVSD_BUF_MIN		4096	/* every connection may buffer this much */

struct kvsd_ring;
struct kvsd_closeq;

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
	int out_fds[KVSD_MAX_OUT_FDS];	/* sent with the reply, then closed */
	unsigned int n_out_fds;
	struct kvsd_ring *ring;		/* the shared ring, if asked for */
	int wait_bell;			/* WAIT_FD: our end, rung by the core's waker */
	/*
	 * Its uid's close queue (closer.h), where a place is reserved for
	 * the socket and for fds[0]: a client's file is never closed here.
	 */
	struct kvsd_closeq *closeq;
	/*
	 * Its uid's ledger (user.h), and what this connection has charged
	 * to it: its own state, and the core's hold table for held_peak
	 * pages (the table only grows); its buffer and ring by their size.
	 */
	struct kvsd_user *user;
	uint64_t conn_charge;
	uint64_t held_peak;
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

/* What the server's files share: the daemon and the open connections. */
struct kvsd_srv {
	struct kvsd *d;
	struct conn *conns;
	unsigned int n_conns;
	uint64_t buffered;		/* buffer bytes beyond KVSD_BUF_MIN, all connections */
};

extern struct kvsd_srv kvsd_srv;

static inline bool kvsd_is_cmd(unsigned int cmd, unsigned int ioc)
{
	return _IOC_NR(cmd) == _IOC_NR(ioc);
}

/* server.c: run the request in c->buf and turn c->buf into its reply. */
void kvsd_conn_handle(struct conn *c);

/* sock_cmd.c */
bool kvsd_is_sock_cmd(unsigned int cmd);
/* A KVS_SOCK_* request (@ustruct: its command struct, copied back on success). */
int kvsd_sock_cmd(struct conn *c, const struct kvs_msg *h, uint8_t *ustruct);
/* The core's waker (kvs_client_set_waker()): rings the WAIT_FD bell. */
void kvsd_conn_wake(void *arg);

/* conn.c */
void kvsd_conn_event(struct kvsd_watch *w, uint32_t events);
void kvsd_conn_set_events(struct conn *c, uint32_t events);
/* However a connection ends (@why NULL: the client hung up), everything goes. */
void kvsd_conn_close(struct conn *c, const char *why);
/* Hand the request's descriptors to the closers: a reply takes none. */
void kvsd_conn_drop_fds(struct conn *c);
/* Close a client's socket, in a place reserved in @q (never on the loop if busy). */
void kvsd_sock_close(struct kvsd_closeq *q, int fd);

/* accept.c */
void kvsd_accept(struct kvsd_watch *w, uint32_t events);
/*
 * Room for @need bytes in c->buf, within the budget: 0, or -ENOBUFS or
 * -ENOMEM with @why saying which limit.
 */
int kvsd_conn_reserve(struct conn *c, uint32_t need, char *why, size_t why_len);
/* A reply was sent: a large buffer is given back. */
void kvsd_conn_trim_buf(struct conn *c);
/* @c is closing: out of the list, its buffer given back. */
void kvsd_conn_forget(struct conn *c);
/* Whether @c's uid's closers are too far behind for @c to be read. */
bool kvsd_conn_closers_behind(const struct conn *c);
/*
 * RING_SETUP: a ring of @size bytes out of the buffer budget and its
 * uid's ledger, given back with kvsd_conn_ring_refund().  0, or -ENOBUFS
 * or -EDQUOT with @why set.
 */
int kvsd_conn_ring_charge(struct conn *c, uint32_t size, char *why, size_t why_len);
void kvsd_conn_ring_refund(struct conn *c, uint32_t size);
/* Before ALLOC, LOOKUP, PUBLISH of @more pages: the hold table may grow. */
int kvsd_conn_held_charge(struct conn *c, uint64_t more, char *why, size_t why_len);
int kvsd_accept_start(const char *path);
void kvsd_accept_stop(void);
/* Once a second: the stall deadline, throttled uids, accepting again. */
void kvsd_accept_tick(void);

#endif /* _KVSHARED_CONN_H */
