// SPDX-License-Identifier: GPL-2.0
/*
 * In-flight dedupe through kvshared (issue 14, part 1): the connection's
 * wait bell (KVS_SOCK_WAIT_FD), each test on a daemon of its own
 * (tests/daemon/kvd_test.h, the ASan/UBSan build), stopped with SIGTERM
 * at the end (exit 0, socket removed, clean logs):
 *
 *  - a raw waiter's bell is readable when made with no wait pending, not
 *    readable while its LOOKUP waits on a claim, and turns readable when
 *    the claim ends: published (the next LOOKUP hits), put by its owner
 *    or its owner killed with -9 (the next LOOKUP misses, nothing in
 *    flight);
 *  - libkv's kv_lookup_wait() sleeps on that bell: woken by the publish,
 *    it armed exactly one wait (the pool's inflight_waits counter), where
 *    re-polling would have armed one per look;
 *  - with the daemon stopped (SIGSTOP) while a waiter sleeps,
 *    kv_lookup_wait() fails with ETIMEDOUT within two call deadlines,
 *    far below its own wait timeout, and holds nothing;
 *  - bad KVS_SOCK_WAIT_FD requests get their errnos (flags, reserved,
 *    out field, a descriptor sent along, a second bell), the bells a
 *    client gets are non-blocking and of their kinds (the wait bell and
 *    the cq bell sockets that take nothing back, EPIPE with or without a
 *    descriptor; the sq bell an eventfd), and a client that closes its
 *    wait bell, or its ring's sq doorbell, harms nobody: the daemon
 *    keeps serving, a victim keeps working, and the closed doorbell does
 *    not keep the daemon busy;
 *  - a client, as a second uid, stuck reading its wait bell into a page
 *    that never arrives (a userfaultfd nobody serves, as a FUSE mount
 *    that does not answer) and then closing its connection, which closes
 *    the daemon's end, leaves another user's calls served (within 5 s:
 *    never reached unless the daemon's loop is stuck, as it would be on
 *    a pipe, whose close waits for the reader's copy).
 */
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>

#include <kvshare/arbiter.h>

#include "kvd_client.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include "kselftest_harness.h"
#pragma GCC diagnostic pop
#pragma GCC diagnostic ignored "-Wsign-compare"

#define POOL		"w"
#define POOL_SPEC	POOL ":pages=64,layers=2,kv_heads=2,head_dim=16," \
			"tokens_per_page=16,dtype=f16,mode=0666"
#define HDR		sizeof(struct kvs_msg)
#define CHAIN		4
/* Generous bounds for events that come at once: never reached unless broken. */
#define EVENT_MS	10000

static struct kvs_key make_key(__u32 chain, __u32 i)
{
	struct kvs_key k = { { 0x5157414954ull, chain, i, (__u64)chain * 977 + i } };

	return k;
}

static void chain_keys(struct kvs_key *k, __u32 chain)
{
	__u32 i;

	for (i = 0; i < CHAIN; i++)
		k[i] = make_key(chain, i);
}

/* ------------------------------------------------------------------ */
/* a raw client                                                       */
/* ------------------------------------------------------------------ */

struct raw_reply {
	struct kvs_msg h;
	unsigned char body[4096];
};

/* One reply; its first descriptor in *rfd (-1: none), the others closed. */
static int raw_recv(int fd, struct raw_reply *r, int *rfd)
{
	union {
		char b[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	size_t got = 0, want = HDR;

	*rfd = -1;
	while (got < want) {
		struct iovec iov = { (char *)r + got, want - got };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
				     .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b) };
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		struct cmsghdr *c;
		ssize_t n;

		if (poll(&pfd, 1, EVENT_MS) != 1)
			return -ETIMEDOUT;
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
		if (n <= 0)
			return -EPIPE;
		for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			size_t i, nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

			for (i = 0; i < nfd; i++) {
				int f;

				memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(f));
				if (*rfd < 0)
					*rfd = f;
				else
					close(f);
			}
		}
		got += n;
		if (got >= HDR) {
			if (r->h.len < HDR || r->h.len > sizeof(*r))
				return -EPROTO;
			want = r->h.len;
		}
	}
	return 0;
}

/*
 * A request: the command struct @st, then @dlen bytes of data area; the
 * reply's struct back into @st, its data area into @data.  The command's
 * result, or a transport error - 1000.
 */
