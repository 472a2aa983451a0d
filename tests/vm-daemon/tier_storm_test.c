// SPDX-License-Identifier: GPL-2.0
/*
 * tier_storm_test: the crash storm of issue 29, on the real thing.
 * kvshared --mode module with a pool in kvshare.ko and its remote tier to
 * the guest's own redis-server is killed with SIGKILL mid-fetch, and
 * started again, 1,000 times (KVS_TIER_STORM_ROUNDS= in the guest changes
 * it).
 *
 * Between kvshared's tier and Redis sits a relay of the test's own (one
 * thread, on the loopback), which passes everything both ways except
 * while a round holds it: then what the tier sends is kept back, and the
 * GETs in it are counted.  So a fetch is in progress, and stays so, until
 * the kill; Redis itself answers every probe and every command that is
 * let through.
 *
 * Each round: kvshared starts and adopts the pool (its tier up, its
 * channel open); the relay holds; the test's client, which published two
 * pages of a fresh chain while no kvshared ran (no write-behind, whose
 * held SET the tier's thread would wait on before sending the GETs),
 * looks up that chain's six keys with KVS_LOOKUP_WAIT: two
 * hits, and the miss claims the other four for the channel (and takes a
 * reference on the last hit, the fetched chain's parent), so the
 * LOOKUP reports them in flight and the client waits on the first.  The
 * test waits until the tier's GET of them is held in the relay (three
 * rounds in four; in the fourth the kill comes right after the LOOKUP,
 * wherever the tier is then), samples the pool (claims held, the client
 * still waiting) and kills kvshared.  Then the client's wait must end,
 * and the pool hold exactly the client's four references: no claim, no
 * owned page, nothing of the channel's; the client puts them, and the
 * pool holds nothing.  Every 100 rounds, the pool's invariants.
 *
 * A kill "landed mid-fetch" when, at the kill, the pool held the four
 * claims and the client was still waiting on them; at least 95% of the
 * kills must have, and of the rounds that waited for it, at least 90%
 * must have had the tier's GET held in the relay.  After the storm a
 * last kvshared adopts the pool and SIGTERM makes it exit 0 and destroy
 * it; the arbiter's objects are back at the baseline and the module's
 * reference count is the test's one file, so the guest's rmmod succeeds.
 *
 * Measured (TCG guest, 2 vCPUs, idle-ish host): 1,000 kills in 56 s, 56 ms
 * a round: kvshared's start to "ready" (pool adoption, the tier's probe
 * of Redis, its channel) 36 ms, the miss and the GET 8 ms, the kill and
 * the checks 9 ms; all 1,000 kills landed with the four claims held and
 * the client waiting, the GET held in all 750 rounds that waited for it,
 * the channel holding a reference in all 1,000; the whole suite 77 s of
 * VM time with the boot.
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/socket.h>
#include <time.h>

#include "../uapi/kvs_test.h"
#include "../uapi/kvs_chan.h"

#define STORM_ROUNDS	1000
#define STORM_PAGES	64
#define STORM_HITS	2		/* keys published before the miss */
#define STORM_MISS	4		/* keys the miss claims */
#define STORM_NS	7
#define STORM_CHAIN	70000		/* + the round: a fresh chain each round */
#define STORM_WAIT_MS	20000		/* kvshared's start, a GET, a wake: at most */
#define REDIS_PORT	6393
#define RELAY_PORT	6394
#define RELAY_PAIRS	8		/* connections the tier makes at once, at most */
#define LOG_KEEP	4096		/* kvshared's last log bytes, for a failure */

extern char **environ;

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000ll + ts.tv_nsec / 1000000;
}

/* ---- the relay between the tier and Redis ------------------------------- */

struct relay_pair {
	int tier, redis;	/* -1: a free slot */
	char *kept;		/* what the tier sent while held */
	size_t len, cap;
};

static struct {
	int lfd;
	int hold;		/* set by the test: keep what the tier sends */
	int stop;
	unsigned int gets;	/* GETs kept back, ever */
	int err;		/* the relay's first errno */
	struct relay_pair p[RELAY_PAIRS];
	pthread_t th;
} relay;

