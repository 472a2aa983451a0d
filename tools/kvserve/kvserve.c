// SPDX-License-Identifier: GPL-2.0
/*
 * kvserve: the reference multi-process serving run.  Several worker
 * processes serve prompts that share prefixes (one system prompt, a few
 * documents, a unique question each), as replicas of an engine on one host
 * would, and share prefix KV pages through the arbiter:
 *
 *   match   the prompt against the worker's radix tree, then the arbiter
 *           (LOOKUP of chained SHA-256 block keys): pages some process
 *           already computed;
 *   prefill the rest with a small transformer (model.c) whose attention is
 *           libkv's paged C reference, reading the shared pages in place;
 *   decode  a few tokens greedily through the paged decode kernel;
 *   finish  PUBLISH the new full pages (a duplicate: use the canonical)
 *           and PUT everything: the pages stay CACHED for the next one.
 *
 * Every --verify'th request of a worker is recomputed from scratch in
 * private memory and compared to the bit: every KV row of every layer in
 * its pages (its own and other processes'), each generated token and the
 * final hidden state.  Shared memory, arbitration and the attention code
 * are all on trial, and the recompute's time is the cost sharing saved.
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
#include <kvshare/attn.h>
#include <kvshare/radix.h>
#include <kvshare/req_table.h>

#include "model.h"

struct opts {
	const char *arbiter;
	const char *pool;
	const char *salt;
	bool cuda;			/* --memory cuda: the pool is device memory */
	unsigned int workers, requests, system_tokens, doc_tokens, docs;
	unsigned int question_tokens, q_heads, gen_tokens, verify;
	uint64_t seed, model_seed;
	char default_salt[96];
};

