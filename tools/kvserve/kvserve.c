// SPDX-License-Identifier: GPL-2.0
/*
 * kvserve: the reference multi-process serving run.  Several worker
 * processes serve prompts that share prefixes (one system prompt, a few
 * documents, a unique question each), as replicas of an engine on one host
 * would, and share prefix KV pages through the arbiter:
 *
 *   keys   = chained SHA-256 block keys of the prompt's full pages
 *   hits   = LOOKUP(keys)            pages some process already computed
 *   misses = ALLOC, "prefill" them, PUBLISH (a duplicate: use the canonical)
 *   done   = PUT everything          the pages stay CACHED for the next one
 *
 * The prefill writes each page's bytes as a function of its key, so every
 * page a worker reads, its own or another's, is checked byte for byte:
 * shared memory and arbitration are both on trial.  Attention itself comes
 * with libkv's kernels; this run measures what sharing saves.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <kvshare/arbiter.h>
#include <kvshare/blockhash.h>
#include <kvshare/radix.h>
#include <kvshare/req_table.h>

struct opts {
	const char *arbiter;
	const char *pool;
	const char *salt;
	unsigned int workers, requests, system_tokens, doc_tokens, docs;
	unsigned int question_tokens;
	uint64_t seed;
};

/* What one worker did, sent to the parent through a pipe. */
struct tally {
	uint64_t requests, prompt_tokens, page_tokens;
	uint64_t local_hit_pages, remote_hit_pages, computed_pages, dup_pages;
	uint64_t evicted_pages, verified_bytes, mismatches, errors;
	uint64_t ns;
};

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* @n token ids drawn from stream @stream (a "text"). */
static void text(uint32_t *out, unsigned int n, uint64_t stream)
{
	uint64_t s = stream * 0x2545f4914f6cdd1dull + 1;
	unsigned int i;

	for (i = 0; i < n; i++)
		out[i] = (uint32_t)(splitmix64(&s) % 128000);
}

/* The bytes a "prefill" writes for the page with this key. */
static void fill_page(uint64_t *p, size_t bytes, const struct kvs_key *key)
{
	uint64_t s = key->w[0] ^ key->w[3];
	size_t i;

	for (i = 0; i < bytes / 8; i++)
		p[i] = splitmix64(&s);
}

static bool page_ok(const uint64_t *p, size_t bytes, const struct kvs_key *key)
{
	uint64_t s = key->w[0] ^ key->w[3];
	size_t i;

	for (i = 0; i < bytes / 8; i++)
		if (p[i] != splitmix64(&s))
			return false;
	return true;
}

struct worker {
	const struct opts *o;
	unsigned int id;
	struct kv_pool *pool;
	struct kv_prefix_cache *cache;
	struct kv_req_table *rt;
	struct kv_block_hasher hasher;	/* the keys, for checking page bytes */
	size_t page_bytes;
	uint32_t tokens_per_page;
	uint32_t *tokens;
	struct kvs_key *keys;
	struct tally t;
};

/* Check one page this worker got from the cache, local or shared. */
static void verify(struct worker *w, uint32_t page, const struct kvs_key *key)
{
	if (page_ok(kv_page_addr(w->pool, page), w->page_bytes, key))
		w->t.verified_bytes += w->page_bytes;
	else
		w->t.mismatches++;
}

/*
 * One request, as an engine does it: match the prompt against the local
 * tree and then the arbiter, reserve pages for the rest, prefill them,
 * and hand the request to the cache when it finishes (which PUBLISHes
 * the new full pages, or swaps in another process's identical ones).
 */
