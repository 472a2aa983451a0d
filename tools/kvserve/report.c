// SPDX-License-Identifier: GPL-2.0
/*
 * kvserve's summary on stdout: the workers' tallies added up, what sharing
 * did, where the time went, time to first token, and the pool's own view
 * with its invariants checked.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvshare/arbiter.h>
#include <kvshare/attn.h>

#include "kvserve.h"
#include "model.h"
#include "tolerance.h"

void tally_add(struct tally *sum, const struct tally *t)
{
	const uint64_t *a = (const uint64_t *)t;
	uint64_t *s = (uint64_t *)sum;
	struct tally was = *sum;
	size_t i;

	/* Every field is a count to add up but these five. */
	for (i = 0; i < sizeof(*t) / sizeof(uint64_t); i++)
		s[i] += a[i];
	sum->start_ns = was.start_ns && was.start_ns < t->start_ns ? was.start_ns : t->start_ns;
	sum->end_ns = was.end_ns > t->end_ns ? was.end_ns : t->end_ns;
	sum->arbiter_gone = was.arbiter_gone ? was.arbiter_gone : t->arbiter_gone;
	sum->digest = was.digest ^ t->digest;
	for (i = 0; i < 4; i++)
		sum->tol_err[i] = was.tol_err[i] > t->tol_err[i] ? was.tol_err[i] : t->tol_err[i];
}

/*
 * The pool's own view, with its invariants checked.  The check walks every
 * page under the pool lock, so only an admin may ask for it: anyone else
 * gets the counters alone and *checked is false.
 */
