// SPDX-License-Identifier: GPL-2.0
/*
 * kvbench radix: the local prefix cache's costs, no arbiter involved.
 *
 *   match_prefix and insert, in ns per page of the prompt, for prompts of
 *   1k, 32k and 128k tokens against trees holding 10k and 1M tokens;
 *   eviction, in ns per page and pages per second;
 *   block hashing of a 50k-token prompt: SHA-256 v1 and v2 and the XXH3
 *   fast mode, each beside its floor, the SHA-256 compression-function
 *   calls it makes times the cost of one call measured in the same run
 *   (a chain of calls, each on the last one's output, as keys chain).
 *
 * The tree: one long "conversation" of T = min(128k, cached / 2) tokens,
 * plus 2k-token prompts that share its first 1k tokens (a system prompt)
 * and add 1k of their own, until the tree holds the cached size.  So the
 * root has one child, the system prompt, with ~cached/1k children.  A
 * prompt of L tokens is the conversation's first min(L, T) tokens, then new
 * ones: at 1M cached every prompt is a full hit, at 10k the 32k and 128k
 * prompts hit 5k tokens.  "warm" repeats the call with everything in
 * cache; "cold" first streams 64 MiB through the caches, as a scheduler
 * meeting the tree again after a forward pass would.
 */
#include "kvbench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvshare/blockhash.h>
#include <kvshare/radix.h>

#define SYS_TOKENS	1024
#define BRANCH_TOKENS	1024
#define MAX_CONV	(128 * 1024)
#define FLUSH_BYTES	(64u << 20)
#define HASH_TOKENS	50000
#define MATCH_GOAL_US	10.0
#define HASH_GOAL_US	200.0

#define COMPRESS_CALLS	4096

struct ropts {
	uint32_t tpp;
	uint32_t reps;
	int hash_only;
};

static const uint32_t prompts[] = { 1024, 32 * 1024, 128 * 1024 };
static const uint32_t trees[] = { 10 * 1000, 1000 * 1000 };

static uint64_t released;

static void count_release(void *priv, const uint32_t *pages, uint32_t n,
			  unsigned int flags)
{
	(void)priv;
	(void)pages;
	(void)flags;
	released += n;
}

/* Token ids of text @stream: deterministic, spread like a vocabulary. */
static void text(uint32_t *out, size_t n, uint64_t stream)
{
	size_t i;

	for (i = 0; i < n; i++)
		out[i] = (uint32_t)(bench_mix64(stream * 0x100000001b3ull + i) % 128000);
}

struct world {
	uint32_t tpp;
	uint32_t *conv;			/* the conversation, MAX_CONV tokens */
	uint32_t conv_len;		/* T */
	uint32_t *buf;			/* a prompt being built */
	uint32_t *pages;		/* page values and match output */
	uint32_t next_page;
};

static long insert(struct kv_radix *t, struct world *w, const uint32_t *tok,
		   size_t n)
{
	size_t i;

	for (i = 0; i < n / w->tpp; i++)
		w->pages[i] = w->next_page + i;
	w->next_page += n / w->tpp;
	return kv_radix_insert(t, tok, n, w->pages, 0, NULL);
}

/* The tree of the header comment, holding about @cached tokens. */
static struct kv_radix *build(struct world *w, uint32_t cached)
{
	struct kv_radix_ops ops = { .release = count_release };
	struct kv_radix *t;
	uint64_t k = 0;

	if (kv_radix_create(w->tpp, &ops, &t))
		return NULL;
	w->conv_len = cached / 2 < MAX_CONV ? cached / 2 : MAX_CONV;
	w->next_page = 0;
	insert(t, w, w->conv, w->conv_len);
	memcpy(w->buf, w->conv, SYS_TOKENS * sizeof(*w->buf));
	while (kv_radix_total_pages(t) * w->tpp + BRANCH_TOKENS <= cached) {
		text(w->buf + SYS_TOKENS, BRANCH_TOKENS, 1000 + k++);
		if (insert(t, w, w->buf, SYS_TOKENS + BRANCH_TOKENS) < 0)
			break;
	}
	return t;
}

/* A prompt of @len tokens: the conversation's start, then new text. */
static void make_prompt(struct world *w, uint32_t len, uint32_t shared, uint64_t salt)
{
	if (shared > w->conv_len)
		shared = w->conv_len;
	if (shared > len)
		shared = len;
	memcpy(w->buf, w->conv, shared * sizeof(*w->buf));
	text(w->buf + shared, len - shared, 0xabc000 + salt);
}