static int tcp_connect(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		return -errno;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static int send_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= n;
	}
	return 0;
}

static void relay_close(struct relay_pair *p)
{
	close(p->tier);
	close(p->redis);
	free(p->kept);
	memset(p, 0, sizeof(*p));
	p->tier = p->redis = -1;
}

/* The GETs whose last byte is in @p's kept bytes past @old (a command may span reads). */
static unsigned int relay_count_gets(const struct relay_pair *p, size_t old)
{
	static const char get[] = "$3\r\nGET\r\n";
	size_t plen = sizeof(get) - 1, i;
	unsigned int n = 0;

	for (i = old >= plen ? old - plen + 1 : 0; i + plen <= p->len; i++)
		n += !memcmp(p->kept + i, get, plen);
	return n;
}

/* The tier sent something: on to Redis, or kept while the test holds. */
static int relay_from_tier(struct relay_pair *p)
{
	char buf[65536];
	ssize_t n = read(p->tier, buf, sizeof(buf));
	size_t old = p->len;

	if (n <= 0)
		return -1;
	if (!__atomic_load_n(&relay.hold, __ATOMIC_ACQUIRE))
		return send_all(p->redis, buf, n);
	if (p->len + n > p->cap) {
		size_t cap = (p->len + n) * 2;
		char *k = realloc(p->kept, cap);

		if (!k)
			return -1;
		p->kept = k;
		p->cap = cap;
	}
	memcpy(p->kept + p->len, buf, n);
	p->len += n;
	__atomic_fetch_add(&relay.gets, relay_count_gets(p, old), __ATOMIC_RELEASE);
	return 0;
}

