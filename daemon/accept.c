// SPDX-License-Identifier: GPL-2.0
/*
 * Accept and buffer policy (conn.h): what one connection, and one user,
 * may take of kvshared, so that one local user cannot take what the
 * others need.  The caps are configuration keys (config.h,
 * kvshared.conf.example); docs/threat-model.md gives their bounds.
 *
 * - max_connections, and max_connections_per_uid (uid 0 exempt): a
 *   connection over either is accepted and closed at once, so that the
 *   listen backlog drains instead of filling with connections nobody
 *   serves; one rate-limited log line says why.
 * - max_conn_buffer: a message announcing more is not framed (conn.c
 *   closes it).  A buffer grows as bytes arrive (the reply is built in
 *   place and is never longer than its request), so it holds what was
 *   really sent.
 * - max_buffer_total: all connections' buffers beyond the first
 *   KVSD_BUF_MIN bytes of each (which every connection may have, so that
 *   small calls always work), and the shared rings; a connection whose
 *   buffer would exceed it is closed.
 * - stall_timeout_ms: from the first byte of a request to its last, and
 *   from a reply blocked by a full socket to its last byte; a client past
 *   it is closed, whatever it still trickles (slowloris).
 * - a uid whose close queue is long is not read from (closer.h).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "closer.h"
#include "conn.h"
#include "listen.h"

#define BUF_KEEP	(64u << 10)	/* larger buffers are freed after use */
#define MAX_GROUPS	65536		/* NGROUPS_MAX */

static struct {
	struct kvsd_watch listen;
	char *path;
	ino_t ino;
	uint64_t next_id;
	bool accept_paused;
	bool accept_warned;		/* logged once per episode */
} acc = { .listen = { .fd = -1 } };

/* ---- the buffer budget --------------------------------------------------- */

/* What a buffer of @cap bytes counts against max_buffer_total. */
static uint64_t buf_counted(uint32_t cap)
{
	return cap > KVSD_BUF_MIN ? cap - KVSD_BUF_MIN : 0;
}

static void conn_free_buf(struct conn *c)
{
	kvsd_srv.buffered -= buf_counted(c->cap);
	kvsd_user_uncharge(c->user, KVSD_CHARGE_BUF, buf_counted(c->cap));
	free(c->buf);
	c->buf = NULL;
	c->cap = 0;
}

/* Can @more bytes be buffered within max_buffer_total?  0, or -ENOBUFS and why. */
static int budget_fits(uint64_t more, char *why, size_t why_len)
{
	uint64_t total = kvsd_srv.d->cfg->max_buffer_total;

	if (kvsd_srv.buffered + more <= total)
		return 0;
	snprintf(why, why_len, "buffer budget exhausted: %llu bytes buffered, "
		 "max_buffer_total %llu", (unsigned long long)kvsd_srv.buffered,
		 (unsigned long long)total);
	return -ENOBUFS;
}

/*
 * Every connection may have KVSD_BUF_MIN (charged with the connection);
 * beyond that, the buffers of all connections together stay within
 * max_buffer_total, and its uid's ledger pays for the rest.
 */
int kvsd_conn_reserve(struct conn *c, uint32_t need, char *why, size_t why_len)
{
	uint64_t more;
	uint8_t *p;
	int ret;

	if (c->cap >= need)
		return 0;
	if (need < KVSD_BUF_MIN)
		need = KVSD_BUF_MIN;
	more = buf_counted(need) - buf_counted(c->cap);
	ret = budget_fits(more, why, why_len);
	if (ret)
		return ret;
	ret = kvsd_user_charge(c->user, KVSD_CHARGE_BUF, more, why, why_len);
	if (ret) {
		kvsd_user_refused(c->user, "a message's buffer", why);
		return ret;
	}
	p = realloc(c->buf, need);
	if (!p) {
		kvsd_user_uncharge(c->user, KVSD_CHARGE_BUF, more);
		snprintf(why, why_len, "out of memory");
		return -ENOMEM;
	}
	kvsd_srv.buffered += more;
	c->buf = p;
	c->cap = need;
	return 0;
}

void kvsd_conn_trim_buf(struct conn *c)
{
	if (c->cap > BUF_KEEP)
		conn_free_buf(c);
}

/*
 * A ring's message area counts against max_buffer_total, as a buffer
 * does; the whole memfd (its control page too) is charged to the uid.
 */
int kvsd_conn_ring_charge(struct conn *c, uint32_t size, char *why, size_t why_len)
{
	int ret;

	ret = budget_fits(size, why, why_len);
	if (ret)
		return ret;
	ret = kvsd_user_charge(c->user, KVSD_CHARGE_RING, KVS_RING_MIN + size,
			       why, why_len);
	if (ret) {
		kvsd_user_refused(c->user, "a shared ring", why);
		return ret;
	}
	kvsd_srv.buffered += size;
	return 0;
}

void kvsd_conn_ring_refund(struct conn *c, uint32_t size)
{
	kvsd_srv.buffered -= size;
	kvsd_user_uncharge(c->user, KVSD_CHARGE_RING, KVS_RING_MIN + size);
}

