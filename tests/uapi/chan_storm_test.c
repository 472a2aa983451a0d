// SPDX-License-Identifier: GPL-2.0
/*
 * A crash storm on the pool event channel of kvshare.ko: its holder,
 * a small tier of this test's own, killed with SIGKILL mid-fetch 1,000
 * times (KVS_STORM_ROUNDS overrides), while clients LOOKUP (with and
 * without KVS_LOOKUP_WAIT), ALLOC with KVS_ALLOC_CLAIM, PUBLISH and PUT
 * throughout, in processes of their own.
 *
 * Each round a new holder opens the channel and reads its records as a
 * tier does: of each miss it "fetches" all, half or none (PUBLISHes the
 * claims on the channel and holds the rest), of each PUBLISHED record it
 * gives back about half and keeps the others.  It is killed, after a
 * pause that varies, once it holds at least one MISS claim and one
 * reference (the test's own LOOKUP miss and PUBLISH of keys of that round
 * make sure of both), while the clients' misses meanwhile wait on its
 * claims.  The rounds run on STORM_SLOTS pools at once, a holder each:
 * under TCG a round is mostly the latency of waking the next process, so
 * that the storm stays within a guest suite's time.
 *
 * Afterwards: no error in any client or holder, the pool's invariants
 * (KVS_STATS_CHECK, also every 100 rounds under load), no reference,
 * claim or owned page left (n_refs, n_claimed, n_owned, n_held 0), the
 * arbiter's objects (INFO's n_objects: pools, files, channels, tables)
 * back to the baseline and the module's reference count down to the one
 * file still open, so rmmod (unload_test and the guest's last step)
 * succeeds.
 */
#include <sched.h>
#include <sys/mman.h>
#include <time.h>

#include "kvs_test.h"
#include "kvs_chan.h"

#define STORM_PAGES	256
#define STORM_QUOTA	64		/* a file's, so the channel's max_held */
#define STORM_RING	64
#define STORM_FETCH	8
#define STORM_WORKERS	2
#define STORM_SLOTS	4		/* pools, each with a holder at a time */
#define STORM_CHAINS	48		/* the clients' chains, up to 8 keys each */
#define STORM_ROUNDS	1000
#define STORM_WAIT_MS	10000		/* a holder's step, at most */
#define CLIENT_PAUSE_US	200		/* between a client's operations */
#define STORM_STACK	(256 << 10)	/* a holder's */
/* A holder keeps at most this much, well below max_held: it never stalls. */
#define HOLD_REFS	16
#define HOLD_CLAIMS	24

/* Chains of the clients, and the test's own fresh ones of each round. */
#define CHAIN_CLIENT	20000
#define CHAIN_MISS	40000
#define CHAIN_PUB	60000

/* Shared by the test, its clients and its holders (MAP_SHARED). */
struct storm {
	int stop;
	__u64 ops, waits, woken, eexist, nospc;
	__u64 fetched, kept_refs;
	int client_err, client_line;
	int holder_err, holder_line;
};

#define bump(sh, field)	__atomic_fetch_add(&(sh)->field, 1, __ATOMIC_RELAXED)

/* A client or holder failure: the first one's errno and line, kept. */
#define FAIL_ONCE(sh, who, err) do { \
	int __zero = 0, __err = (err); \
	if (__atomic_compare_exchange_n(&(sh)->who##_err, &__zero, __err ? __err : -1, 0, \
					__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) \
		(sh)->who##_line = __LINE__; \
} while (0)

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000ll + ts.tv_nsec / 1000000;
}

/* A pool of the storm, its holder of the moment and the test's client. */
struct slot {
	__u32 pool;
	char name[KVS_NAME_MAX];
	struct kvs_conn *me;
	pid_t pid;		/* 0: no holder */
	char *stack;		/* the holders' (clone()), reused round after round */
	struct kvs_conn *ctl;
	struct storm *sh;
	int up;			/* the holder's reports, the test's end */
	int hup;		/* the holder's end (the holder reads this field) */
	char want;		/* the report awaited: 'o', then 'a' */
	__u32 round;
};

/*
 * A client until told to stop: a random chain of up to 8 keys, looked up
 * with or without KVS_LOOKUP_WAIT; a wait on keys in flight (the holder's
 * claims, or the other client's) polls until the claim ends, anything
 * else missing is claimed, published and put.  EEXIST (claimed meanwhile)
 * and ENOSPC (every page held) are the other clients' doing and counted;
 * any other error ends the client with it.
 */