static void relay_accept(void)
{
	int fd = accept4(relay.lfd, NULL, NULL, SOCK_CLOEXEC), r, i, one = 1;

	if (fd < 0)
		return;
	for (i = 0; i < RELAY_PAIRS && relay.p[i].tier >= 0; i++)
		;
	r = tcp_connect(REDIS_PORT);
	if (i == RELAY_PAIRS || r < 0) {
		__atomic_store_n(&relay.err, i == RELAY_PAIRS ? EMFILE : -r, __ATOMIC_RELAXED);
		close(fd);
		if (r >= 0)
			close(r);
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	relay.p[i].tier = fd;
	relay.p[i].redis = r;
}

static void *relay_main(void *arg)
{
	struct pollfd pf[1 + 2 * RELAY_PAIRS];
	int i, n;

	(void)arg;
	while (!__atomic_load_n(&relay.stop, __ATOMIC_RELAXED)) {
		pf[0].fd = relay.lfd;
		pf[0].events = POLLIN;
		for (i = 0; i < RELAY_PAIRS; i++) {
			struct relay_pair *p = &relay.p[i];

			/* Released: what was kept goes on first, in order. */
			if (p->tier >= 0 && p->len &&
			    !__atomic_load_n(&relay.hold, __ATOMIC_ACQUIRE)) {
				if (send_all(p->redis, p->kept, p->len))
					relay_close(p);
				p->len = 0;
			}
			pf[1 + 2 * i].fd = p->tier;
			pf[2 + 2 * i].fd = p->redis;
			pf[1 + 2 * i].events = pf[2 + 2 * i].events = POLLIN;
		}
		n = poll(pf, 1 + 2 * RELAY_PAIRS, 10);
		if (n <= 0)
			continue;
		if (pf[0].revents & POLLIN)
			relay_accept();
		for (i = 0; i < RELAY_PAIRS; i++) {
			struct relay_pair *p = &relay.p[i];
			char buf[65536];
			ssize_t r;

			if (p->tier < 0)
				continue;
			if ((pf[1 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR)) &&
			    relay_from_tier(p)) {
				relay_close(p);	/* the tier's end: kvshared died */
				continue;
			}
			if (pf[2 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR)) {
				r = read(p->redis, buf, sizeof(buf));
				if (r <= 0 || send_all(p->tier, buf, r))
					relay_close(p);
			}
		}
	}
	for (i = 0; i < RELAY_PAIRS; i++)
		if (relay.p[i].tier >= 0)
			relay_close(&relay.p[i]);
	return NULL;
}

static int relay_start(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(RELAY_PORT),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1, i;

	for (i = 0; i < RELAY_PAIRS; i++)
		relay.p[i].tier = relay.p[i].redis = -1;
	relay.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (relay.lfd < 0)
		return -errno;
	setsockopt(relay.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(relay.lfd, (struct sockaddr *)&a, sizeof(a)) || listen(relay.lfd, 16))
		return -errno;
	return -pthread_create(&relay.th, NULL, relay_main, NULL);
}

static void relay_stop(void)
{
	__atomic_store_n(&relay.stop, 1, __ATOMIC_RELAXED);
	pthread_join(relay.th, NULL);
	close(relay.lfd);
}

/* ---- redis-server and kvshared ------------------------------------------- */

static pid_t spawn(char *const argv[], int out_fd)
{
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int ret;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
	posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
	ret = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	return ret ? -ret : pid;
}

/* Redis answers PING on its port (up to STORM_WAIT_MS). */
static int redis_ready(void)
{
	long long end = now_ms() + STORM_WAIT_MS;
	char buf[16];

	do {
		int fd = tcp_connect(REDIS_PORT);

		if (fd >= 0) {
			ssize_t n = -1;

			if (!send_all(fd, "PING\r\n", 6))
				n = read(fd, buf, sizeof(buf));
			close(fd);
			if (n >= 5 && !memcmp(buf, "+PONG", 5))
				return 0;
		}
		usleep(20000);
	} while (now_ms() < end);
	return -ETIMEDOUT;
}

struct kvsd {
	pid_t pid;
	int log;		/* its stdout and stderr */
	char tail[LOG_KEEP];	/* the last of it */
	size_t len;
};

/* Read kvshared's log into @k->tail; 1 once a read shows @word, 0 at EOF. */
static int kvsd_log_until(struct kvsd *k, const char *word, long long end)
{
	struct pollfd p = { .fd = k->log, .events = POLLIN };

	for (;;) {
		ssize_t n;
		int left = (int)(end - now_ms());

		if (left <= 0 || poll(&p, 1, left) != 1)
			return -ETIMEDOUT;
		if (k->len > LOG_KEEP / 2) {
			memmove(k->tail, k->tail + k->len - LOG_KEEP / 4, LOG_KEEP / 4);
			k->len = LOG_KEEP / 4;
		}
		n = read(k->log, k->tail + k->len, LOG_KEEP - 1 - k->len);
		if (n <= 0)
			return 0;
		k->len += n;
		k->tail[k->len] = 0;
		if (word && strstr(k->tail, word))
			return 1;
	}
}

/* kvshared with pool @pool, its tier to Redis on @port, until it is ready. */
static int kvsd_start(struct kvsd *k, const char *pool, int port)
{
	char spec[512];
	char *argv[] = { "kvshared", "--mode", "module", "--device", "/dev/kvshare",
			 "--socket", "/tmp/tier_storm.sock", "--pool", spec, NULL };
	int fds[2], ret;

	/* A fetch may wait for Redis (the relay) a minute. */
	snprintf(spec, sizeof(spec), "%s:pages=%d,layers=%d,kv_heads=%d,head_dim=%d,"
		 "tokens_per_page=%d,dtype=f16,mode=0600,memory=host,"
		 "remote=127.0.0.1:%d,remote_namespace=tstorm,remote_timeout_ms=60000",
		 pool, STORM_PAGES, KVS_T_LAYERS, KVS_T_HEADS, KVS_T_HEAD_DIM,
		 KVS_T_TOKENS, port);
	if (pipe2(fds, O_CLOEXEC))
		return -errno;
	k->pid = spawn(argv, fds[1]);
	close(fds[1]);
	k->log = fds[0];
	k->len = 0;
	k->tail[0] = 0;
	if (k->pid < 0) {
		close(k->log);
		return k->pid;
	}
	ret = kvsd_log_until(k, "kvshared: ready", now_ms() + STORM_WAIT_MS);
	return ret == 1 ? 0 : ret ? ret : -EPIPE;
}

/* Redis's reply to @cmd (inline) as a number (":N"), or -1. */
static long long redis_int(const char *cmd)
{
	int fd = tcp_connect(REDIS_PORT);
	char buf[64];
	ssize_t n = -1;

	if (fd < 0)
		return -1;
	if (!send_all(fd, cmd, strlen(cmd)))
		n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 2 || buf[0] != ':')
		return -1;
	buf[n] = 0;
	return atoll(buf + 1);
}