static int serve_one(struct worker *w, unsigned int r)
{
	const struct opts *o = w->o;
	uint64_t pick = w->id * 1000003ull + r + o->seed;
	unsigned int n_tok = o->system_tokens + o->doc_tokens + o->question_tokens;
	unsigned int doc = splitmix64(&pick) % o->docs, i;
	struct kv_radix_req req = { .tokens = w->tokens };
	long n_keys, matched;
	int ret;

	text(w->tokens, o->system_tokens, o->seed);
	text(w->tokens + o->system_tokens, o->doc_tokens, o->seed + 1 + doc);
	text(w->tokens + o->system_tokens + o->doc_tokens, o->question_tokens,
	     o->seed + 1000 + pick);
	n_keys = kv_hash_chain(&w->hasher, NULL, w->tokens, n_tok, NULL, 0, w->keys);
	if (n_keys < 0)
		return n_keys;

	req.slot = kv_req_alloc(w->rt);
	if (req.slot < 0)
		return req.slot;
	matched = kv_prefix_match(w->cache, w->rt, &req, n_tok);
	if (matched < 0) {
		kv_req_free(w->rt, req.slot);
		return matched;
	}
	for (i = 0; i < matched / w->tokens_per_page; i++)
		verify(w, kv_req_page(w->rt, req.slot, i), &w->keys[i]);
	ret = kv_prefix_reserve(w->cache, w->rt, &req, n_tok);
	if (ret) {
		kv_prefix_abort(w->cache, w->rt, &req);
		return ret;
	}
	for (i = matched / w->tokens_per_page; i < n_keys; i++)
		fill_page(kv_page_addr(w->pool, kv_req_page(w->rt, req.slot, i)),
			  w->page_bytes, &w->keys[i]);
	req.n_tokens = n_tok;
	ret = kv_prefix_cache_finished(w->cache, w->rt, &req);
	w->t.requests++;
	w->t.prompt_tokens += n_tok;
	w->t.page_tokens += n_keys * w->tokens_per_page;
	return ret;
}

static int worker_setup(struct worker *w)
{
	const struct opts *o = w->o;
	size_t n_tok = o->system_tokens + o->doc_tokens + o->question_tokens;
	struct kv_prefix_config cfg = { .salt = o->salt, .salt_len = strlen(o->salt) };
	const struct kvs_pool_attach *info;
	int ret;

	ret = kv_pool_open(o->arbiter, o->pool, 0, 0, &w->pool);
	if (ret) {
		fprintf(stderr, "kvserve: worker %u: pool '%s': %s\n", w->id, o->pool,
			strerror(-ret));
		return ret;
	}
	info = kv_pool_info(w->pool);
	w->page_bytes = info->geom.page_bytes;
	w->tokens_per_page = info->geom.tokens_per_page;
	ret = kv_hasher_init(&w->hasher, o->salt, strlen(o->salt), w->tokens_per_page);
	if (!ret)
		ret = kv_prefix_create(kv_pool_arbiter(w->pool), info, &cfg, &w->cache);
	if (!ret)
		ret = kv_req_table_create(1, n_tok, w->tokens_per_page, &w->rt);
	w->tokens = calloc(n_tok, sizeof(*w->tokens));
	w->keys = calloc(n_tok / w->tokens_per_page + 1, sizeof(*w->keys));
	if (!ret && (!w->tokens || !w->keys))
		ret = -ENOMEM;
	if (ret)
		fprintf(stderr, "kvserve: worker %u: %s\n", w->id, strerror(-ret));
	return ret;
}

static void worker_tally(struct worker *w)
{
	const struct kv_prefix_stats *st = kv_prefix_stats(w->cache);

	w->t.local_hit_pages = st->local_hit_pages;
	w->t.remote_hit_pages = st->remote_hit_pages;
	w->t.computed_pages = st->published - st->dup_published;
	w->t.dup_pages = st->dup_published;
	w->t.evicted_pages = st->alloc_evictions;
	w->t.errors += st->errors;
}

static int worker_run(struct worker *w)
{
	uint64_t t0;
	unsigned int r;
	int ret;

	ret = worker_setup(w);
	if (ret)
		goto out;
	t0 = now_ns();
	for (r = 0; r < w->o->requests; r++) {
		ret = serve_one(w, r);
		if (ret) {
			fprintf(stderr, "kvserve: worker %u: request %u: %s\n", w->id, r,
				strerror(-ret));
			w->t.errors++;
		}
	}
	w->t.ns = now_ns() - t0;
	worker_tally(w);
	ret = 0;
out:
	if (w->cache)
		kv_prefix_destroy(w->cache);
	kv_req_table_destroy(w->rt);
	kv_pool_close(w->pool);
	free(w->tokens);
	free(w->keys);
	return ret;
}