/*
 * Before a command that may add @more pages to @c's holdings: the core's
 * hold table for what @c holds then, charged at its largest.  0 or
 * -EDQUOT/-ENOBUFS with @why set.
 */
int kvsd_conn_held_charge(struct conn *c, uint64_t more, char *why, size_t why_len)
{
	uint64_t peak = kvs_client_held(c->cl) + more, extra;
	int ret;

	if (peak <= c->held_peak)
		return 0;
	extra = kvs_client_meta_bytes(peak) - kvs_client_meta_bytes(c->held_peak);
	ret = kvsd_user_charge(c->user, KVSD_CHARGE_HELD, extra, why, why_len);
	if (ret) {
		kvsd_user_refused(c->user, "holding more pages", why);
		return ret;
	}
	c->held_peak = peak;
	return 0;
}

void kvsd_conn_forget(struct conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		kvsd_srv.conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	kvsd_srv.n_conns--;
	conn_free_buf(c);
	kvsd_user_uncharge(c->user, KVSD_CHARGE_CONN, c->conn_charge);
	kvsd_user_uncharge(c->user, KVSD_CHARGE_HELD,
			   kvs_client_meta_bytes(c->held_peak) - kvs_client_meta_bytes(0));
	kvsd_user_put(c->user);
}

/*
 * Whether the closers are too far behind for @c to be read: its uid has
 * KVSD_CLOSE_QUEUE_UID descriptors waiting for them, or some and all uids
 * KVSD_CLOSE_QUEUE_MAX.  A message under way (whose first bytes may have
 * brought the last of them) is read to its end, unless it brings another
 * KVSD_RECV_FDS, so a uid's queue stays below KVSD_CLOSE_QUEUE_UID +
 * 2 * KVSD_RECV_FDS.
 */
bool kvsd_conn_closers_behind(const struct conn *c)
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
	const struct kvsd_config *cfg = kvsd_srv.d->cfg;
	unsigned int n = 0;
	struct conn *c;

	if (kvsd_srv.n_conns >= cfg->max_connections) {
		snprintf(why, len, "max_connections %u reached", cfg->max_connections);
		return true;
	}
	if (!uc->uid)
		return false;
	for (c = kvsd_srv.conns; c; c = c->next)
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
		kvsd_sock_close(q, fd);
		kvsd_closeq_put(q);
		return;
	}
	if (q)
		kvsd_closeq_put(q);
	close(fd);
}

/*
 * What a connection costs before it sends anything: its state, the
 * core's client, its first buffer and its supplementary groups (up to
 * 256 KiB of them).  Its hold table is charged as it grows.
 */
static uint64_t conn_bytes(const struct conn *c)
{
	return sizeof(*c) + kvs_client_meta_bytes(0) + KVSD_BUF_MIN +
	       (uint64_t)c->cred.n_groups * sizeof(*c->groups);
}

/*
 * A new connection: its credentials, then its client, user, close queue
 * (with a place reserved, which from then on takes the socket), groups,
 * charge and watch, each undone in reverse order when a later step fails.
 */
static void conn_new(int fd)
{
	struct ucred uc = { .uid = (uid_t)-1 };
	socklen_t len = sizeof(uc);
	struct conn *c;
	char why[192];
	int ret;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len)) {
		kvsd_log("accept: SO_PEERCRED: %s", strerror(errno));
		goto refuse;
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
		goto refuse;
	}
	if (conn_over_cap(&uc, why, sizeof(why))) {
		kvsd_log_limited(KVSD_LOG_REFUSED, "client (pid %d uid %u) refused: %s",
				 uc.pid, uc.uid, why);
		goto refuse;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		goto oom;
	c->cl = kvs_client_new();
	if (!c->cl)
		goto free_conn;
	c->user = kvsd_user_get(uc.uid, uc.uid == 0);
	if (!c->user)
		goto free_client;
	c->closeq = kvsd_closeq_get(uc.uid);
	if (!c->closeq)
		goto put_user;
	if (kvsd_closeq_reserve(c->closeq, 1))
		goto put_closeq;
	c->w.fd = fd;
	c->w.fn = kvsd_conn_event;
	c->wait_bell = -1;
	kvs_client_set_waker(c->cl, kvsd_conn_wake, c);
	c->id = ++acc.next_id;
	c->pid = uc.pid;
	c->cred.uid = uc.uid;
	c->cred.gid = uc.gid;
	/* uid 0 is admin: the daemon's counterpart of CAP_SYS_ADMIN. */
	c->cred.admin = uc.uid == 0;
	ret = conn_read_groups(c);
	if (ret) {
		kvsd_log("accept: SO_PEERGROUPS: %s (pid %d uid %u refused)",
			 strerror(-ret), uc.pid, uc.uid);
		goto close_sock;
	}
	ret = kvsd_user_charge(c->user, KVSD_CHARGE_CONN, conn_bytes(c), why,
			       sizeof(why));
	if (ret) {
		kvsd_user_refused(c->user, "a connection", why);
		goto free_groups;
	}
	c->conn_charge = conn_bytes(c);
	ret = kvsd_watch_add(&c->w, EPOLLIN);
	if (ret) {
		kvsd_log("accept: epoll: %s", strerror(-ret));
		goto uncharge;
	}
	c->next = kvsd_srv.conns;
	if (kvsd_srv.conns)
		kvsd_srv.conns->prev = c;
	kvsd_srv.conns = c;
	kvsd_srv.n_conns++;
	kvsd_log_limited(KVSD_LOG_CONNECT, "client %llu connected (pid %d uid %u gid %u)",
			 (unsigned long long)c->id, c->pid, uc.uid, uc.gid);
	return;

uncharge:
	kvsd_user_uncharge(c->user, KVSD_CHARGE_CONN, c->conn_charge);
free_groups:
	free(c->groups);
close_sock:
	/* The place reserved in its queue takes the socket. */
	kvsd_sock_close(c->closeq, fd);
	fd = -1;
put_closeq:
	kvsd_closeq_put(c->closeq);
put_user:
	kvsd_user_put(c->user);
free_client:
	kvs_client_free(c->cl);
free_conn:
	free(c);
	if (fd < 0)
		return;
	/* Every step before the reservation fails only for want of memory. */
oom:
	kvsd_log("accept: out of memory (pid %d uid %u refused)", uc.pid, uc.uid);
refuse:
	refuse_close(uc.uid, fd);
}

