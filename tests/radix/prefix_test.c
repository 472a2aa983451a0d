// SPDX-License-Identifier: GPL-2.0
/*
 * The radix tree wired to the arbiter, across processes: each test starts
 * its own kvshared (ASan build, socket mode, a host-memory pool) and runs
 * client processes that serve prompts through struct kv_prefix_cache.
 *
 * A "prefill" writes each full page's bytes as a function of the salt and
 * the tokens up to the page's end, and every page a client gets from a
 * cache (local or another process's) is checked against that function, so
 * a page shared wrongly fails.  After the clients exit, the pool must hold
 * no reference and pass the arbiter's own invariant check.
 *
 * $KVSHARED names the daemon (default $BUILD/san/kvshared, BUILD=build).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <kvshare/prefix.h>
#include "kselftest_harness.h"

#define POOL		"t"
#define TPP		4
#define POOL_PAGES	96
#define MAX_TOK		512

/* ------------------------------------------------------------------ */
/* The daemon                                                          */

static pid_t start_daemon(const char *dir, const char *pool_spec)
{
	char sock[256], log[256], line[512];
	const char *bin = getenv("KVSHARED"), *build = getenv("BUILD");
	char path[256];
	pid_t pid;
	int i;

	if (!bin || !*bin) {
		snprintf(path, sizeof(path), "%s/san/kvshared",
			 build && *build ? build : "build");
		bin = path;
	}
	snprintf(sock, sizeof(sock), "%s/s", dir);
	snprintf(log, sizeof(log), "%s/kvshared.log", dir);
	pid = fork();
	if (pid < 0)
		return -1;
	if (!pid) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		dup2(fd, 2);
		execl(bin, bin, "--mode", "socket", "--socket", sock, "--pool",
		      pool_spec, (char *)NULL);
		dprintf(2, "exec %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	/* Ready when it says so on stderr (daemon/README.md). */
	for (i = 0; i < 200; i++) {
		FILE *f = fopen(log, "r");
		int ready = 0;

		while (f && fgets(line, sizeof(line), f))
			ready |= !strncmp(line, "kvshared: ready", 15);
		if (f)
			fclose(f);
		if (ready)
			return pid;
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return -1;
		usleep(50000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -1;
}

static int stop_daemon(pid_t pid)
{
	int st;

	kill(pid, SIGTERM);
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ------------------------------------------------------------------ */
/* Clients                                                             */

struct client {
	struct kv_pool *pool;
	struct kv_prefix_cache *pc;
	struct kv_req_table *rt;
	const char *salt;
	size_t page_bytes;
};

/* What a client process reports to the test. */
struct report {
	int err;
	uint32_t hit_tokens;
	uint32_t n_pages;
	uint32_t pages[MAX_TOK / TPP];
	uint32_t mismatches;
	struct kv_prefix_stats st;
};

/* kv_prefix_config.inflight_wait_ms of the clients a test starts next. */
static int inflight_wait_ms;

static int client_open(struct client *c, const char *sock, const char *salt,
		       uint64_t ns, unsigned int algo)
{
	struct kv_prefix_config cfg = {
		.salt = salt, .salt_len = salt ? strlen(salt) : 0, .algo = algo,
		.inflight_wait_ms = inflight_wait_ms,
	};
	int ret;

	memset(c, 0, sizeof(*c));
	c->salt = salt;
	ret = kv_pool_open(sock, POOL, ns, 0, &c->pool);
	if (ret)
		return ret;
	c->page_bytes = kv_pool_info(c->pool)->geom.page_bytes;
	ret = kv_prefix_create(kv_pool_arbiter(c->pool), kv_pool_info(c->pool),
			       &cfg, &c->pc);
	if (!ret)
		ret = kv_req_table_create(4, MAX_TOK, TPP, &c->rt);
	return ret;
}

static void client_close(struct client *c)
{
	kv_prefix_destroy(c->pc);
	kv_req_table_destroy(c->rt);
	kv_pool_close(c->pool);
}

static uint64_t mix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The bytes of the page that ends at token @end: salt and prefix decide. */
static uint64_t page_seed(const struct client *c, const uint32_t *tok, size_t end)
{
	uint64_t h = 1469598103934665603ull;
	const char *s;
	size_t i;

	for (s = c->salt ? c->salt : "(none)"; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	for (i = 0; i < end; i++)
		h = (h ^ tok[i]) * 1099511628211ull;
	return h;
}

static void fill(const struct client *c, uint32_t page, const uint32_t *tok, size_t end)
{
	uint64_t *p = kv_page_addr(c->pool, page), s = page_seed(c, tok, end);
	size_t i;

	for (i = 0; i < c->page_bytes / 8; i++)
		p[i] = mix(&s);
}

static int page_ok(const struct client *c, uint32_t page, const uint32_t *tok, size_t end)
{
	const uint64_t *p = kv_page_addr(c->pool, page);
	uint64_t s = page_seed(c, tok, end);
	size_t i;

	for (i = 0; i < c->page_bytes / 8; i++)
		if (p[i] != mix(&s))
			return 0;
	return 1;
}

/* Match, check the hits, allocate and "prefill" the rest. */
static int begin(struct client *c, struct kv_radix_req *r, const uint32_t *tok,
		 uint32_t n, struct report *rep)
{
	uint32_t i, hit;
	long got;
	int ret;

	*r = (struct kv_radix_req){ .slot = kv_req_alloc(c->rt), .tokens = tok };
	got = kv_prefix_match(c->pc, c->rt, r, n);
	if (got < 0)
		return (int)got;
	hit = got / TPP;
	rep->hit_tokens = got;
	for (i = 0; i < hit; i++)
		rep->mismatches += !page_ok(c, kv_req_page(c->rt, r->slot, i), tok,
					    (i + 1) * TPP);
	ret = kv_prefix_reserve(c->pc, c->rt, r, n);
	if (ret)
		return ret;
	for (i = hit; i < n / TPP; i++)
		fill(c, kv_req_page(c->rt, r->slot, i), tok, (i + 1) * TPP);
	return 0;
}

/* Finish, and report the tree's pages for the prompt. */
static int finish(struct client *c, struct kv_radix_req *r, const uint32_t *tok,
		  uint32_t n, struct report *rep)
{
	uint32_t i;
	int ret;

	ret = kv_prefix_cache_finished(c->pc, c->rt, r);
	if (ret)
		return ret;
	rep->n_pages = kv_radix_peek(kv_prefix_tree(c->pc), tok, n, rep->pages) / TPP;
	for (i = 0; i < rep->n_pages; i++)
		rep->mismatches += !page_ok(c, rep->pages[i], tok, (i + 1) * TPP);
	rep->st = *kv_prefix_stats(c->pc);
	return kv_radix_check(kv_prefix_tree(c->pc));
}

static int serve(struct client *c, const uint32_t *tok, uint32_t n, struct report *rep)
{
	struct kv_radix_req r;
	int ret = begin(c, &r, tok, n, rep);

	return ret ? ret : finish(c, &r, tok, n, rep);
}

/* A prompt: @shared tokens of text @a, then the rest of text @b. */
static void prompt(uint32_t *tok, uint32_t n, uint32_t shared, uint64_t a, uint64_t b)
{
	uint64_t sa = a, sb = b;
	uint32_t i;

	for (i = 0; i < n; i++)
		tok[i] = (uint32_t)(i < shared ? mix(&sa) : mix(&sb)) % 50000;
}

/* ------------------------------------------------------------------ */
/* Processes                                                           */

struct job {
	const char *sock;
	const char *salt;
	uint64_t ns;
	unsigned int algo;
	const uint32_t *tok;
	uint32_t n;
	int go_fd, ready_fd;		/* -1: no barrier */
	int parent_fds[2];		/* the parent's ends: the child closes them */
	int (*fn)(struct client *c, const struct job *j, struct report *rep);
};

/* Serve one prompt; with a barrier, wait between prefill and finish. */
static int job_serve(struct client *c, const struct job *j, struct report *rep)
{
	struct kv_radix_req r;
	char b = 0;
	int ret;

	if (j->ready_fd < 0)
		return serve(c, j->tok, j->n, rep);
	ret = begin(c, &r, j->tok, j->n, rep);
	if (write(j->ready_fd, &b, 1) != 1 || read(j->go_fd, &b, 1) != 1)
		return -EPIPE;
	return ret ? ret : finish(c, &r, j->tok, j->n, rep);
}

/* Run @j in a child; its report comes back through @fd (read it later). */
static pid_t spawn(const struct job *j, int *fd)
{
	int p[2];
	pid_t pid;

	if (pipe(p))
		return -1;
	pid = fork();
	if (pid)
		goto parent;
	{
		struct report rep = { 0 };
		struct client c;

		/*
		 * Only the parent may hold the barrier's other ends, so that
		 * its death is EOF here; and never outlive a stuck test.
		 */
		close(p[0]);
		if (j->parent_fds[0] >= 0)
			close(j->parent_fds[0]);
		if (j->parent_fds[1] >= 0)
			close(j->parent_fds[1]);
		alarm(60);
		rep.err = client_open(&c, j->sock, j->salt, j->ns, j->algo);
		if (!rep.err)
			rep.err = j->fn(&c, j, &rep);
		if (write(p[1], &rep, sizeof(rep)) != sizeof(rep))
			_exit(3);
		client_close(&c);
		_exit(rep.err ? 2 : 0);
	}
parent:
	close(p[1]);
	*fd = p[0];
	return pid;
}

/* Barrier bytes come one per child: read until there are @n. */
static int read_all(int fd, char *buf, size_t n)
{
	ssize_t r;

	while (n) {
		r = read(fd, buf, n);
		if (r <= 0)
			return -EPIPE;
		buf += r;
		n -= r;
	}
	return 0;
}

static int collect(pid_t pid, int fd, struct report *rep)
{
	int st;

	memset(rep, 0, sizeof(*rep));
	if (read(fd, rep, sizeof(*rep)) != sizeof(*rep))
		rep->err = -EPIPE;
	close(fd);
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return -ECHILD;
	return WEXITSTATUS(st) ? (rep->err ? rep->err : -ECHILD) : 0;
}

static int run(const struct job *j, struct report *rep)
{
	int fd;
	pid_t pid = spawn(j, &fd);

	return pid < 0 ? -errno : collect(pid, fd, rep);
}

/* The pool's counters, invariants checked by the arbiter (EUCLEAN if not). */
static int pool_stats(const char *sock, struct kvs_pool_stats *st)
{
	struct kv_arbiter *arb;
	int ret;

	ret = kv_arbiter_open(sock, 0, &arb);
	if (ret)
		return ret;
	ret = kv_arbiter_attach(arb, POOL, 0, NULL);
	memset(st, 0, sizeof(*st));
	st->flags = KVS_STATS_CHECK;
	if (!ret)
		ret = kv_arbiter_call(arb, KVS_IOC_POOL_STATS, st);
	kv_arbiter_close(arb);
	return ret;
}

/* ------------------------------------------------------------------ */

FIXTURE(arb) {
	char dir[64];
	char sock[128];
	pid_t daemon;
	uint32_t tok[MAX_TOK];
	struct job job;
};

static void setup(struct __test_metadata *_metadata, FIXTURE_DATA(arb) *self,
		  const char *extra)
{
	char spec[256];

	strcpy(self->dir, "/tmp/kvs-radix-XXXXXX");
	ASSERT_NE(NULL, mkdtemp(self->dir));
	snprintf(self->sock, sizeof(self->sock), "%s/s", self->dir);
	snprintf(spec, sizeof(spec), POOL ":pages=%u,layers=1,kv_heads=1,head_dim=8,"
		 "tokens_per_page=%u,dtype=f32,mode=0600,memory=host%s",
		 POOL_PAGES, TPP, extra);
	self->daemon = start_daemon(self->dir, spec);
	ASSERT_LT(0, self->daemon) TH_LOG("kvshared did not start (see %s/kvshared.log)",
					   self->dir);
	self->job = (struct job){
		.sock = self->sock, .salt = "tenant", .tok = self->tok,
		.go_fd = -1, .ready_fd = -1, .parent_fds = { -1, -1 },
		.fn = job_serve,
	};
}

FIXTURE_SETUP(arb)
{
	setup(_metadata, self, "");
}

FIXTURE_TEARDOWN(arb)
{
	char cmd[128];

	if (self->daemon > 0)
		EXPECT_EQ(0, stop_daemon(self->daemon));
	snprintf(cmd, sizeof(cmd), "rm -rf %s", self->dir);
	if (system(cmd))
		TH_LOG("could not remove %s", self->dir);
}

/* Nothing held once every client is gone, and the pool is consistent. */
static void expect_clean(struct __test_metadata *_metadata, const char *sock,
			 struct kvs_pool_stats *st)
{
	ASSERT_EQ(0, pool_stats(sock, st));
	EXPECT_EQ(0, st->n_held);
	EXPECT_EQ(0, st->n_refs);
	EXPECT_EQ(0, st->n_shared);
	EXPECT_EQ(0, st->n_owned);
	EXPECT_EQ(POOL_PAGES, st->n_free + st->n_cached);
}

/* A serves a prompt; B, another process, gets all its full pages. */
TEST_F(arb, cross_process_hits)
{
	struct report a, b, b2;
	struct kvs_pool_stats st;
	uint32_t i;

	self->job.n = 42;				/* 10 full pages + 2 */
	prompt(self->tok, 42, 42, 1, 1);
	ASSERT_EQ(0, run(&self->job, &a));
	ASSERT_EQ(0, a.hit_tokens);
	ASSERT_EQ(10, a.n_pages);
	ASSERT_EQ(10, a.st.published);
	ASSERT_EQ(0, a.mismatches);

	ASSERT_EQ(0, run(&self->job, &b));
	ASSERT_EQ(40, b.hit_tokens);
	ASSERT_EQ(10, b.st.remote_hit_pages);
	ASSERT_EQ(0, b.st.published);
	ASSERT_EQ(0, b.mismatches);
	for (i = 0; i < 10; i++)
		ASSERT_EQ(a.pages[i], b.pages[i]);	/* the same physical pages */

	/* A longer prompt with the same start: 10 remote hits, 5 new pages. */
	self->job.n = 60;
	prompt(self->tok, 60, 42, 1, 2);
	ASSERT_EQ(0, run(&self->job, &b2));
	ASSERT_EQ(40, b2.hit_tokens);
	ASSERT_EQ(5, b2.st.published);
	ASSERT_EQ(0, b2.mismatches);
	for (i = 0; i < 10; i++)
		ASSERT_EQ(a.pages[i], b2.pages[i]);

	expect_clean(_metadata, self->sock, &st);
	EXPECT_EQ(15, st.n_cached);
}

/* A process's second request hits its own tree: no LOOKUP at all. */
static int job_twice(struct client *c, const struct job *j, struct report *rep)
{
	struct report first = { 0 };
	int ret = serve(c, j->tok, j->n, &first);

	if (ret)
		return ret;
	ret = serve(c, j->tok, j->n, rep);
	rep->mismatches += first.mismatches;
	return ret;
}

TEST_F(arb, local_hits_first)
{
	struct report r;
	struct kvs_pool_stats st;

	self->job.n = 33;
	self->job.fn = job_twice;
	prompt(self->tok, 33, 33, 5, 5);
	ASSERT_EQ(0, run(&self->job, &r));
	ASSERT_EQ(32, r.hit_tokens);
	ASSERT_EQ(8, r.st.local_hit_pages);
	ASSERT_EQ(0, r.st.remote_hit_pages);
	ASSERT_EQ(1, r.st.lookups);		/* the first request's miss */
	ASSERT_EQ(0, r.mismatches);
	expect_clean(_metadata, self->sock, &st);
}

/*
 * Two processes prefill the same prompt at once: the second PUBLISH of
 * each page is a duplicate, and both trees end on the same pages.
 */
TEST_F(arb, same_prompt_same_pages)
{
	int go[2], ready[2], fa, fb;
	struct report a, b;
	struct kvs_pool_stats st;
	pid_t pa, pb;
	char c[2] = { 0, 0 };
	uint32_t i;

	ASSERT_EQ(0, pipe(go));
	ASSERT_EQ(0, pipe(ready));
	self->job.n = 48;
	self->job.go_fd = go[0];
	self->job.ready_fd = ready[1];
	self->job.parent_fds[0] = go[1];
	self->job.parent_fds[1] = ready[0];
	prompt(self->tok, 48, 48, 7, 7);
	pa = spawn(&self->job, &fa);
	pb = spawn(&self->job, &fb);
	close(go[0]);
	close(ready[1]);
	/* Both have missed and prefilled before either publishes. */
	ASSERT_EQ(0, read_all(ready[0], c, 2));
	ASSERT_EQ(2, write(go[1], c, 2));
	ASSERT_EQ(0, collect(pa, fa, &a));
	ASSERT_EQ(0, collect(pb, fb, &b));
	ASSERT_EQ(0, a.hit_tokens);
	ASSERT_EQ(0, b.hit_tokens);
	ASSERT_EQ(12, a.n_pages);
	ASSERT_EQ(12, b.n_pages);
	for (i = 0; i < 12; i++)
		ASSERT_EQ(a.pages[i], b.pages[i]);
	ASSERT_EQ(12, a.st.dup_published + b.st.dup_published);
	ASSERT_EQ(0, a.mismatches + b.mismatches);
	expect_clean(_metadata, self->sock, &st);
	EXPECT_EQ(12, st.n_cached);
	EXPECT_EQ(12, st.dup_publishes);
}

/*
 * In-flight dedupe: A misses, claims and prefills the prompt; B, started
 * while A still computes, waits for A's pages instead of computing them
 * again, and gets every one of them when A publishes: nothing is computed
 * twice (same_prompt_same_pages above, without it: 12 duplicates).
 */
TEST_F(arb, inflight_prompt_computed_once)
{
	int go[2], ready[2], fa, fb;
	struct report a, b;
	struct kvs_pool_stats st;
	struct job jb;
	pid_t pa, pb;
	char c = 0;

	inflight_wait_ms = 20000;
	ASSERT_EQ(0, pipe(go));
	ASSERT_EQ(0, pipe(ready));
	self->job.n = 48;
	self->job.go_fd = go[0];
	self->job.ready_fd = ready[1];
	self->job.parent_fds[0] = go[1];
	self->job.parent_fds[1] = ready[0];
	prompt(self->tok, 48, 48, 9, 9);
	pa = spawn(&self->job, &fa);
	/* A has claimed and prefilled; it publishes only on "go". */
	ASSERT_EQ(0, read_all(ready[0], &c, 1));
	jb = self->job;
	jb.go_fd = jb.ready_fd = -1;
	pb = spawn(&jb, &fb);
	usleep(300 * 1000);
	ASSERT_EQ(0, pool_stats(self->sock, &st));
	EXPECT_EQ(12, st.n_claimed);
	EXPECT_LE(1, st.inflight_waits);
	ASSERT_EQ(1, write(go[1], &c, 1));
	close(go[0]);
	close(ready[1]);
	ASSERT_EQ(0, collect(pa, fa, &a));
	ASSERT_EQ(0, collect(pb, fb, &b));
	ASSERT_EQ(0, a.hit_tokens);
	ASSERT_EQ(48, b.hit_tokens);
	ASSERT_EQ(12, a.st.claimed);
	ASSERT_EQ(0, b.st.claimed);
	ASSERT_EQ(0, a.st.dup_published + b.st.dup_published);
	ASSERT_EQ(0, b.st.allocated);
	ASSERT_EQ(0, a.mismatches + b.mismatches);
	expect_clean(_metadata, self->sock, &st);
	EXPECT_EQ(12, st.n_cached);
	EXPECT_EQ(0, st.dup_publishes);
	EXPECT_EQ(0, st.n_claimed);
}

/* Other salts, other namespaces: no hits; the same salt again: hits. */
TEST_F(arb, salts_isolate)
{
	struct report r;
	struct kvs_pool_stats st;

	self->job.n = 40;
	prompt(self->tok, 40, 40, 9, 9);
	ASSERT_EQ(0, run(&self->job, &r));
	self->job.salt = "other";
	ASSERT_EQ(0, run(&self->job, &r));
	ASSERT_EQ(0, r.hit_tokens);
	ASSERT_EQ(0, r.mismatches);
	self->job.salt = NULL;				/* no salt is not "" */
	ASSERT_EQ(0, run(&self->job, &r));
	ASSERT_EQ(0, r.hit_tokens);
	self->job.salt = "";
	ASSERT_EQ(0, run(&self->job, &r));
	ASSERT_EQ(0, r.hit_tokens);
	self->job.salt = "tenant";
	self->job.ns = 2;				/* same salt, other namespace */
	ASSERT_EQ(0, run(&self->job, &r));
	ASSERT_EQ(0, r.hit_tokens);
	self->job.ns = 0;
	self->job.algo = KV_HASH_XXH3;			/* same salt, other function */
	ASSERT_EQ(0, run(&self->job, &r));
	ASSERT_EQ(0, r.hit_tokens);
	self->job.algo = KV_HASH_SHA256;
	ASSERT_EQ(0, run(&self->job, &r));
	ASSERT_EQ(40, r.hit_tokens);
	ASSERT_EQ(0, r.mismatches);
	expect_clean(_metadata, self->sock, &st);
	EXPECT_EQ(60, st.n_cached);
}

/* Killed in the middle of a request: its holdings go with it. */
static int job_hang(struct client *c, const struct job *j, struct report *rep)
{
	struct kv_radix_req r;
	char b = 0;
	int ret;

	ret = serve(c, j->tok, j->n, rep);	/* tree holds references */
	if (!ret)
		ret = begin(c, &r, j->tok, j->n + 8, rep); /* OWNED pages too */
	if (write(j->ready_fd, &b, 1) != 1)
		return -EPIPE;
	pause();
	return ret;
}

TEST_F(arb, kill_releases_everything)
{
	struct kvs_pool_stats st;
	int ready[2], fd, s;
	uint32_t tok2[64];
	struct report r;
	pid_t pid;
	char b;

	ASSERT_EQ(0, pipe(ready));
	self->job.n = 24;
	self->job.fn = job_hang;
	self->job.ready_fd = ready[1];
	self->job.parent_fds[1] = ready[0];
	prompt(self->tok, 64, 64, 11, 11);
	memcpy(tok2, self->tok, sizeof(tok2));
	pid = spawn(&self->job, &fd);
	close(ready[1]);
	ASSERT_EQ(0, read_all(ready[0], &b, 1));
	ASSERT_EQ(0, pool_stats(self->sock, &st));
	ASSERT_EQ(6 + 2, st.n_held);		/* 6 in its tree, 2 being filled */
	kill(pid, SIGKILL);
	waitpid(pid, &s, 0);
	close(fd);
	/* The daemon sees the close; give it a moment. */
	for (s = 0; s < 100; s++) {
		ASSERT_EQ(0, pool_stats(self->sock, &st));
		if (!st.n_held)
			break;
		usleep(20000);
	}
	expect_clean(_metadata, self->sock, &st);
	EXPECT_EQ(6, st.n_cached);
	/* Its published pages outlive it. */
	self->job.fn = job_serve;
	self->job.ready_fd = -1;
	self->job.parent_fds[1] = -1;
	self->job.tok = tok2;
	ASSERT_EQ(0, run(&self->job, &r));
	ASSERT_EQ(24, r.hit_tokens);
	ASSERT_EQ(0, r.mismatches);
}

/*
 * More prompts than the pool holds, in one process: allocation evicts the
 * local tree (PUT), then the arbiter evicts what became CACHED.
 */
static int job_many(struct client *c, const struct job *j, struct report *rep)
{
	uint32_t tok[64], k;
	int ret;

	for (k = 0; k < 40; k++) {
		prompt(tok, 64, 16, 100, 200 + k);	/* 4 shared + 12 own pages */
		ret = serve(c, tok, 64, rep);
		if (ret)
			return ret;
		if (kv_radix_total_pages(kv_prefix_tree(c->pc)) > POOL_PAGES)
			return -EOVERFLOW;
	}
	/* The newest prompt is still whole, and the shared part too. */
	ret = serve(c, tok, 64, rep);
	rep->st = *kv_prefix_stats(c->pc);
	return ret;
}

TEST_F(arb, alloc_under_pressure)
{
	struct kvs_pool_stats st;
	struct report r;

	self->job.fn = job_many;
	ASSERT_EQ(0, run(&self->job, &r));
	ASSERT_EQ(64, r.hit_tokens);
	ASSERT_EQ(0, r.mismatches);
	ASSERT_LT(0, r.st.alloc_evictions);
	ASSERT_LE(r.st.alloc_evictions, r.st.put_pages);
	expect_clean(_metadata, self->sock, &st);
	ASSERT_LT(0, st.evictions);			/* the arbiter evicted too */
}

/* A per-file quota: EDQUOT is pressure as well, met by local eviction. */
FIXTURE(quota) {
	char dir[64];
	char sock[128];
	pid_t daemon;
	uint32_t tok[MAX_TOK];
	struct job job;
};

FIXTURE_SETUP(quota)
{
	setup(_metadata, (FIXTURE_DATA(arb) *)self, ",quota=20");
}

FIXTURE_TEARDOWN(quota)
{
	char cmd[128];

	if (self->daemon > 0)
		EXPECT_EQ(0, stop_daemon(self->daemon));
	snprintf(cmd, sizeof(cmd), "rm -rf %s", self->dir);
	if (system(cmd))
		TH_LOG("could not remove %s", self->dir);
}

TEST_F(quota, edquot_evicts_locally)
{
	struct kvs_pool_stats st;
	struct report r;

	self->job.fn = job_many;
	ASSERT_EQ(0, run(&self->job, &r));
	ASSERT_EQ(64, r.hit_tokens);
	ASSERT_EQ(0, r.mismatches);
	ASSERT_LT(0, r.st.alloc_evictions);
	expect_clean(_metadata, self->sock, &st);
}

/*
 * Chunked prefill: cache_unfinished publishes the first chunk while the
 * request runs on, and another process already hits it.
 */
static int job_chunked(struct client *c, const struct job *j, struct report *rep)
{
	struct kv_radix_req r;
	char b = 0;
	int ret;

	ret = begin(c, &r, j->tok, 20, rep);		/* chunk 1: 5 pages */
	if (!ret)
		ret = kv_prefix_cache_unfinished(c->pc, c->rt, &r);
	if (write(j->ready_fd, &b, 1) != 1 || read(j->go_fd, &b, 1) != 1)
		return -EPIPE;
	if (ret)
		return ret;
	ret = kv_prefix_reserve(c->pc, c->rt, &r, j->n);	/* chunk 2 */
	for (uint32_t i = 5; !ret && i < j->n / TPP; i++)
		fill(c, kv_req_page(c->rt, r.slot, i), j->tok, (i + 1) * TPP);
	return ret ? ret : finish(c, &r, j->tok, j->n, rep);
}

TEST_F(arb, unfinished_publishes_early)
{
	int go[2], ready[2], fd;
	struct kvs_pool_stats st;
	struct report a, b;
	struct job other;
	pid_t pid;
	char c = 0;

	ASSERT_EQ(0, pipe(go));
	ASSERT_EQ(0, pipe(ready));
	self->job.n = 40;
	self->job.fn = job_chunked;
	self->job.go_fd = go[0];
	self->job.ready_fd = ready[1];
	self->job.parent_fds[0] = go[1];
	self->job.parent_fds[1] = ready[0];
	prompt(self->tok, 40, 40, 13, 13);
	pid = spawn(&self->job, &fd);
	close(go[0]);
	close(ready[1]);
	ASSERT_EQ(0, read_all(ready[0], &c, 1));
	other = self->job;
	other.fn = job_serve;
	other.go_fd = other.ready_fd = -1;
	other.parent_fds[0] = other.parent_fds[1] = -1;
	ASSERT_EQ(0, run(&other, &b));		/* while the first is mid-way */
	ASSERT_EQ(20, b.hit_tokens);
	ASSERT_EQ(0, b.mismatches);
	ASSERT_EQ(1, write(go[1], &c, 1));
	ASSERT_EQ(0, collect(pid, fd, &a));
	/* The second process published pages 5..9 first: the first's are dups. */
	ASSERT_EQ(5, a.st.dup_published);
	ASSERT_EQ(0, a.mismatches);
	expect_clean(_metadata, self->sock, &st);
	EXPECT_EQ(10, st.n_cached);
}

/* Destroying the cache PUTs everything while the file stays open. */
static int job_destroy(struct client *c, const struct job *j, struct report *rep)
{
	struct kvs_pool_stats st = { .flags = KVS_STATS_CHECK };
	int ret = serve(c, j->tok, j->n, rep);

	if (ret)
		return ret;
	kv_prefix_destroy(c->pc);
	c->pc = NULL;
	ret = kv_arbiter_call(kv_pool_arbiter(c->pool), KVS_IOC_POOL_STATS, &st);
	if (!ret && st.n_held)
		ret = -EBUSY;
	return ret;
}

TEST_F(arb, destroy_puts_everything)
{
	struct kvs_pool_stats st;
	struct report r;

	self->job.n = 30;
	self->job.fn = job_destroy;
	prompt(self->tok, 30, 30, 17, 17);
	ASSERT_EQ(0, run(&self->job, &r));
	expect_clean(_metadata, self->sock, &st);
	EXPECT_EQ(7, st.n_cached);
}

/* An aborted request gives back what it owned and keeps what the tree has. */
static int job_abort(struct client *c, const struct job *j, struct report *rep)
{
	struct kvs_pool_stats st = { .flags = KVS_STATS_CHECK };
	struct kv_radix_req r;
	int ret;

	ret = serve(c, j->tok, 16, rep);		/* 4 pages in the tree */
	if (!ret)
		ret = begin(c, &r, j->tok, j->n, rep);	/* 4 hits + 4 OWNED */
	if (ret)
		return ret;
	kv_prefix_abort(c->pc, c->rt, &r);
	ret = kv_arbiter_call(kv_pool_arbiter(c->pool), KVS_IOC_POOL_STATS, &st);
	if (ret)
		return ret;
	if (st.n_held != 4 || st.n_owned ||
	    kv_radix_protected_pages(kv_prefix_tree(c->pc)) ||
	    kv_req_table_available(c->rt) != 4)
		return -EBUSY;
	rep->st = *kv_prefix_stats(c->pc);
	return 0;
}

TEST_F(arb, abort_gives_back)
{
	struct kvs_pool_stats st;
	struct report r;

	self->job.n = 30;
	self->job.fn = job_abort;
	prompt(self->tok, 30, 30, 19, 19);
	ASSERT_EQ(0, run(&self->job, &r));
	ASSERT_EQ(16, r.hit_tokens);
	ASSERT_EQ(0, r.mismatches);
	expect_clean(_metadata, self->sock, &st);
	EXPECT_EQ(4, st.n_cached);
}

TEST_HARNESS_MAIN
