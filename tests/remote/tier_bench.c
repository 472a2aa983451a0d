// SPDX-License-Identifier: GPL-2.0
/*
 * tier_bench: the remote tier against a plain pipelined hiredis loop of
 * the same values on the same servers, for remote_bench.sh (make bench).
 * Every mode runs CLIENTS threads at once, each with its own connection,
 * and prints one line: "<mode> <seconds> <bytes>" of the wall time from
 * the first thread's start to the last one's end.  The tier's clients
 * attach in client namespace $TB_NS (default 0).
 *
 *   publish SOCK METRICS POOL CLIENTS PAGES SEED
 *       each client publishes a chain of PAGES pages of random bytes on
 *       the kvshared at SOCK; the time runs until the tier has written
 *       them all (kvshare_remote_write_pending 0 on METRICS, a unix socket)
 *   warm SOCK POOL [N]
 *       write every page of the pool (or N pages) once and give them back
 *       (exit 1 if they cannot all be allocated at once): a host that
 *       has run a while has its pool's memory in place, a fresh one pays
 *       the kernel's page allocation on first touch, which is no cost of
 *       the tier's (it falls on whoever writes the page first)
 *   fetch SOCK POOL CLIENTS PAGES SEED
 *       each client looks its chain up with KVS_LOOKUP_WAIT on a host that
 *       has none of it (the tier fetches it), checks every byte, puts it
 *   getloop USER PASS PATTERN CLIENTS NODE...
 *       the keys matching PATTERN on each NODE (HOST:PORT, a cluster's
 *       masters or one server) split between the clients, each GETting its
 *       share from every node in one pipeline per node (a thread each)
 *   setloop USER PASS PATTERN CLIENTS NODE...
 *       the same keys SET again to the values they hold (read first, not
 *       timed): the same bytes to the same nodes, pipelined the same way
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <hiredis/hiredis.h>
#include <kvshare/arbiter.h>

#define MAX_CLIENTS	16
#define MAX_NODES	8

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what, int err)
{
	fprintf(stderr, "tier_bench: %s: %s\n", what, strerror(err));
	exit(1);
}

/* A page's bytes and key, from seed, client and index: the same on both hosts. */
static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static void page_fill(uint8_t *p, size_t len, uint64_t seed, unsigned int c, unsigned int i)
{
	uint64_t s = mix(seed * 1000003 + c * 65537 + i + 1), v;
	size_t k;

	for (k = 0; k + 8 <= len; k += 8) {
		s += 0x9e3779b97f4a7c15ull;
		v = mix(s);
		memcpy(p + k, &v, 8);
	}
}

static void chain_keys(struct kvs_key *keys, unsigned int n, uint64_t seed, unsigned int c)
{
	unsigned int i, w;

	for (i = 0; i < n; i++)
		for (w = 0; w < 4; w++)
			keys[i].w[w] = mix(seed ^ mix(c * 4096 + i) ^ (w + 1) * 0x1234567ull);
}

/* ---- the tier ------------------------------------------------------------------ */

struct tier_arg {
	const char *sock, *pool;
	unsigned int client, pages;
	uint64_t seed;
	bool fetch;
	pthread_barrier_t *bar;
	int ret;
	double start, end;	/* past the barrier; done */
	size_t page_bytes;
};