static void flush_caches(void)
{
	static volatile unsigned char *junk;
	size_t i;

	if (!junk)
		junk = calloc(1, FLUSH_BYTES);
	for (i = 0; junk && i < FLUSH_BYTES; i += 64)
		junk[i]++;
}

/* Median ns of one match_prefix of the prompt in w->buf. */
static double time_match(struct kv_radix *t, struct world *w, uint32_t len,
			 uint32_t reps, int cold, size_t *hit)
{
	uint64_t *s = calloc(reps, sizeof(*s)), t0, med;
	struct kv_radix_match m = { 0 };
	uint32_t r, i, inner = cold ? 1 : 1 + 256 * 1024 / len;

	kv_radix_match_prefix(t, w->buf, len, w->pages, &m);	/* splits once */
	for (r = 0; r < reps; r++) {
		if (cold)
			flush_caches();
		t0 = bench_now_ns();
		for (i = 0; i < inner; i++)
			kv_radix_match_prefix(t, w->buf, len, w->pages, &m);
		s[r] = (bench_now_ns() - t0) / inner;
	}
	*hit = m.len;
	med = bench_median(s, reps);
	free(s);
	return (double)med;
}

/* Median ns of inserting a prompt sharing half its length, on a fresh tree. */
static double time_insert(struct world *w, uint32_t cached, uint32_t len,
			  uint32_t reps)
{
	uint64_t *s = calloc(reps, sizeof(*s)), t0, med;
	struct kv_radix *t;
	uint32_t r;

	for (r = 0; r < reps; r++) {
		t = build(w, cached);
		make_prompt(w, len, len / 2, r);
		t0 = bench_now_ns();
		insert(t, w, w->buf, len);
		s[r] = bench_now_ns() - t0;
		kv_radix_destroy(t);
	}
	med = bench_median(s, reps);
	free(s);
	return (double)med;
}

/* Median ns per page of evicting a whole 1M-token tree, 64 pages a call. */
static double time_evict(struct world *w, uint32_t cached, uint32_t reps,
			 uint64_t *pages)
{
	uint64_t *s = calloc(reps, sizeof(*s)), t0, med;
	struct kv_radix *t;
	uint32_t r;

	for (r = 0; r < reps; r++) {
		t = build(w, cached);
		*pages = kv_radix_total_pages(t);
		t0 = bench_now_ns();
		while (kv_radix_evict(t, 64))
			;
		s[r] = bench_now_ns() - t0;
		kv_radix_destroy(t);
	}
	med = bench_median(s, reps);
	free(s);
	return (double)med / (*pages ? *pages : 1);
}

/* The functions kvbench times, in the order it prints them. */
static const struct {
	unsigned int algo;
	const char *name;
} hash_fns[] = {
	{ KV_HASH_SHA256_V1, "sha256 v1" },
	{ KV_HASH_SHA256_V2, "sha256 v2 (default)" },
	{ KV_HASH_XXH3, "xxh3 (fast)" },
};
#define N_HASH_FNS (sizeof(hash_fns) / sizeof(hash_fns[0]))

struct hash_times {
	double ns[N_HASH_FNS];		/* median ns of one 50k-token chain */
	long compressions[N_HASH_FNS];	/* SHA-256 compressions it makes */
	double compress_ns;		/* median ns of one compression */
};

