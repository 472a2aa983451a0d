// SPDX-License-Identifier: GPL-2.0
/*
 * Prometheus metrics: a minimal HTTP/1.0 responder to GET /metrics on a
 * unix socket or a loopback TCP port.  Loopback only, because the
 * endpoint is unauthenticated and names pools, pids and uids.
 *
 * Every scrape asks the arbiter afresh (POOL_LIST and POOL_STATS as the
 * daemon, which is admin in socket mode and normally root in module
 * mode), so the numbers are the arbiter's own, never a copy that could
 * drift.  Per-client holdings exist only in socket mode, where the
 * clients are this daemon's connections.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "closer.h"
#include "kvshared.h"
#include "listen.h"
#include "remote/remote.h"
#include "server.h"
#include "user.h"

#define REQ_MAX		8192		/* request head, bytes */
#define MAX_CONNS	32
#define IDLE_SECS	5

struct mconn {
	struct kvsd_watch w;
	struct mconn *next;
	time_t start;
	char req[REQ_MAX + 1];
	size_t req_len;
	char *out;
	size_t out_len, out_sent;
};

static struct {
	struct kvsd *d;
	struct kvsd_watch listen;
	char *unix_path;
	ino_t ino;
	struct mconn *conns;
	unsigned int n_conns;
} met = { .listen = { .fd = -1 } };

/* ---- a growing text buffer ------------------------------------------------ */

struct sbuf {
	char *p;
	size_t len, cap;
	bool oom;
};

static void sb_printf(struct sbuf *sb, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static bool sb_grow(struct sbuf *sb, size_t need)
{
	size_t cap = sb->cap ? sb->cap : 16384;
	char *p;

	if (sb->oom)
		return false;
	if (sb->len + need < sb->cap)
		return true;
	while (cap <= sb->len + need)
		cap *= 2;
	p = realloc(sb->p, cap);
	if (!p) {
		sb->oom = true;
		return false;
	}
	sb->p = p;
	sb->cap = cap;
	return true;
}

static void sb_printf(struct sbuf *sb, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !sb_grow(sb, n))
		return;
	va_start(ap, fmt);
	vsnprintf(sb->p + sb->len, sb->cap - sb->len, fmt, ap);
	va_end(ap);
	sb->len += n;
}

static void sb_append(struct sbuf *sb, const char *p, size_t len)
{
	if (!sb_grow(sb, len))
		return;
	memcpy(sb->p + sb->len, p, len);
	sb->len += len;
	sb->p[sb->len] = '\0';
}

/* ---- the exposition --------------------------------------------------------- */

struct pool_snap {
	struct kvs_pool_desc desc;
	struct kvs_pool_stats st;
};