/*
 * Out of descriptors or memory, or the close queues are full: a pending
 * connection stays queued and would wake us forever, so stop accepting
 * until a tick finds things better.
 */
static void accept_pause(const char *why)
{
	if (!acc.accept_warned)
		kvsd_log("accept: %s; retrying every second", why);
	acc.accept_warned = true;
	kvsd_watch_del(&acc.listen);
	acc.accept_paused = true;
}

void kvsd_accept(struct kvsd_watch *w, uint32_t events)
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
			if (acc.accept_warned)
				kvsd_log("accept: accepting again");
			acc.accept_warned = false;
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
	uint64_t now = kvsd_now_ms(), limit = kvsd_srv.d->cfg->stall_timeout_ms;
	struct conn *c, *next;
	char why[96];

	for (c = kvsd_srv.conns; c; c = next) {
		next = c->next;
		if (!c->busy_since || now - c->busy_since < limit)
			continue;
		snprintf(why, sizeof(why), c->out_len ?
			 "did not read its reply for %llu ms" :
			 "stalled for %llu ms in the middle of a message",
			 (unsigned long long)(now - c->busy_since));
		kvsd_conn_close(c, why);
	}
}

/* Read again from connections whose uid's closers have caught up. */
static void conn_unthrottle(void)
{
	struct conn *c, *next;

	for (c = kvsd_srv.conns; c; c = next) {
		next = c->next;
		if (!c->throttled || kvsd_conn_closers_behind(c))
			continue;
		c->throttled = false;
		kvsd_conn_set_events(c, EPOLLIN);
	}
}

void kvsd_accept_tick(void)
{
	conn_expire();
	conn_unthrottle();
	kvsd_users_tick();
	if (!acc.accept_paused || kvsd_closer_full())
		return;
	if (!kvsd_watch_add(&acc.listen, EPOLLIN))
		acc.accept_paused = false;
}

int kvsd_accept_start(const char *path)
{
	const struct kvsd_config *cfg = kvsd_srv.d->cfg;
	int fd;

	acc.path = strdup(path);
	if (!acc.path)
		return -ENOMEM;
	/* Anyone may connect: each pool's mode decides who may attach. */
	fd = kvsd_unix_listen(path, 0666, &acc.ino);
	if (fd < 0)
		return fd;
	acc.listen.fd = fd;
	acc.listen.fn = kvsd_accept;
	if (kvsd_watch_add(&acc.listen, EPOLLIN)) {
		int ret = -errno;

		close(fd);
		acc.listen.fd = -1;
		return ret;
	}
	kvsd_log("listening on %s (max_connections %u, %u per uid; buffers "
		 "%llu bytes per connection, %llu in all; stall timeout %u ms; "
		 "memory %llu bytes per uid, %llu in all)",
		 path, cfg->max_connections, cfg->max_connections_per_uid,
		 (unsigned long long)cfg->max_conn_buffer,
		 (unsigned long long)cfg->max_buffer_total,
		 cfg->stall_timeout_ms, (unsigned long long)cfg->max_user_memory,
		 (unsigned long long)cfg->max_memory_total);
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

void kvsd_accept_stop(void)
{
	if (acc.listen.fd >= 0) {
		if (!acc.accept_paused)
			kvsd_watch_del(&acc.listen);
		kvsd_unix_unlink(acc.path, acc.ino);
		listen_close(acc.listen.fd);
		acc.listen.fd = -1;
	}
	free(acc.path);
	acc.path = NULL;
}