/* ---- the tests ------------------------------------------------------------ */

/* How the rounds went: the kills, and where they landed. */
struct tally {
	unsigned int rounds, waited, gets, claims, waiting, landed, refs;
	long long start_ms, fetch_ms, end_ms;
};

FIXTURE(storm) {
	struct kvs_env env;
};

FIXTURE_SETUP(storm)
{
	kvs_env_init(&self->env);
}

FIXTURE_TEARDOWN(storm)
{
	kvs_env_fini(&self->env);	/* kills kvshared and redis-server if still up */
	unlink("/tmp/tier_storm.sock");
}

/* The pool's counters, its invariants checked too. */
static void storm_stats(struct __test_metadata *_metadata, struct kvs_conn *ctl,
			__u32 pool, struct kvs_pool_stats *st)
{
	ASSERT_EQ(0, kvs_stats(ctl, pool, KVS_STATS_CHECK, st));
}

/* A chain of pages the client publishes: two keys, the chain's first. */
static void publish_hits(struct __test_metadata *_metadata, struct kvs_conn *c,
			 __u32 chain, __u32 *res)
{
	__u32 own[STORM_HITS];

	ASSERT_EQ(0, kvs_alloc(c, STORM_HITS, own));
	ASSERT_EQ(0, kvs_publish_chain(c, own, STORM_HITS, KVS_NO_PAGE, chain, 0, res, NULL));
}

/*
 * One round on running kvshared @k: a miss claimed for its channel, the
 * tier's fetch held in the relay (unless @now), the kill, and the pool
 * holding only the client's references afterwards.
 */
static void storm_round(struct __test_metadata *_metadata, struct kvs_env *env,
			struct kvs_conn *c, __u32 pool, struct kvsd *k, __u32 round,
			const __u32 *pub, int now, struct tally *t)
{
	__u32 pages[STORM_HITS + STORM_MISS], hit, inflight;
	unsigned int gets = __atomic_load_n(&relay.gets, __ATOMIC_ACQUIRE);
	struct kvs_pool_stats st;
	long long t0 = now_ms(), end = t0 + STORM_WAIT_MS;
	struct pollfd pf = { .fd = c->fd, .events = POLLIN };
	int status, got_get = 0;

	__atomic_store_n(&relay.hold, 1, __ATOMIC_RELEASE);
	ASSERT_EQ(0, lookup_wait(c, STORM_CHAIN + round, 0, STORM_HITS + STORM_MISS,
				 pages, &hit, &inflight));
	ASSERT_EQ(STORM_HITS, hit);
	/* Claimed for the channel: nobody else in this pool claims. */
	ASSERT_EQ(STORM_MISS, inflight) TH_LOG("round %u: kvshared's log:\n%s", round, k->tail);
	if (!now) {
		t->waited++;
		while (!(got_get = __atomic_load_n(&relay.gets, __ATOMIC_ACQUIRE) != gets) &&
		       now_ms() < end)
			usleep(500);
		t->gets += got_get;
	}
	t->fetch_ms += now_ms() - t0;

	/* Where the kill lands: the claims held, the client still waiting. */
	storm_stats(_metadata, &env->ctl, pool, &st);
	t->claims += st.n_claimed == STORM_MISS;
	t->waiting += !readable(c->fd);
	t->landed += st.n_claimed == STORM_MISS && !readable(c->fd);
	/* The client's 2 + 2; the rest is the channel's (the miss's parent). */
	t->refs += st.n_refs > 2 * STORM_HITS;
	ASSERT_EQ(0, kill(k->pid, SIGKILL));
	t0 = now_ms();
	ASSERT_EQ(k->pid, waitpid(k->pid, &status, 0));
	kvs_env_forget(env, k->pid);
	ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
		TH_LOG("round %u: kvshared status 0x%x:\n%s", round, status, k->tail);
	close(k->log);
	__atomic_store_n(&relay.hold, 0, __ATOMIC_RELEASE);

	/* The channel's file went with kvshared: the client's wait ended. */
	ASSERT_EQ(1, poll(&pf, 1, STORM_WAIT_MS)) TH_LOG("round %u: the client still waits", round);
	storm_stats(_metadata, &env->ctl, pool, &st);
	ASSERT_EQ(0, st.n_claimed) TH_LOG("round %u", round);
	ASSERT_EQ(0, st.n_owned) TH_LOG("round %u", round);
	ASSERT_EQ(2 * STORM_HITS, st.n_refs) TH_LOG("round %u: references leaked", round);
	ASSERT_EQ(2 * STORM_HITS, st.n_held) TH_LOG("round %u", round);
	ASSERT_EQ(1, st.n_files) TH_LOG("round %u: the channel is left", round);
	ASSERT_EQ(0, kvs_put(c, pub, STORM_HITS));
	ASSERT_EQ(0, kvs_put(c, pages, STORM_HITS));
	storm_stats(_metadata, &env->ctl, pool, &st);
	ASSERT_EQ(0, st.n_refs);
	ASSERT_EQ(0, st.n_held);
	if ((round + 1) % 100 == 0)
		check_invariants(&env->ctl, pool);
	t->end_ms += now_ms() - t0;
	t->rounds++;
}