static void usage(FILE *f)
{
	fputs("usage: kvserve [--arbiter PATH] [--pool NAME] [--workers N] [--requests R]\n"
	      "               [--system-tokens S] [--doc-tokens D] [--docs K]\n"
	      "               [--question-tokens Q] [--salt STR] [--seed N]\n\n"
	      "N worker processes each serve R prompts of S shared system-prompt tokens,\n"
	      "D tokens of one of K shared documents and Q unique tokens, sharing prefix\n"
	      "KV pages of pool NAME through the arbiter (libkv picks the module or the\n"
	      "daemon unless --arbiter names one), and check every page byte for byte.\n", f);
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option longs[] = {
		{ "arbiter", 1, NULL, 'a' }, { "pool", 1, NULL, 'p' },
		{ "workers", 1, NULL, 'w' }, { "requests", 1, NULL, 'r' },
		{ "system-tokens", 1, NULL, 's' }, { "doc-tokens", 1, NULL, 'd' },
		{ "docs", 1, NULL, 'k' }, { "question-tokens", 1, NULL, 'q' },
		{ "salt", 1, NULL, 'S' }, { "seed", 1, NULL, 'x' },
		{ "help", 0, NULL, 'h' }, { NULL, 0, NULL, 0 },
	};
	unsigned int *nums[128] = {
		['w'] = &o->workers, ['r'] = &o->requests, ['s'] = &o->system_tokens,
		['d'] = &o->doc_tokens, ['k'] = &o->docs, ['q'] = &o->question_tokens,
	};
	int c, idx = 0;

	while ((c = getopt_long(argc, argv, "", longs, &idx)) != -1) {
		char *end;
		unsigned long v;

		switch (c) {
		case 'a': o->arbiter = optarg; continue;
		case 'p': o->pool = optarg; continue;
		case 'S': o->salt = optarg; continue;
		case 'h': usage(stdout); exit(0);
		case 'x':
			o->seed = strtoull(optarg, &end, 0);
			if (*end || !*optarg)
				goto bad;
			continue;
		case '?':
			usage(stderr);
			return -1;
		}
		errno = 0;
		v = strtoul(optarg, &end, 0);
		if (errno || *end || !*optarg || v > 1000000)
			goto bad;
		*nums[c] = v;
	}
	if (!o->workers || !o->requests || !o->docs ||
	    !(o->system_tokens + o->doc_tokens + o->question_tokens)) {
		fprintf(stderr, "kvserve: workers, requests, docs and the prompt length "
			"must not be 0\n");
		return -1;
	}
	return 0;
bad:
	fprintf(stderr, "kvserve: --%s: '%s' is not a number in 0..1000000\n",
		longs[idx].name, optarg);
	return -1;
}

static void add(struct tally *sum, const struct tally *t)
{
	sum->requests += t->requests;
	sum->prompt_tokens += t->prompt_tokens;
	sum->page_tokens += t->page_tokens;
	sum->local_hit_pages += t->local_hit_pages;
	sum->remote_hit_pages += t->remote_hit_pages;
	sum->evicted_pages += t->evicted_pages;
	sum->computed_pages += t->computed_pages;
	sum->dup_pages += t->dup_pages;
	sum->verified_bytes += t->verified_bytes;
	sum->mismatches += t->mismatches;
	sum->errors += t->errors;
	if (t->ns > sum->ns)
		sum->ns = t->ns;
}

/* The pool's own view, with its invariants checked. */
static int pool_report(const struct opts *o, struct kvs_pool_stats *st,
		       uint32_t *tokens_per_page)
{
	struct kvs_pool_attach info = { 0 };
	struct kv_arbiter *arb;
	int ret;

	ret = kv_arbiter_open(o->arbiter, KV_ARBITER_NO_URING, &arb);
	if (ret)
		return ret;
	ret = kv_arbiter_attach(arb, o->pool, 0, &info);
	*tokens_per_page = info.geom.tokens_per_page;
	memset(st, 0, sizeof(*st));
	st->flags = KVS_STATS_CHECK;
	if (!ret)
		ret = kv_arbiter_call(arb, KVS_IOC_POOL_STATS, st);
	kv_arbiter_close(arb);
	return ret;
}

