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
 *   prefill the rest, one request at a time, in chunks (--prefill-chunk),
 *           with a small transformer (model.c) whose attention is libkv's
 *           paged C reference, reading the shared pages in place; PUBLISH
 *           each chunk's full pages at once (a duplicate: use the
 *           canonical), so that workers waiting for them in flight and
 *           requests that come while this one decodes find them;
 *   decode  greedily, all the requests a worker holds (--batch) together:
 *           one batched call of the paged decode kernel per layer and
 *           generated token; a finished request makes room for the next;
 *   finish  PUBLISH the generated tokens' full pages and PUT everything:
 *           the pages stay CACHED for the next one.
 *
 * --no-share serves the same requests without the arbiter: each worker
 * keeps its own prefix cache (a radix tree over private pages), as an
 * engine without kvshare does.  And when an arbiter call fails during the
 * run (a deadline passed, the daemon is gone), the worker serves that
 * request the same way, in private pages; after a lost connection every
 * later one too, and the requests it held in pool pages start over there.
 *
 * Every --verify'th request of a worker is recomputed from scratch in
 * private memory, alone (a batch of one), and compared to the bit: every
 * KV row of every layer in its pages (its own and other processes'), each
 * generated token and the final hidden state.  Shared memory, arbitration,
 * batching and the attention code are all on trial, and the recompute's
 * time is the cost sharing saved.  The outputs digest (tokens and final
 * states of every request) is the same with or without sharing, whatever
 * the batch: the model is deterministic to the bit.  With --memory cuda the
 * pages the CUDA kernels wrote are compared within tests/attn's tolerances
 * instead (the kernels sum in another order), layer 0's KV still to the bit.
 *
 * This file is the parent: the options, the workers' processes and the
 * start line that releases them together.  worker.c is one worker, from
 * its setup to its tally (below it, cache.c holds a request's pages and
 * verify.c checks a served request);
 * report.c adds the tallies up and prints the summary.  Both only ever
 * get called from here (kvserve.h).
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <kvshare/arbiter.h>

#include "kvserve.h"

static void usage(FILE *f)
{
	fputs("usage: kvserve [--arbiter PATH] [--pool NAME] [--workers N] [--requests R]\n"
	      "               [--system-tokens S] [--doc-tokens D] [--docs K]\n"
	      "               [--question-tokens Q] [--q-heads H] [--gen-tokens G]\n"
	      "               [--batch B] [--no-share] [--private-pages P]\n"
	      "               [--inflight-wait MS] [--burst] [--prefill-chunk C]\n"
	      "               [--memory host|cuda]\n"
	      "               [--verify V] [--model-seed M] [--salt STR] [--seed N]\n\n"
	      "N worker processes each serve R prompts of S shared system-prompt tokens,\n"
	      "D tokens of one of K shared documents and Q unique tokens, and generate G\n"
	      "tokens each, with a small random-weight transformer of H query heads over\n"
	      "pool NAME's geometry, sharing prefix KV pages through the arbiter (libkv\n"
	      "picks the module or the daemon unless --arbiter names one).  A worker\n"
	      "holds up to B requests: each is prefilled alone, and all are decoded\n"
	      "together, one batched call per generated token.  --no-share serves the\n"
	      "same requests without the arbiter: each worker caches its own prefixes\n"
	      "in P private pages (default: as many as the pool has, at least a\n"
	      "batch's worth).  When an arbiter call fails during the run (no room,\n"
	      "a deadline, the daemon gone), the worker serves that request in private\n"
	      "pages, and after a lost connection every later one too.\n"
	      "Every V'th request of a worker (0: none) is recomputed from scratch,\n"
	      "alone, and compared to the bit.  The model's weights come from M; the\n"
	      "block keys' salt names the model (M and H) unless --salt replaces it.\n"
	      "--seed picks the texts.  --inflight-wait MS: a worker that misses prompt\n"
	      "pages another worker is computing waits up to MS for them instead of\n"
	      "computing them too, and claims those it computes (in-flight dedupe;\n"
	      "default 2000, 0: off, every worker computes what it misses).\n"
	      "A prompt is prefilled in chunks of C tokens (whole pages; 0: at once),\n"
	      "each chunk's full pages cached and published as soon as computed.\n"
	      "The workers start serving together, once all are set up; with --burst\n"
	      "every worker's first request is on document 0, a burst of one new\n"
	      "prefix.  The summary gives time to first token (the first requests from\n"
	      "the common start, every request from when its worker took it).\n"
	      "--memory cuda: the pool is GPU memory (kvshared memory=cuda); attention on\n"
	      "it runs on the CUDA kernels (build/kvserve-cuda; build/kvserve has none),\n"
	      "checked against the C reference within tests/attn's tolerances.\n"
	      "Defaults: 4 workers x 24 requests, 1024 + 2048 of 4 + 96 tokens, 4 q\n"
	      "heads, 8 generated tokens, batches of 8, chunks of 512, --verify 4,\n"
	      "seeds 1.\n", f);
}

static const struct option longs[] = {
	{ "arbiter", 1, NULL, 'a' }, { "pool", 1, NULL, 'p' },
	{ "workers", 1, NULL, 'w' }, { "requests", 1, NULL, 'r' },
	{ "system-tokens", 1, NULL, 's' }, { "doc-tokens", 1, NULL, 'd' },
	{ "docs", 1, NULL, 'k' }, { "question-tokens", 1, NULL, 'q' },
	{ "q-heads", 1, NULL, 'H' }, { "gen-tokens", 1, NULL, 'g' },
	{ "verify", 1, NULL, 'v' }, { "batch", 1, NULL, 'b' },
	{ "private-pages", 1, NULL, 'P' }, { "no-share", 0, NULL, 'n' },
	{ "salt", 1, NULL, 'S' }, { "seed", 1, NULL, 'x' },
	{ "model-seed", 1, NULL, 'm' }, { "inflight-wait", 1, NULL, 'W' },
	{ "memory", 1, NULL, 'M' }, { "burst", 0, NULL, 'B' },
	{ "prefill-chunk", 1, NULL, 'C' },
	{ "help", 0, NULL, 'h' }, { NULL, 0, NULL, 0 },
};

/* The options that take a count, by their letter in longs[]. */
static unsigned int *count_opt(struct opts *o, int c)
{
	switch (c) {
	case 'w': return &o->workers;
	case 'r': return &o->requests;
	case 's': return &o->system_tokens;
	case 'd': return &o->doc_tokens;
	case 'k': return &o->docs;
	case 'q': return &o->question_tokens;
	case 'H': return &o->q_heads;
	case 'g': return &o->gen_tokens;
	case 'v': return &o->verify;
	case 'b': return &o->batch;
	case 'P': return &o->private_pages;
	case 'W': return &o->inflight_wait_ms;
	case 'C': return &o->prefill_chunk;
	}
	return NULL;
}

/* --seed and --model-seed: a number in 0..2^64-1.  0, or -1 said. */
static int parse_seed(const char *name, const char *arg, uint64_t *v)
{
	char *end;

	*v = strtoull(arg, &end, 0);
	if (*end || !*arg || *arg == '-') {
		fprintf(stderr, "kvserve: --%s: '%s' is not a number in 0..2^64-1\n", name,
			arg);
		return -1;
	}
	return 0;
}

/* A count: a number in 0..1000000.  0, or -1 said. */
static int parse_count(const char *name, const char *arg, unsigned int *v)
{
	unsigned long n;
	char *end;

	errno = 0;
	n = strtoul(arg, &end, 0);
	if (errno || *end || !*arg || n > 1000000) {
		fprintf(stderr, "kvserve: --%s: '%s' is not a number in 0..1000000\n", name,
			arg);
		return -1;
	}
	*v = n;
	return 0;
}

/* Option @c (longs[@idx]) with its argument, if any, in optarg.  0, or -1 said. */
static int parse_opt(struct opts *o, int c, int idx)
{
	switch (c) {
	case 'a': o->arbiter = optarg; return 0;
	case 'p': o->pool = optarg; return 0;
	case 'S': o->salt = optarg; return 0;
	case 'M':
		if (strcmp(optarg, "host") && strcmp(optarg, "cuda")) {
			fprintf(stderr, "kvserve: --memory: '%s' is neither host nor cuda\n",
				optarg);
			return -1;
		}
		o->cuda = !strcmp(optarg, "cuda");
		return 0;
	case 'n': o->no_share = true; return 0;
	case 'B': o->burst = true; return 0;
	case 'h': usage(stdout); exit(0);
	case 'x': return parse_seed(longs[idx].name, optarg, &o->seed);
	case 'm': return parse_seed(longs[idx].name, optarg, &o->model_seed);
	}
	if (!count_opt(o, c)) {
		usage(stderr);
		return -1;
	}
	return parse_count(longs[idx].name, optarg, count_opt(o, c));
}

/* What no single option can say wrong: zeros and sizes.  0, or -1 said. */
static int check_opts(const struct opts *o)
{
	if (!o->workers || !o->requests || !o->docs || !o->q_heads || !o->gen_tokens ||
	    !o->batch || !(o->system_tokens + o->doc_tokens + o->question_tokens)) {
		fprintf(stderr, "kvserve: workers, requests, docs, q heads, generated tokens, "
			"the batch and the prompt length must not be 0\n");
		return -1;
	}
	if (o->workers > 1024) {
		fprintf(stderr, "kvserve: --workers: at most 1024\n");
		return -1;
	}
	if ((uint64_t)o->system_tokens + o->doc_tokens + o->question_tokens +
	    o->gen_tokens > 1000000) {
		fprintf(stderr, "kvserve: a prompt and its generated tokens must not pass "
			"1000000 tokens\n");
		return -1;
	}
	return 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
	int c, idx = 0;

	while ((c = getopt_long(argc, argv, "", longs, &idx)) != -1)
		if (parse_opt(o, c, idx))
			return -1;
	if (optind < argc) {
		fprintf(stderr, "kvserve: unexpected argument '%s'\n", argv[optind]);
		return -1;
	}
	if (check_opts(o))
		return -1;
	/* Block keys must name the model: another model's KV is not ours. */
	if (!o->salt) {
		snprintf(o->default_salt, sizeof(o->default_salt),
			 "kvserve:model-seed=%llu,q-heads=%u",
			 (unsigned long long)o->model_seed, o->q_heads);
		o->salt = o->default_salt;
	}
	return 0;
}

/* Wait until every worker is ready or gone, then release them all at once. */
static void release(const struct opts *o, struct results *res, int ready, int go)
{
	unsigned int n = 0;
	char buf[64];
	ssize_t got;

	while (n < o->workers) {
		got = read(ready, buf, sizeof(buf));
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		n += got;
	}
	*res->go_ns = now_ns();
	close(go);
	close(ready);
}

static int spawn(const struct opts *o, struct results *res, struct tally *sum)
{
	unsigned int i, failed = 0;
	int ready[2], go[2];
	pid_t *pids;

	pids = calloc(o->workers, sizeof(*pids));
	if (!pids)
		return -ENOMEM;
	if (pipe(ready) || pipe(go)) {
		perror("kvserve: pipe");
		free(pids);
		return -errno;
	}
	for (i = 0; i < o->workers; i++) {
		pid_t pid = fork();

		if (pid < 0) {
			failed++;
			break;
		}
		if (!pid) {
			close(ready[0]);
			close(go[1]);
			_exit(worker_main(o, i, res, ready[1], go[0]) ? 2 : 0);
		}
		pids[i] = pid;
	}
	close(ready[1]);
	close(go[0]);
	release(o, res, ready[0], go[1]);
	for (i = 0; i < o->workers && pids[i]; i++) {
		int st;

		if (waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			failed++;
		else
			tally_add(sum, &res->t[i]);
	}
	free(pids);
	return failed ? -ECHILD : 0;
}

/* The pool's size and geometry, before the workers start. */
static int pool_geometry(const struct opts *o, struct kvs_pool_attach *info)
{
	struct kv_arbiter *arb;
	int ret;

	ret = kv_arbiter_open(o->arbiter, KV_ARBITER_NO_URING, &arb);
	if (ret)
		return ret;
	ret = kv_arbiter_attach(arb, o->pool, 0, info);
	kv_arbiter_close(arb);
	return ret;
}

int main(int argc, char **argv)
{
	struct opts o = {
		.pool = "kvserve", .workers = 4, .requests = 24,
		.system_tokens = 1024, .doc_tokens = 2048, .docs = 4,
		.question_tokens = 96, .q_heads = 4, .gen_tokens = 8, .verify = 4, .seed = 1,
		.model_seed = 1, .batch = 8, .prefill_chunk = 512, .inflight_wait_ms = 2000,
	};
	struct kvs_pool_attach info = { 0 };
	struct kvs_pool_stats st;
	struct tally sum = { 0 };
	struct results res = { 0 };
	bool checked = false;
	size_t bytes;
	void *mem;
	int ret, check;

	if (parse(argc, argv, &o))
		return 2;
	ret = pool_geometry(&o, &info);
	if (ret) {
		pool_open_err(&o, 0, ret);
		return 1;
	}
	res.pool_pages = info.n_pages;
	res.words = (info.n_pages + 63) / 64;
	bytes = o.workers * (sizeof(struct tally) + 2 * res.words * sizeof(uint64_t) +
			     (size_t)o.requests * sizeof(uint64_t)) + sizeof(uint64_t);
	mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		perror("kvserve: mmap");
		return 1;
	}
	res.t = mem;
	res.bitmaps = (uint64_t *)(res.t + o.workers);
	res.ttft = res.bitmaps + 2 * o.workers * res.words;
	res.go_ns = res.ttft + (size_t)o.workers * o.requests;
	ret = spawn(&o, &res, &sum);
	/* A worker found the arbiter gone: do not wait on it here either. */
	check = sum.arbiter_gone ? sum.arbiter_gone : pool_stats(&o, &st, &checked);
	report(&o, &res, &sum, &info.geom);
	report_time(&o, &res, &sum);
	report_pool(check, &sum, &st, checked);
	if (sum.arbiter_gone)
		check = 0;

	if (ret || check || sum.mismatches || sum.errors) {
		fprintf(stderr, "kvserve: FAILED: %llu requests differ from a recompute, "
			"%llu request errors%s%s\n",
			(unsigned long long)sum.mismatches, (unsigned long long)sum.errors,
			ret ? ", a worker failed" : "", check ? ", pool check failed" : "");
		return 1;
	}
	return 0;
}
