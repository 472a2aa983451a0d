// SPDX-License-Identifier: GPL-2.0
/*
 * Multi-threaded stress of the arbiter core.  Built twice: against the
 * ASan+UBSan core (core_stress_test) and, core and test together, under
 * ThreadSanitizer (core_stress_tsan).
 *
 *   shared_prefix: worker threads, each with its own client, race LOOKUP /
 *     ALLOC (under eviction pressure) / PUBLISH / PUT on one shared prefix
 *     chain plus their own suffixes; a churn thread attaches short-lived
 *     clients and frees them with their holdings; a reader thread runs
 *     KVS_STATS_CHECK and PAGES all along.  Each worker checks, with its
 *     references held, that a second LOOKUP of its chain returns exactly
 *     the pages it holds.  After the join everything must be FREE or CACHED
 *     with no reference left.
 *   pool_churn: threads create, attach, use and destroy pools (some under
 *     one contended name) while others list and read them; afterwards no
 *     core object is left but the clients.
 *
 * KVS_STRESS_MS (default 1500) sets each test's duration, KVS_STRESS_THREADS
 * (default 4) the number of workers.
 */
#include <stdarg.h>
#include <time.h>

#include "kt.h"

#ifdef __SANITIZE_THREAD__
/*
 * A race must fail the test: the harness ends each test with _exit(),
 * which would skip TSan's end-of-process exit code.
 */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
	return "halt_on_error=1:abort_on_error=1:second_deadlock_stack=1";
}
#endif

#define ST_PAGES	48
#define ST_PREFIX	8
#define ST_SUFFIX	4
#define ST_KEYS		(ST_PREFIX + ST_SUFFIX)
#define ST_MAX_THREADS	16
#define ST_PREFIX_A	0x5052454649ull	/* kt_key(ST_PREFIX_A, i) */

static int stop_flag;

static int stopped(void)
{
	return __atomic_load_n(&stop_flag, __ATOMIC_RELAXED);
}

struct worker {
	int id;
	pthread_t th;
	struct kt_client *kc;
	__u32 pool;
	__u64 rng;
	unsigned long iters, hits, dups, published, enospc, edquot, junk;
	int failed;
	char why[256];
};