static void family(struct sbuf *sb, const char *name, const char *type,
		   const char *help)
{
	sb_printf(sb, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/*
 * The families with one sample per pool from its stats: a uint64_t field
 * at @off, or POOL_MISSES (lookups - hits, which the stats do not hold).
 * In the order they are written, after kvshare_pool_info and _pages.
 */
#define POOL_MISSES	SIZE_MAX
#define POOL_STAT(field)	offsetof(struct kvs_pool_stats, field)

static const struct pool_stat_family {
	const char *name, *type, *help;
	size_t off;
} pool_stat_families[] = {
	{ "kvshare_pool_size_pages", "gauge",
	  "Pages in the pool.", POOL_STAT(n_pages) },
	{ "kvshare_pool_evictable_pages", "gauge",
	  "Cached pages without children (evictable now).", POOL_STAT(n_evictable) },
	{ "kvshare_pool_refs", "gauge",
	  "Sum of the refcounts of shared pages.", POOL_STAT(n_refs) },
	{ "kvshare_pool_held_pages", "gauge",
	  "References plus owned pages recorded against clients.", POOL_STAT(n_held) },
	{ "kvshare_pool_claimed_pages", "gauge",
	  "Owned pages in flight under a key (claims).", POOL_STAT(n_claimed) },
	{ "kvshare_pool_files", "gauge",
	  "Clients (files or connections) attached.", POOL_STAT(n_files) },
	{ "kvshare_pool_allocs_total", "counter",
	  "Pages allocated.", POOL_STAT(allocs) },
	{ "kvshare_pool_alloc_fails_total", "counter",
	  "ALLOC calls failed for lack of pages.", POOL_STAT(alloc_fails) },
	{ "kvshare_pool_publishes_total", "counter",
	  "Entries published.", POOL_STAT(publishes) },
	{ "kvshare_pool_dup_publishes_total", "counter",
	  "Published entries whose key already existed.", POOL_STAT(dup_publishes) },
	{ "kvshare_pool_lookups_total", "counter",
	  "Keys looked up.", POOL_STAT(lookups) },
	{ "kvshare_pool_hits_total", "counter",
	  "Keys looked up and found.", POOL_STAT(hits) },
	{ "kvshare_pool_misses_total", "counter",
	  "Keys looked up and not found.", POOL_MISSES },
	{ "kvshare_pool_evictions_total", "counter",
	  "Cached pages evicted.", POOL_STAT(evictions) },
};

static uint64_t pool_stat(const struct kvs_pool_stats *st, size_t off)
{
	uint64_t v;

	if (off == POOL_MISSES)
		return st->lookups - st->hits;
	memcpy(&v, (const char *)st + off, sizeof(v));
	return v;
}

static void pool_family(struct sbuf *sb, const struct pool_snap *ps, uint32_t n,
			const struct pool_stat_family *f)
{
	uint32_t i;

	family(sb, f->name, f->type, f->help);
	for (i = 0; i < n; i++)
		sb_printf(sb, "%s{pool=\"%s\"} %llu\n", f->name, ps[i].desc.name,
			  (unsigned long long)pool_stat(&ps[i].st, f->off));
}

static void pool_pages(struct sbuf *sb, const struct pool_snap *ps, uint32_t n)
{
	uint32_t i;

	family(sb, "kvshare_pool_pages", "gauge", "Pages by state.");
	for (i = 0; i < n; i++) {
		const struct kvs_pool_stats *st = &ps[i].st;
		const char *name = ps[i].desc.name;

		sb_printf(sb, "kvshare_pool_pages{pool=\"%s\",state=\"free\"} %llu\n"
			  "kvshare_pool_pages{pool=\"%s\",state=\"owned\"} %llu\n"
			  "kvshare_pool_pages{pool=\"%s\",state=\"shared\"} %llu\n"
			  "kvshare_pool_pages{pool=\"%s\",state=\"cached\"} %llu\n",
			  name, (unsigned long long)st->n_free,
			  name, (unsigned long long)st->n_owned,
			  name, (unsigned long long)st->n_shared,
			  name, (unsigned long long)st->n_cached);
	}
}

static void pool_info(struct sbuf *sb, const struct pool_snap *ps, uint32_t n)
{
	uint32_t i;

	family(sb, "kvshare_pool_info", "gauge", "A pool's identity and geometry (always 1).");
	for (i = 0; i < n; i++) {
		const struct kvs_pool_desc *p = &ps[i].desc;

		sb_printf(sb, "kvshare_pool_info{pool=\"%s\",id=\"%u\",dtype=\"%s\","
			  "layers=\"%u\",kv_heads=\"%u\",head_dim=\"%u\","
			  "tokens_per_page=\"%u\",page_bytes=\"%llu\",mode=\"%04o\","
			  "uid=\"%u\",gid=\"%u\",mem_fd=\"%s\"} 1\n",
			  p->name, p->pool_id, kvsd_dtype_name(p->geom.dtype),
			  p->geom.n_layers, p->geom.n_kv_heads, p->geom.head_dim,
			  p->geom.tokens_per_page, (unsigned long long)p->geom.page_bytes,
			  p->mode, p->uid, p->gid, p->has_mem_fd ? "yes" : "no");
	}
}

struct client_ctx {
	struct sbuf *sb;
	const struct pool_snap *ps;
	uint32_t n;
};

static void client_sample(const struct kvsd_conn_info *ci, void *arg)
{
	struct client_ctx *cc = arg;
	const char *pool = "";
	uint32_t i;

	if (!ci->pool_id)
		return;
	for (i = 0; i < cc->n; i++)
		if (cc->ps[i].desc.pool_id == ci->pool_id)
			pool = cc->ps[i].desc.name;
	sb_printf(cc->sb, "kvshare_client_held_pages{pool=\"%s\",client=\"%llu\","
		  "pid=\"%d\",uid=\"%u\"} %llu\n", pool,
		  (unsigned long long)ci->id, ci->pid, ci->uid,
		  (unsigned long long)ci->held);
}

static void user_sample(const struct kvsd_user_info *ui, void *arg)
{
	struct sbuf *sb = arg;
	unsigned int k;

	for (k = 0; k < KVSD_CHARGE_NKINDS; k++)
		sb_printf(sb, "kvshare_user_memory_bytes{uid=\"%u\",what=\"%s\"} %llu\n",
			  ui->uid, kvsd_charge_names[k], (unsigned long long)ui->bytes[k]);
	sb_printf(sb, "kvshare_user_memory_bytes{uid=\"%u\",what=\"pools\"} %llu\n",
		  ui->uid, (unsigned long long)ui->pools);
}

static void pool_families(struct sbuf *sb, const struct pool_snap *ps, uint32_t n)
{
	size_t i;

	pool_info(sb, ps, n);
	pool_pages(sb, ps, n);
	for (i = 0; i < ARRAY_SIZE(pool_stat_families); i++)
		pool_family(sb, ps, n, &pool_stat_families[i]);
}

/* Pools we may not read (module mode, daemon not root) are left out. */
static uint32_t snapshot(struct pool_snap **out)
{
	struct kvs_pool_desc *descs = NULL;
	struct pool_snap *ps;
	uint32_t i, n = 0, k = 0;

	*out = NULL;
	if (kvsd_pool_list(met.d, &descs, &n) || !n) {
		free(descs);
		return 0;
	}
	ps = calloc(n, sizeof(*ps));
	for (i = 0; ps && i < n; i++) {
		ps[k].desc = descs[i];
		ps[k].st.pool_id = descs[i].pool_id;
		if (!kvsd_self_cmd(met.d, KVS_IOC_POOL_STATS, &ps[k].st))
			k++;
	}
	free(descs);
	*out = ps;
	return ps ? k : 0;
}

static void render(struct sbuf *sb)
{
	bool socket_mode = met.d->mode == KVSD_MODE_SOCKET;
	struct pool_snap *ps;
	uint32_t n = snapshot(&ps);
	char *remote;

	family(sb, "kvshare_up", "gauge", "1: kvshared runs; mode is where the arbiter is.");
	sb_printf(sb, "kvshare_up{mode=\"%s\"} 1\n", socket_mode ? "socket" : "module");
	family(sb, "kvshare_pools", "gauge", "Pools that exist.");
	sb_printf(sb, "kvshare_pools %u\n", n);
	if (socket_mode) {
		family(sb, "kvshare_connections", "gauge", "Clients connected to the socket.");
		sb_printf(sb, "kvshare_connections %u\n", kvsd_server_n_conns());
		/* One stuck in close() for long: a file system that does not answer. */
		family(sb, "kvshare_close_busy", "gauge",
		       "Client descriptors a closer thread is closing now.");
		sb_printf(sb, "kvshare_close_busy %u\n", kvsd_closer_busy());
		family(sb, "kvshare_close_queued", "gauge",
		       "Client descriptors waiting in the close queues.");
		sb_printf(sb, "kvshare_close_queued %u\n", kvsd_closer_queued());
	}
	pool_families(sb, ps, n);
	if (socket_mode) {
		struct client_ctx cc = { .sb = sb, .ps = ps, .n = n };

		family(sb, "kvshare_client_held_pages", "gauge",
		       "Pages one connection holds (owned plus references).");
		kvsd_server_for_each(client_sample, &cc);
		family(sb, "kvshare_user_memory_bytes", "gauge",
		       "What a connected uid costs kvshared (max_user_memory), by what.");
		kvsd_users_for_each(user_sample, sb);
	}
	remote = kvsd_remote_metrics();
	if (remote)
		sb_append(sb, remote, strlen(remote));
	free(remote);
	free(ps);
}

/* ---- HTTP ------------------------------------------------------------------- */

static void respond(struct mconn *mc, int status, const char *reason,
		    const char *body, size_t body_len, bool head)
{
	struct sbuf sb = { 0 };

	sb_printf(&sb, "HTTP/1.0 %d %s\r\n"
		  "Content-Type: %s\r\n"
		  "Content-Length: %zu\r\n"
		  "Connection: close\r\n\r\n", status, reason,
		  status == 200 ? "text/plain; version=0.0.4; charset=utf-8" :
				  "text/plain; charset=utf-8", body_len);
	if (!head)
		sb_append(&sb, body, body_len);
	mc->out = sb.p;
	mc->out_len = sb.oom ? 0 : sb.len;
	mc->out_sent = 0;
}

static void respond_text(struct mconn *mc, int status, const char *reason)
{
	char body[64];

	snprintf(body, sizeof(body), "%d %s\n", status, reason);
	respond(mc, status, reason, body, strlen(body), false);
}

/* The request head is complete: answer it. */
static void http_answer(struct mconn *mc)
{
	char method[16], path[256];
	struct sbuf sb = { 0 };
	bool head;

	if (sscanf(mc->req, "%15s %255s HTTP/%*d.%*d", method, path) != 2) {
		respond_text(mc, 400, "Bad Request");
		return;
	}
	head = !strcmp(method, "HEAD");
	if (strcmp(method, "GET") && !head) {
		respond_text(mc, 405, "Method Not Allowed");
		return;
	}
	path[strcspn(path, "?")] = '\0';
	if (strcmp(path, "/metrics")) {
		respond_text(mc, 404, "Not Found");
		return;
	}
	render(&sb);
	if (sb.oom)
		respond_text(mc, 500, "Internal Server Error");
	else
		respond(mc, 200, "OK", sb.p, sb.len, head);
	free(sb.p);
}

static void mconn_close(struct mconn *mc)
{
	struct mconn **pp;

	for (pp = &met.conns; *pp; pp = &(*pp)->next) {
		if (*pp == mc) {
			*pp = mc->next;
			break;
		}
	}
	kvsd_watch_del(&mc->w);
	close(mc->w.fd);
	free(mc->out);
	free(mc);
	met.n_conns--;
}

/* 0: done, 1: more to send, < 0: broken. */
static int mconn_send(struct mconn *mc)
{
	while (mc->out_sent < mc->out_len) {
		ssize_t n = send(mc->w.fd, mc->out + mc->out_sent,
				 mc->out_len - mc->out_sent, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -errno;
		}
		mc->out_sent += n;
	}
	return 0;
}

static bool head_complete(const struct mconn *mc)
{
	return strstr(mc->req, "\r\n\r\n") || strstr(mc->req, "\n\n");
}

static void mconn_event(struct kvsd_watch *w, uint32_t events)
{
	struct mconn *mc = (struct mconn *)((char *)w - offsetof(struct mconn, w));
	ssize_t n;

	if (!mc->out) {
		if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
			return;
		n = recv(w->fd, mc->req + mc->req_len, REQ_MAX - mc->req_len,
			 MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0) {
			mconn_close(mc);
			return;
		}
		mc->req_len += n;
		mc->req[mc->req_len] = '\0';
		if (strlen(mc->req) != mc->req_len)
			respond_text(mc, 400, "Bad Request");
		else if (head_complete(mc))
			http_answer(mc);
		else if (mc->req_len == REQ_MAX)
			respond_text(mc, 431, "Request Header Fields Too Large");
		else
			return;
		if (!mc->out) {
			mconn_close(mc);
			return;
		}
	}
	switch (mconn_send(mc)) {
	case 1:
		if (kvsd_watch_mod(&mc->w, EPOLLOUT))
			mconn_close(mc);
		return;
	default:
		/* HTTP/1.0: the response ends with the connection. */
		mconn_close(mc);
	}
}

static void met_accept(struct kvsd_watch *w, uint32_t events)
{
	struct mconn *mc;
	int fd;

	(void)events;
	fd = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return;
	if (met.n_conns >= MAX_CONNS) {
		close(fd);	/* a scraper retries; a flood gets nothing */
		return;
	}
	mc = calloc(1, sizeof(*mc));
	if (!mc) {
		close(fd);
		return;
	}
	mc->w.fd = fd;
	mc->w.fn = mconn_event;
	mc->start = time(NULL);
	if (kvsd_watch_add(&mc->w, EPOLLIN)) {
		close(fd);
		free(mc);
		return;
	}
	mc->next = met.conns;
	met.conns = mc;
	met.n_conns++;
}

/* Slow or idle scrapers must not pile up. */
void kvsd_metrics_tick(void)
{
	time_t now = time(NULL);
	struct mconn *mc, *next;

	for (mc = met.conns; mc; mc = next) {
		next = mc->next;
		if (now - mc->start > IDLE_SECS)
			mconn_close(mc);
	}
}

/* ---- the listener ------------------------------------------------------------ */

static int tcp_listen(const char *spec)
{
	struct sockaddr_storage ss;
	socklen_t len;
	char addr[INET6_ADDRSTRLEN];
	int fd, one = 1, ret = kvsd_metrics_addr(spec, &ss, &len);

	if (ret)		/* config.c has checked it */
		return ret;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, len) || listen(fd, 16) ||
	    getsockname(fd, (struct sockaddr *)&ss, &len)) {
		ret = -errno;
		kvsd_log("metrics %s: %s", spec, strerror(-ret));
		close(fd);
		return ret;
	}
	if (ss.ss_family == AF_INET) {
		struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;

		inet_ntop(AF_INET, &in4->sin_addr, addr, sizeof(addr));
		kvsd_log("metrics on http://%s:%u/metrics", addr, ntohs(in4->sin_port));
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;

		inet_ntop(AF_INET6, &in6->sin6_addr, addr, sizeof(addr));
		kvsd_log("metrics on http://[%s]:%u/metrics", addr, ntohs(in6->sin6_port));
	}
	return fd;
}

int kvsd_metrics_start(struct kvsd *d, const char *spec)
{
	int fd;

	met.d = d;
	if (!strncmp(spec, "unix:", 5)) {
		met.unix_path = strdup(spec + 5);
		if (!met.unix_path)
			return -ENOMEM;
		fd = kvsd_unix_listen(met.unix_path, 0666, &met.ino);
		if (fd >= 0)
			kvsd_log("metrics on unix:%s (GET /metrics)", met.unix_path);
	} else {
		fd = tcp_listen(spec);
	}
	if (fd < 0)
		return fd;
	met.listen.fd = fd;
	met.listen.fn = met_accept;
	if (kvsd_watch_add(&met.listen, EPOLLIN)) {
		int ret = -errno;

		close(fd);
		met.listen.fd = -1;
		return ret;
	}
	return 0;
}

void kvsd_metrics_stop(void)
{
	while (met.conns)
		mconn_close(met.conns);
	if (met.listen.fd >= 0) {
		kvsd_watch_del(&met.listen);
		close(met.listen.fd);
		met.listen.fd = -1;
		if (met.unix_path)
			kvsd_unix_unlink(met.unix_path, met.ino);
	}
	free(met.unix_path);
	met.unix_path = NULL;
}
