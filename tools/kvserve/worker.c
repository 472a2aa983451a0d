// SPDX-License-Identifier: GPL-2.0
/*
 * One kvserve worker process (kvserve.c has the whole picture): its
 * requests from prompt to last token (match, prefill in chunks, batched
 * decode, finish) and what it leaves for the parent (struct tally).  A
 * request's pages are in one of two caches, behind one set of calls
 * (cache.c): the pool's, or the worker's private one that it serves from
 * with --no-share or after an arbiter failure.  verify.c checks a request
 * against a recompute.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <kvshare/arbiter.h>
#include <kvshare/attn.h>
#include <kvshare/prefix.h>
#include <kvshare/req_table.h>

#include "kvserve.h"
#include "model.h"
#include "worker.h"

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A span of wall and CPU time, for struct tally's breakdown. */
struct span {
	uint64_t wall, cpu;
};

static struct span span_start(void)
{
	return (struct span){ now_ns(), clock_ns(CLOCK_PROCESS_CPUTIME_ID) };
}

static void span_end(const struct span *s, uint64_t *wall, uint64_t *cpu)
{
	*wall += now_ns() - s->wall;
	*cpu += clock_ns(CLOCK_PROCESS_CPUTIME_ID) - s->cpu;
}

/* @n token ids drawn from stream @stream (a "text"). */
static void text(uint32_t *out, unsigned int n, uint64_t stream)
{
	uint64_t s = stream * 0x2545f4914f6cdd1dull + 1;
	unsigned int i;

	for (i = 0; i < n; i++)
		out[i] = (uint32_t)(splitmix64(&s) % 128000);
}

/* ---- one request ---- */

static void req_abort(struct worker *w, struct request *q)
{
	q->cache->abort(w, q);
}

/* The request's pages and pool, for the model. */
static int req_seq(struct worker *w, struct request *q, struct model_seq *s)
{
	uint32_t indptr[2], len;
	long n = kv_req_table_csr(w->rt, &q->req.slot, 1, indptr, w->pbuf, w->max_pages, &len);

	if (n < 0)
		return n;
	s->pool_base = q->cache->memory(w, &s->pool_pages);
	s->pages = w->pbuf;
	s->n_pages = n;
	return 0;
}

/* The end of the next prefill chunk from @pos: chunks end on multiples of w->chunk. */
static uint32_t chunk_end(const struct worker *w, uint32_t pos)
{
	uint32_t end = w->chunk ? (pos / w->chunk + 1) * w->chunk : w->n_prompt;

	return end < w->n_prompt ? end : w->n_prompt;
}

/*
 * Prefill the prompt's tokens [pos, end) and cache the full pages so far
 * (the row then reads the tree's pages); 0, or what the request's cache
 * says to return with the request released.
 */
static int prefill_chunk(struct worker *w, struct request *q, uint32_t pos, uint32_t end)
{
	struct model_seq seq;
	struct span sp;
	int ret;

	ret = req_seq(w, q, &seq);
	sp = span_start();
	if (!ret)
		ret = model_prefill(w->model, &seq, q->tokens, pos, end - pos, &q->next);
	span_end(&sp, &w->t.prefill_ns, &w->t.prefill_cpu_ns);
	if (ret) {
		req_abort(w, q);
		return ret;
	}
	w->t.prefill_tokens += end - pos;
	q->req.n_tokens = end;
	sp = span_start();
	ret = q->cache->cache(w, q, false);
	span_end(&sp, &w->t.publish_ns, &w->t.publish_cpu_ns);
	q->req.n_tokens = w->n_kv;
	return ret ? q->cache->fail(w, q, ret) : 0;
}

/*
 * Match, reserve, prefill and cache the prompt's full pages, in the
 * request's cache.  The prefill goes in chunks of --prefill-chunk tokens
 * (as engines' chunked prefill), each chunk's full pages cached
 * (PUBLISHed) as soon as they are computed: a worker waiting for them in
 * flight (--inflight-wait) takes them then, not only after this whole
 * prompt, and the next request, here or in another worker, finds them
 * while this one decodes.  -EAGAIN when an arbiter call failed and the
 * request was dropped, to be served privately.
 */