static int raw_call(int fd, __u32 cmd, void *st, size_t usize, void *data, size_t dlen,
		    int pass_fd, int *rfd)
{
	unsigned char buf[1024];
	struct kvs_msg h = { .magic = KVS_MSG_MAGIC, .cmd = cmd, .len = HDR + usize + dlen,
			     .seq = 7 };
	struct raw_reply r;
	int ret, got_fd;

	if (h.len > sizeof(buf))
		return -1000 - E2BIG;
	memcpy(buf, &h, HDR);
	memcpy(buf + HDR, st, usize);
	if (dlen)
		memcpy(buf + HDR + usize, data, dlen);
	if (kvd_raw_send(fd, buf, h.len, pass_fd))
		return -1000 - EIO;
	ret = raw_recv(fd, &r, &got_fd);
	if (ret)
		return -1000 + ret;
	if (rfd)
		*rfd = got_fd;
	else if (got_fd >= 0)
		close(got_fd);
	if (r.h.len >= HDR + usize)
		memcpy(st, r.body, usize);
	/* What the command wrote follows the struct; out_off says where it goes. */
	if (!r.h.result && r.h.out_len) {
		if (r.h.out_off < HDR + usize || r.h.out_off + r.h.out_len > HDR + usize + dlen ||
		    r.h.len < HDR + usize + r.h.out_len)
			return -1000 - EPROTO;
		memcpy((unsigned char *)data + (r.h.out_off - HDR - usize), r.body + usize,
		       r.h.out_len);
	}
	return r.h.result;
}

static int raw_wait_fd(int fd, int *wfd)
{
	struct kvs_wait_fd wf = { 0 };
	int ret = raw_call(fd, KVS_SOCK_WAIT_FD, &wf, sizeof(wf), NULL, 0, -1, wfd);

	if (!ret && wf.wait_fd != 0)
		return -1000 - EPROTO;
	return ret;
}

/* A raw connection attached to pool POOL of this process's uid. */
static int raw_attached(const char *sock)
{
	struct kvs_pool_attach at = { .name = POOL, .owner = geteuid() };
	int fd = kvd_connect(sock);

	if (fd < 0)
		return fd;
	if (raw_call(fd, KVS_IOC_POOL_ATTACH, &at, sizeof(at), NULL, 0, -1, NULL)) {
		close(fd);
		return -EIO;
	}
	return fd;
}

/* LOOKUP with KVS_LOOKUP_WAIT of chain @chain: its result; n_hit, n_inflight out. */
static int raw_lookup_wait(int fd, __u32 chain, __u32 *n_hit, __u32 *n_inflight)
{
	struct {
		struct kvs_key keys[CHAIN];
		__u32 pages[CHAIN];
	} data;
	struct kvs_lookup lk = {
		.count = CHAIN, .flags = KVS_LOOKUP_WAIT,
		.keys = HDR + sizeof(lk),
		.pages = HDR + sizeof(lk) + sizeof(data.keys),
	};
	int ret;

	chain_keys(data.keys, chain);
	memset(data.pages, 0xff, sizeof(data.pages));
	ret = raw_call(fd, KVS_IOC_LOOKUP, &lk, sizeof(lk), &data, sizeof(data), -1, NULL);
	*n_hit = lk.n_hit;
	*n_inflight = lk.n_inflight;
	return ret;
}

/* Is @fd readable within @ms?  1 yes, 0 no. */
static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* CPU time (user + system) process @pid has used, in seconds; < 0 on error. */
static double cpu_seconds(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;
	FILE *f;
	int n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	p = fgets(buf, sizeof(buf), f);
	fclose(f);
	/* Fields 14 and 15, after the command name's closing parenthesis. */
	p = p ? strrchr(buf, ')') : NULL;
	if (!p)
		return -1;
	n = sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st);
	return n == 2 ? (double)(ut + st) / sysconf(_SC_CLK_TCK) : -1;
}

static void drain(int fd)
{
	char b[64];

	while (read(fd, b, sizeof(b)) > 0)
		;
}

/* ------------------------------------------------------------------ */
/* the fixture                                                        */
/* ------------------------------------------------------------------ */

FIXTURE(wait) {
	struct kvd d;
	struct kv_arbiter *ctl;		/* socket only, never attached */
	__u32 pool_id;
	pid_t kid;
	char why[512];
};

