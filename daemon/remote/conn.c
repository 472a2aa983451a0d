// SPDX-License-Identifier: GPL-2.0
/*
 * One Redis node's connection (conn.h): non-blocking TCP or TLS,
 * AUTH, pipelines under a deadline, backoff after failures.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "conn.h"

#define BACKOFF_MIN_MS	100
#define BACKOFF_MAX_MS	5000
#define SEND_IOV	64	/* commands of one sendmsg() */

struct kvsd_rtls {
	SSL_CTX *ctx;
};


static int ms_left(uint64_t deadline_ms)
{
	uint64_t now = kvsd_now_ms();

	if (now >= deadline_ms)
		return 0;
	return deadline_ms - now > 60000 ? 60000 : (int)(deadline_ms - now);
}

struct kvsd_rtls *kvsd_rtls_new(const char *ca_file, const char *cert,
				const char *key, char *err, size_t err_len)
{
	struct kvsd_rtls *t = calloc(1, sizeof(*t));

	if (!t) {
		snprintf(err, err_len, "out of memory");
		return NULL;
	}
	t->ctx = SSL_CTX_new(TLS_client_method());
	if (!t->ctx)
		goto fail;
	SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
	if (ca_file && SSL_CTX_load_verify_locations(t->ctx, ca_file, NULL) != 1)
		goto fail;
	if (!ca_file && SSL_CTX_set_default_verify_paths(t->ctx) != 1)
		goto fail;
	if (cert && (SSL_CTX_use_certificate_chain_file(t->ctx, cert) != 1 ||
		     SSL_CTX_use_PrivateKey_file(t->ctx, key ? key : cert,
						 SSL_FILETYPE_PEM) != 1))
		goto fail;
	return t;
fail:
	snprintf(err, err_len, "TLS setup: %s",
		 ERR_reason_error_string(ERR_get_error()) ?: "unknown error");
	kvsd_rtls_free(t);
	return NULL;
}

void kvsd_rtls_free(struct kvsd_rtls *t)
{
	if (!t)
		return;
	SSL_CTX_free(t->ctx);
	free(t);
}

void kvsd_rnode_init(struct kvsd_rnode *n, const char *host, int port)
{
	memset(n, 0, sizeof(*n));
	snprintf(n->host, sizeof(n->host), "%s", host);
	n->port = port;
	n->fd = -1;
	n->backoff_ms = BACKOFF_MIN_MS;
}

int kvsd_rnode_parse(struct kvsd_rnode *n, const char *spec)
{
	const char *colon = strrchr(spec, ':');
	char host[64];
	char *end;
	long port;

	if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof(host))
		return -EINVAL;
	memcpy(host, spec, colon - spec);
	host[colon - spec] = '\0';
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (errno || *end || port < 1 || port > 65535)
		return -EINVAL;
	kvsd_rnode_init(n, host, (int)port);
	return 0;
}

void kvsd_rnode_close(struct kvsd_rnode *n)
{
	if (n->ssl) {
		SSL_free(n->ssl);
		n->ssl = NULL;
	}
	if (n->fd >= 0)
		close(n->fd);
	n->fd = -1;
	kvsd_resp_free(n->reader);
	n->reader = NULL;
}

static void node_failed(struct kvsd_rnode *n)
{
	kvsd_rnode_close(n);
	n->retry_at_ms = kvsd_now_ms() + n->backoff_ms;
	n->backoff_ms = n->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS
							 : n->backoff_ms * 2;
}

/* Numeric addresses only ("localhost" aside): no resolver in this thread. */
static int node_addr(const struct kvsd_rnode *n, struct sockaddr_storage *ss,
		     socklen_t *len)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
	const char *host = strcmp(n->host, "localhost") ? n->host : "127.0.0.1";

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons(n->port);
		*len = sizeof(*sin);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(n->port);
		*len = sizeof(*sin6);
		return 0;
	}
	return -EINVAL;
}

static int wait_fd(int fd, short events, uint64_t deadline_ms)
{
	struct pollfd p = { .fd = fd, .events = events };
	int r;

	do {
		r = poll(&p, 1, ms_left(deadline_ms));
	} while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	return r ? 0 : -ETIMEDOUT;
}