static int req_prefill(struct worker *w, struct request *q)
{
	struct span sp = span_start();
	const float *hidden;
	uint32_t pos, len;
	long matched;
	int ret;

	q->req = (struct kv_radix_req){ .tokens = q->tokens, .slot = kv_req_alloc(w->rt) };
	if (q->req.slot < 0)
		return q->req.slot;
	matched = q->cache->match(w, q);
	if (matched < 0)
		return matched;
	span_end(&sp, &w->t.match_ns, &w->t.match_cpu_ns);
	for (pos = matched; pos < w->n_prompt; pos = chunk_end(w, pos)) {
		ret = prefill_chunk(w, q, pos, chunk_end(w, pos));
		if (ret)
			return ret;
	}
	q->pos = w->n_prompt;
	hidden = model_last_hidden(w->model, &len);
	memcpy(q->hidden, hidden, len * sizeof(float));
	return 0;
}

/* A request's prompt; @first_doc: document 0 whatever @pick says (--burst). */
static void prompt(const struct opts *o, uint32_t *tokens, uint64_t pick, bool first_doc)
{
	unsigned int doc = splitmix64(&pick) % o->docs;

	if (first_doc)
		doc = 0;

	text(tokens, o->system_tokens, o->seed);
	text(tokens + o->system_tokens, o->doc_tokens, o->seed + 1 + doc);
	text(tokens + o->system_tokens + o->doc_tokens, o->question_tokens,
	     o->seed + 1000 + pick);
}

/* What the request produced, for comparing runs: its tokens and final state. */
static uint64_t req_digest(const struct worker *w, const struct request *q)
{
	uint64_t h = (uint64_t)w->id << 32 | q->r, s;
	uint32_t i, bits, n = hid_len(w);

	for (i = w->n_prompt; i <= w->n_kv; i++) {
		s = h ^ q->tokens[i];
		h = splitmix64(&s);
	}
	for (i = 0; i < n; i++) {
		memcpy(&bits, &q->hidden[i], sizeof(bits));
		s = h ^ bits;
		h = splitmix64(&s);
	}
	return h;
}

static int serve_private(struct worker *w, struct request *q);
static void stop_sharing(struct worker *w);

/* Request @i is done: the last one takes its place (buffers swapped, not shared). */
static void drop(struct worker *w, unsigned int i)
{
	struct request tmp = w->reqs[i];

	w->reqs[i] = w->reqs[--w->n_active];
	w->reqs[w->n_active] = tmp;
}

/*
 * Sharing is over for this worker: the requests it holds in pool pages
 * may lose them (the arbiter may hand them to others once it sees this
 * process gone), so each is dropped and served again, whole, in private
 * pages.
 */
static void requeue_shared(struct worker *w)
{
	unsigned int i;
	int ret;

	for (i = 0; i < w->n_active; i++) {
		struct request *q = &w->reqs[i];

		if (q->cache != &cache_shared)
			continue;
		req_abort(w, q);
		ret = serve_private(w, q);
		if (ret) {
			fprintf(stderr, "kvserve: worker %u: request %u: %s\n", w->id, q->r,
				strerror(-ret));
			w->t.errors++;
			drop(w, i--);
		}
	}
	stop_sharing(w);
}

/* What the shared prefix cache did, into the worker's tally. */
static void tally_cache(struct worker *w)
{
	const struct kv_prefix_stats *st = kv_prefix_stats(w->cache);

	w->t.local_hit_pages += st->local_hit_pages;
	w->t.remote_hit_pages += st->remote_hit_pages;
	w->t.computed_pages += st->published - st->dup_published;
	w->t.dup_pages += st->dup_published;
	w->t.claimed_pages += st->claimed;
	w->t.claim_conflicts += st->claim_conflicts;
	w->t.evicted_pages += st->alloc_evictions;
}

/*
 * The handle is broken and no request uses pool pages any more: count
 * what the shared cache did, drop it (its PUTs fail at once on the broken
 * handle) and close the pool, which gives this process's holdings back as
 * soon as the daemon runs again.
 */