static int spawn(const struct opts *o, struct tally *sum)
{
	unsigned int i, failed = 0;
	int fds[2];

	if (pipe(fds))
		return -errno;
	for (i = 0; i < o->workers; i++) {
		pid_t pid = fork();

		if (pid < 0)
			return -errno;
		if (!pid) {
			struct worker w = { .o = o, .id = i };
			int ret = worker_run(&w);

			close(fds[0]);
			if (write(fds[1], &w.t, sizeof(w.t)) != sizeof(w.t))
				_exit(3);
			_exit(ret ? 2 : 0);
		}
	}
	close(fds[1]);
	for (i = 0; i < o->workers; i++) {
		struct tally t;
		int st;

		if (read(fds[0], &t, sizeof(t)) == sizeof(t))
			add(sum, &t);
		if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			failed++;
	}
	close(fds[0]);
	return failed ? -ECHILD : 0;
}

int main(int argc, char **argv)
{
	struct opts o = {
		.pool = "kvserve", .salt = "kvserve", .workers = 4, .requests = 24,
		.system_tokens = 1024, .doc_tokens = 2048, .docs = 4,
		.question_tokens = 96, .seed = 1,
	};
	struct kvs_pool_stats st;
	struct tally sum = { 0 };
	uint64_t hits;
	uint32_t tpp = 0;
	int ret, check;

	if (parse(argc, argv, &o))
		return 2;
	ret = spawn(&o, &sum);
	check = pool_report(&o, &st, &tpp);
	hits = sum.local_hit_pages + sum.remote_hit_pages;

	printf("kvserve: %u workers x %u requests, prompts of %u tokens "
	       "(%u system + %u of %u documents + %u unique)\n",
	       o.workers, o.requests, o.system_tokens + o.doc_tokens + o.question_tokens,
	       o.system_tokens, o.doc_tokens, o.docs, o.question_tokens);
	printf("  requests served        %llu\n", (unsigned long long)sum.requests);
	printf("  prompt tokens          %llu (%llu in full pages)\n",
	       (unsigned long long)sum.prompt_tokens, (unsigned long long)sum.page_tokens);
	printf("  pages from the cache   %llu (%.1f%% of full pages): %llu from the "
	       "worker's own tree, %llu found through the arbiter\n",
	       (unsigned long long)hits, sum.page_tokens ? 100.0 * hits * tpp / sum.page_tokens : 0.0,
	       (unsigned long long)sum.local_hit_pages,
	       (unsigned long long)sum.remote_hit_pages);
	printf("  pages computed         %llu (+%llu computed twice in a race, "
	       "deduplicated at PUBLISH)\n",
	       (unsigned long long)sum.computed_pages, (unsigned long long)sum.dup_pages);
	printf("  pages evicted locally  %llu\n", (unsigned long long)sum.evicted_pages);
	printf("  bytes verified         %llu in pages served from the cache\n",
	       (unsigned long long)sum.verified_bytes);
	printf("  wall time              %.1f ms (slowest worker)\n", sum.ns / 1e6);
	if (!check)
		printf("  pool                   %llu cached, %llu shared, %llu free, "
		       "%llu evictions; invariants hold\n",
		       (unsigned long long)st.n_cached, (unsigned long long)st.n_shared,
		       (unsigned long long)st.n_free, (unsigned long long)st.evictions);
	else
		printf("  pool                   check failed: %s\n", strerror(-check));

	if (ret || check || sum.mismatches || sum.errors) {
		fprintf(stderr, "kvserve: FAILED: %llu byte mismatches, %llu request errors%s%s\n",
			(unsigned long long)sum.mismatches, (unsigned long long)sum.errors,
			ret ? ", a worker failed" : "", check ? ", pool check failed" : "");
		return 1;
	}
	return 0;
}