int pool_stats(const struct opts *o, struct kvs_pool_stats *st, bool *checked)
{
	struct kvs_pool_attach info = { 0 };
	struct kv_arbiter *arb;
	int ret;

	ret = kv_arbiter_open(o->arbiter, KV_ARBITER_NO_URING, &arb);
	if (ret)
		return ret;
	ret = kv_arbiter_attach(arb, o->pool, 0, &info);
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

/* Pool pages some worker held at its end (@which 1: prompt prefixes only), each once. */
static uint64_t distinct(const struct opts *o, const struct results *res, unsigned int which)
{
	uint64_t n = 0, m;
	unsigned int i;
	size_t wd;

	for (wd = 0; wd < res->words; wd++) {
		for (m = 0, i = 0; i < o->workers; i++)
			m |= res->bitmaps[(2 * i + which) * res->words + wd];
		n += __builtin_popcountll(m);
	}
	return n;
}

/* The pool's dtype as kvshared's configuration spells it (kv_layout.h). */
static const char *dtype_name(uint32_t dtype)
{
	const struct kv_dtype_name *d = kv_dtype_by_id(dtype);

	return d ? d->name : "?";
}

static double per(uint64_t ns, uint64_t n, double unit)
{
	return n ? ns / unit / n : 0.0;
}

/* The workload, the model and whether pages are shared. */
static void report_setup(const struct opts *o, const struct kvs_geometry *g)
{
	printf("kvserve: %u workers x %u requests, prompts of %u tokens "
	       "(%u system + %u of %u documents + %u unique), %u generated\n",
	       o->workers, o->requests, o->system_tokens + o->doc_tokens + o->question_tokens,
	       o->system_tokens, o->doc_tokens, o->docs, o->question_tokens, o->gen_tokens);
	printf("  model                  %u layers, %u q heads over %u KV heads of dim %u, "
	       "%s pages; attention: libkv C reference (%s)%s\n", g->n_layers, o->q_heads,
	       g->n_kv_heads, g->head_dim, dtype_name(g->dtype), kv_attn_ref_isa(),
	       o->cuda ? " for private pages and the recompute" : "");
	if (o->cuda) {
		char name[256];
		int drv = kv_cuda_driver();

		printf("  memory                 cuda: the pool was imported and mapped through "
		       "%s\n", drv == 1 ? "the CUDA driver" : "the CUDA driver STAND-IN "
		       "(tests only, host memory underneath)");
		printf("  attention on the pool  %s\n", model_attn_cuda_name(drv, name,
									   sizeof(name)));
	}
	if (o->no_share)
		printf("  sharing                none (--no-share): each worker caches its own "
		       "prefixes in private pages\n");
	else
		printf("  sharing                prefix pages through the arbiter\n");
}

/* What the caches did: pages found, computed, deduplicated, evicted, left resident. */
static void report_pages(const struct opts *o, const struct results *res,
			 const struct tally *sum, uint32_t tpp)
{
	/* Pool pages once however many workers hold them; private ones each. */
	uint64_t resident = distinct(o, res, 0) + sum->private_pages;
	uint64_t resident_prefix = distinct(o, res, 1) + sum->private_prefix_pages;
	uint64_t hits = sum->local_hit_pages + sum->remote_hit_pages;

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
	if (o->inflight_wait_ms && !o->no_share)
		printf("  in-flight dedupe       waits up to %u ms; %llu pages claimed while "
		       "computed, %llu claims refused (computed unclaimed)\n",
		       o->inflight_wait_ms, (unsigned long long)sum->claimed_pages,
		       (unsigned long long)sum->claim_conflicts);
	printf("  duplicates / pages     %llu / %llu computed pages\n",
	       (unsigned long long)sum->dup_pages,
	       (unsigned long long)(sum->computed_pages + sum->dup_pages));
	printf("  pages evicted locally  %llu\n", (unsigned long long)sum->evicted_pages);
	printf("  KV pages at the end    %llu resident (%llu of them prompt prefixes "
	       "shared by requests), %.1f held per worker\n",
	       (unsigned long long)resident, (unsigned long long)resident_prefix,
	       (double)sum->held_pages / o->workers);
}

/* The compute: prefill, decode, the check against a recompute and what sharing saved. */
static void report_compute(const struct opts *o, const struct tally *sum,
			   const struct kvs_geometry *g)
{
	double scratch = per(sum->verify_prefill_ns, sum->verified_requests, 1e6);
	double served = per(sum->prefill_ns, sum->requests, 1e6);

	printf("  prefill                %llu of %llu prompt tokens computed (%.1f%%), "
	       "%.2f ms a request\n", (unsigned long long)sum->prefill_tokens,
	       (unsigned long long)sum->prompt_tokens,
	       sum->prompt_tokens ? 100.0 * sum->prefill_tokens / sum->prompt_tokens : 0.0,
	       served);
	printf("  decode                 %llu tokens in %llu batched calls (up to %u "
	       "requests a call, %.1f on average), %.1f us a token\n",
	       (unsigned long long)sum->decode_tokens, (unsigned long long)sum->decode_calls,
	       o->batch, sum->decode_calls ? (double)sum->decode_tokens / sum->decode_calls : 0,
	       per(sum->decode_ns, sum->decode_tokens, 1e3));
	if (!o->cuda)
		printf("  verified               %llu requests recomputed from scratch, equal to "
		       "the bit: %llu bytes of KV, every token, the final state\n",
		       (unsigned long long)sum->verified_requests,
		       (unsigned long long)sum->verified_bytes);
	else
		printf("  verified               %llu requests recomputed from scratch (the C "
		       "reference, host memory, served tokens fed back), within tests/attn's "
		       "%s tolerance %.0e: %llu bytes of KV, layer 0 to the bit; worst relative "
		       "error %.2e in KV, %.2e in the final state (abs %.2e, %.2e); %llu greedy "
		       "tokens flipped between near-tied logits\n",
		       (unsigned long long)sum->verified_requests, dtype_name(g->dtype),
		       tol_bound(g->dtype), (unsigned long long)sum->verified_bytes,
		       sum->tol_err[0] / 1e9, sum->tol_err[2] / 1e9, sum->tol_err[1] / 1e9,
		       sum->tol_err[3] / 1e9, (unsigned long long)sum->tol_flips);
	if (sum->verified_requests && served > 0)
		printf("  from-scratch prefill   %.2f ms a request: %.1fx the served "
		       "prefill's time\n", scratch, scratch / served);
}

/* How the run went: the arbiter's failures, throughput, the outputs digest. */
static void report_outcome(const struct opts *o, const struct tally *sum)
{
	double wall = sum->end_ns > sum->start_ns ? (sum->end_ns - sum->start_ns) / 1e9 : 0;
	uint64_t gen = sum->requests * o->gen_tokens;

	printf("  arbiter failures       %llu requests served without sharing, %llu "
	       "served but not published, %llu arbiter calls failed%s%s\n",
	       (unsigned long long)sum->fallback_requests, (unsigned long long)sum->unpublished,
	       (unsigned long long)sum->arbiter_errors,
	       sum->arbiter_gone ? "; sharing ended: " : "",
	       sum->arbiter_gone ? strerror((int)-sum->arbiter_gone) : "");
	printf("  throughput             %.2f requests/s, %.0f tokens/s (prompt + generated)\n",
	       wall ? sum->requests / wall : 0, wall ? (sum->prompt_tokens + gen) / wall : 0);
	printf("  outputs digest         %016llx\n", (unsigned long long)sum->digest);
	printf("  wall time              %.1f ms (first request to last, all workers)\n",
	       wall * 1e3);
}

void report(const struct opts *o, const struct results *res, const struct tally *sum,
	    const struct kvs_geometry *g)
{
	report_setup(o, g);
	report_pages(o, res, sum, g->tokens_per_page);
	report_compute(o, sum, g);
	report_outcome(o, sum);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* "median M ms, p90 P, max X" of the non-zero ones of @n values in @v (sorted here). */
static void print_quantiles(uint64_t *v, size_t n)
{
	size_t i, k = 0;

	for (i = 0; i < n; i++)
		if (v[i])
			v[k++] = v[i];
	if (!k) {
		printf("none");
		return;
	}
	qsort(v, k, sizeof(*v), cmp_u64);
	printf("median %.1f ms, p90 %.1f, max %.1f (%zu)", v[(k - 1) / 2] / 1e6,
	       v[(k * 9 + 9) / 10 - 1] / 1e6, v[k - 1] / 1e6, k);
}

/*
 * Where the workers' time went (per worker: wall / CPU ms) and time to
 * first token.  Wall minus CPU in a phase is time waiting: for a core (more
 * workers than cores), an arbiter reply, or pages another worker computes.
 */
void report_time(const struct opts *o, const struct results *res,
			const struct tally *sum)
{
	uint64_t n = 0, idle = 0, *first, *all;
	uint64_t wall = 0, cpu, parts, parts_cpu;
	unsigned int i;

	for (i = 0; i < o->workers; i++) {
		if (!res->t[i].ok)
			continue;
		n++;
		wall += res->t[i].end_ns - res->t[i].start_ns;
		idle += sum->end_ns - res->t[i].end_ns;
	}
	if (!n)
		return;
	cpu = sum->serve_cpu_ns;
	parts = sum->match_ns + sum->prefill_ns + sum->publish_ns + sum->decode_ns +
		sum->verify_ns;
	parts_cpu = sum->match_cpu_ns + sum->prefill_cpu_ns + sum->publish_cpu_ns +
		    sum->decode_cpu_ns + sum->verify_cpu_ns;
	printf("  time per worker        serving %.0f ms, %.0f on a CPU (wall / CPU ms): "
	       "prefill %.0f / %.0f, decode %.0f / %.0f, match (tree, keys, LOOKUP, "
	       "waits) %.0f / %.0f, publish %.0f / %.0f, verify %.0f / %.0f, other %.0f / %.0f; "
	       "setup %.0f ms before the start, idle %.0f ms after its last request\n",
	       wall / 1e6 / n, cpu / 1e6 / n, sum->prefill_ns / 1e6 / n,
	       sum->prefill_cpu_ns / 1e6 / n, sum->decode_ns / 1e6 / n,
	       sum->decode_cpu_ns / 1e6 / n, sum->match_ns / 1e6 / n,
	       sum->match_cpu_ns / 1e6 / n, sum->publish_ns / 1e6 / n,
	       sum->publish_cpu_ns / 1e6 / n, sum->verify_ns / 1e6 / n,
	       sum->verify_cpu_ns / 1e6 / n,
	       wall > parts ? (wall - parts) / 1e6 / n : 0.0,
	       cpu > parts_cpu ? (cpu - parts_cpu) / 1e6 / n : 0.0,
	       sum->setup_ns / 1e6 / n, idle / 1e6 / n);
	first = calloc(o->workers, sizeof(*first));
	all = malloc((size_t)o->workers * o->requests * sizeof(*all));
	if (!first || !all) {
		free(first);
		return;
	}
	for (i = 0; i < o->workers; i++)
		first[i] = res->t[i].ok ? res->ttft[(size_t)i * o->requests] : 0;
	memcpy(all, res->ttft, (size_t)o->workers * o->requests * sizeof(*all));
	printf("  time to first token    first request of each worker%s, from the "
	       "common start: ", o->burst ? " (--burst: one new document)" : "");
	print_quantiles(first, o->workers);
	printf("; every request, from when its worker took it: ");
	print_quantiles(all, (size_t)o->workers * o->requests);
	printf("\n");
	free(first);
	free(all);
}


/* The pool's line: its counters and invariants (pool_stats()), or why not. */
void report_pool(int check, const struct tally *sum, const struct kvs_pool_stats *st,
		 bool checked)
{
	if (!check)
		printf("  pool                   %llu cached, %llu shared, %llu free, "
		       "%llu evictions; %s\n",
		       (unsigned long long)st->n_cached, (unsigned long long)st->n_shared,
		       (unsigned long long)st->n_free, (unsigned long long)st->evictions,
		       checked ? "invariants hold" :
		       "invariants not checked (the check is an admin's)");
	else if (sum->arbiter_gone)
		printf("  pool                   not checked: the arbiter is gone (%s)\n",
		       strerror((int)-check));
	else
		printf("  pool                   check failed: %s\n", strerror(-check));
}