/* The pool kvshared made, by name, or 0. */
static __u32 pool_named(struct kvs_conn *ctl, const char *name)
{
	struct kvs_pool_desc d[64];
	__u32 i, n = 0;

	if (kvs_pool_list(ctl, d, KVS_ARRAY_SIZE(d), &n))
		return 0;
	for (i = 0; i < n && i < KVS_ARRAY_SIZE(d); i++)
		if (!strcmp(d[i].name, name))
			return d[i].pool_id;
	return 0;
}

/* The module, kvshared and redis-server, or the test skips. */
#define STORM_REQUIRE(env) do { \
	KVS_REQUIRE(env); \
	if (!(kvs_conn_caps(&(env)->ctl) & KVS_CAP_MODULE)) \
		SKIP(return, "the arbiter is not kvshare.ko"); \
	if (system("command -v redis-server >/dev/null && command -v kvshared >/dev/null")) \
		SKIP(return, "redis-server or kvshared is not in the guest"); \
} while (0)

/* redis-server on REDIS_PORT, answering; teardown kills it if the test does not. */
static pid_t redis_start(struct __test_metadata *_metadata, struct kvs_env *env)
{
	char *argv[] = { "redis-server", "--port", "6393", "--bind", "127.0.0.1",
			 "--save", "", "--appendonly", "no", "--dir", "/tmp",
			 "--daemonize", "no", NULL };
	int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
	pid_t pid;

	ASSERT_LE(0, null);
	pid = spawn(argv, null);
	close(null);
	ASSERT_LT(0, pid);
	kvs_env_adopt(_metadata, env, pid);
	ASSERT_EQ(0, redis_ready());
	return pid;
}

static void redis_stop(struct __test_metadata *_metadata, struct kvs_env *env, pid_t pid)
{
	int status;

	ASSERT_EQ(0, kill(pid, SIGTERM));
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	kvs_env_forget(env, pid);
}

/* kvshared started on @name (created or adopted), and the pool's id. */
static __u32 kvsd_up(struct __test_metadata *_metadata, struct kvs_env *env,
		     struct kvsd *k, const char *name, int port)
{
	__u32 pool;

	ASSERT_EQ(0, kvsd_start(k, name, port)) TH_LOG("kvshared:\n%s", k->tail);
	kvs_env_adopt(_metadata, env, k->pid);
	pool = pool_named(&env->ctl, name);
	ASSERT_NE(0, pool);
	return pool;
}

/* SIGTERM: kvshared exits 0 and destroys its pool. */
static void kvsd_term(struct __test_metadata *_metadata, struct kvs_env *env,
		      struct kvsd *k, const char *name, __u32 pool)
{
	int status;