static void stop_sharing(struct worker *w)
{
	if (!w->cache)
		return;
	tally_cache(w);
	kv_prefix_destroy(w->cache);
	w->cache = NULL;
	kv_pool_close(w->pool);
	w->pool = NULL;
}

static int serve_private(struct worker *w, struct request *q)
{
	int ret;

	if (!q->fell_back && !w->o->no_share) {
		q->fell_back = true;
		w->t.fallback_requests++;
	}
	ret = pc_setup(w);
	if (ret)
		return ret;
	q->cache = &cache_private;
	return req_prefill(w, q);
}

/* The request has its last token: check it, cache its pages, count it. */
static int finish(struct worker *w, struct request *q)
{
	const struct opts *o = w->o;
	struct model_seq served;
	struct span sp;
	int ret = 0;

	q->tokens[w->n_kv] = q->next;
	w->t.digest ^= req_digest(w, q);
	if (o->verify && q->r % o->verify == 0) {
		sp = span_start();
		ret = req_seq(w, q, &served);
		if (!ret)
			ret = verify_request(w, q, &served);
		span_end(&sp, &w->t.verify_ns, &w->t.verify_cpu_ns);
		if (ret == -EIO)
			w->t.mismatches++;
	}
	if (ret) {
		req_abort(w, q);
		return ret;
	}
	sp = span_start();
	ret = q->cache->cache(w, q, true);
	span_end(&sp, &w->t.publish_ns, &w->t.publish_cpu_ns);
	w->t.requests++;
	w->t.prompt_tokens += w->n_prompt;
	w->t.page_tokens += w->n_prompt / w->geom.tokens_per_page * w->geom.tokens_per_page;
	w->t.decode_tokens += o->gen_tokens - 1;
	return ret;
}

/* Take request @r: prefill it; requests of one token are done at once. */
static int admit(struct worker *w, unsigned int r)
{
	struct request *q = &w->reqs[w->n_active];
	/* The first request arrives at the common start, the rest when taken. */
	uint64_t arrived = r ? now_ns() : w->go_ns;
	int ret;

	q->r = r;
	q->cache = w->o->no_share ? &cache_private : &cache_shared;
	q->fell_back = false;
	prompt(w->o, q->tokens, w->id * 1000003ull + r + w->o->seed, w->o->burst && !r);
	ret = w->dead ? -EAGAIN : req_prefill(w, q);
	if (ret == -EAGAIN)
		ret = serve_private(w, q);
	if (!ret)
		w->ttft[r] = now_ns() - arrived;
	if (!ret && q->pos < w->n_kv)
		w->n_active++;
	else if (!ret)
		ret = finish(w, q);
	if (w->dead)
		requeue_shared(w);
	return ret;
}

/*
 * One generated token for every request the worker holds: one decode call
 * (per layer) for all of those in the pool, one for those in private
 * pages.
 */
static void decode_step(struct worker *w)
{
	static const struct req_cache *const caches[] = { &cache_shared, &cache_private };
	unsigned int i, n, k, c;
	struct span sp = span_start();
	int ret;

	for (c = 0; c < 2; c++) {
		struct model_batch b = { 0 };
		long np;

		for (i = n = 0; i < w->n_active; i++) {
			struct request *q = &w->reqs[i];

			if (q->cache != caches[c])
				continue;
			w->slots[n] = q->req.slot;
			w->toks[n] = q->next;
			w->pos[n] = q->pos;
			w->idx[n++] = i;
		}
		if (!n)
			continue;
		np = kv_req_table_csr(w->rt, w->slots, n, w->indptr, w->bpages,
				      (size_t)w->o->batch * w->max_pages, w->lens);
		b.pool_base = caches[c]->memory(w, &b.pool_pages);
		b.n_reqs = n;
		b.page_indptr = w->indptr;
		b.pages = w->bpages;
		ret = np < 0 ? (int)np : model_decode_batch(w->model, &b, w->toks, w->pos,
							    w->nexts, w->bhidden);
		w->t.decode_calls++;
		for (k = 0; k < n; k++) {
			struct request *q = &w->reqs[w->idx[k]];

			if (ret) {
				/* Marked for the sweep below. */
				q->pos = UINT32_MAX;
				continue;
			}
			q->tokens[q->pos++] = q->next;
			q->next = w->nexts[k];
			memcpy(q->hidden, w->bhidden + (size_t)k * hid_len(w),
			       hid_len(w) * sizeof(float));
		}
	}
	span_end(&sp, &w->t.decode_ns, &w->t.decode_cpu_ns);
	for (i = 0; i < w->n_active; i++) {
		struct request *q = &w->reqs[i];

		if (q->pos == UINT32_MAX) {
			fprintf(stderr, "kvserve: worker %u: request %u: decode failed\n",
				w->id, q->r);
			req_abort(w, q);
			w->t.errors++;
		} else if (q->pos == w->n_kv) {
			ret = finish(w, q);
			if (ret) {
				fprintf(stderr, "kvserve: worker %u: request %u: %s\n", w->id,
					q->r, strerror(-ret));
				w->t.errors++;
			}
		} else {
			continue;
		}
		/* Done: the last one takes its place. */
		drop(w, i--);
	}
	if (w->dead)
		requeue_shared(w);
}