static int tcp_connect(struct kvsd_rnode *n, uint64_t deadline_ms)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int one = 1, err = 0, ret;
	socklen_t elen = sizeof(err);

	if (node_addr(n, &ss, &len)) {
		snprintf(n->err, sizeof(n->err), "'%s' is not a numeric address", n->host);
		return -EINVAL;
	}
	n->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (n->fd < 0)
		return -errno;
	setsockopt(n->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(n->fd, (struct sockaddr *)&ss, len) && errno != EINPROGRESS) {
		ret = -errno;
		goto fail;
	}
	ret = wait_fd(n->fd, POLLOUT, deadline_ms);
	if (ret)
		goto fail;
	if (getsockopt(n->fd, SOL_SOCKET, SO_ERROR, &err, &elen) || err) {
		ret = -(err ?: errno);
		goto fail;
	}
	return 0;
fail:
	snprintf(n->err, sizeof(n->err), "connecting to %s:%d: %s", n->host, n->port,
		 strerror(-ret));
	return ret;
}

/* -EAGAIN with *want set (POLLIN/POLLOUT), or the SSL error as -EIO. */
static int tls_want(struct kvsd_rnode *n, int r, short *want)
{
	switch (SSL_get_error(n->ssl, r)) {
	case SSL_ERROR_WANT_READ:
		*want = POLLIN;
		return -EAGAIN;
	case SSL_ERROR_WANT_WRITE:
		*want = POLLOUT;
		return -EAGAIN;
	case SSL_ERROR_ZERO_RETURN:
		return -ECONNRESET;
	}
	return -EIO;
}

static int tls_handshake(struct kvsd_rnode *n, struct kvsd_rtls *t,
			 uint64_t deadline_ms)
{
	X509_VERIFY_PARAM *vp;
	short want = 0;
	int r, ret;

	n->ssl = SSL_new(t->ctx);
	if (!n->ssl)
		return -ENOMEM;
	SSL_set_fd(n->ssl, n->fd);
	vp = SSL_get0_param(n->ssl);
	/* The certificate must name the node: its IP, or "localhost". */
	if (X509_VERIFY_PARAM_set1_ip_asc(vp, n->host) != 1) {
		X509_VERIFY_PARAM_set1_host(vp, n->host, 0);
		SSL_set_tlsext_host_name(n->ssl, n->host);
	}
	for (;;) {
		ERR_clear_error();
		r = SSL_connect(n->ssl);
		if (r == 1)
			return 0;
		ret = tls_want(n, r, &want);
		if (ret != -EAGAIN)
			break;
		ret = wait_fd(n->fd, want, deadline_ms);
		if (ret)
			break;
	}
	snprintf(n->err, sizeof(n->err), "TLS handshake with %s:%d: %s", n->host,
		 n->port, ret == -ETIMEDOUT ? "timed out" :
		 SSL_get_verify_result(n->ssl) != X509_V_OK ?
		 X509_verify_cert_error_string(SSL_get_verify_result(n->ssl)) :
		 ERR_reason_error_string(ERR_get_error()) ?: "failed");
	return ret == -ETIMEDOUT ? ret : -EPROTO;
}

static ssize_t io_write(struct kvsd_rnode *n, const char *p, size_t len, short *want)
{
	ssize_t w;

	if (n->ssl) {
		ERR_clear_error();
		w = SSL_write(n->ssl, p, (int)(len > (1u << 30) ? 1u << 30 : len));
		return w > 0 ? w : tls_want(n, (int)w, want);
	}
	w = send(n->fd, p, len, MSG_NOSIGNAL);
	if (w >= 0)
		return w;
	*want = POLLOUT;
	return errno == EAGAIN || errno == EINTR ? -EAGAIN : -errno;
}

/* A command's bytes: buf, then its body and tail. */
static size_t cmd_len(const struct kvsd_rcmd *c)
{
	return (size_t)c->len + c->body_len + c->tail_len;
}

/* The contiguous piece of command @c at byte @off, and its length. */
static const char *cmd_at(const struct kvsd_rcmd *c, size_t off, size_t *n)
{
	if (off < (size_t)c->len) {
		*n = c->len - off;
		return c->buf + off;
	}
	off -= c->len;
	if (off < c->body_len) {
		*n = c->body_len - off;
		return (const char *)c->body + off;
	}
	off -= c->body_len;
	*n = c->tail_len - off;
	return c->tail + off;
}