FIXTURE_SETUP(wait)
{
	const char *args[] = { "--pool", POOL_SPEC, NULL };
	int ret;

	self->kid = 0;
	self->why[0] = '\0';
	unsetenv("KVSHARE_CALL_TIMEOUT_MS");
	ret = kvd_init(&self->d);
	ASSERT_EQ(0, ret) TH_LOG("mkdtemp: %s", strerror(-ret));
	ret = kvd_start_ctl(&self->d, args, POOL, &self->ctl, &self->pool_id,
			    self->why, sizeof(self->why));
	ASSERT_EQ(0, ret) TH_LOG("%s", self->why);
}

FIXTURE_TEARDOWN(wait)
{
	int ret = kvd_stop_ctl(&self->d, self->kid, self->ctl, self->why, sizeof(self->why));

	if (ret)
		TH_LOG("kvshared: %s", self->why);
	EXPECT_EQ(0, ret);
	kvd_fini(&self->d);
}

static int stats(FIXTURE_DATA(wait) *self, struct kvs_pool_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->pool_id = self->pool_id;
	st->flags = KVS_STATS_CHECK;
	return kv_arbiter_call(self->ctl, KVS_IOC_POOL_STATS, st);
}

static int publish_chain(struct kv_arbiter *a, const __u32 *pages, __u32 chain)
{
	struct kvs_publish_entry e[CHAIN];
	__u32 i;

	memset(e, 0, sizeof(e));
	for (i = 0; i < CHAIN; i++) {
		e[i].page = pages[i];
		e[i].parent = i ? KVS_PARENT_PREV : KVS_NO_PAGE;
		e[i].key = make_key(chain, i);
	}
	return kv_publish(a, e, CHAIN);
}

/* ------------------------------------------------------------------ */
/* the wait bell                                                      */
/* ------------------------------------------------------------------ */

enum claim_end { END_PUBLISH, END_PUT, END_DEATH };

/*
 * A child owns a claim on chain @chain (claimed before it says so on
 * @ready) and ends it when told on @go: publishes, puts, or waits to be
 * killed.
 */
static void __attribute__((noreturn)) owner(const char *sock, __u32 chain,
					    enum claim_end how, int ready, int go)
{
	struct kvs_key keys[CHAIN];
	struct kv_arbiter *a;
	__u32 pages[CHAIN];
	char c = 1;

	chain_keys(keys, chain);
	KVD_CHILD_EQ(0, kvd_open_attached(sock, POOL, 0, &a));
	KVD_CHILD_EQ(0, kv_alloc_claim(a, keys, CHAIN, pages));
	KVD_CHILD_EQ(1, write(ready, &c, 1));
	KVD_CHILD_EQ(1, read(go, &c, 1));
	if (how == END_PUBLISH) {
		KVD_CHILD_EQ(0, publish_chain(a, pages, chain));
		KVD_CHILD_EQ(0, kv_put(a, pages, CHAIN));
	} else if (how == END_PUT) {
		KVD_CHILD_EQ(0, kv_put(a, pages, CHAIN));
	} else {
		pause();
	}
	KVD_CHILD_EQ(1, write(ready, &c, 1));
	pause();
	_exit(0);
}

/*
 * The raw waiter's side of one claim that ends as @how says: the bell is
 * quiet while it waits, and readable once the claim has ended.
 */
static void waiter_sees(struct __test_metadata *_metadata, FIXTURE_DATA(wait) *self,
			enum claim_end how)
{
	int ready[2], go[2], fd, wfd = -1;
	__u32 hit, inflight;
	char c = 1;