static void client(const struct slot *slots, struct storm *sh, __u32 seed)
{
	struct kvs_conn cs[STORM_SLOTS];
	__u32 pages[8], own[8], hit, inflight;
	int ret, i;

	for (i = 0; i < STORM_SLOTS; i++) {
		if (kvs_conn_open(&cs[i]) || kvs_attach(&cs[i], slots[i].name, CH_NS, 0, NULL)) {
			FAIL_ONCE(sh, client, errno);
			_exit(1);
		}
	}
	while (!__atomic_load_n(&sh->stop, __ATOMIC_RELAXED)) {
		__u32 r = kvs_rand(&seed), chain = CHAIN_CLIENT + r % STORM_CHAINS;
		__u32 n = 1 + (r >> 8) % 8, parent;
		struct kvs_conn *c = &cs[(r >> 20) % STORM_SLOTS];

		if (r & (1u << 16)) {
			ret = lookup_wait(c, chain, 0, n, pages, &hit, &inflight);
		} else {
			ret = kvs_lookup_chain(c, chain, 0, n, pages, &hit);
			inflight = 0;
		}
		if (ret) {
			FAIL_ONCE(sh, client, -ret);
			break;
		}
		if (hit < n && inflight) {
			struct pollfd pf = { .fd = c->fd, .events = POLLIN };

			bump(sh, waits);
			if (poll(&pf, 1, STORM_WAIT_MS) == 1)
				bump(sh, woken);
		} else if (hit < n) {
			parent = hit ? pages[hit - 1] : KVS_NO_PAGE;
			ret = kvs_claim_keys(c, chain, hit, n - hit, own);
			if (ret == -EEXIST) {
				bump(sh, eexist);
			} else if (ret == -ENOSPC) {
				bump(sh, nospc);
			} else if (ret) {
				FAIL_ONCE(sh, client, -ret);
				break;
			} else {
				ret = kvs_publish_chain(c, own, n - hit, parent, chain, hit,
							NULL, NULL);
				if (!ret)
					ret = kvs_put(c, own, n - hit);
				if (ret) {
					FAIL_ONCE(sh, client, -ret);
					break;
				}
			}
		}
		if (hit && (ret = kvs_put(c, pages, hit))) {
			FAIL_ONCE(sh, client, -ret);
			break;
		}
		bump(sh, ops);
		/* Leave the holders some of the guest's two CPUs. */
		usleep(CLIENT_PAUSE_US);
	}
	_exit(sh->client_err ? 1 : 0);
}

/*
 * PUBLISH @n claimed pages of one miss on channel @fd, keys as recorded,
 * the first under the page its first record names (the LOOKUP's last
 * hit), as a tier does; then that page's reference goes back.
 */
static int fetch_publish(int fd, const struct kvs_event *miss, __u32 n, __u32 *res)
{
	struct kvs_publish_entry e[STORM_FETCH];
	struct kvs_conn cc = chan_conn(fd);
	__u32 i;
	int ret;

	memset(e, 0, sizeof(e));
	for (i = 0; i < n; i++) {
		e[i].page = miss[i].page;
		e[i].parent = i ? KVS_PARENT_PREV : miss[0].parent;
		e[i].key = miss[i].key;
	}
	ret = kvs_publish(&cc, e, n, NULL);
	for (i = 0; !ret && i < n; i++)
		res[i] = e[i].result;
	if (!ret && miss[0].parent != KVS_NO_PAGE)
		ret = chan_put(fd, &miss[0].parent, 1);
	return ret;
}

/* A miss not fetched yet: the reference on its parent kept, within the bound. */
static int keep_parent(int fd, const struct kvs_event *miss, __u32 *refs)
{
	if (miss[0].parent == KVS_NO_PAGE)
		return 0;
	if (*refs < HOLD_REFS) {
		(*refs)++;
		return 0;
	}
	return chan_put(fd, &miss[0].parent, 1);
}

/*
 * A holder: the channel's tier until it is killed.  Reports 'o' once the
 * channel is open and 'a' once it holds a claim and a reference; never
 * returns.
 */