static void *tier_client(void *p)
{
	struct tier_arg *a = p;
	const struct kvs_pool_attach *info;
	struct kvs_publish_entry *e = calloc(a->pages, sizeof(*e));
	struct kvs_key *keys = calloc(a->pages, sizeof(*keys));
	uint32_t *pages = calloc(a->pages, sizeof(*pages));
	struct kv_pool *pool;
	uint8_t *want = NULL;
	unsigned int i;
	int ret;

	ret = kv_pool_open(a->sock, a->pool, strtoull(getenv("TB_NS") ?: "0", NULL, 0), 0,
			   &pool);
	if (ret || !e || !keys || !pages) {
		a->ret = ret ?: -ENOMEM;
		pthread_barrier_wait(a->bar);
		return NULL;
	}
	info = kv_pool_info(pool);
	a->page_bytes = info->geom.page_bytes;
	chain_keys(keys, a->pages, a->seed, a->client);
	if (!a->fetch) {	/* the pages, filled before the clock starts */
		ret = kv_alloc(kv_pool_arbiter(pool), a->pages, pages);
		for (i = 0; !ret && i < a->pages; i++) {
			page_fill(kv_page_addr(pool, pages[i]), info->geom.page_bytes,
				  a->seed, a->client, i);
			e[i].page = pages[i];
			e[i].parent = i ? KVS_PARENT_PREV : KVS_NO_PAGE;
			e[i].key = keys[i];
		}
	}
	pthread_barrier_wait(a->bar);
	a->start = now_s();
	if (ret) {
		a->ret = ret;
		goto out;
	}
	if (a->fetch) {
		ret = kv_lookup_wait(kv_pool_arbiter(pool), keys, a->pages, pages, 5000, NULL);
		a->end = now_s();
		if (ret >= 0 && (unsigned int)ret != a->pages) {
			fprintf(stderr, "tier_bench: client %u: %d of %u pages fetched\n",
				a->client, ret, a->pages);
			kv_put(kv_pool_arbiter(pool), pages, ret);
			ret = -ENODATA;
		}
	} else {
		ret = kv_publish(kv_pool_arbiter(pool), e, a->pages);
		a->end = now_s();
		for (i = 0; ret >= 0 && i < a->pages; i++)
			pages[i] = e[i].result;
	}
	if (ret < 0) {
		a->ret = ret;
		goto out;
	}
	/* Not timed: every fetched byte is the publisher's. */
	want = malloc(info->geom.page_bytes);
	for (i = 0; a->fetch && want && i < a->pages; i++) {
		page_fill(want, info->geom.page_bytes, a->seed, a->client, i);
		if (memcmp(want, kv_page_addr(pool, pages[i]), info->geom.page_bytes)) {
			fprintf(stderr, "tier_bench: client %u: page %u differs\n", a->client, i);
			a->ret = -EILSEQ;
		}
	}
	kv_put(kv_pool_arbiter(pool), pages, a->pages);
out:
	free(want);
	free(e);
	free(keys);
	free(pages);
	kv_pool_close(pool);
	return NULL;
}