/* Plain TCP: as many of the pipeline's commands as the socket takes, in one call. */
static ssize_t io_writev(struct kvsd_rexec *x, short *want)
{
	struct iovec iov[3 * SEND_IOV];
	struct msghdr msg = { .msg_iov = iov };
	unsigned int i, n = 0;
	ssize_t w;

	for (i = 0; i < SEND_IOV && x->sent + i < x->count; i++) {
		const struct kvsd_rcmd *c = &x->cmds[x->sent + i];
		size_t off = i ? 0 : x->off, len = cmd_len(c), piece;

		while (off < len) {
			iov[n].iov_base = (void *)cmd_at(c, off, &piece);
			iov[n++].iov_len = piece;
			off += piece;
		}
	}
	msg.msg_iovlen = n;
	w = sendmsg(x->n->fd, &msg, MSG_NOSIGNAL);
	if (w >= 0)
		return w;
	*want = POLLOUT;
	return errno == EAGAIN || errno == EINTR ? -EAGAIN : -errno;
}

static ssize_t io_read(struct kvsd_rnode *n, char *p, size_t len, short *want)
{
	ssize_t r;

	if (n->ssl) {
		ERR_clear_error();
		r = SSL_read(n->ssl, p, (int)len);
		return r > 0 ? r : tls_want(n, (int)r, want);
	}
	r = recv(n->fd, p, len, 0);
	if (r > 0)
		return r;
	if (!r)
		return -ECONNRESET;
	*want = POLLIN;
	return errno == EAGAIN || errno == EINTR ? -EAGAIN : -errno;
}

/*
 * Plain TCP: one recvmsg() into the reader's plan (resp.h): the pages of
 * the replies to come straight from the socket, as many as the plan holds.
 */
static ssize_t io_readv(struct kvsd_rexec *x, short *want)
{
	const struct kvsd_rsink *next[KVSD_RESP_PLAN + 1];
	struct iovec iov[KVSD_RESP_IOV];
	struct msghdr msg = { .msg_iov = iov };
	unsigned int i;
	ssize_t r;

	for (i = 0; i < KVSD_RESP_PLAN + 1 && x->got + i < x->count; i++)
		next[i] = x->cmds[x->got + i].sink;
	msg.msg_iovlen = kvsd_resp_iov(x->n->reader, next, i, x->max_reply, iov);
	r = recvmsg(x->n->fd, &msg, 0);
	if (r > 0)
		return r;
	if (!r)
		return -ECONNRESET;
	*want = POLLIN;
	return errno == EAGAIN || errno == EINTR ? -EAGAIN : -errno;
}

static bool reply_ok(const struct kvsd_reply *r)
{
	return r && r->type == KVSD_REPLY_STATUS && !strcmp(r->str, "OK");
}

/* What a refusal said, escaped for the log. */
static const char *reply_words(const struct kvsd_reply *r, char *buf, size_t len)
{
	if (!r || !r->str)
		return "?";
	return kvsd_resp_escape(buf, len, r->str, r->len);
}

static int node_auth(struct kvsd_rnode *n, const struct kvsd_rauth *a,
		     uint64_t deadline_ms)
{
	const char *argv[3] = { "AUTH" };
	size_t lens[3] = { 4 };
	struct kvsd_rcmd c = { 0 };
	char words[128];
	int argc = 1, ret;

	if (!a->password)
		return 0;
	if (a->user) {
		argv[argc] = a->user;
		lens[argc++] = strlen(a->user);
	}
	argv[argc] = a->password;
	lens[argc++] = strlen(a->password);
	if (kvsd_rcmd_format(&c, argc, argv, lens))
		return -ENOMEM;
	ret = kvsd_rnode_exec(n, &c, 1, 4096, deadline_ms);
	if (!ret && !reply_ok(c.reply)) {
		/* Redis's words (WRONGPASS ...), never the password. */
		snprintf(n->err, sizeof(n->err), "AUTH%s%s at %s:%d refused: %s",
			 a->user ? " as " : "", a->user ? a->user : "", n->host,
			 n->port, reply_words(c.reply, words, sizeof(words)));
		n->auth_failed = true;
		ret = -EACCES;
	}
	/* The formatted command held the password: wipe it. */
	if (c.buf)
		explicit_bzero(c.buf, c.len);
	kvsd_rcmd_free(&c);
	return ret;
}

/*
 * READONLY: a cluster replica then answers reads of its master's slots
 * (a master ignores it), so reads survive a dead master until failover.
 */
static int node_readonly(struct kvsd_rnode *n, uint64_t deadline_ms)
{
	static const char cmd[] = "*1\r\n$8\r\nREADONLY\r\n";
	struct kvsd_rcmd c = { .buf = (char *)cmd, .len = sizeof(cmd) - 1 };
	int ret = kvsd_rnode_exec(n, &c, 1, 4096, deadline_ms);
	char words[128];

	if (!ret && !reply_ok(c.reply)) {
		snprintf(n->err, sizeof(n->err), "READONLY at %s:%d refused: %s",
			 n->host, n->port, reply_words(c.reply, words, sizeof(words)));
		ret = -EPROTO;
	}
	kvsd_reply_free(c.reply);
	return ret;
}