static void holder(struct kvs_conn *ctl, __u32 pool, int up, struct storm *sh,
		   __u32 seed)
{
	struct kvs_event ev[STORM_RING], run[STORM_FETCH];
	__u32 claims = 0, refs = 0, res[STORM_FETCH], half, i;
	int fd, armed = 0, ret = 0;
	ssize_t r;

	fd = chan_open(ctl, pool, STORM_RING, STORM_FETCH);
	if (fd < 0) {
		FAIL_ONCE(sh, holder, -fd);
		_exit(1);
	}
	if (write(up, "o", 1) != 1)
		_exit(1);
	for (;;) {
		r = read(fd, ev, sizeof(ev));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 || r % sizeof(ev[0])) {
			FAIL_ONCE(sh, holder, r < 0 ? errno : EIO);
			_exit(1);
		}
		for (i = 0; i < r / sizeof(ev[0]); i++) {
			const struct kvs_event *e = &ev[i];

			if (e->type == KVS_EVENT_PUBLISHED) {
				/* The first is kept: every holder dies holding one. */
				if (!refs || (refs < HOLD_REFS && (kvs_rand(&seed) & 1)))
					refs++;
				else
					ret = chan_put(fd, &e->page, 1);
			} else if (e->type == KVS_EVENT_MISS) {
				/* A miss's records come whole, in order. */
				if (e->n > STORM_FETCH || e->k >= e->n) {
					FAIL_ONCE(sh, holder, EPROTO);
					_exit(1);
				}
				run[e->k] = *e;
				claims++;
				if (e->k + 1 < e->n)
					continue;
				/* Fetched: all of it, its first half, or none yet. */
				half = kvs_rand(&seed) % 3;
				half = half == 0 || claims > HOLD_CLAIMS ? e->n :
				       half == 1 ? e->n / 2 : 0;
				/* A miss while no other claim is held is kept whole: every holder dies holding claims. */
				if (claims == e->n)
					half = 0;
				if (!half) {
					ret = keep_parent(fd, run, &refs);
				} else {
					ret = fetch_publish(fd, run, half, res);
					if (!ret) {
						claims -= half;
						bump(sh, fetched);
					}
					/* The references PUBLISH left: kept, or given back. */
					if (!ret && refs + half <= HOLD_REFS)
						refs += half;
					else if (!ret)
						ret = chan_put(fd, res, half);
				}
			}
			if (ret) {
				FAIL_ONCE(sh, holder, -ret);
				_exit(1);
			}
		}
		if (!armed && claims && refs) {
			armed = 1;
			__atomic_fetch_add(&sh->kept_refs, refs, __ATOMIC_RELAXED);
			if (write(up, "a", 1) != 1)
				_exit(1);
		}
	}
}

static int holder_main(void *arg)
{
	struct slot *s = arg;

	holder(s->ctl, s->pool, s->hup, s->sh, 0x5eed + s->round);
	return 0;
}

/*
 * Round @round starts on @s: a new holder.  A process of its own (its own
 * files: the channel dies with it) that shares the test's memory
 * (CLONE_VM): a fork()'s copy and teardown of the address space cost
 * more under TCG than the rest of a round.  It touches only its stack,
 * the slot and the shared counters, and makes only system calls (errno,
 * which it shares with the test, is read by neither on success).
 */
static void slot_start(struct __test_metadata *_metadata, struct kvs_env *env,
		       struct slot *s, __u32 round)
{
	int up[2];

	ASSERT_EQ(0, pipe2(up, O_CLOEXEC));
	s->hup = up[1];
	s->round = round;
	s->pid = clone(holder_main, s->stack + STORM_STACK, CLONE_VM | SIGCHLD, s);
	ASSERT_LT(0, s->pid) TH_LOG("clone: %s", strerror(errno));
	kvs_env_adopt(_metadata, env, s->pid);
	close(up[1]);
	s->up = up[0];
	s->want = 'o';
}

/* The holder of @s said @byte: nudge it, or kill it.  1 when the round is over. */
static int slot_step(struct __test_metadata *_metadata, struct kvs_env *env,
		     struct slot *s, struct storm *sh, char byte, __u32 *seed)
{
	__u32 page, pages[4], hit;
	int status;

	ASSERT_EQ(s->want, byte) TH_LOG("round %u: the holder said %d (error %d at line %d)",
					s->round, byte, sh->holder_err, sh->holder_line);
	if (byte == 'o') {
		/* A miss the channel claims and a page it holds, this round's own. */
		ASSERT_EQ(0, kvs_lookup_chain(s->me, CHAIN_MISS + s->round, 0, 4, pages, &hit));
		ASSERT_EQ(0, hit);
		ASSERT_EQ(0, publish_one(s->me, CHAIN_PUB + s->round, &page));
		ASSERT_EQ(0, kvs_put1(s->me, page));
		s->want = 'a';
		return 0;
	}
	/* Armed: killed somewhere in its next reads, fetches and PUTs. */
	if (kvs_rand(seed) & 1)
		usleep(kvs_rand(seed) % 500);
	ASSERT_EQ(0, kill(s->pid, SIGKILL));
	ASSERT_EQ(s->pid, waitpid(s->pid, &status, 0));
	ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
		TH_LOG("round %u: holder status 0x%x (error %d at line %d)",
		       s->round, status, sh->holder_err, sh->holder_line);
	kvs_env_forget(env, s->pid);
	close(s->up);
	s->pid = 0;
	return 1;
}