/*
 * kv_pool_open() failed: names are scoped by owner, so say whose pool was
 * looked for (libkv's default owner; $KVSHARE_POOL_OWNER picks another).
 */
void pool_open_err(const struct opts *o, unsigned int id, int ret)
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
 * mapped by libkv through the CUDA driver, and the model's attention on it
 * runs on the CUDA kernels (model_attn_cuda()): on a GPU with build/kvserve-cuda,
 * or in the tests on the CPU stand-ins of both the driver
 * (tests/gpu/cudastub) and the kernels (tests/simt: build/tests/gpu/kvserve-simt).
 * build/kvserve has no kernels and says so.
 */
static int memory_check(const struct opts *o, const struct worker *w)
{
	const struct kvs_geometry *g = &kv_pool_info(w->pool)->geom;
	int dev = kv_pool_is_device(w->pool), ret;
	char why[320];

	if (dev != o->cuda) {
		fprintf(stderr, "kvserve: worker %u: pool '%s' is %s memory: run with "
			"--memory %s\n", w->id, o->pool, dev ? "device (CUDA)" : "host",
			dev ? "cuda" : "host");
		return -EINVAL;
	}
	if (!dev)
		return 0;
	if ((g->dtype != KVS_DTYPE_F16 && g->dtype != KVS_DTYPE_BF16) ||
	    (g->head_dim != 64 && g->head_dim != 128 && g->head_dim != 256)) {
		fprintf(stderr, "kvserve: worker %u: pool '%s': the CUDA kernels take fp16 "
			"and bf16 pools of head dim 64, 128 or 256\n", w->id, o->pool);
		return -EOPNOTSUPP;
	}
	if (kv_pool_device(w->pool) > 0) {
		fprintf(stderr, "kvserve: worker %u: pool '%s' is on GPU %d; the kernels run "
			"on GPU 0 (CUDA_VISIBLE_DEVICES=%d makes it GPU 0)\n", w->id, o->pool,
			kv_pool_device(w->pool), kv_pool_device(w->pool));
		return -EOPNOTSUPP;
	}
	ret = model_attn_cuda(kv_page_addr(w->pool, 0), kv_cuda_driver(), why, sizeof(why));
	if (ret)
		fprintf(stderr, "kvserve: worker %u: --memory cuda: %s\n", w->id, why);
	return ret;
}