	fd = raw_attached(self->d.sock);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, raw_wait_fd(fd, &wfd));
	ASSERT_LE(0, wfd);
	/* No wait pending yet: readable at once, as the module's file is. */
	ASSERT_EQ(1, readable(wfd, 0));
	drain(wfd);
	ASSERT_EQ(0, readable(wfd, 0));

	ASSERT_EQ(0, pipe(ready));
	ASSERT_EQ(0, pipe(go));
	self->kid = fork();
	ASSERT_LE(0, self->kid);
	if (!self->kid)
		owner(self->d.sock, 1, how, ready[1], go[0]);
	ASSERT_EQ(1, read(ready[0], &c, 1));

	ASSERT_EQ(0, raw_lookup_wait(fd, 1, &hit, &inflight));
	ASSERT_EQ(0, hit);
	ASSERT_EQ(CHAIN, inflight);
	/* Waiting: nothing rang (a stray byte would send the waiter looking). */
	ASSERT_EQ(0, readable(wfd, 50));

	if (how == END_DEATH) {
		ASSERT_EQ(0, kill(self->kid, SIGKILL));
		ASSERT_EQ(self->kid, waitpid(self->kid, NULL, 0));
		self->kid = 0;
	} else {
		ASSERT_EQ(1, write(go[1], &c, 1));
	}
	/* The claim ended: the waiter is woken. */
	ASSERT_EQ(1, readable(wfd, EVENT_MS));
	drain(wfd);
	ASSERT_EQ(0, raw_lookup_wait(fd, 1, &hit, &inflight));
	ASSERT_EQ(how == END_PUBLISH ? CHAIN : 0, hit);
	ASSERT_EQ(0, inflight);
	if (self->kid) {
		ASSERT_EQ(1, read(ready[0], &c, 1));
		kill(self->kid, SIGKILL);
		waitpid(self->kid, NULL, 0);
		self->kid = 0;
	}
	close(ready[0]);
	close(ready[1]);
	close(go[0]);
	close(go[1]);
	close(wfd);
	close(fd);
}

TEST_F(wait, waiter_woken_when_the_owner_publishes)
{
	waiter_sees(_metadata, self, END_PUBLISH);
}

TEST_F(wait, waiter_woken_when_the_owner_puts)
{
	waiter_sees(_metadata, self, END_PUT);
}

TEST_F(wait, waiter_woken_when_the_owner_dies)
{
	waiter_sees(_metadata, self, END_DEATH);
}

/* ------------------------------------------------------------------ */
/* libkv's kv_lookup_wait() on the bell                               */
/* ------------------------------------------------------------------ */

struct later {
	FIXTURE_DATA(wait) *self;
	struct kv_arbiter *a;
	const __u32 *pages;
	__u64 waits;			/* inflight_waits before the waiter looked */
	bool stop_daemon;		/* SIGSTOP instead of publishing */
	int ret;
};

/* Once the waiter's LOOKUP has armed its wait: publish, or stop the daemon. */
static void *end_later(void *arg)
{
	struct later *l = arg;
	struct kvs_pool_stats st;
	double deadline = kvd_now() + EVENT_MS / 1000.0;

	do {
		l->ret = stats(l->self, &st);
		if (l->ret)
			return NULL;
		if (st.inflight_waits > l->waits)
			break;
		kvd_sleep_ms(1);
	} while (kvd_now() < deadline);
	if (st.inflight_waits <= l->waits) {
		l->ret = -ETIMEDOUT;
		return NULL;
	}
	if (l->stop_daemon)
		l->ret = kill(l->self->d.pid, SIGSTOP) ? -errno : 0;
	else
		l->ret = publish_chain(l->a, l->pages, 2);
	return NULL;
}

TEST_F(wait, lookup_wait_sleeps_until_the_publish)
{
	struct kvs_key keys[CHAIN];
	struct kv_arbiter *a, *b;
	struct kvs_pool_stats st;
	__u32 pages[CHAIN], got[CHAIN], inflight = 99, i;
	struct later l = { .self = self };
	pthread_t t;

	chain_keys(keys, 2);
	ASSERT_EQ(0, kvd_open_attached(self->d.sock, POOL, 0, &a));
	ASSERT_EQ(0, kvd_open_attached(self->d.sock, POOL, 0, &b));
	ASSERT_EQ(0, kv_alloc_claim(a, keys, CHAIN, pages));
	ASSERT_EQ(0, stats(self, &st));
	l.a = a;
	l.pages = pages;
	l.waits = st.inflight_waits;
	ASSERT_EQ(0, pthread_create(&t, NULL, end_later, &l));
	ASSERT_EQ(CHAIN, kv_lookup_wait(b, keys, CHAIN, got, 60000, &inflight));
	pthread_join(t, NULL);
	ASSERT_EQ(0, l.ret);
	ASSERT_EQ(0, inflight);
	for (i = 0; i < CHAIN; i++)
		ASSERT_EQ(pages[i], got[i]);
	/* One wait armed, one wake: a waiter that re-polled would arm one per look. */
	ASSERT_EQ(0, stats(self, &st));
	ASSERT_EQ(l.waits + 1, st.inflight_waits);
	ASSERT_EQ(0, kv_put(b, got, CHAIN));
	ASSERT_EQ(0, kv_put(a, pages, CHAIN));
	kv_arbiter_close(a);
	kv_arbiter_close(b);
}