	ASSERT_EQ(0, kill(k->pid, SIGTERM));
	ASSERT_EQ(k->pid, waitpid(k->pid, &status, 0));
	kvs_env_forget(env, k->pid);
	kvsd_log_until(k, NULL, now_ms() + 1000);
	close(k->log);
	ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
		TH_LOG("kvshared status 0x%x:\n%s", status, k->tail);
	ASSERT_EQ(0, pool_named(&env->ctl, name));
	kvs_env_untrack(env, pool);
}

TEST_F_TIMEOUT(storm, kvshared_killed_mid_fetch_1000_times, 540)
{
	const char *env = getenv("KVS_TIER_STORM_ROUNDS");
	__u32 rounds = STORM_ROUNDS, pool, r;
	struct tally t = { 0 };
	struct kvs_pool_stats st;
	struct kvs_conn *c;
	struct kvsd k;
	char name[KVS_NAME_MAX];
	pid_t redis;
	long long t0;

	STORM_REQUIRE(&self->env);
	if (env && *env)
		rounds = strtoul(env, NULL, 10);
	snprintf(name, sizeof(name), "tstorm_%d", (int)getpid());
	redis = redis_start(_metadata, &self->env);
	ASSERT_EQ(0, relay_start());

	/* A first kvshared creates the pool (and goes); every later one adopts it. */
	pool = kvsd_up(_metadata, &self->env, &k, name, RELAY_PORT);
	kvs_env_track(_metadata, &self->env, pool);
	c = kvs_env_attach(_metadata, &self->env, name, STORM_NS);
	ASSERT_EQ(0, kill(k.pid, SIGKILL));
	ASSERT_EQ(k.pid, waitpid(k.pid, NULL, 0));
	kvs_env_forget(&self->env, k.pid);
	close(k.log);

	t0 = now_ms();
	for (r = 0; r < rounds; r++) {
		__u32 pub[STORM_HITS];
		long long ts;

		/*
		 * The hits are published while no channel is open: no
		 * write-behind, whose SET (held too) the tier's thread would
		 * wait on before it sends the fetch's GETs.
		 */
		publish_hits(_metadata, c, STORM_CHAIN + r, pub);
		ts = now_ms();
		ASSERT_EQ(pool, kvsd_up(_metadata, &self->env, &k, name, RELAY_PORT));
		ASSERT_NE(NULL, strstr(k.tail, "adopted from the module"));
		t.start_ms += now_ms() - ts;
		storm_round(_metadata, &self->env, c, pool, &k, r, pub, r % 4 == 3, &t);
		ASSERT_EQ(0, __atomic_load_n(&relay.err, __ATOMIC_RELAXED))
			TH_LOG("the relay: %s", strerror(relay.err));
	}
	ksft_print_msg("%u kvshared killed in %lld ms: %lld ms a round (start %lld, miss and fetch %lld, kill and check %lld)\n",
		       t.rounds, now_ms() - t0, (now_ms() - t0) / (t.rounds ?: 1),
		       t.start_ms / (t.rounds ?: 1), t.fetch_ms / (t.rounds ?: 1),
		       t.end_ms / (t.rounds ?: 1));
	ksft_print_msg("at the kill: %u with the %u claims held, %u with the client waiting, %u both; the tier's GET held in %u of the %u rounds that waited for it; the channel holding references in %u\n",
		       t.claims, STORM_MISS, t.waiting, t.landed, t.gets, t.waited, t.refs);
	ASSERT_LE(t.rounds * 95, t.landed * 100);
	ASSERT_LE(t.waited * 90, t.gets * 100);

	/* A last kvshared adopts the pool; SIGTERM destroys it. */
	kvs_conn_close(c);
	ASSERT_EQ(pool, kvsd_up(_metadata, &self->env, &k, name, RELAY_PORT));
	storm_stats(_metadata, &self->env.ctl, pool, &st);
	ASSERT_EQ(0, st.n_claimed);
	ASSERT_EQ(0, st.n_refs);
	kvsd_term(_metadata, &self->env, &k, name, pool);
	relay_stop();
	redis_stop(_metadata, &self->env, redis);
	kvs_env_assert_baseline(_metadata, &self->env);
	/* Only the control file pins the module: rmmod will succeed. */
	ASSERT_EQ(1, kvs_module_refcnt());
}