/* What one worker did, sent to the parent through a pipe. */
struct tally {
	uint64_t requests, prompt_tokens, page_tokens;
	uint64_t local_hit_pages, remote_hit_pages, computed_pages, dup_pages;
	uint64_t evicted_pages, errors;
	uint64_t prefill_tokens, decode_tokens;
	uint64_t verified_requests, verified_bytes, mismatches;
	uint64_t prefill_ns, decode_ns, verify_prefill_ns;
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

struct worker {
	const struct opts *o;
	unsigned int id;
	struct kv_pool *pool;
	struct kv_prefix_cache *cache;
	struct kv_req_table *rt;
	struct model *model;
	const struct kvs_geometry *geom;
	uint32_t *tokens;		/* prompt, then the generated tokens */
	uint32_t *pages;		/* the request's page table */
	uint32_t max_pages;
	float *hidden;			/* the served run's final state, kept by verify() */
	uint8_t *scratch;		/* private pages for the recompute */
	uint32_t *scratch_pages;
	struct tally t;
};

/*
 * Recompute the request from scratch in private memory (poisoned with
 * NaN, pages in reverse order) and compare: every KV row of every layer
 * of tokens [0, n_kv), the generated tokens, the final hidden state.
 * -EIO on any difference; the first is reported.
 */
static int verify(struct worker *w, const struct model_seq *served, uint32_t n_prompt,
		  uint32_t n_kv)
{
	const struct kvs_geometry *g = w->geom;
	const uint32_t T = g->tokens_per_page, n_pages = (n_kv + T - 1) / T;
	const uint64_t row = kv_token_stride(g);
	struct model_seq s = { w->scratch, n_pages, w->scratch_pages, n_pages };
	const uint8_t *pool = served->pool_base;
	uint32_t i, l, which, t, next, len;
	const float *hidden = model_last_hidden(w->model, &len);
	uint64_t t0;
	int ret;

	/* The recompute overwrites the model's state: keep the served one. */
	memcpy(w->hidden, hidden, len * sizeof(float));
	t0 = now_ns();
	memset(w->scratch, 0xff, (size_t)n_pages * g->page_bytes);
	for (i = 0; i < n_pages; i++)
		w->scratch_pages[i] = n_pages - 1 - i;
	ret = model_prefill(w->model, &s, w->tokens, 0, n_prompt, &next);
	w->t.verify_prefill_ns += now_ns() - t0;
	for (i = n_prompt; !ret && i <= n_kv; i++) {
		if (next != w->tokens[i]) {
			fprintf(stderr, "kvserve: worker %u: token %u is %u, from scratch %u\n",
				w->id, i, w->tokens[i], next);
			return -EIO;
		}
		if (i < n_kv)
			ret = model_decode(w->model, &s, w->tokens[i], i, &next);
	}
	if (ret)
		return ret;
	hidden = model_last_hidden(w->model, &len);
	if (memcmp(hidden, w->hidden, len * sizeof(float))) {
		fprintf(stderr, "kvserve: worker %u: final hidden state differs from scratch\n",
			w->id);
		return -EIO;
	}
	for (t = 0; t < n_kv; t++)
		for (l = 0; l < g->n_layers; l++)
			for (which = KV_K; which <= KV_V; which++) {
				const uint8_t *a = pool + kv_offset(g, served->pages[t / T], l,
								    which, t % T, 0, 0);
				const uint8_t *b = w->scratch + kv_offset(g, s.pages[t / T], l,
									  which, t % T, 0, 0);

				if (memcmp(a, b, row)) {
					fprintf(stderr, "kvserve: worker %u: %c of token %u, layer %u, "
						"in page %u differs from scratch\n", w->id,
						which == KV_K ? 'K' : 'V', t, l, served->pages[t / T]);
					return -EIO;
				}
				w->t.verified_bytes += row;
			}
	w->t.verified_requests++;
	return 0;
}

static void prompt(const struct opts *o, uint32_t *tokens, uint64_t pick)
{
	unsigned int doc = splitmix64(&pick) % o->docs;

	text(tokens, o->system_tokens, o->seed);
	text(tokens + o->system_tokens, o->doc_tokens, o->seed + 1 + doc);
	text(tokens + o->system_tokens + o->doc_tokens, o->question_tokens,
	     o->seed + 1000 + pick);
}

/*
 * One request, as an engine does it: match the prompt against the local
 * tree and then the arbiter, reserve pages for the rest and for the
 * tokens it will generate, prefill what was not cached, decode, and hand
 * the request to the cache when it finishes (which PUBLISHes the new full
 * pages, or swaps in another process's identical ones).
 */
static int serve_one(struct worker *w, unsigned int r)
{
	const struct opts *o = w->o;
	const uint32_t n_prompt = o->system_tokens + o->doc_tokens + o->question_tokens;
	/* KV is written for all but the last generated token, never fed back. */
	const uint32_t n_kv = n_prompt + o->gen_tokens - 1;
	struct kv_radix_req req = { .tokens = w->tokens };
	struct model_seq seq = {
		.pool_base = kv_page_addr(w->pool, 0),
		.pool_pages = kv_pool_info(w->pool)->n_pages, .pages = w->pages,
	};
	uint32_t indptr[2], seq_len, next, i;
	uint64_t t0, t1;
	long matched, n;
	int ret;

	prompt(o, w->tokens, w->id * 1000003ull + r + o->seed);
	req.slot = kv_req_alloc(w->rt);
	if (req.slot < 0)
		return req.slot;
	/* The last prompt token is always computed: its logits pick the first new token. */
	matched = kv_prefix_match(w->cache, w->rt, &req, n_prompt - 1);
	if (matched < 0) {
		kv_req_free(w->rt, req.slot);
		return matched;
	}
	ret = kv_prefix_reserve(w->cache, w->rt, &req, n_kv);
	n = ret ? ret : kv_req_table_csr(w->rt, &req.slot, 1, indptr, w->pages,
					  w->max_pages, &seq_len);
	if (n < 0) {
		kv_prefix_abort(w->cache, w->rt, &req);
		return n;
	}
	seq.n_pages = n;

	t0 = now_ns();
	ret = model_prefill(w->model, &seq, w->tokens, matched, n_prompt - matched, &next);
	t1 = now_ns();
	for (i = n_prompt; !ret && i < n_kv; i++) {
		w->tokens[i] = next;
		ret = model_decode(w->model, &seq, next, i, &next);
	}
	w->tokens[n_kv] = next;
	w->t.prefill_ns += t1 - t0;
	w->t.decode_ns += now_ns() - t1;
	w->t.prefill_tokens += n_prompt - matched;
	w->t.decode_tokens += o->gen_tokens - 1;
	if (!ret && o->verify && r % o->verify == 0) {
		ret = verify(w, &seq, n_prompt, n_kv);
		if (ret == -EIO)
			w->t.mismatches++;
	}
	if (ret) {
		kv_prefix_abort(w->cache, w->rt, &req);
		return ret;
	}
	req.n_tokens = n_kv;
	ret = kv_prefix_cache_finished(w->cache, w->rt, &req);
	w->t.requests++;
	w->t.prompt_tokens += n_prompt;
	w->t.page_tokens += n_prompt / w->geom->tokens_per_page * w->geom->tokens_per_page;
	return ret;
}

/*
 * kv_pool_open() failed: names are scoped by owner, so say whose pool was
 * looked for (libkv's default owner; $KVSHARE_POOL_OWNER picks another).
 */
static void pool_open_err(const struct opts *o, unsigned int id, int ret)
{
	const char *env = getenv("KVSHARE_POOL_OWNER");
	struct kv_arbiter *arb;
	uint32_t owner;

	if (ret == -EINVAL && env && *env && kv_uid_parse(env, &owner)) {
		fprintf(stderr, "kvserve: worker %u: $KVSHARE_POOL_OWNER '%s' is "
			"neither a uid nor a known user\n", id, env);
		return;
	}
	if (ret == -ENOENT && !kv_arbiter_open(o->arbiter, KV_ARBITER_NO_URING, &arb)) {
		if (!kv_arbiter_default_owner(arb, &owner)) {
			fprintf(stderr, "kvserve: worker %u: no pool '%s' owned by uid %u "
				"(KVSHARE_POOL_OWNER names another owner)\n", id,
				o->pool, owner);
			kv_arbiter_close(arb);
			return;
		}
		kv_arbiter_close(arb);
	}
	fprintf(stderr, "kvserve: worker %u: pool '%s': %s\n", id, o->pool,
		strerror(-ret));
}

/*
 * --memory cuda: the pool must be device memory (kvshared's memory=cuda),
 * mapped by libkv through the CUDA driver.  On the driver stand-in of the
 * tests (tests/gpu/cudastub) that mapping is host memory underneath, and
 * the model's attention, libkv's C reference, reads and writes it in
 * place: the CUDA kernels cannot run there.  On a real GPU the mapping is
 * device memory the CPU cannot touch: the model would have to run its
 * attention through kv_attn_*_cuda() (fp16/bf16 tensors on the device,
 * checked against the C reference within its tolerances rather than to the
 * bit), which is not written yet, so kvserve refuses there and says so.
 */
static int memory_check(const struct opts *o, const struct worker *w)
{
	int dev = kv_pool_is_device(w->pool);

	if (dev != o->cuda) {
		fprintf(stderr, "kvserve: worker %u: pool '%s' is %s memory: run with "
			"--memory %s\n", w->id, o->pool, dev ? "device (CUDA)" : "host",
			dev ? "cuda" : "host");
		return -EINVAL;
	}
	if (dev && kv_cuda_driver() != 0) {
		fprintf(stderr, "kvserve: worker %u: pool '%s' is mapped on a real GPU; "
			"kvserve's model computes on the CPU and its CUDA attention path "
			"is not written yet (docs/gpu.md)\n", w->id, o->pool);
		return -EOPNOTSUPP;
	}
	return 0;
}

static int worker_setup(struct worker *w)
{
	const struct opts *o = w->o;
	const uint32_t n_all = o->system_tokens + o->doc_tokens + o->question_tokens +
			       o->gen_tokens;
	struct kv_prefix_config cfg = { .salt = o->salt, .salt_len = strlen(o->salt) };
	const struct kvs_pool_attach *info;
	int ret;

	ret = kv_pool_open(o->arbiter, o->pool, 0, 0, &w->pool);
	if (ret) {
		pool_open_err(o, w->id, ret);
		return ret;
	}
	info = kv_pool_info(w->pool);
	ret = memory_check(o, w);
	if (ret)
		return ret;
	w->geom = &info->geom;
	w->max_pages = n_all / w->geom->tokens_per_page + 1;
	ret = model_create(&info->geom, o->q_heads, o->model_seed, n_all, &w->model);
	if (ret == -EINVAL) {
		fprintf(stderr, "kvserve: --q-heads %u does not fit pool '%s' (%u KV heads of "
			"dim %u, %s): it must be a multiple of the KV heads\n", o->q_heads,
			o->pool, info->geom.n_kv_heads, info->geom.head_dim,
			"the attention code takes fp16, bf16 and fp32");
		return ret;
	}
	if (!ret)
		ret = kv_prefix_create(kv_pool_arbiter(w->pool), info, &cfg, &w->cache);
	if (!ret)
		ret = kv_req_table_create(1, n_all, w->geom->tokens_per_page, &w->rt);
	w->tokens = calloc(n_all, sizeof(*w->tokens));
	w->pages = calloc(w->max_pages, sizeof(*w->pages));
	w->scratch_pages = calloc(w->max_pages, sizeof(*w->scratch_pages));
	w->hidden = calloc((size_t)o->q_heads * info->geom.head_dim, sizeof(float));
	w->scratch = o->verify ? malloc((size_t)w->max_pages * info->geom.page_bytes) : NULL;
	if (!ret && (!w->tokens || !w->pages || !w->scratch_pages || !w->hidden ||
		     (o->verify && !w->scratch)))
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
	model_destroy(w->model);
	kv_pool_close(w->pool);
	free(w->tokens);
	free(w->pages);
	free(w->scratch_pages);
	free(w->hidden);
	free(w->scratch);
	return ret;
}

static void usage(FILE *f)
{
	fputs("usage: kvserve [--arbiter PATH] [--pool NAME] [--workers N] [--requests R]\n"
	      "               [--system-tokens S] [--doc-tokens D] [--docs K]\n"
	      "               [--question-tokens Q] [--q-heads H] [--gen-tokens G]\n"
	      "               [--verify V] [--model-seed M] [--salt STR] [--seed N]\n"
	      "               [--memory host|cuda]\n\n"
	      "N worker processes each serve R prompts of S shared system-prompt tokens,\n"
	      "D tokens of one of K shared documents and Q unique tokens, and generate G\n"
	      "tokens each, with a small random-weight transformer of H query heads over\n"
	      "pool NAME's geometry, sharing prefix KV pages through the arbiter (libkv\n"
	      "picks the module or the daemon unless --arbiter names one).  Every V'th\n"
	      "request of a worker (0: none) is recomputed from scratch and compared to\n"
	      "the bit.  The model's weights come from M; the block keys' salt names\n"
	      "the model (M and H) unless --salt replaces it.  --seed picks the texts.\n"
	      "--memory cuda: the pool is GPU memory (kvshared memory=cuda); today only\n"
	      "on the tests' CUDA driver stand-in, where attention is the C reference.\n"
	      "Defaults: 4 workers x 24 requests, 1024 + 2048 of 4 + 96 tokens, 4 q\n"
	      "heads, 8 generated tokens, --verify 4, seeds 1.\n", f);
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option longs[] = {
		{ "arbiter", 1, NULL, 'a' }, { "pool", 1, NULL, 'p' },
		{ "workers", 1, NULL, 'w' }, { "requests", 1, NULL, 'r' },
		{ "system-tokens", 1, NULL, 's' }, { "doc-tokens", 1, NULL, 'd' },
		{ "docs", 1, NULL, 'k' }, { "question-tokens", 1, NULL, 'q' },
		{ "q-heads", 1, NULL, 'H' }, { "gen-tokens", 1, NULL, 'g' },
		{ "verify", 1, NULL, 'v' },
		{ "salt", 1, NULL, 'S' }, { "seed", 1, NULL, 'x' },
		{ "model-seed", 1, NULL, 'm' }, { "memory", 1, NULL, 'M' },
		{ "help", 0, NULL, 'h' }, { NULL, 0, NULL, 0 },
	};
	unsigned int *nums[128] = {
		['w'] = &o->workers, ['r'] = &o->requests, ['s'] = &o->system_tokens,
		['d'] = &o->doc_tokens, ['k'] = &o->docs, ['q'] = &o->question_tokens,
		['H'] = &o->q_heads, ['g'] = &o->gen_tokens, ['v'] = &o->verify,
	};
	int c, idx = 0;

	while ((c = getopt_long(argc, argv, "", longs, &idx)) != -1) {
		char *end;
		unsigned long v;

		switch (c) {
		case 'a': o->arbiter = optarg; continue;
		case 'p': o->pool = optarg; continue;
		case 'S': o->salt = optarg; continue;
		case 'M':
			if (strcmp(optarg, "host") && strcmp(optarg, "cuda")) {
				fprintf(stderr, "kvserve: --memory: '%s' is neither host "
					"nor cuda\n", optarg);
				return -1;
			}
			o->cuda = !strcmp(optarg, "cuda");
			continue;
		case 'h': usage(stdout); exit(0);
		case 'x':
		case 'm':
			*(c == 'x' ? &o->seed : &o->model_seed) = strtoull(optarg, &end, 0);
			if (*end || !*optarg || *optarg == '-')
				goto bad_seed;
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
	if (!o->workers || !o->requests || !o->docs || !o->q_heads || !o->gen_tokens ||
	    !(o->system_tokens + o->doc_tokens + o->question_tokens)) {
		fprintf(stderr, "kvserve: workers, requests, docs, q heads, generated tokens "
			"and the prompt length must not be 0\n");
		return -1;
	}
	if ((uint64_t)o->system_tokens + o->doc_tokens + o->question_tokens +
	    o->gen_tokens > 1000000) {
		fprintf(stderr, "kvserve: a prompt and its generated tokens must not pass "
			"1000000 tokens\n");
		return -1;
	}
	/* Block keys must name the model: another model's KV is not ours. */
	if (!o->salt) {
		snprintf(o->default_salt, sizeof(o->default_salt),
			 "kvserve:model-seed=%llu,q-heads=%u",
			 (unsigned long long)o->model_seed, o->q_heads);
		o->salt = o->default_salt;
	}
	return 0;
bad_seed:
	fprintf(stderr, "kvserve: --%s: '%s' is not a number in 0..2^64-1\n",
		longs[idx].name, optarg);
	return -1;
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
	sum->verified_requests += t->verified_requests;
	sum->mismatches += t->mismatches;
	sum->errors += t->errors;
	sum->prefill_tokens += t->prefill_tokens;
	sum->decode_tokens += t->decode_tokens;
	sum->prefill_ns += t->prefill_ns;
	sum->decode_ns += t->decode_ns;
	sum->verify_prefill_ns += t->verify_prefill_ns;
	if (t->ns > sum->ns)
		sum->ns = t->ns;
}

/*
 * The pool's own view, with its invariants checked.  The check walks every
 * page under the pool lock, so only an admin may ask for it: anyone else
 * gets the counters alone and *checked is false.
 */
static int pool_report(const struct opts *o, struct kvs_pool_stats *st,
		       struct kvs_geometry *geom, bool *checked)
{
	struct kvs_pool_attach info = { 0 };
	struct kv_arbiter *arb;
	int ret;

	ret = kv_arbiter_open(o->arbiter, KV_ARBITER_NO_URING, &arb);
	if (ret)
		return ret;
	ret = kv_arbiter_attach(arb, o->pool, 0, &info);
	*geom = info.geom;
	memset(st, 0, sizeof(*st));
	st->flags = KVS_STATS_CHECK;
	*checked = true;
	if (!ret)
		ret = kv_arbiter_call(arb, KVS_IOC_POOL_STATS, st);
	if (ret == -EPERM) {
		memset(st, 0, sizeof(*st));
		*checked = false;
		ret = kv_arbiter_call(arb, KVS_IOC_POOL_STATS, st);
	}
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

static const char *dtype_name(uint32_t dtype)
{
	return dtype == KVS_DTYPE_BF16 ? "bf16" : dtype == KVS_DTYPE_F16 ? "fp16" :
	       dtype == KVS_DTYPE_F32 ? "fp32" : "?";
}

static double per(uint64_t ns, uint64_t n, double unit)
{
	return n ? ns / unit / n : 0.0;
}

static void report(const struct opts *o, const struct tally *sum,
		   const struct kvs_geometry *g)
{
	uint64_t hits = sum->local_hit_pages + sum->remote_hit_pages;
	uint32_t tpp = g->tokens_per_page;
	double scratch = per(sum->verify_prefill_ns, sum->verified_requests, 1e6);
	double served = per(sum->prefill_ns, sum->requests, 1e6);

	printf("kvserve: %u workers x %u requests, prompts of %u tokens "
	       "(%u system + %u of %u documents + %u unique), %u generated\n",
	       o->workers, o->requests, o->system_tokens + o->doc_tokens + o->question_tokens,
	       o->system_tokens, o->doc_tokens, o->docs, o->question_tokens, o->gen_tokens);
	printf("  model                  %u layers, %u q heads over %u KV heads of dim %u, "
	       "%s pages; attention: libkv C reference (%s)\n", g->n_layers, o->q_heads,
	       g->n_kv_heads, g->head_dim, dtype_name(g->dtype), kv_attn_ref_isa());
	if (o->cuda)
		printf("  memory                 cuda: the pool was imported and mapped "
		       "through the CUDA driver STAND-IN (tests only, host memory "
		       "underneath); attention ran the C reference on that mapping, "
		       "not the CUDA kernels\n");
	printf("  requests served        %llu\n", (unsigned long long)sum->requests);
	printf("  prompt tokens          %llu (%llu in full pages)\n",
	       (unsigned long long)sum->prompt_tokens, (unsigned long long)sum->page_tokens);
	printf("  pages from the cache   %llu (%.1f%% of full pages): %llu from the "
	       "worker's own tree, %llu found through the arbiter\n",
	       (unsigned long long)hits,
	       sum->page_tokens ? 100.0 * hits * tpp / sum->page_tokens : 0.0,
	       (unsigned long long)sum->local_hit_pages,
	       (unsigned long long)sum->remote_hit_pages);
	printf("  pages computed         %llu (+%llu computed twice in a race, "
	       "deduplicated at PUBLISH)\n",
	       (unsigned long long)sum->computed_pages, (unsigned long long)sum->dup_pages);
	printf("  pages evicted locally  %llu\n", (unsigned long long)sum->evicted_pages);
	printf("  prefill                %llu of %llu prompt tokens computed (%.1f%%), "
	       "%.2f ms a request\n", (unsigned long long)sum->prefill_tokens,
	       (unsigned long long)sum->prompt_tokens,
	       sum->prompt_tokens ? 100.0 * sum->prefill_tokens / sum->prompt_tokens : 0.0,
	       served);
	printf("  decode                 %llu tokens, %.1f us a token\n",
	       (unsigned long long)sum->decode_tokens,
	       per(sum->decode_ns, sum->decode_tokens, 1e3));
	printf("  verified               %llu requests recomputed from scratch, equal to "
	       "the bit: %llu bytes of KV, every token, the final state\n",
	       (unsigned long long)sum->verified_requests,
	       (unsigned long long)sum->verified_bytes);
	if (sum->verified_requests && served > 0)
		printf("  from-scratch prefill   %.2f ms a request: %.1fx the served "
		       "prefill's time\n", scratch, scratch / served);
	printf("  wall time              %.1f ms (slowest worker)\n", sum->ns / 1e6);
}

int main(int argc, char **argv)
{
	struct opts o = {
		.pool = "kvserve", .workers = 4, .requests = 24,
		.system_tokens = 1024, .doc_tokens = 2048, .docs = 4,
		.question_tokens = 96, .q_heads = 4, .gen_tokens = 8, .verify = 4, .seed = 1,
		.model_seed = 1,
	};
	struct kvs_geometry geom = { 0 };
	struct kvs_pool_stats st;
	struct tally sum = { 0 };
	bool checked = false;
	int ret, check;

	if (parse(argc, argv, &o))
		return 2;
	ret = spawn(&o, &sum);
	check = pool_report(&o, &st, &geom, &checked);
	report(&o, &sum, &geom);
	if (!check)
		printf("  pool                   %llu cached, %llu shared, %llu free, "
		       "%llu evictions; %s\n",
		       (unsigned long long)st.n_cached, (unsigned long long)st.n_shared,
		       (unsigned long long)st.n_free, (unsigned long long)st.evictions,
		       checked ? "invariants hold" :
		       "invariants not checked (the check is an admin's)");
	else
		printf("  pool                   check failed: %s\n", strerror(-check));

	if (ret || check || sum.mismatches || sum.errors) {
		fprintf(stderr, "kvserve: FAILED: %llu requests differ from a recompute, "
			"%llu request errors%s%s\n",
			(unsigned long long)sum.mismatches, (unsigned long long)sum.errors,
			ret ? ", a worker failed" : "", check ? ", pool check failed" : "");
		return 1;
	}
	return 0;
}
