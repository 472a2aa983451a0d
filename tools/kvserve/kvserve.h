/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What kvserve's files share: the options, what a worker leaves for the
 * parent, and the entry points the parent (kvserve.c) calls: the worker
 * (worker.c) and the summary (report.c).  Calls flow one way, from
 * kvserve.c to the other two; neither calls back.
 */
#ifndef KVSERVE_KVSERVE_H
#define KVSERVE_KVSERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

struct kvs_geometry;
struct kvs_pool_stats;

/* The command line (kvserve.c's parse()), the same in every process. */
struct opts {
	const char *arbiter;
	const char *pool;
	const char *salt;
	bool cuda;			/* --memory cuda: the pool is device memory */
	unsigned int workers, requests, system_tokens, doc_tokens, docs;
	unsigned int question_tokens, q_heads, gen_tokens, verify, batch;
	unsigned int prefill_chunk;	/* tokens; 0: the whole prompt in one call */
	unsigned int private_pages;	/* 0: as many as the pool has */
	unsigned int inflight_wait_ms;	/* in-flight dedupe; 0: off */
	bool no_share;
	bool burst;			/* every worker's first request: document 0 */
	uint64_t seed, model_seed;
	char default_salt[96];
};

/* What one worker did, left for the parent in shared memory. */
struct tally {
	uint64_t requests, prompt_tokens, page_tokens;
	uint64_t local_hit_pages, remote_hit_pages, computed_pages, dup_pages;
	uint64_t claimed_pages, claim_conflicts;	/* --inflight-wait */
	uint64_t evicted_pages, errors;
	uint64_t prefill_tokens, decode_tokens, decode_calls;
	uint64_t verified_requests, verified_bytes, mismatches;
	/*
	 * --memory cuda: greedy tokens flipped within tolerance; the worst
	 * errors against the recompute (1e-9 units): relative and absolute
	 * of the KV (layers 1 on), of the final state.
	 */
	uint64_t tol_flips, tol_err[4];
	uint64_t prefill_ns, decode_ns, verify_prefill_ns;
	/*
	 * Where a worker's time goes, wall clock and its own CPU time (the
	 * difference: waiting for a core, an arbiter reply or a page another
	 * worker computes).  match: the radix tree, the block keys' hashing,
	 * LOOKUP (and in-flight waits), ALLOC; publish: the keys and PUBLISH
	 * or PUT of a prompt's and a finished request's pages.
	 */
	uint64_t match_ns, match_cpu_ns, prefill_cpu_ns, publish_ns, publish_cpu_ns;
	uint64_t decode_cpu_ns, verify_ns, verify_cpu_ns, serve_cpu_ns;
	uint64_t setup_ns;		/* process start to ready: fork, pool, model */
	uint64_t start_ns, end_ns;	/* CLOCK_MONOTONIC: serving, setup excluded */
	uint64_t held_pages, prefix_pages;	/* in the worker's trees at its end */
	uint64_t private_pages, private_prefix_pages;	/* of which private */
	uint64_t fallback_requests;	/* served in private pages after an arbiter error */
	uint64_t unpublished;		/* finished, but PUBLISH failed: not shared */
	uint64_t arbiter_errors;	/* arbiter calls that failed */
	int64_t arbiter_gone;		/* -errno that ended sharing for the run, or 0 */
	uint64_t digest;		/* XOR over requests of a hash of their outputs */
	uint64_t ok;			/* the worker ran to its end */
};

/*
 * Per worker, in memory shared with the parent: its tally, then bitmaps
 * of the pool pages it held at its end (all, and those of the shared part
 * of the prompts), then its requests' times to first token; last, the
 * time the parent released the workers at.
 */
struct results {
	struct tally *t;
	uint64_t *bitmaps;		/* [workers][2][words] */
	uint64_t *ttft;			/* [workers][requests] */
	volatile uint64_t *go_ns;	/* the release time */
	size_t words;
	uint32_t pool_pages;
};

/* Nanoseconds on clock @id; now_ns() for wall time, comparable across processes. */
static inline uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static inline uint64_t now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

/* ---- worker.c ---- */

/*
 * Worker @id's whole life, in its own process: set up, pass the start
 * line (write a byte to @ready, wait for EOF on @go; both closed here),
 * serve o->requests requests and leave its tally, times to first token
 * and bitmaps in @res.  0, or -errno when setup failed.
 */
int worker_main(const struct opts *o, unsigned int id, const struct results *res,
		int ready, int go);

/* Say why kv_pool_open() (or attaching to o->pool) failed with @ret. */
void pool_open_err(const struct opts *o, unsigned int id, int ret);

/* ---- report.c ---- */

/* Add worker tally @t to @sum. */
void tally_add(struct tally *sum, const struct tally *t);

/*
 * The pool's counters, with its invariants checked where this user may
 * ask for that (*checked).  0 or -errno.
 */
int pool_stats(const struct opts *o, struct kvs_pool_stats *st, bool *checked);

/* The summary, the time breakdown and the pool's line, on stdout. */
void report(const struct opts *o, const struct results *res, const struct tally *sum,
	    const struct kvs_geometry *g);
void report_time(const struct opts *o, const struct results *res,
		 const struct tally *sum);
void report_pool(int check, const struct tally *sum, const struct kvs_pool_stats *st,
		 bool checked);

#endif