static int worker_setup(struct worker *w)
{
	const struct opts *o = w->o;
	const uint32_t B = o->batch;
	struct kv_prefix_config cfg = { .salt = o->salt, .salt_len = strlen(o->salt),
					.inflight_wait_ms = (int)o->inflight_wait_ms };
	const struct kvs_pool_attach *info;
	unsigned int i;
	uint32_t hid;
	int ret;

	w->n_prompt = o->system_tokens + o->doc_tokens + o->question_tokens;
	w->n_kv = w->n_prompt + o->gen_tokens - 1;
	w->n_all = w->n_prompt + o->gen_tokens;
	/* The geometry is the pool's, with or without sharing. */
	ret = kv_pool_open(o->arbiter, o->pool, 0, 0, &w->pool);
	if (ret) {
		pool_open_err(o, w->id, ret);
		return ret;
	}
	info = kv_pool_info(w->pool);
	ret = memory_check(o, w);
	if (ret)
		return ret;
	w->geom = info->geom;
	w->geom.page_bytes = kv_page_bytes(&info->geom);
	w->pool_pages = info->n_pages;
	w->max_pages = w->n_all / w->geom.tokens_per_page + 1;
	/* Chunks end on page boundaries: each one's pages are full when cached. */
	w->chunk = o->prefill_chunk / w->geom.tokens_per_page * w->geom.tokens_per_page;
	if (o->prefill_chunk && !w->chunk)
		w->chunk = w->geom.tokens_per_page;
	ret = model_create(&info->geom, o->q_heads, o->model_seed,
			   w->n_all > B ? w->n_all : B, &w->model);
	if (ret == -EINVAL) {
		fprintf(stderr, "kvserve: --q-heads %u does not fit pool '%s' (%u KV heads of "
			"dim %u, %s): it must be a multiple of the KV heads\n", o->q_heads,
			o->pool, info->geom.n_kv_heads, info->geom.head_dim,
			"the attention code takes fp16, bf16 and fp32");
		return ret;
	}
	if (!ret && o->no_share) {
		/* No arbiter from here on: private pages, a private tree. */
		kv_pool_close(w->pool);
		w->pool = NULL;
		ret = pc_setup(w);
	} else if (!ret) {
		ret = kv_prefix_create(kv_pool_arbiter(w->pool), info, &cfg, &w->cache);
	}
	if (!ret)
		ret = kv_req_table_create(B, w->n_all, w->geom.tokens_per_page, &w->rt);
	if (ret)
		goto out;
	hid = hid_len(w);
	w->reqs = calloc(B, sizeof(*w->reqs));
	for (i = 0; w->reqs && i < B; i++) {
		w->reqs[i].tokens = calloc(w->n_all, sizeof(uint32_t));
		w->reqs[i].hidden = calloc(hid, sizeof(float));
		if (!w->reqs[i].tokens || !w->reqs[i].hidden)
			ret = -ENOMEM;
	}
	w->pbuf = calloc(w->max_pages, sizeof(uint32_t));
	w->slots = calloc(B, sizeof(int));
	w->toks = calloc(B, sizeof(uint32_t));
	w->pos = calloc(B, sizeof(uint32_t));
	w->nexts = calloc(B, sizeof(uint32_t));
	w->idx = calloc(B, sizeof(uint32_t));
	w->lens = calloc(B, sizeof(uint32_t));
	w->indptr = calloc(B + 1, sizeof(uint32_t));
	w->bpages = calloc((size_t)B * w->max_pages, sizeof(uint32_t));
	w->bhidden = calloc((size_t)B * hid, sizeof(float));
	w->scratch_pages = calloc(w->max_pages, sizeof(uint32_t));
	w->scratch = o->verify ? malloc((size_t)w->max_pages * w->geom.page_bytes) : NULL;
	if (!w->reqs || !w->pbuf || !w->slots || !w->toks || !w->pos || !w->nexts ||
	    !w->idx || !w->lens || !w->indptr || !w->bpages || !w->bhidden ||
	    !w->scratch_pages || (o->verify && !w->scratch))
		ret = -ENOMEM;
out:
	if (ret)
		fprintf(stderr, "kvserve: worker %u: %s\n", w->id, strerror(-ret));
	return ret;
}

struct held {
	struct worker *w;
	uint32_t prefix_pages;		/* pages of the shared part of a prompt */
	bool pool;			/* mark pool pages in the bitmap */
};

static int count_held(void *arg, const struct kv_radix_node_info *ni)
{
	struct held *h = arg;
	const uint32_t T = h->w->geom.tokens_per_page;
	uint32_t i;

	for (i = 0; i < ni->n_pages; i++) {
		uint32_t p = ni->pages[i];
		bool prefix = ni->depth / T + i < h->prefix_pages;

		h->w->t.held_pages++;
		h->w->t.prefix_pages += prefix;
		if (!h->pool) {
			h->w->t.private_pages++;
			h->w->t.private_prefix_pages += prefix;
			continue;
		}
		if (!h->w->bitmap || p >= h->w->bitmap_pages)
			continue;
		h->w->bitmap[p / 64] |= 1ull << (p % 64);
		if (prefix)
			h->w->prefix_bitmap[p / 64] |= 1ull << (p % 64);
	}
	return 0;
}

