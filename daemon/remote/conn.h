/* SPDX-License-Identifier: GPL-2.0 */
/*
 * One connection to one Redis node, for the remote tier's thread only:
 * TCP (optionally TLS through OpenSSL), AUTH with an ACL user, and
 * pipelined commands.  Every call takes an absolute deadline (CLOCK_
 * MONOTONIC ms) and never blocks past it: the socket is non-blocking and
 * waits are poll()s bounded by the deadline.  Replies are read by the
 * project's own bounded RESP reader (resp.h), never by hiredis:
 * a Redis is not trusted to send sane replies.
 *
 * A node that fails to connect or breaks mid-call is closed and not
 * tried again before its backoff passes (100 ms, doubling to 5 s), so
 * that a dead node costs a caller nothing but the error.
 */
#ifndef _KVSHARED_REMOTE_CONN_H
#define _KVSHARED_REMOTE_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../clock.h"	/* kvsd_now_ms(): the deadlines here */
#include "resp.h"

struct kvsd_rtls;

/* How to reach and log in to every node of one tier. */
struct kvsd_rauth {
	const char *user;		/* ACL user; NULL: the default user */
	const char *password;		/* NULL: no AUTH */
	struct kvsd_rtls *tls;		/* NULL: plain TCP */
};

struct kvsd_rnode {
	char host[64];
	int port;
	int fd;				/* -1: not connected */
	void *ssl;			/* SSL *, with TLS */
	struct kvsd_resp *reader;
	uint64_t retry_at_ms;		/* no connect before this */
	uint32_t backoff_ms;
	bool auth_failed;		/* the last connect was refused by AUTH */
	bool readonly;			/* send READONLY after AUTH (a cluster node) */
	char err[256];			/* why the last call failed */
};

/*
 * One command of a pipeline: RESP bytes (kvsd_rcmd_format) and, after
 * kvsd_rnode_exec(), its reply (NULL if none came).  With a sink, a bulk
 * string reply of the sink's length is read into it (resp.h).
 */
struct kvsd_rcmd {
	char *buf;
	int len;
	/*
	 * Sent after buf, if set: a body (a page, straight from the pool)
	 * then a tail; neither is the command's (kvsd_rcmd_free() frees buf
	 * only), and both must stay as they are until the reply is in.
	 */
	const void *body;
	size_t body_len;
	const char *tail;
	size_t tail_len;
	struct kvsd_reply *reply;
	const struct kvsd_rsink *sink;
	uint16_t slot;			/* cluster routing (cluster.c) */
	int8_t node;			/* where it goes, -1: by slot */
	bool asking;			/* precede it with ASKING (an ASK redirect) */
	bool read;			/* a read: a replica may answer it */
};

/* TLS: a client context trusting @ca_file (PEM), or NULL after err. */
struct kvsd_rtls *kvsd_rtls_new(const char *ca_file, const char *cert,
				const char *key, char *err, size_t err_len);
void kvsd_rtls_free(struct kvsd_rtls *t);

void kvsd_rnode_init(struct kvsd_rnode *n, const char *host, int port);
/* "HOST:PORT" into n; -EINVAL if it is not one. */
int kvsd_rnode_parse(struct kvsd_rnode *n, const char *spec);
void kvsd_rnode_close(struct kvsd_rnode *n);

/*
 * Connect and log in if not connected.  0, -EAGAIN (in backoff),
 * -EACCES (AUTH refused: n->auth_failed), or another -errno; n->err
 * says why.
 */
int kvsd_rnode_connect(struct kvsd_rnode *n, const struct kvsd_rauth *a,
		       uint64_t deadline_ms);

/*
 * Send cmds[0..n) in one pipeline and read one reply each, in order,
 * reading while writing.  A reply longer than max_reply bytes (or
 * otherwise out of the reader's bounds), garbage, bytes nobody asked
 * for, a broken connection or the deadline closes the node: -EPROTO,
 * -EIO, -ETIMEDOUT, the replies read so far kept.
 */
int kvsd_rnode_exec(struct kvsd_rnode *n, struct kvsd_rcmd *cmds, unsigned int count,
		    size_t max_reply, uint64_t deadline_ms);

/*
 * Several pipelines at once, one per node, under one deadline: init each,
 * then run them all; each one's ret is 0 or its node's -errno.
 */
struct kvsd_rexec {
	struct kvsd_rnode *n;
	struct kvsd_rcmd *cmds;
	unsigned int count, sent, got;
	size_t off, max_reply;
	short events;			/* what it waits for */
	int ret;			/* 1 while running */
};

void kvsd_rexec_init(struct kvsd_rexec *x, struct kvsd_rnode *n,
		     struct kvsd_rcmd *cmds, unsigned int count, size_t max_reply);
void kvsd_rexec_run(struct kvsd_rexec *xs, unsigned int n_x, uint64_t deadline_ms);

/* A command from argv; 0 or -ENOMEM.  kvsd_rcmd_free() frees buf and reply. */
int kvsd_rcmd_format(struct kvsd_rcmd *c, int argc, const char *const *argv,
		     const size_t *lens);
void kvsd_rcmd_free(struct kvsd_rcmd *c);

#endif /* _KVSHARED_REMOTE_CONN_H */