/* The sum of the samples of metric @name on kvshared's metrics socket, or -1. */
static long long metric(const char *path, const char *name)
{
	static char buf[1 << 20];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *req = "GET /metrics HTTP/1.0\r\n\r\n";
	size_t len = 0, nl = strlen(name);
	long long sum = 0;
	char *p;
	ssize_t r;
	int fd;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    write(fd, req, strlen(req)) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	while (len < sizeof(buf) - 1 && (r = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
		len += r;
	close(fd);
	buf[len] = '\0';
	for (p = buf; (p = strstr(p, name)); p += nl)
		if ((p == buf || p[-1] == '\n') && (p[nl] == '{' || p[nl] == ' '))
			sum += atoll(strchr(p, ' ') ? strchr(p, ' ') + 1 : "0");
	return sum;
}

static int tier_mode(int argc, char **argv, bool fetch)
{
	const char *met = fetch ? NULL : argv[3];
	int base = fetch ? 2 : 3;
	unsigned int n_c = atoi(argv[base + 2]), pages = atoi(argv[base + 3]), i;
	struct tier_arg a[MAX_CLIENTS];
	pthread_t th[MAX_CLIENTS];
	pthread_barrier_t bar;
	long long written0 = 0, w;
	double t0 = 0, end = 0;
	int failed = 0;

	if (argc != base + 5 || !n_c || n_c > MAX_CLIENTS || !pages)
		die("bad arguments", EINVAL);
	if (met)
		written0 = metric(met, "kvshare_remote_written_pages_total");
	pthread_barrier_init(&bar, NULL, n_c + 1);
	for (i = 0; i < n_c; i++) {
		a[i] = (struct tier_arg){ .sock = argv[2], .pool = argv[base + 1],
					  .client = i, .pages = pages,
					  .seed = strtoull(argv[base + 4], NULL, 0),
					  .fetch = fetch, .bar = &bar };
		pthread_create(&th[i], NULL, tier_client, &a[i]);
	}
	pthread_barrier_wait(&bar);
	for (i = 0; i < n_c; i++) {
		pthread_join(th[i], NULL);
		/* From the first client's start: not from this thread's wake-up. */
		if (!t0 || a[i].start < t0)
			t0 = a[i].start;
		if (a[i].ret) {
			fprintf(stderr, "tier_bench: client %u: %s\n", i, strerror(-a[i].ret));
			failed = 1;
		}
		if (a[i].end > end)
			end = a[i].end;
	}
	if (met) {	/* written behind: until the tier has settled them all */
		while ((w = metric(met, "kvshare_remote_write_pending")) > 0 &&
		       now_s() - t0 < 30)
			usleep(500);
		end = now_s();
		w = metric(met, "kvshare_remote_written_pages_total") - written0;
		if (w != (long long)n_c * pages) {
			fprintf(stderr, "tier_bench: %lld of %u pages written\n", w,
				n_c * pages);
			failed = 1;
		}
	}
	if (failed)
		return 1;
	printf("%s %.6f %llu\n", fetch ? "fetch" : "publish", end - t0,
	       (unsigned long long)n_c * pages *
	       (unsigned long long)a[0].page_bytes);
	return 0;
}

/* ---- the plain loop -------------------------------------------------------------- */

struct node {
	char host[64];
	int port;
	redisReply *keys;		/* KEYS PATTERN: an array */
	redisReply **vals;		/* setloop: their values */
};

struct loop_arg {
	struct node *nd;
	unsigned int client, n_c;
	bool set;
	redisContext *rc;
	pthread_barrier_t *bar;
	size_t bytes;
	double start, end;
	int ret;
};

static redisContext *node_connect(const struct node *nd, const char *user, const char *pass)
{
	redisContext *rc = redisConnect(nd->host, nd->port);
	redisReply *r;

	if (!rc || rc->err)
		die(rc ? rc->errstr : "redisConnect", EIO);
	r = redisCommand(rc, "AUTH %s %s", user, pass);
	if (!r || r->type != REDIS_REPLY_STATUS)
		die("AUTH refused", EACCES);
	freeReplyObject(r);
	return rc;
}

/* The client's share of the node's keys: one pipeline, then every reply. */
static void *loop_client(void *p)
{
	struct loop_arg *a = p;
	redisReply *keys = a->nd->keys, *r;
	size_t k, n = 0;

	pthread_barrier_wait(a->bar);
	a->start = now_s();
	for (k = a->client; k < keys->elements; k += a->n_c, n++) {
		const redisReply *key = keys->element[k];

		if (a->set)
			redisAppendCommand(a->rc, "SET %b %b", key->str, key->len,
					   a->nd->vals[k]->str, a->nd->vals[k]->len);
		else
			redisAppendCommand(a->rc, "GET %b", key->str, key->len);
	}
	for (k = a->client; k < keys->elements; k += a->n_c) {
		if (redisGetReply(a->rc, (void **)&r) != REDIS_OK) {
			a->ret = -EIO;
			break;
		}
		if (a->set ? r->type != REDIS_REPLY_STATUS : r->type != REDIS_REPLY_STRING)
			a->ret = -EPROTO;
		a->bytes += a->set ? a->nd->vals[k]->len : r->len;
		freeReplyObject(r);
	}
	a->end = now_s();
	return NULL;
}

static int loop_mode(int argc, char **argv, bool set)
{
	const char *user = argv[2], *pass = argv[3], *pattern = argv[4];
	unsigned int n_c = argc > 5 ? atoi(argv[5]) : 0, n_nd = argc - 6, i, c, n_t = 0;
	struct loop_arg a[MAX_CLIENTS * MAX_NODES];
	pthread_t th[MAX_CLIENTS * MAX_NODES];
	struct node nd[MAX_NODES];
	pthread_barrier_t bar;
	size_t bytes = 0, k;
	double t0 = 0, end = 0;
	int failed = 0;

	if (argc < 7 || !n_c || n_c > MAX_CLIENTS || n_nd > MAX_NODES)
		die("bad arguments", EINVAL);
	memset(nd, 0, sizeof(nd));
	for (i = 0; i < n_nd; i++) {
		const char *colon = strrchr(argv[6 + i], ':');
		redisContext *rc;

		if (!colon || colon - argv[6 + i] >= (long)sizeof(nd[i].host))
			die(argv[6 + i], EINVAL);
		memcpy(nd[i].host, argv[6 + i], colon - argv[6 + i]);
		nd[i].port = atoi(colon + 1);
		rc = node_connect(&nd[i], user, pass);
		nd[i].keys = redisCommand(rc, "KEYS %s", pattern);
		if (!nd[i].keys || nd[i].keys->type != REDIS_REPLY_ARRAY)
			die("KEYS", EPROTO);
		if (set) {	/* the values they hold, to SET them again */
			nd[i].vals = calloc(nd[i].keys->elements + 1, sizeof(*nd[i].vals));
			for (k = 0; k < nd[i].keys->elements; k++)
				redisAppendCommand(rc, "GET %b", nd[i].keys->element[k]->str,
						   nd[i].keys->element[k]->len);
			for (k = 0; k < nd[i].keys->elements; k++)
				if (redisGetReply(rc, (void **)&nd[i].vals[k]) != REDIS_OK ||
				    nd[i].vals[k]->type != REDIS_REPLY_STRING)
					die("GET", EPROTO);
		}
		redisFree(rc);
	}
	for (c = 0; c < n_c; c++)
		for (i = 0; i < n_nd; i++)
			if (nd[i].keys->elements > c)
				n_t++;
	pthread_barrier_init(&bar, NULL, n_t + 1);
	n_t = 0;
	for (c = 0; c < n_c; c++) {
		for (i = 0; i < n_nd; i++) {
			if (nd[i].keys->elements <= c)
				continue;
			a[n_t] = (struct loop_arg){ .nd = &nd[i], .client = c, .n_c = n_c,
						    .set = set, .bar = &bar,
						    .rc = node_connect(&nd[i], user, pass) };
			pthread_create(&th[n_t], NULL, loop_client, &a[n_t]);
			n_t++;
		}
	}
	pthread_barrier_wait(&bar);
	for (i = 0; i < n_t; i++) {
		pthread_join(th[i], NULL);
		if (!t0 || a[i].start < t0)
			t0 = a[i].start;
		failed |= a[i].ret != 0;
		bytes += a[i].bytes;
		if (a[i].end > end)
			end = a[i].end;
		redisFree(a[i].rc);
	}
	for (i = 0; i < n_nd; i++) {
		for (k = 0; set && k < nd[i].keys->elements; k++)
			freeReplyObject(nd[i].vals[k]);
		free(nd[i].vals);
		freeReplyObject(nd[i].keys);
	}
	if (failed || !n_t) {
		fprintf(stderr, "tier_bench: %s: %s\n", set ? "setloop" : "getloop",
			n_t ? "a reply was not what was asked" : "no keys");
		return 1;
	}
	printf("%s %.6f %zu\n", set ? "setloop" : "getloop", end - t0, bytes);
	return 0;
}

static int warm_mode(const char *sock, const char *name, uint64_t n)
{
	const struct kvs_pool_attach *info;
	struct kv_pool *pool;
	uint32_t *pages;
	uint64_t i;
	int ret;

	ret = kv_pool_open(sock, name, 0, 0, &pool);
	if (ret)
		die(sock, -ret);
	info = kv_pool_info(pool);
	if (!n || n > info->n_pages)
		n = info->n_pages;
	pages = calloc(n, sizeof(*pages));
	if (!pages)
		die("warm", ENOMEM);
	ret = kv_alloc(kv_pool_arbiter(pool), n, pages);
	if (ret)
		die("ALLOC", -ret);
	for (i = 0; i < n; i++)
		memset(kv_page_addr(pool, pages[i]), 0, info->geom.page_bytes);
	kv_put(kv_pool_arbiter(pool), pages, n);
	free(pages);
	kv_pool_close(pool);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	if (!strcmp(mode, "publish") && argc == 8)
		return tier_mode(argc, argv, false);
	if (!strcmp(mode, "warm") && (argc == 4 || argc == 5))
		return warm_mode(argv[2], argv[3], argc == 5 ? strtoull(argv[4], NULL, 0) : 0);
	if (!strcmp(mode, "fetch") && argc == 7)
		return tier_mode(argc, argv, true);
	if (!strcmp(mode, "getloop") || !strcmp(mode, "setloop"))
		return loop_mode(argc, argv, mode[0] == 's');
	fprintf(stderr, "usage: tier_bench publish SOCK METRICS POOL CLIENTS PAGES SEED\n"
			"       tier_bench warm SOCK POOL [N]\n"
			"       tier_bench fetch SOCK POOL CLIENTS PAGES SEED\n"
			"       tier_bench getloop|setloop USER PASS PATTERN CLIENTS NODE...\n");
	return 2;
}