TEST_F(wait, lookup_wait_on_a_stopped_daemon_times_out)
{
	struct kvs_key keys[CHAIN];
	struct kv_arbiter *a, *b;
	struct kvs_pool_stats st;
	__u32 pages[CHAIN], got[CHAIN], inflight = 99;
	struct later l = { .self = self, .stop_daemon = true };
	pthread_t t;
	double t0;
	int ret;

	chain_keys(keys, 3);
	ASSERT_EQ(0, kvd_open_attached(self->d.sock, POOL, 0, &a));
	ASSERT_EQ(0, kvd_open_attached(self->d.sock, POOL, 0, &b));
	ASSERT_EQ(0, kv_arbiter_set_timeout(b, 300));
	ASSERT_EQ(0, kv_alloc_claim(a, keys, CHAIN, pages));
	ASSERT_EQ(0, stats(self, &st));
	l.waits = st.inflight_waits;
	ASSERT_EQ(0, pthread_create(&t, NULL, end_later, &l));
	t0 = kvd_now();
	ret = kv_lookup_wait(b, keys, CHAIN, got, 60000, &inflight);
	pthread_join(t, NULL);
	ASSERT_EQ(0, l.ret);
	EXPECT_EQ(-ETIMEDOUT, ret);
	/* Two call deadlines (the sleep, then the LOOKUP), and a margin. */
	EXPECT_GT(5.0, kvd_now() - t0);
	EXPECT_EQ(-ETIMEDOUT, kv_arbiter_broken(b));
	ASSERT_EQ(0, kill(self->d.pid, SIGCONT));
	kv_arbiter_close(b);
	ASSERT_EQ(0, kv_put(a, pages, CHAIN));
	kv_arbiter_close(a);
	ASSERT_EQ(0, kvd_settle(&self->d));
	ASSERT_EQ(0, stats(self, &st));
	ASSERT_EQ(0, st.n_held);
	ASSERT_EQ(0, st.n_claimed);
}

/* ------------------------------------------------------------------ */
/* hostile clients                                                    */
/* ------------------------------------------------------------------ */

/* A victim's LOOKUP, publish and PUT through its ring: it keeps working. */
static void victim_round(struct __test_metadata *_metadata, struct kv_arbiter *v, __u32 chain)
{
	__u32 pages[CHAIN];

	ASSERT_EQ(0, kv_alloc(v, CHAIN, pages));
	ASSERT_LE(0, publish_chain(v, pages, chain));
	ASSERT_EQ(0, kv_put(v, pages, CHAIN));
}