/*
 * A fetched chain follows the client's last hit, as its compute would: a
 * first kvshared's tier writes keys 0-5 of a chain behind to Redis and
 * goes with its pool; on a new pool a client publishes keys 0 and 1 and
 * looks up all six, and the new kvshared's tier fetches 2-5 into the
 * channel's claims and publishes them, key 2's page under key 1's.
 */
TEST_F_TIMEOUT(storm, fetched_chain_follows_the_last_hit, 120)
{
	__u32 own[6], pub[6], pages[6], more[4], hit, inflight, pool, i;
	const __u32 chain = STORM_CHAIN - 1;
	struct kvs_page_desc d;
	struct pollfd pf;
	struct kvs_conn *c;
	struct kvsd k;
	char name[KVS_NAME_MAX];
	long long end;
	pid_t redis;

	STORM_REQUIRE(&self->env);
	snprintf(name, sizeof(name), "tchain_%d", (int)getpid());
	redis = redis_start(_metadata, &self->env);

	pool = kvsd_up(_metadata, &self->env, &k, name, REDIS_PORT);
	kvs_env_track(_metadata, &self->env, pool);
	c = kvs_env_attach(_metadata, &self->env, name, STORM_NS);
	ASSERT_EQ(0, kvs_alloc(c, 6, own));
	ASSERT_EQ(0, kvs_publish_chain(c, own, 6, KVS_NO_PAGE, chain, 0, pub, NULL));
	ASSERT_EQ(0, kvs_put(c, pub, 6));
	for (end = now_ms() + STORM_WAIT_MS; redis_int("DBSIZE\r\n") < 6 && now_ms() < end;)
		usleep(20000);
	ASSERT_LE(6, redis_int("DBSIZE\r\n")) TH_LOG("kvshared:\n%s", k.tail);
	kvs_conn_close(c);
	kvsd_term(_metadata, &self->env, &k, name, pool);

	pool = kvsd_up(_metadata, &self->env, &k, name, REDIS_PORT);
	kvs_env_track(_metadata, &self->env, pool);
	c = kvs_env_attach(_metadata, &self->env, name, STORM_NS);
	publish_hits(_metadata, c, chain, pub);
	ASSERT_EQ(0, lookup_wait(c, chain, 0, 6, pages, &hit, &inflight));
	ASSERT_EQ(STORM_HITS, hit);
	ASSERT_EQ(6 - STORM_HITS, inflight);
	pf.fd = c->fd;
	pf.events = POLLIN;
	ASSERT_EQ(1, poll(&pf, 1, STORM_WAIT_MS)) TH_LOG("kvshared:\n%s", k.tail);
	ASSERT_EQ(0, kvs_lookup_chain(c, chain, STORM_HITS, 6 - STORM_HITS, more, &hit));
	ASSERT_EQ(6 - STORM_HITS, hit) TH_LOG("kvshared:\n%s", k.tail);
	for (i = 0; i < 6 - STORM_HITS; i++) {
		ASSERT_EQ(0, kvs_page(&self->env.ctl, pool, more[i], &d));
		ASSERT_EQ(i ? more[i - 1] : pages[STORM_HITS - 1], d.parent)
			TH_LOG("fetched key %u", STORM_HITS + i);
	}
	ASSERT_EQ(0, kvs_page(&self->env.ctl, pool, pages[STORM_HITS - 1], &d));
	ASSERT_EQ(1, d.n_children);
	ASSERT_EQ(0, kvs_put(c, pub, STORM_HITS));
	ASSERT_EQ(0, kvs_put(c, pages, STORM_HITS));
	ASSERT_EQ(0, kvs_put(c, more, 6 - STORM_HITS));
	check_invariants(&self->env.ctl, pool);
	kvs_conn_close(c);
	kvsd_term(_metadata, &self->env, &k, name, pool);
	redis_stop(_metadata, &self->env, redis);
	kvs_env_assert_baseline(_metadata, &self->env);
}

TEST_HARNESS_MAIN