static void worker_tally(struct worker *w)
{
	struct held h = {
		.w = w,
		.prefix_pages = (w->o->system_tokens + w->o->doc_tokens) / w->geom.tokens_per_page,
	};

	if (w->cache) {
		tally_cache(w);
		h.pool = true;
		kv_radix_walk(kv_prefix_tree(w->cache), count_held, &h);
	}
	if (w->pc.base) {
		w->t.local_hit_pages += w->pc.local_hit_pages;
		w->t.computed_pages += w->pc.computed_pages;
		w->t.evicted_pages += w->pc.evicted_pages;
		h.pool = false;
		kv_radix_walk(w->pc.tree, count_held, &h);
	}
}

/*
 * The start line: every worker, set up or failed, writes a byte to
 * @ready and waits for EOF on @go, which the parent gives (by closing its
 * end) once all are ready or gone, and after it wrote the release time to
 * *go_ns.  So the workers serve from one moment on (--burst's requests
 * arrive together), the setup of one is not in another's serving time,
 * and a worker that died early blocks nobody.
 */
struct gate {
	int ready, go;			/* write end, read end */
	const volatile uint64_t *go_ns;
};

static uint64_t gate_pass(const struct gate *g)
{
	char c = 1;

	if (write(g->ready, &c, 1) != 1)
		perror("kvserve: worker: start line");
	close(g->ready);
	while (read(g->go, &c, 1) < 0 && errno == EINTR)
		;
	close(g->go);
	return *g->go_ns ? *g->go_ns : now_ns();
}

static int worker_run(struct worker *w, const struct gate *g)
{
	unsigned int r = 0, i;
	uint64_t born = now_ns(), cpu;
	int ret;

	ret = worker_setup(w);
	w->t.setup_ns = now_ns() - born;
	w->go_ns = gate_pass(g);
	if (ret)
		goto out;
	w->t.start_ns = now_ns();
	cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
	while (r < w->o->requests || w->n_active) {
		while (w->n_active < w->o->batch && r < w->o->requests) {
			ret = admit(w, r);
			if (ret) {
				fprintf(stderr, "kvserve: worker %u: request %u: %s\n", w->id, r,
					strerror(-ret));
				w->t.errors++;
			}
			r++;
		}
		if (w->n_active)
			decode_step(w);
	}
	w->t.end_ns = now_ns();
	w->t.serve_cpu_ns = clock_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu;
	worker_tally(w);
	w->t.ok = 1;
	ret = 0;
out:
	if (w->cache)
		kv_prefix_destroy(w->cache);
	if (w->pc.tree)
		kv_radix_destroy(w->pc.tree);
	free(w->pc.base);
	free(w->pc.free);
	kv_req_table_destroy(w->rt);
	model_destroy(w->model);
	kv_pool_close(w->pool);
	for (i = 0; w->reqs && i < w->o->batch; i++) {
		free(w->reqs[i].tokens);
		free(w->reqs[i].hidden);
	}
	free(w->reqs);
	free(w->pbuf);
	free(w->slots);
	free(w->toks);
	free(w->pos);
	free(w->nexts);
	free(w->idx);
	free(w->lens);
	free(w->indptr);
	free(w->bpages);
	free(w->bhidden);
	free(w->scratch_pages);
	free(w->scratch);
	return ret;
}

int worker_main(const struct opts *o, unsigned int id, const struct results *res,
		int ready, int go)
{
	struct worker w = { .o = o, .id = id };
	struct gate g = { ready, go, res->go_ns };
	int ret;

	w.bitmap = res->bitmaps + 2 * id * res->words;
	w.prefix_bitmap = w.bitmap + res->words;
	w.bitmap_pages = res->pool_pages;
	w.ttft = res->ttft + (size_t)id * o->requests;
	ret = worker_run(&w, &g);
	res->t[id] = w.t;
	return ret;
}