TEST_F(wait, bad_wait_fd_requests_and_closed_ends_harm_nobody)
{
	struct kvs_wait_fd wf;
	struct kvs_ring_setup rs = { .size = 4096 };
	struct kv_arbiter *v, *a;
	__u32 hit, inflight, pages[CHAIN];
	struct kvs_key keys[CHAIN];
	static const __u64 one = 1;
	int fd, wfd, wfd2, rfd;

	ASSERT_EQ(0, kvd_open_attached(self->d.sock, POOL, 0, &v));
	ASSERT_TRUE(kv_arbiter_uses_ring(v));
	fd = raw_attached(self->d.sock);
	ASSERT_LE(0, fd);
	wf = (struct kvs_wait_fd) { .flags = 1 };
	ASSERT_EQ(-EINVAL, raw_call(fd, KVS_SOCK_WAIT_FD, &wf, sizeof(wf), NULL, 0, -1, NULL));
	wf = (struct kvs_wait_fd) { .reserved = { 0, 1 } };
	ASSERT_EQ(-EINVAL, raw_call(fd, KVS_SOCK_WAIT_FD, &wf, sizeof(wf), NULL, 0, -1, NULL));
	wf = (struct kvs_wait_fd) { .wait_fd = 3 };
	ASSERT_EQ(-EINVAL, raw_call(fd, KVS_SOCK_WAIT_FD, &wf, sizeof(wf), NULL, 0, -1, NULL));
	wf = (struct kvs_wait_fd) { 0 };
	ASSERT_EQ(-EINVAL, raw_call(fd, KVS_SOCK_WAIT_FD, &wf, sizeof(wf), NULL, 0, 0, NULL));
	ASSERT_EQ(0, raw_wait_fd(fd, &wfd));
	ASSERT_LE(0, wfd);
	ASSERT_EQ(O_NONBLOCK, fcntl(wfd, F_GETFL) & O_NONBLOCK);
	/* A socket that takes nothing back: no bytes, no descriptors (EPIPE). */
	ASSERT_STREQ("socket", kvd_fd_kind(wfd));
	ASSERT_EQ(-EPIPE, kvd_raw_send(wfd, "x", 1, -1));
	ASSERT_EQ(-EPIPE, kvd_raw_send(wfd, "x", 1, fd));
	wf = (struct kvs_wait_fd) { 0 };
	ASSERT_EQ(-EBUSY, raw_call(fd, KVS_SOCK_WAIT_FD, &wf, sizeof(wf), NULL, 0, -1, &wfd2));
	ASSERT_EQ(-1, wfd2);
	/* The ring's setup says where its doorbells are; out fields are not in. */
	rs = (struct kvs_ring_setup) { .size = 4096, .sq_bell = 1 };
	ASSERT_EQ(-EINVAL, raw_call(fd, KVS_SOCK_RING_SETUP, &rs, sizeof(rs), NULL, 0, -1, NULL));
	rs = (struct kvs_ring_setup) { .size = 4096, .cq_bell = 2 };
	ASSERT_EQ(-EINVAL, raw_call(fd, KVS_SOCK_RING_SETUP, &rs, sizeof(rs), NULL, 0, -1, NULL));
	rs = (struct kvs_ring_setup) { .size = 4096, .reserved = 1 };
	ASSERT_EQ(-EINVAL, raw_call(fd, KVS_SOCK_RING_SETUP, &rs, sizeof(rs), NULL, 0, -1, NULL));

	/* Its wait bell closed, a wait that ends rings nobody: EPIPE, no signal. */
	close(wfd);
	chain_keys(keys, 4);
	ASSERT_EQ(0, kvd_open_attached(self->d.sock, POOL, 0, &a));
	ASSERT_EQ(0, kv_alloc_claim(a, keys, CHAIN, pages));
	ASSERT_EQ(0, raw_lookup_wait(fd, 4, &hit, &inflight));
	ASSERT_EQ(CHAIN, inflight);
	ASSERT_EQ(0, kv_put(a, pages, CHAIN));
	victim_round(_metadata, v, 5);
	ASSERT_EQ(0, raw_lookup_wait(fd, 4, &hit, &inflight));
	ASSERT_EQ(0, inflight);
	kv_arbiter_close(a);
	close(fd);

	/* A ring whose sq doorbell the client closed: still served (RING_ENTER). */
	fd = kvd_connect(self->d.sock);
	ASSERT_LE(0, fd);
	rs = (struct kvs_ring_setup) { .size = 4096 };
	{
		union {
			char b[CMSG_SPACE(4 * sizeof(int))];
			struct cmsghdr align;
		} ctl;
		struct kvs_msg h = { .magic = KVS_MSG_MAGIC, .cmd = KVS_SOCK_RING_SETUP,
				     .len = HDR + sizeof(rs) };
		unsigned char req[HDR + sizeof(rs)], rep[HDR + sizeof(rs)];
		struct iovec iov = { rep, sizeof(rep) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
				     .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b) };
		struct cmsghdr *cm;
		int fds[3];

		memcpy(req, &h, HDR);
		memcpy(req + HDR, &rs, sizeof(rs));
		ASSERT_EQ(0, kvd_raw_send(fd, req, sizeof(req), -1));
		ASSERT_EQ(1, readable(fd, EVENT_MS));
		ASSERT_EQ(sizeof(rep), recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL));
		cm = CMSG_FIRSTHDR(&mh);
		ASSERT_TRUE(cm && cm->cmsg_type == SCM_RIGHTS);
		ASSERT_EQ(CMSG_LEN(3 * sizeof(int)), cm->cmsg_len);
		memcpy(fds, CMSG_DATA(cm), sizeof(fds));
		memcpy(&rs, rep + HDR, sizeof(rs));
		ASSERT_EQ(0, ((struct kvs_msg *)rep)->result);
		ASSERT_EQ(0, rs.ring_fd);
		ASSERT_EQ(1, rs.sq_bell);
		ASSERT_EQ(2, rs.cq_bell);
		rfd = fds[0];
		/* The sq doorbell is an eventfd, the cq doorbell a socket. */
		ASSERT_STREQ("eventfd", kvd_fd_kind(fds[1]));
		ASSERT_STREQ("socket", kvd_fd_kind(fds[2]));
		/*
		 * Non-blocking: libkv's doorbell write to a full count and
		 * its drains never wait past a call's deadline.
		 */
		ASSERT_EQ(O_NONBLOCK, fcntl(fds[1], F_GETFL) & O_NONBLOCK);
		ASSERT_EQ(O_NONBLOCK, fcntl(fds[2], F_GETFL) & O_NONBLOCK);
		ASSERT_EQ(8, write(fds[1], &one, sizeof(one)));
		close(fds[1]);
		close(fds[2]);
	}
	{
		struct kvs_ring_enter re = { 0 };
		double cpu0, t0;

		victim_round(_metadata, v, 6);
		ASSERT_EQ(0, raw_call(fd, KVS_SOCK_RING_ENTER, &re, sizeof(re), NULL, 0, -1, NULL));
		/*
		 * The doorbell its client closed is not reported forever by
		 * a level-triggered epoll: the idle daemon uses next to no
		 * CPU (a spinning one would use all of the time waited).
		 */
		cpu0 = cpu_seconds(self->d.pid);
		t0 = kvd_now();
		ASSERT_LE(0, cpu0);
		kvd_sleep_ms(500);
		EXPECT_GT(0.5 * (kvd_now() - t0), cpu_seconds(self->d.pid) - cpu0);
	}
	close(rfd);
	close(fd);
	victim_round(_metadata, v, 7);
	kv_arbiter_close(v);
}