static void wfail(struct worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wfail(struct worker *w, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (w->failed++)
		return;
	n = snprintf(w->why, sizeof(w->why), "thread %d iteration %lu: ", w->id, w->iters);
	va_start(ap, fmt);
	vsnprintf(w->why + n, sizeof(w->why) - n, fmt, ap);
	va_end(ap);
	__atomic_store_n(&stop_flag, 1, __ATOMIC_RELAXED);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

#define WFAIL(...) do { wfail(w, __VA_ARGS__); return; } while (0)

/* One worker round: find, fill what is missing, check, give back. */
static void worker_round(struct worker *w)
{
	struct kvs_publish_entry e[ST_KEYS];
	struct kvs_key k[ST_KEYS];
	__u32 mine[ST_KEYS], again[ST_KEYS], fresh[ST_KEYS], junk[8];
	__u32 h = 0, n_hit = 0, n_dup = 0, need, i, variant = kt_rand_below(&w->rng, 6);
	/*
	 * Half the rounds on THE shared prefix, the others on one of a few
	 * prefixes all threads share too, which keep being evicted and
	 * published again: racing PUBLISHes of the same keys.
	 */
	__u64 prefix = kt_rand_below(&w->rng, 2) ? 0 : 1 + kt_rand_below(&w->rng, 12);
	int ret;

	for (i = 0; i < ST_PREFIX; i++)
		k[i] = kt_key(ST_PREFIX_A + prefix, i);
	for (i = 0; i < ST_SUFFIX; i++)
		k[ST_PREFIX + i] = kt_key(0x1000 + w->id, variant * 16 + i);

	ret = kt_lookup(w->kc, k, ST_KEYS, mine, &h);
	if (ret == -EDQUOT) {
		w->edquot++;
		return;
	}
	if (ret)
		WFAIL("LOOKUP: %d", ret);
	w->hits += h;
	need = ST_KEYS - h;
	if (need) {
		ret = kt_alloc(w->kc, need, fresh);
		if (ret == -ENOSPC || ret == -EDQUOT) {
			if (ret == -ENOSPC)
				w->enospc++;
			else
				w->edquot++;
			if (h && kt_put(w->kc, mine, h))
				wfail(w, "PUT after ENOSPC failed");
			return;
		}
		if (ret)
			WFAIL("ALLOC %u: %d", need, ret);
		memset(e, 0, sizeof(e));
		for (i = 0; i < need; i++) {
			if (fresh[i] >= ST_PAGES)
				WFAIL("ALLOC gave page %u", fresh[i]);
			e[i].page = fresh[i];
			e[i].parent = i ? KVS_PARENT_PREV : (h ? mine[h - 1] : KVS_NO_PAGE);
			e[i].key = k[h + i];
		}
		ret = kt_publish(w->kc, e, need, &n_dup);
		if (ret)
			WFAIL("PUBLISH %u after %u hits: %d", need, h, ret);
		for (i = 0; i < need; i++) {
			int dup = !!(e[i].flags & KVS_PUBLISHED_DUP);

			if (e[i].result >= ST_PAGES || (!dup && e[i].result != fresh[i]) ||
			    (dup && e[i].result == fresh[i]))
				WFAIL("PUBLISH entry %u: page %u result %u flags %u", i,
					     fresh[i], e[i].result, e[i].flags);
			mine[h + i] = e[i].result;
		}
		w->dups += n_dup;
		w->published += need;
	}
	/* All held: the same keys must give the same pages, all of them. */
	ret = kt_lookup(w->kc, k, ST_KEYS, again, &n_hit);
	if (ret == -EDQUOT) {
		w->edquot++;
	} else if (ret) {
		WFAIL("second LOOKUP: %d", ret);
	} else {
		if (n_hit != ST_KEYS)
			WFAIL("second LOOKUP hit %u of %u held keys", n_hit, ST_KEYS);
		for (i = 0; i < ST_KEYS; i++)
			if (again[i] != mine[i])
				WFAIL("key %u: held page %u, LOOKUP says %u", i, mine[i],
					     again[i]);
		if (kt_put(w->kc, again, ST_KEYS))
			WFAIL("PUT of the second LOOKUP failed");
	}
	/* Sometimes grab pool space too, forcing evictions. */
	if (kt_rand_below(&w->rng, 3) == 0) {
		__u32 n = 1 + kt_rand_below(&w->rng, 8);

		ret = kt_alloc(w->kc, n, junk);
		if (!ret) {
			w->junk += n;
			if (kt_put(w->kc, junk, n))
				WFAIL("PUT of junk failed");
		} else if (ret != -ENOSPC && ret != -EDQUOT) {
			WFAIL("junk ALLOC: %d", ret);
		}
	}
	/* Give back, in two halves to vary the order. */
	if (kt_put(w->kc, mine + ST_KEYS / 2, ST_KEYS - ST_KEYS / 2) ||
	    kt_put(w->kc, mine, ST_KEYS / 2))
		WFAIL("final PUT failed");
	if (kt_held(w->kc) != 0)
		WFAIL("still holds %u pages", kt_held(w->kc));
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	while (!stopped() && !w->failed) {
		worker_round(w);
		w->iters++;
	}
	return NULL;
}

/* Short-lived clients that go away holding pages. */
static void *churn_main(void *arg)
{
	struct worker *w = arg;
	struct kvs_key k[ST_PREFIX];
	__u32 pages[ST_PREFIX], n_hit, p[2], i;
	int ret;

	for (i = 0; i < ST_PREFIX; i++)
		k[i] = kt_key(ST_PREFIX_A, i);
	while (!stopped() && !w->failed) {
		struct kt_client *c = kt_new(1000, 1000, 0);

		if (!c) {
			wfail(w, "kvs_client_new failed");
			break;
		}
		ret = kt_attach(c, "stress", 1);
		if (ret) {
			wfail(w, "ATTACH: %d", ret);
			kt_free(c);
			break;
		}
		ret = kt_lookup(c, k, 1 + kt_rand_below(&w->rng, ST_PREFIX), pages, &n_hit);
		if (ret && ret != -EDQUOT)
			wfail(w, "churn LOOKUP: %d", ret);
		ret = kt_alloc(c, 2, p);
		if (!ret && kt_rand_below(&w->rng, 2)) {
			struct kvs_publish_entry e[2];

			memset(e, 0, sizeof(e));
			e[0].page = p[0];
			e[0].parent = KVS_NO_PAGE;
			e[0].key = kt_key(0x2000, kt_rand_below(&w->rng, 64));
			e[1].page = p[1];
			e[1].parent = KVS_PARENT_PREV;
			e[1].key = kt_key(0x2001, kt_rand_below(&w->rng, 64));
			ret = kt_publish(c, e, 2, NULL);
			if (ret)
				wfail(w, "churn PUBLISH: %d", ret);
		} else if (ret && ret != -ENOSPC && ret != -EDQUOT) {
			wfail(w, "churn ALLOC: %d", ret);
		}
		kt_free(c);	/* with everything it holds */
		w->iters++;
	}
	return NULL;
}

/* Reads the pool all along: invariants must hold at every instant. */
static void *reader_main(void *arg)
{
	static struct kvs_page_desc d[ST_PAGES];
	struct worker *w = arg;
	struct kvs_pool_stats st;
	__u32 n;
	int ret;

	while (!stopped() && !w->failed) {
		ret = kt_stats_check(w->kc, w->pool, &st);
		if (ret) {
			wfail(w, "KVS_STATS_CHECK: %d", ret);
			break;
		}
		if (st.n_free + st.n_owned + st.n_shared + st.n_cached != ST_PAGES ||
		    st.n_held != st.n_refs + st.n_owned)
			wfail(w, "counters: free %llu owned %llu shared %llu cached %llu held %llu refs %llu",
			      (unsigned long long)st.n_free, (unsigned long long)st.n_owned,
			      (unsigned long long)st.n_shared, (unsigned long long)st.n_cached,
			      (unsigned long long)st.n_held, (unsigned long long)st.n_refs);
		ret = kt_pages(w->kc, w->pool, 0, ST_PAGES, d, &n);
		if (ret || n != ST_PAGES)
			wfail(w, "PAGES: %d, %u", ret, n);
		w->iters++;
	}
	return NULL;
}

FIXTURE(stress) {
	struct kt_client *v;
	__u32 pool;
	int n_workers;
	long ms;
	struct worker w[ST_MAX_THREADS + 2];
};

FIXTURE_SETUP(stress)
{
	ASSERT_EQ(0, kt_core_init());
	self->v = kt_new(0, 0, 1);
	ASSERT_NE(NULL, self->v);
	self->n_workers = kt_env_long("KVS_STRESS_THREADS", 4);
	if (self->n_workers < 1)
		self->n_workers = 1;
	if (self->n_workers > ST_MAX_THREADS)
		self->n_workers = ST_MAX_THREADS;
	self->ms = kt_env_long("KVS_STRESS_MS", 1500);
}

FIXTURE_TEARDOWN(stress)
{
	kt_core_teardown(_metadata, self->pool);
}

TEST_F_TIMEOUT(stress, shared_prefix, 120)
{
	struct kvs_pool_stats st;
	struct worker *w = self->w;
	int i, n = self->n_workers;
	unsigned long evict_hint = 0, dups = 0, iters = 0;

	ASSERT_EQ(0, kt_create(self->v, "stress", ST_PAGES, 0666, 0, 0, &self->pool));
	for (i = 0; i < n + 2; i++) {
		w[i].id = i;
		w[i].pool = self->pool;
		w[i].rng = 0x5eed0000ull + i;
		w[i].kc = kt_new(1000, 1000, i == n + 1);
		ASSERT_NE(NULL, w[i].kc);
		if (i < n)
			ASSERT_EQ(0, kt_attach(w[i].kc, "stress", 1));
	}
	/* One worker with a tight quota: LOOKUP and ALLOC see EDQUOT. */
	if (n > 1)
		ASSERT_EQ(0, kt_quota(w[n - 1].kc, 1, ST_KEYS + 2, NULL, NULL));
	__atomic_store_n(&stop_flag, 0, __ATOMIC_RELAXED);
	for (i = 0; i < n; i++)
		ASSERT_EQ(0, pthread_create(&w[i].th, NULL, worker_main, &w[i]));
	ASSERT_EQ(0, pthread_create(&w[n].th, NULL, churn_main, &w[n]));
	ASSERT_EQ(0, pthread_create(&w[n + 1].th, NULL, reader_main, &w[n + 1]));
	sleep_ms(self->ms);
	__atomic_store_n(&stop_flag, 1, __ATOMIC_RELAXED);
	for (i = 0; i < n + 2; i++)
		ASSERT_EQ(0, pthread_join(w[i].th, NULL));

	for (i = 0; i < n + 2; i++) {
		EXPECT_EQ(0, w[i].failed) {
			TH_LOG("%s", w[i].why);
		}
		EXPECT_LT(0, w[i].iters) {
			TH_LOG("thread %d made no progress", i);
		}
		iters += i < n ? w[i].iters : 0;
		dups += w[i].dups;
		evict_hint += w[i].enospc + w[i].junk;
	}
	TH_LOG("%d workers: %lu rounds, %lu duplicate publishes, churn %lu, reader %lu",
	       n, iters, dups, w[n].iters, w[n + 1].iters);

	/* With the workers' references still there: consistent. */
	KT_CHECK_ST(self->v, self->pool, &st);
	EXPECT_EQ(0, st.n_owned);
	EXPECT_LT(0, st.evictions);
	for (i = 0; i < n + 2; i++) {
		kt_free(w[i].kc);
		w[i].kc = NULL;
	}
	KT_CHECK_ST(self->v, self->pool, &st);
	EXPECT_EQ(0, st.n_owned);
	EXPECT_EQ(0, st.n_shared);
	EXPECT_EQ(0, st.n_refs);
	EXPECT_EQ(0, st.n_held);
	EXPECT_EQ(0, st.n_files);
	EXPECT_EQ(ST_PAGES, st.n_free + st.n_cached);
	(void)evict_hint;
}

/* Pools come and go while others use, list and read them. */
static void *pool_churn_main(void *arg)
{
	struct worker *w = arg;
	struct kvs_pool_desc d[KT_MAX_POOLS];
	char own[16];
	int ret;

	snprintf(own, sizeof(own), "own%d", w->id);
	while (!stopped() && !w->failed) {
		const char *name = kt_rand_below(&w->rng, 2) ? own : "contended";
		struct kt_client *c = kt_new(1000 + w->id, 1000, 0);
		struct kvs_pool_list l;
		struct kvs_pool_stats st;
		__u32 id = 0, p[3];

		if (!c) {
			wfail(w, "kvs_client_new failed");
			return NULL;
		}
		ret = kt_create(c, name, 16, 0666, 0, 0, &id);
		if (ret && ret != -EEXIST && ret != -ENOSPC)
			wfail(w, "CREATE %s: %d", name, ret);
		ret = kt_attach(c, name, 1);
		if (!ret) {
			ret = kt_alloc(c, 3, p);
			if (!ret)
				ret = kt_publish_chain(c, p, 3, KVS_NO_PAGE, w->id,
						       kt_rand_below(&w->rng, 4), NULL, NULL);
			if (ret && ret != -ENOSPC)
				wfail(w, "use of %s: %d", name, ret);
			ret = kt_stats_check(c, 0, &st);
			if (ret)
				wfail(w, "STATS_CHECK of %s: %d", name, ret);
		} else if (ret != -ENOENT && ret != -EACCES) {
			wfail(w, "ATTACH %s: %d", name, ret);
		}
		memset(&l, 0, sizeof(l));
		l.count = KT_MAX_POOLS;
		l.pools = KT_PTR(d);
		ret = kt_cmd(c, KVS_IOC_POOL_LIST, &l);
		if (ret)
			wfail(w, "LIST: %d", ret);
		if (id && kt_rand_below(&w->rng, 2)) {
			ret = kt_destroy(c, id);
			if (ret && ret != -ENOENT)
				wfail(w, "DESTROY: %d", ret);
		} else if (l.count && !ret) {
			/* Destroy someone's pool, as the admin would. */
			struct kt_client *adm = kt_new(0, 0, 1);
			__u32 victim = d[kt_rand_below(&w->rng, l.count < KT_MAX_POOLS ?
							 l.count : KT_MAX_POOLS)].pool_id;

			if (adm) {
				ret = kt_destroy(adm, victim);
				if (ret && ret != -ENOENT)
					wfail(w, "admin DESTROY: %d", ret);
				kt_free(adm);
			}
		}
		kt_free(c);
		w->iters++;
	}
	return NULL;
}

TEST_F_TIMEOUT(stress, pool_churn, 120)
{
	struct worker *w = self->w;
	struct kvs_pool_desc d[KT_MAX_POOLS];
	struct kvs_pool_list l;
	int i, n = self->n_workers;
	unsigned long total;
	__u64 obj0;

	obj0 = kvs_core_objects();
	__atomic_store_n(&stop_flag, 0, __ATOMIC_RELAXED);
	for (i = 0; i < n; i++) {
		w[i].id = i;
		w[i].rng = 0xc0de0000ull + i;
		ASSERT_EQ(0, pthread_create(&w[i].th, NULL, pool_churn_main, &w[i]));
	}
	sleep_ms(self->ms);
	__atomic_store_n(&stop_flag, 1, __ATOMIC_RELAXED);
	for (i = 0; i < n; i++)
		ASSERT_EQ(0, pthread_join(w[i].th, NULL));
	for (i = 0, total = 0; i < n; i++) {
		EXPECT_EQ(0, w[i].failed) {
			TH_LOG("%s", w[i].why);
		}
		total += w[i].iters;
	}
	/* One thread may be starved on a loaded machine; all of them, not. */
	EXPECT_LT(0, total);
	TH_LOG("%d threads: %lu rounds", n, total);
	/* Destroy what is left: nothing but the viewer remains. */
	memset(&l, 0, sizeof(l));
	l.count = KT_MAX_POOLS;
	l.pools = KT_PTR(d);
	ASSERT_EQ(0, kt_cmd(self->v, KVS_IOC_POOL_LIST, &l));
	for (i = 0; i < (int)l.count && i < KT_MAX_POOLS; i++)
		EXPECT_EQ(0, kt_destroy(self->v, d[i].pool_id));
	EXPECT_EQ(obj0, kvs_core_objects());
	self->pool = 0;
}

TEST_HARNESS_MAIN