int kvsd_rnode_connect(struct kvsd_rnode *n, const struct kvsd_rauth *a,
		       uint64_t deadline_ms)
{
	int ret;

	if (n->fd >= 0)
		return 0;
	if (kvsd_now_ms() < n->retry_at_ms) {
		if (!n->err[0])
			snprintf(n->err, sizeof(n->err), "%s:%d: backing off", n->host,
				 n->port);
		return -EAGAIN;
	}
	n->auth_failed = false;
	n->reader = kvsd_resp_new();
	if (!n->reader)
		return -ENOMEM;
	ret = tcp_connect(n, deadline_ms);
	if (!ret && a->tls)
		ret = tls_handshake(n, a->tls, deadline_ms);
	if (!ret)
		ret = node_auth(n, a, deadline_ms);
	if (!ret && n->readonly)
		ret = node_readonly(n, deadline_ms);
	if (ret) {
		node_failed(n);
		return ret;
	}
	n->backoff_ms = BACKOFF_MIN_MS;
	n->err[0] = '\0';
	return 0;
}

static int exec_fail(struct kvsd_rnode *n, int ret, const char *what)
{
	/* A TLS alert (a client certificate refused, say) says more than EIO. */
	const char *tls = n->ssl ? ERR_reason_error_string(ERR_peek_error()) : NULL;
	char c;

	if (n->ssl && !tls) {
		/* A write refused: the peer's alert may wait to be read. */
		SSL_read(n->ssl, &c, 1);
		tls = ERR_reason_error_string(ERR_peek_error());
	}

	if (ret == -EAGAIN)
		ret = -EIO;
	snprintf(n->err, sizeof(n->err), "%s:%d: %s: %s%s", n->host, n->port, what,
		 tls ? "TLS: " : "", tls ? tls :
		 ret == -EPROTO ? "protocol error" : strerror(-ret));
	ERR_clear_error();
	node_failed(n);
	return ret;
}

/* Send what the socket takes now: 0, or -errno (-EAGAIN: *want says for what). */
static int exec_send(struct kvsd_rexec *x, short *want)
{
	ssize_t w;

	while (x->sent < x->count) {
		struct kvsd_rcmd *c = &x->cmds[x->sent];
		const char *p;
		size_t piece;

		if (x->n->ssl) {
			p = cmd_at(c, x->off, &piece);
			w = io_write(x->n, p, piece, want);
		} else {
			w = io_writev(x, want);
		}
		if (w < 0)
			return (int)w;
		/* Past every command the call took whole. */
		while (w && x->sent < x->count) {
			size_t left = cmd_len(&x->cmds[x->sent]) - x->off;

			if ((size_t)w < left) {
				x->off += w;
				break;
			}
			w -= left;
			x->sent++;
			x->off = 0;
		}
	}
	return 0;
}

/*
 * Move what the socket allows: write until it would block, read and take
 * every whole reply until it would block.  1 when every reply is in, 0
 * when it must wait (x->events says for what), or -errno (the node is
 * closed).
 */
static int exec_step(struct kvsd_rexec *x)
{
	struct kvsd_rnode *n = x->n;
	short w_want = POLLOUT, r_want = POLLIN;
	struct kvsd_reply *reply;
	size_t room;
	char *p;
	ssize_t r;
	int ret;

	while (x->got < x->count) {
		ret = exec_send(x, &w_want);
		if (ret && ret != -EAGAIN)
			return exec_fail(n, ret, "sending");
		if (n->ssl) {
			kvsd_resp_space(n->reader, &p, &room);
			r = io_read(n, p, room, &r_want);
		} else {
			r = io_readv(x, &r_want);
		}
		if (r == -EAGAIN) {
			x->events = r_want | (x->sent < x->count ? w_want : 0);
			return 0;
		}
		if (r < 0)
			return exec_fail(n, (int)r, "reading");
		kvsd_resp_filled(n->reader, r);
		for (;;) {
			/* The next reply is its command's: its bound, its sink. */
			if (x->got < x->count)
				kvsd_resp_expect(n->reader, x->max_reply,
						 x->cmds[x->got].sink);
			ret = kvsd_resp_next(n->reader, &reply);
			if (ret < 0) {
				snprintf(n->err, sizeof(n->err), "%s:%d: reading: %s",
					 n->host, n->port, kvsd_resp_error(n->reader));
				node_failed(n);
				return -EPROTO;
			}
			if (!ret)
				break;
			if (x->got >= x->count) {	/* an answer nobody asked */
				kvsd_reply_free(reply);
				snprintf(n->err, sizeof(n->err), "%s:%d: a reply nobody asked for",
					 n->host, n->port);
				node_failed(n);
				return -EPROTO;
			}
			x->cmds[x->got++].reply = reply;
		}
	}
	if (kvsd_resp_busy(n->reader)) {
		snprintf(n->err, sizeof(n->err), "%s:%d: bytes after the last reply",
			 n->host, n->port);
		node_failed(n);
		return -EPROTO;
	}
	return 1;
}