TEST_F_TIMEOUT(chan, holder_killed_mid_fetch_1000_times, 300)
{
	struct pollfd pf[STORM_SLOTS];
	struct slot slots[STORM_SLOTS];
	struct kvs_pool_stats st;
	struct storm *sh;
	pid_t workers[STORM_WORKERS];
	__u32 seed = 0x5eed, rounds = STORM_ROUNDS, started = 0, done = 0;
	const char *env = getenv("KVS_STORM_ROUNDS");
	long long t0;
	int i, n;
	char byte;

	CH_REQUIRE_MODULE();
	if (env && *env)
		rounds = strtoul(env, NULL, 10);
	for (i = 0; i < STORM_SLOTS; i++) {
		slots[i].pool = kvs_env_pool(_metadata, &self->env, STORM_PAGES, STORM_QUOTA,
					     slots[i].name);
		slots[i].me = kvs_env_attach(_metadata, &self->env, slots[i].name, CH_NS);
		slots[i].pid = 0;
		slots[i].ctl = &self->env.ctl;
		slots[i].stack = mmap(NULL, STORM_STACK, PROT_READ | PROT_WRITE,
				      MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
		ASSERT_NE(MAP_FAILED, slots[i].stack);
	}
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, sh);
	memset(sh, 0, sizeof(*sh));
	for (i = 0; i < STORM_SLOTS; i++)
		slots[i].sh = sh;
	for (i = 0; i < STORM_WORKERS; i++) {
		workers[i] = kvs_env_fork(_metadata, &self->env);
		if (workers[i] == 0)
			client(slots, sh, 0x1234567u * (i + 1));
	}

	t0 = now_ms();
	while (done < rounds) {
		for (i = 0; i < STORM_SLOTS; i++) {
			if (!slots[i].pid && started < rounds)
				slot_start(_metadata, &self->env, &slots[i], started++);
			pf[i].fd = slots[i].pid ? slots[i].up : -1;
			pf[i].events = POLLIN;
			pf[i].revents = 0;
		}
		n = poll(pf, STORM_SLOTS, STORM_WAIT_MS);
		ASSERT_LT(0, n) TH_LOG("%u rounds done: no holder said anything for %d ms",
				       done, STORM_WAIT_MS);
		for (i = 0; i < STORM_SLOTS; i++) {
			if (!(pf[i].revents & (POLLIN | POLLHUP)))
				continue;
			if (read(slots[i].up, &byte, 1) != 1)
				byte = 0;
			if (!slot_step(_metadata, &self->env, &slots[i], sh, byte, &seed))
				continue;
			if (++done % 100 == 0)
				ASSERT_EQ(0, kvs_stats(&self->env.ctl, slots[i].pool,
						       KVS_STATS_CHECK, &st))
					TH_LOG("%u rounds done: invariants", done);
		}
	}
	__atomic_store_n(&sh->stop, 1, __ATOMIC_RELAXED);
	for (i = 0; i < STORM_WORKERS; i++)
		ASSERT_CHILD_OK(workers[i]);
	ksft_print_msg("%u holders killed in %lld ms on %d pools; clients: %llu ops, %llu waits (%llu woken), %llu EEXIST, %llu ENOSPC; %llu fetches published, %llu references held at arming\n",
		       rounds, now_ms() - t0, STORM_SLOTS, (unsigned long long)sh->ops,
		       (unsigned long long)sh->waits, (unsigned long long)sh->woken,
		       (unsigned long long)sh->eexist, (unsigned long long)sh->nospc,
		       (unsigned long long)sh->fetched, (unsigned long long)sh->kept_refs);
	ASSERT_EQ(0, sh->client_err) TH_LOG("client error at line %d", sh->client_line);
	ASSERT_EQ(0, sh->holder_err) TH_LOG("holder error at line %d", sh->holder_line);
	/* The clients waited on the holders' claims: the storm hit them. */
	ASSERT_LT(0, sh->waits);
	ASSERT_LT(0, sh->fetched);

	for (i = 0; i < STORM_SLOTS; i++) {
		ASSERT_EQ(0, kvs_stats(&self->env.ctl, slots[i].pool, KVS_STATS_CHECK, &st));
		ASSERT_EQ(0, st.n_refs);
		ASSERT_EQ(0, st.n_claimed);
		ASSERT_EQ(0, st.n_owned);
		ASSERT_EQ(0, st.n_held);
		ASSERT_EQ(1, st.n_files);	/* the test's client */
		ASSERT_EQ(STORM_PAGES, st.n_free + st.n_cached);
		check_invariants(&self->env.ctl, slots[i].pool);
	}
	for (i = 0; i < STORM_SLOTS; i++)
		munmap(slots[i].stack, STORM_STACK);
	munmap(sh, sizeof(*sh));
	kvs_env_assert_baseline(_metadata, &self->env);
	/* Only the control file pins the module: rmmod would succeed. */
	ASSERT_EQ(1, kvs_module_refcnt());
}

TEST_HARNESS_MAIN