/*
 * The attacker: its wait bell is readable at once (no wait pending); a
 * thread reads that byte into a page that never arrives and stays inside
 * the read (the fault is seen); then the connection is closed, and the
 * daemon closes its end.  Ready says so, then it waits to be killed.
 */
static void __attribute__((noreturn)) wait_reader_stuck(const char *sock, int ready)
{
	gid_t none[1] = { 65534 };
	struct kvd_stuck_read r;
	pthread_t t;
	int fd, uffd;

	r.page = kvd_stuck_page(&uffd);
	KVD_CHILD_TRUE(r.page != NULL);
	KVD_CHILD_EQ(0, setgroups(1, none));
	KVD_CHILD_EQ(0, setgid(65534));
	KVD_CHILD_EQ(0, setuid(65534));
	fd = kvd_connect(sock);
	KVD_CHILD_TRUE(fd >= 0);
	KVD_CHILD_EQ(0, raw_wait_fd(fd, &r.fd));
	KVD_CHILD_EQ(1, kvd_wait_readable(r.fd, EVENT_MS));
	KVD_CHILD_EQ(0, pthread_create(&t, NULL, kvd_read_into, &r));
	KVD_CHILD_EQ(0, kvd_wait_fault(uffd, EVENT_MS));
	close(fd);
	KVD_CHILD_EQ(1, write(ready, "r", 1));
	for (;;)
		pause();
}

TEST_F(wait, a_client_stuck_reading_its_wait_bell_stalls_nobody)
{
	struct kv_arbiter *v;
	int ready[2];
	char c;

	ASSERT_EQ(0, pipe(ready));
	self->kid = fork();
	ASSERT_LE(0, self->kid);
	if (!self->kid) {
		close(ready[0]);
		wait_reader_stuck(self->d.sock, ready[1]);
	}
	close(ready[1]);
	ASSERT_EQ(1, kvd_wait_readable(ready[0], 2 * EVENT_MS));
	ASSERT_EQ(1, read(ready[0], &c, 1));
	close(ready[0]);
	ASSERT_EQ(0, kvd_open_attached(self->d.sock, POOL, 0, &v));
	ASSERT_EQ(0, kv_arbiter_set_timeout(v, 5000));
	victim_round(_metadata, v, 8);
	kv_arbiter_close(v);
}

TEST_HARNESS_MAIN