/*
 * Bytes waiting before anything was asked: a Redis that answers what
 * nobody asked would shift every later reply onto the wrong command.
 * (Plain TCP: over TLS, session tickets may wait there.)
 */
static bool unsolicited(struct kvsd_rnode *n)
{
	char c;

	if (n->ssl || n->fd < 0)
		return false;
	if (recv(n->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 1)
		return true;
	return false;
}

void kvsd_rexec_init(struct kvsd_rexec *x, struct kvsd_rnode *n,
		     struct kvsd_rcmd *cmds, unsigned int count, size_t max_reply)
{
	memset(x, 0, sizeof(*x));
	x->n = n;
	x->cmds = cmds;
	x->count = count;
	x->max_reply = max_reply;
	x->ret = n->fd < 0 ? -ENOTCONN : 1;	/* 1: running */
	if (x->ret == 1 && unsolicited(n)) {
		snprintf(n->err, sizeof(n->err), "%s:%d: bytes nobody asked for",
			 n->host, n->port);
		node_failed(n);
		x->ret = -EPROTO;
	}
}

void kvsd_rexec_run(struct kvsd_rexec *xs, unsigned int n_x, uint64_t deadline_ms)
{
	struct pollfd *p = calloc(n_x, sizeof(*p));
	unsigned int *idx = calloc(n_x, sizeof(*idx));
	unsigned int i, n_p;
	int left, r;

	if (!p || !idx) {
		for (i = 0; i < n_x; i++)
			if (xs[i].ret == 1)
				xs[i].ret = -ENOMEM;
		goto out;
	}
	for (;;) {
		n_p = 0;
		for (i = 0; i < n_x; i++) {
			if (xs[i].ret != 1)
				continue;
			r = exec_step(&xs[i]);
			if (r) {
				xs[i].ret = r < 0 ? r : 0;
				continue;
			}
			p[n_p].fd = xs[i].n->fd;
			p[n_p].events = xs[i].events;
			p[n_p].revents = 0;
			idx[n_p++] = i;
		}
		if (!n_p)
			break;
		left = ms_left(deadline_ms);
		if (!left) {
			for (i = 0; i < n_p; i++)
				xs[idx[i]].ret = exec_fail(xs[idx[i]].n, -ETIMEDOUT,
							   "waiting for Redis");
			break;
		}
		if (poll(p, n_p, left) < 0 && errno != EINTR) {
			for (i = 0; i < n_p; i++)
				xs[idx[i]].ret = exec_fail(xs[idx[i]].n, -errno, "poll");
			break;
		}
	}
out:
	free(p);
	free(idx);
}

int kvsd_rnode_exec(struct kvsd_rnode *n, struct kvsd_rcmd *cmds, unsigned int count,
		    size_t max_reply, uint64_t deadline_ms)
{
	struct kvsd_rexec x;

	kvsd_rexec_init(&x, n, cmds, count, max_reply);
	kvsd_rexec_run(&x, 1, deadline_ms);
	return x.ret;
}

int kvsd_rcmd_format(struct kvsd_rcmd *c, int argc, const char *const *argv,
		     const size_t *lens)
{
	char *buf = NULL;
	int len = kvsd_resp_format(&buf, argc, argv, lens);

	if (len < 0)
		return -ENOMEM;
	memset(c, 0, sizeof(*c));
	c->buf = buf;
	c->len = len;
	c->node = -1;
	return 0;
}

void kvsd_rcmd_free(struct kvsd_rcmd *c)
{
	kvsd_reply_free(c->reply);
	c->reply = NULL;
	free(c->buf);
	c->buf = NULL;
}