/* ns of a chain of COMPRESS_CALLS compressions (whole ns of one would round). */
static uint64_t time_compress(void)
{
	uint32_t st[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, i;
	unsigned char blk[64] = { 0 };
	uint64_t t0;

	t0 = bench_now_ns();
	for (i = 0; i < COMPRESS_CALLS; i++) {
		blk[0] = (unsigned char)i;
		kv_sha256_compress(st, blk);
	}
	t0 = bench_now_ns() - t0;
	return t0 + (st[0] & 1);	/* st[0]: keep the chain live */
}

/*
 * The chains of the same prompt under each function and one compression,
 * taken in turn each repetition, so that a noisy neighbour slows all alike.
 */
static int time_hashes(uint32_t tpp, uint32_t reps, struct hash_times *out)
{
	uint32_t *tok = malloc(HASH_TOKENS * sizeof(*tok)), r, f;
	struct kvs_key *keys = malloc((HASH_TOKENS / tpp + 1) * sizeof(*keys));
	uint64_t *s = calloc((N_HASH_FNS + 1) * (size_t)reps, sizeof(*s)), t0;
	struct kv_block_hasher h[N_HASH_FNS];
	int ret = -1;

	if (!tok || !keys || !s)
		goto out;
	text(tok, HASH_TOKENS, 77);
	for (f = 0; f < N_HASH_FNS; f++) {
		if (kv_hasher_init_algo(&h[f], hash_fns[f].algo, "bench", 5, tpp))
			goto out;
		out->compressions[f] = kv_hash_compressions(&h[f], tok, HASH_TOKENS,
							    NULL, 0);
	}
	for (r = 0; r < reps; r++) {
		for (f = 0; f < N_HASH_FNS; f++) {
			t0 = bench_now_ns();
			kv_hash_chain(&h[f], NULL, tok, HASH_TOKENS, NULL, 0, keys);
			s[f * reps + r] = bench_now_ns() - t0;
		}
		s[N_HASH_FNS * reps + r] = time_compress();
	}
	for (f = 0; f < N_HASH_FNS; f++)
		out->ns[f] = (double)bench_median(s + f * reps, reps);
	out->compress_ns = (double)bench_median(s + N_HASH_FNS * reps, reps) /
			   COMPRESS_CALLS;
	ret = 0;
out:
	free(tok);
	free(keys);
	free(s);
	return ret;
}

/* The hashing table; returns v2's median us, or -1. */
static double print_hashes(const struct ropts *o)
{
	double pages = (double)(HASH_TOKENS / o->tpp), us;
	struct hash_times t;
	char floor[16];
	size_t f;

	if (time_hashes(o->tpp, o->reps, &t))
		return -1;
	printf("\n%-20s %8s %11s %10s %10s %10s\n", "hash chain", "tokens",
	       "compr/page", "us", "floor_us", "Mtokens/s");
	for (f = 0; f < N_HASH_FNS; f++) {
		if (t.compressions[f] > 0)
			snprintf(floor, sizeof(floor), "%.1f",
				 t.compressions[f] * t.compress_ns / 1e3);
		else
			snprintf(floor, sizeof(floor), "-");
		printf("%-20s %8u %11.2f %10.1f %10s %10.1f\n", hash_fns[f].name,
		       HASH_TOKENS, t.compressions[f] / pages, t.ns[f] / 1e3, floor,
		       t.ns[f] > 0 ? HASH_TOKENS * 1e3 / t.ns[f] : 0.0);
	}
	printf("# floor: compressions x %.2f ns, the median of one SHA-256 compression "
	       "(kv_sha256_compress,\n# %u chained calls) in the same run; "
	       "ratio v1/v2 %.2f, v2/xxh3 %.2f\n", t.compress_ns, COMPRESS_CALLS,
	       t.ns[1] > 0 ? t.ns[0] / t.ns[1] : 0.0,
	       t.ns[2] > 0 ? t.ns[1] / t.ns[2] : 0.0);
	us = t.ns[1] / 1e3;
	printf("# goal: SHA-256 (v2) chain of 50k tokens <= %.0f us: %.1f us (%s)\n",
	       HASH_GOAL_US, us, us <= HASH_GOAL_US ? "met" : "NOT met");
	return us;
}

static const char *size_name(uint32_t n, char *buf, size_t len)
{
	if (n >= 1000000 && n % 1000000 == 0)
		snprintf(buf, len, "%uM", n / 1000000);
	else if (n % 1024 == 0)
		snprintf(buf, len, "%uk", n / 1024);
	else if (n % 1000 == 0)
		snprintf(buf, len, "%uk", n / 1000);
	else
		snprintf(buf, len, "%u", n);
	return buf;
}

static void row(const char *op, uint32_t cached, uint32_t len, size_t hit,
		uint32_t tpp, double ns)
{
	char a[16], b[16];
	double pages = (double)len / tpp;

	printf("%-18s %7s %7s %8.0f %9zu %10.1f %10.2f\n", op,
	       size_name(cached, a, sizeof(a)), size_name(len, b, sizeof(b)),
	       pages, hit / tpp, ns / pages, ns / 1000.0);
}

static int run(const struct ropts *o)
{
	struct world w = { .tpp = o->tpp };
	double ns, match32k = -1;
	uint64_t ev_pages = 0;
	struct kv_radix *t;
	size_t ti, pi, hit;

	if (o->hash_only) {
		printf("# kvbench radix: tokens_per_page %u, median of %u repetitions\n",
		       o->tpp, o->reps);
		return print_hashes(o) < 0;
	}
	w.conv = malloc(MAX_CONV * sizeof(*w.conv));
	w.buf = malloc(2 * MAX_CONV * sizeof(*w.buf));
	w.pages = malloc((2 * MAX_CONV / o->tpp + 1) * sizeof(*w.pages));
	if (!w.conv || !w.buf || !w.pages)
		return 1;
	text(w.conv, MAX_CONV, 1);

	printf("# kvbench radix: tokens_per_page %u, median of %u repetitions\n"
	       "# tree: a conversation of min(128k, cached/2) tokens + 2k-token prompts "
	       "sharing its first 1k\n# prompt: the conversation's start, then new tokens\n",
	       o->tpp, o->reps);
	printf("%-18s %7s %7s %8s %9s %10s %10s\n", "op", "cached", "prompt",
	       "pages", "hit_pages", "ns/page", "us/call");
	for (ti = 0; ti < sizeof(trees) / sizeof(trees[0]); ti++) {
		t = build(&w, trees[ti]);
		if (!t)
			return 1;
		for (pi = 0; pi < sizeof(prompts) / sizeof(prompts[0]); pi++) {
			make_prompt(&w, prompts[pi], prompts[pi], 0);
			ns = time_match(t, &w, prompts[pi], o->reps, 0, &hit);
			row("match_prefix warm", trees[ti], prompts[pi], hit, o->tpp, ns);
			if (trees[ti] == 1000000 && prompts[pi] == 32 * 1024)
				match32k = ns;
			ns = time_match(t, &w, prompts[pi], o->reps, 1, &hit);
			row("match_prefix cold", trees[ti], prompts[pi], hit, o->tpp, ns);
		}
		kv_radix_destroy(t);
		for (pi = 0; pi < sizeof(prompts) / sizeof(prompts[0]); pi++) {
			ns = time_insert(&w, trees[ti], prompts[pi], o->reps);
			row("insert (half new)", trees[ti], prompts[pi],
			    prompts[pi] / 2 < w.conv_len ? prompts[pi] / 2 : w.conv_len,
			    o->tpp, ns);
		}
	}
	ns = time_evict(&w, 1000000, o->reps < 7 ? o->reps : 7, &ev_pages);
	printf("%-18s %7s %7s %8llu %9s %10.2f %10.1f  (%.0f M pages/s)\n",
	       "evict, 64 a call", "1M", "-", (unsigned long long)ev_pages, "-", ns,
	       ns * ev_pages / 1e3, ns > 0 ? 1e3 / ns : 0.0);

	printf("\n# goal: match_prefix of 32k tokens with 1M cached <= %.0f us: %.2f us (%s)\n",
	       MATCH_GOAL_US, match32k / 1e3, match32k / 1e3 <= MATCH_GOAL_US ? "met" : "NOT met");
	print_hashes(o);
	free(w.conv);
	free(w.buf);
	free(w.pages);
	return 0;
}

static void usage(FILE *f)
{
	fputs("usage: kvbench radix [--tokens-per-page N] [--reps R] [--hash-only]\n\n"
	      "The local radix tree and block hashing, in-process (no arbiter):\n"
	      "match_prefix (warm and cold caches) and insert in ns per page for\n"
	      "prompts of 1k, 32k and 128k tokens against trees of 10k and 1M\n"
	      "cached tokens, eviction of a 1M-token tree, and the SHA-256 (v1,\n"
	      "v2) and XXH3 chains of a 50k-token prompt beside their floor (the\n"
	      "SHA-256 compressions they make x one's cost, measured in the same\n"
	      "run).  --hash-only: the chains alone.  Default: 16 tokens per\n"
	      "page, median of 31 repetitions.\n", f);
}

int bench_radix_main(int argc, char **argv)
{
	struct ropts o = { .tpp = 16, .reps = 31 };
	int i;

	for (i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(argv[i], "--hash-only")) {
			o.hash_only = 1;
		} else if (i + 1 < argc && !strcmp(argv[i], "--tokens-per-page") &&
		    !bench_parse_u32(argv[i + 1], 1, 4096, &o.tpp)) {
			i++;
		} else if (i + 1 < argc && !strcmp(argv[i], "--reps") &&
			   !bench_parse_u32(argv[i + 1], 1, 100000, &o.reps)) {
			i++;
		} else {
			fprintf(stderr, "kvbench: radix: bad option '%s' "
				"(see kvbench radix --help)\n", argv[i]);
			return 2;
		}
	}
	return run(&o);
}
