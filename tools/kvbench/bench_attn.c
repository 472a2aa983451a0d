// SPDX-License-Identifier: GPL-2.0
/*
 * kvbench attn: decode bandwidth of the paged attention code.
 *
 *   kvbench attn        the C reference (libkv_attn) on the CPU: bytes of
 *                       K and V read per second, next to a streaming-read
 *                       probe of the same memory with the same threads;
 *   kvbench attn --gpu  the CUDA kernels: decode TB/s, as a fraction of a
 *                       read-only kernel's bandwidth (bench_read.cu, the
 *                       reference) and of a device-to-device cudaMemcpy,
 *                       timed in the same run; extend (prefill over a
 *                       cached prefix) TFLOP/s; the goals of issue 20 the
 *                       figures alone decide, met or not.
 *
 * Each shape gets a pool of as many layers as make one "forward pass"
 * read at least PASS_BYTES, far more than any last-level cache, and the
 * timed loop walks the layers the way a model does: what is measured is
 * memory, not cache.  Page tables are random permutations of the pool.
 */
#include "kvbench.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kvshare/attn.h>

#include "bench_read.h"

#define PASS_BYTES	(256ull << 20)	/* KV read per timed pass, at least */
#define PROBE_BYTES	(512ull << 20)
#define MIN_PASSES	5
#define MIN_NS		400000000ull	/* per shape, at least */

/* Llama-3-8B's attention: bf16, head dim 128, 8 KV heads, 32 q heads. */
#define DIM		128
#define N_KV		8
#define N_Q		32
#define TPP		16

struct shape {
	uint32_t batch, ctx;
};

static const struct shape cpu_shapes[] = {
	{ 1, 1024 }, { 1, 8192 }, { 1, 32768 }, { 8, 4096 }, { 32, 1024 }, { 32, 4096 },
};
static const struct shape cpu_quick[] = { { 1, 4096 }, { 8, 1024 } };

struct attn_opts {
	uint32_t threads;
	bool gpu, quick;
	const char *isa;
};

/* ---- a pool and a batch ---- */

struct bench_pool {
	struct kv_attn_kv kv;
	uint32_t n_layers;
	uint32_t *page_indptr, *pages, *seq_lens;
	struct kv_attn_batch b;
	uint64_t kv_bytes;		/* K + V read by one layer's decode */
};

static void pool_free(struct bench_pool *bp)
{
	free(bp->kv.base);
	free(bp->page_indptr);
	free(bp->pages);
	free(bp->seq_lens);
}

/* bf16 values in +-[2^-7, 2): no NaN, no subnormal, nothing slow. */
static void fill_bf16(void *p, size_t bytes, uint64_t seed)
{
	uint64_t *w = p, x = seed | 1;
	size_t i;

	for (i = 0; i < bytes / 8; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		w[i] = (x & 0x83ff83ff83ff83ffull) | 0x3c003c003c003c00ull;
	}
}

static int pool_init(struct bench_pool *bp, const struct shape *s, bool host_mem)
{
	struct kvs_geometry *g = &bp->kv.geom;
	uint32_t pages_per_req = (s->ctx + TPP - 1) / TPP, n_pages, r, i;
	uint64_t layer_bytes;

	memset(bp, 0, sizeof(*bp));
	g->n_kv_heads = N_KV;
	g->head_dim = DIM;
	g->tokens_per_page = TPP;
	g->dtype = KVS_DTYPE_BF16;
	layer_bytes = 2ull * N_KV * DIM * 2 * s->ctx * s->batch;
	bp->kv_bytes = layer_bytes;
	bp->n_layers = (PASS_BYTES + layer_bytes - 1) / layer_bytes;
	g->n_layers = bp->n_layers;
	g->page_bytes = kv_page_bytes(g);
	n_pages = pages_per_req * s->batch;
	bp->kv.n_pages = n_pages;
	bp->page_indptr = malloc((s->batch + 1) * sizeof(uint32_t));
	bp->pages = malloc(n_pages * sizeof(uint32_t));
	bp->seq_lens = malloc(s->batch * sizeof(uint32_t));
	if (!bp->page_indptr || !bp->pages || !bp->seq_lens)
		return -ENOMEM;
	for (i = 0; i < n_pages; i++)
		bp->pages[i] = i;
	for (i = n_pages - 1; i > 0; i--) {
		uint32_t j = bench_mix64(i) % (i + 1), t = bp->pages[i];

		bp->pages[i] = bp->pages[j];
		bp->pages[j] = t;
	}
	for (r = 0; r <= s->batch; r++)
		bp->page_indptr[r] = r * pages_per_req;
	for (r = 0; r < s->batch; r++)
		bp->seq_lens[r] = s->ctx;
	bp->b.n_reqs = s->batch;
	bp->b.max_seq_len = s->ctx;
	bp->b.page_indptr = bp->page_indptr;
	bp->b.pages = bp->pages;
	bp->b.seq_lens = bp->seq_lens;
	if (!host_mem)
		return 0;
	bp->kv.base = aligned_alloc(4096, (size_t)n_pages * g->page_bytes);
	if (!bp->kv.base)
		return -ENOMEM;
	fill_bf16(bp->kv.base, (size_t)n_pages * g->page_bytes, 0x1234);
	return 0;
}

/* ---- the memory probe ---- */

struct probe_arg {
	const uint64_t *p;
	size_t words;
	uint64_t sum;
};

static void *probe_thread(void *arg)
{
	struct probe_arg *a = arg;
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
	size_t i;

	for (i = 0; i + 4 <= a->words; i += 4) {
		s0 += a->p[i];
		s1 += a->p[i + 1];
		s2 += a->p[i + 2];
		s3 += a->p[i + 3];
	}
	a->sum = s0 + s1 + s2 + s3;
	return NULL;
}

/*
 * Median bytes/s of @reps streaming reads of @buf (PROBE_BYTES) over
 * @threads threads.
 */
static double probe_read_bw(const uint64_t *buf, uint32_t threads, uint32_t reps)
{
	size_t words = PROBE_BYTES / 8, per = words / threads;
	struct probe_arg args[256];
	uint64_t ns[16], sink = 0;
	pthread_t tids[256];
	uint32_t rep, t;

	for (rep = 0; rep < reps; rep++) {
		uint64_t t0 = bench_now_ns();

		for (t = 0; t < threads; t++) {
			args[t].p = buf + t * per;
			args[t].words = per;
			if (t && pthread_create(&tids[t], NULL, probe_thread, &args[t]))
				args[t].words = 0;
		}
		probe_thread(&args[0]);
		for (t = 1; t < threads; t++)
			pthread_join(tids[t], NULL);
		ns[rep] = bench_now_ns() - t0;
		for (t = 0; t < threads; t++)
			sink += args[t].sum;
	}
	if (sink == 42)		/* keep the sums alive */
		fprintf(stderr, "\n");
	return (double)per * threads * 8 / bench_median(ns, reps) * 1e9;
}

/* ---- CPU ---- */

/*
 * One shape: the probe right before it (memory bandwidth on a shared
 * machine moves from minute to minute), then the decode passes.
 */
static int cpu_row(const struct shape *s, struct kv_attn_workers *w,
		   const uint64_t *probe_buf, uint32_t threads)
{
	struct kv_attn_params p = { .n_q_heads = N_Q, .workers = w };
	uint64_t samples[64], t_end, t0;
	struct bench_pool bp;
	uint32_t n = 0, layer;
	float *q, *out;
	size_t qn = (size_t)s->batch * N_Q * DIM;
	double bw, probe;
	int ret;

	ret = pool_init(&bp, s, true);
	q = malloc(qn * sizeof(float));
	out = malloc(qn * sizeof(float));
	if (ret || !q || !out) {
		pool_free(&bp);
		free(q);
		free(out);
		return -ENOMEM;
	}
	for (size_t i = 0; i < qn; i++)
		q[i] = (float)(bench_mix64(i) % 2001) / 1000.0f - 1.0f;
	probe = probe_read_bw(probe_buf, threads, 5) / 1e9;
	/* One untimed pass: page faults, the pool's scratch, the threads. */
	t_end = bench_now_ns() + MIN_NS;
	for (int pass = -1; n < 64 && (pass < MIN_PASSES || bench_now_ns() < t_end); pass++) {
		t0 = bench_now_ns();
		for (layer = 0; layer < bp.n_layers; layer++) {
			bp.kv.layer = layer;
			ret = kv_attn_decode_ref(&bp.kv, &bp.b, &p, q, out, NULL);
			if (ret)
				goto out;
		}
		if (pass >= 0)
			samples[n++] = (bench_now_ns() - t0) / bp.n_layers;
	}
	bw = bp.kv_bytes / (double)bench_median(samples, n);	/* GB/s */
	printf("%5u  %7u  %6u  %9.1f  %9.3f  %11.2f  %10.2f  %7.0f%%\n", s->batch, s->ctx,
	       bp.n_layers, bp.kv_bytes / 1048576.0, bench_median(samples, n) / 1e6,
	       bw, probe, 100 * bw / probe);
out:
	pool_free(&bp);
	free(q);
	free(out);
	return ret;
}

static int cmd_cpu(const struct attn_opts *o)
{
	const struct shape *shapes = o->quick ? cpu_quick : cpu_shapes;
	size_t n = o->quick ? sizeof(cpu_quick) / sizeof(cpu_quick[0])
			    : sizeof(cpu_shapes) / sizeof(cpu_shapes[0]);
	struct kv_attn_workers *w = kv_attn_workers_create(o->threads);
	uint64_t *probe_buf = aligned_alloc(4096, PROBE_BYTES);
	int ret = 0;
	size_t i;

	if (!w || !probe_buf) {
		fprintf(stderr, "kvbench attn: cannot start %u threads\n", o->threads);
		kv_attn_workers_destroy(w);
		free(probe_buf);
		return 1;
	}
	if (o->isa && kv_attn_ref_set_isa(o->isa)) {
		fprintf(stderr, "kvbench attn: --isa %s: not available on this CPU\n", o->isa);
		kv_attn_workers_destroy(w);
		free(probe_buf);
		return 2;
	}
	memset(probe_buf, 1, PROBE_BYTES);
	printf("# kvbench attn: C reference decode, bf16, page %u, head dim %u, %u KV heads, "
	       "%u q heads; %u threads, \"%s\" inner loops\n", TPP, DIM, N_KV, N_Q,
	       o->threads, kv_attn_ref_isa());
	printf("# probe: streaming read of %llu MiB on %u threads, median of 5, just "
	       "before each row\n", PROBE_BYTES >> 20, o->threads);
	printf("# decode: K+V bytes of one layer / median time per layer (passes walk every layer)\n");
	printf("batch  context  layers  KV MiB/L   ms/layer  decode GB/s  probe GB/s  of probe\n");
	for (i = 0; i < n && !ret; i++)
		ret = cpu_row(&shapes[i], w, probe_buf, o->threads);
	kv_attn_workers_destroy(w);
	free(probe_buf);
	if (ret)
		fprintf(stderr, "kvbench attn: decode failed: %s\n", strerror(-ret));
	return ret ? 1 : 0;
}

/* ---- GPU ---- */

static const uint32_t gpu_batches[] = { 1, 8, 32, 64, 128 };
static const uint32_t gpu_ctxs[] = { 1024, 4096, 16384, 32768 };

/* Device-to-device cudaMemcpy, bytes read + written per second. */
static double gpu_copy_bw(void)
{
	const size_t bytes = 1ull << 30;
	void *a = NULL, *b = NULL;
	uint64_t t0, ns;
	double bw = 0;
	int i;

	if (kv_cuda_malloc(&a, bytes) || kv_cuda_malloc(&b, bytes))
		goto out;
	kv_cuda_memset(a, 1, bytes);
	kv_cuda_memcpy(b, a, bytes);
	kv_cuda_sync();
	t0 = bench_now_ns();
	for (i = 0; i < 20; i++)
		kv_cuda_memcpy(i % 2 ? a : b, i % 2 ? b : a, bytes);
	if (kv_cuda_sync())
		goto out;
	ns = bench_now_ns() - t0;
	bw = 2.0 * bytes * 20 / ns * 1e9;
out:
	kv_cuda_free(a);
	kv_cuda_free(b);
	return bw;
}

/*
 * The read-only kernel (bench_read.cu) over 1 GiB, bytes read per second:
 * the most a kernel that only reads (decode) can reach.  Median of 5
 * groups of 10 reads, after one untimed.
 */
static double gpu_read_bw(void)
{
	const size_t bytes = 1ull << 30;
	size_t sink_bytes = kvbench_read_sink_bytes();
	uint64_t ns[5], t0;
	void *a = NULL, *sink = NULL;
	double bw = 0;
	int g, i, ret;

	if (!sink_bytes || kv_cuda_malloc(&a, bytes) || kv_cuda_malloc(&sink, sink_bytes))
		goto out;
	kv_cuda_memset(a, 1, bytes);
	ret = kvbench_read_launch(a, bytes, sink);
	if (ret || kv_cuda_sync())
		goto out;
	for (g = 0; g < 5; g++) {
		t0 = bench_now_ns();
		for (i = 0; i < 10 && !ret; i++)
			ret = kvbench_read_launch(a, bytes, sink);
		if (ret || kv_cuda_sync())
			goto out;
		ns[g] = (bench_now_ns() - t0) / 10;
	}
	bw = (double)bytes / bench_median(ns, 5) * 1e9;
out:
	kv_cuda_free(a);
	kv_cuda_free(sink);
	return bw;
}

/* Copy a host array to a new device buffer. */
static void *to_device(const void *src, size_t bytes)
{
	void *d = NULL;

	if (kv_cuda_malloc(&d, bytes ? bytes : 1))
		return NULL;
	if (bytes && kv_cuda_memcpy(d, src, bytes)) {
		kv_cuda_free(d);
		return NULL;
	}
	return d;
}

/*
 * Random bf16 (as the CPU table uses) over @bytes of device memory, a
 * host chunk at a time: constant data would make every score equal and
 * is not what a kernel meets.
 */
static int gpu_fill_bf16(void *dev, size_t bytes, uint64_t seed)
{
	const size_t chunk = 64ull << 20;
	void *h = malloc(chunk);
	size_t off, n;
	int ret = h ? 0 : -ENOMEM;

	if (h)
		fill_bf16(h, chunk, seed);
	for (off = 0; !ret && off < bytes; off += n) {
		n = bytes - off < chunk ? bytes - off : chunk;
		ret = kv_cuda_memcpy((char *)dev + off, h, n);
	}
	free(h);
	return ret;
}

/* One pass: decode through every layer, as a forward pass does. */
static int gpu_pass(struct bench_pool *bp, const struct kv_attn_batch *db,
		    const struct kv_attn_params *p, const void *q, void *out)
{
	uint32_t layer;
	int ret = 0;

	for (layer = 0; !ret && layer < bp->n_layers; layer++) {
		bp->kv.layer = layer;
		ret = kv_attn_decode_cuda(&bp->kv, db, p, q, out, NULL);
	}
	return ret;
}

#define GPU_GROUPS	9		/* timed groups of passes: the median is reported */
#define GPU_GROUP_NS	20000000ull	/* a group lasts about this: the sync is noise */

/* Decode rows at batch >= GOAL_BATCH: at least GOAL_OF_READ of the read kernel. */
#define GOAL_BATCH	32
#define GOAL_OF_READ	0.85

struct gpu_ref {
	double copy, read;		/* bytes/s */
	double worst_goal;		/* the lowest decode / read at batch >= GOAL_BATCH */
	struct shape worst;
};

/*
 * What a GPU row runs on: a pool of one shape in device memory with random
 * bf16 KV, random q and room for the output, the batch's page tables on
 * the device (b is bp.b pointing at them), and the call's parameters.
 */
struct gpu_setup {
	struct bench_pool bp;
	struct kv_attn_batch b;
	struct kv_attn_params p;
	void *base, *q, *out;
	uint32_t *indptr, *pages, *seq;
};

static void gpu_setup_free(struct gpu_setup *d)
{
	kv_cuda_free(d->indptr);
	kv_cuda_free(d->pages);
	kv_cuda_free(d->seq);
	kv_cuda_free(d->q);
	kv_cuda_free(d->out);
	kv_cuda_free(d->base);
	d->bp.kv.base = NULL;
	pool_free(&d->bp);
}

/* Shape @s, @qn q (and output) elements: 0 or -errno; gpu_setup_free() either way. */
static int gpu_setup_init(struct gpu_setup *d, const struct shape *s, size_t qn)
{
	size_t pool_bytes;
	int ret;

	memset(d, 0, sizeof(*d));
	d->p.n_q_heads = N_Q;
	ret = pool_init(&d->bp, s, false);
	if (ret)
		return ret;
	pool_bytes = (size_t)d->bp.kv.n_pages * d->bp.kv.geom.page_bytes;
	if (kv_cuda_malloc(&d->base, pool_bytes) || kv_cuda_malloc(&d->q, qn * 2) ||
	    kv_cuda_malloc(&d->out, qn * 2))
		return -ENOMEM;
	ret = gpu_fill_bf16(d->base, pool_bytes, 0x1234);
	if (!ret)
		ret = gpu_fill_bf16(d->q, qn * 2, 0x5678);
	if (ret)
		return ret;
	d->indptr = to_device(d->bp.page_indptr, (s->batch + 1) * sizeof(uint32_t));
	d->pages = to_device(d->bp.pages, d->bp.kv.n_pages * sizeof(uint32_t));
	d->seq = to_device(d->bp.seq_lens, s->batch * sizeof(uint32_t));
	if (!d->indptr || !d->pages || !d->seq)
		return -ENOMEM;
	d->bp.kv.base = d->base;
	d->b = d->bp.b;
	d->b.page_indptr = d->indptr;
	d->b.pages = d->pages;
	d->b.seq_lens = d->seq;
	return 0;
}

/*
 * The median time of one @pass over @d: one untimed call, one timed alone
 * to size groups of about GPU_GROUP_NS, then GPU_GROUPS timed groups.
 * 0 or -errno.
 */
static int gpu_time(int (*pass)(struct gpu_setup *d), struct gpu_setup *d, uint64_t *median)
{
	uint64_t samples[GPU_GROUPS], t0, ns;
	uint32_t reps, i, g;
	int ret;

	ret = pass(d);
	if (!ret)
		ret = kv_cuda_sync();
	t0 = bench_now_ns();
	if (!ret)
		ret = pass(d);
	if (!ret)
		ret = kv_cuda_sync();
	if (ret)
		return ret;
	ns = bench_now_ns() - t0;
	reps = (uint32_t)(GPU_GROUP_NS / (ns ? ns : 1)) + 1;
	reps = reps > 1000 ? 1000 : reps;
	for (g = 0; g < GPU_GROUPS; g++) {
		t0 = bench_now_ns();
		for (i = 0; !ret && i < reps; i++)
			ret = pass(d);
		if (!ret)
			ret = kv_cuda_sync();
		if (ret)
			return ret;
		samples[g] = (bench_now_ns() - t0) / reps;
	}
	*median = bench_median(samples, GPU_GROUPS);
	return 0;
}

static int gpu_decode_pass(struct gpu_setup *d)
{
	return gpu_pass(&d->bp, &d->b, &d->p, d->q, d->out);
}

static int gpu_row(const struct shape *s, struct gpu_ref *ref)
{
	struct gpu_setup d;
	void *ws = NULL;
	uint64_t ns;
	double bw;
	int ret;

	ret = gpu_setup_init(&d, s, (size_t)s->batch * N_Q * DIM);
	if (ret)
		goto out;
	ret = -ENOMEM;
	d.p.workspace_bytes = kv_attn_decode_cuda_workspace(&d.bp.kv, &d.b, &d.p);
	if (d.p.workspace_bytes && kv_cuda_malloc(&ws, d.p.workspace_bytes))
		goto out;
	d.p.workspace = ws;
	ret = gpu_time(gpu_decode_pass, &d, &ns);
	if (ret)
		goto out;
	bw = (double)d.bp.kv_bytes * d.bp.n_layers / ns * 1e9;
	printf("decode %5u  %7u  %6u  %9.1f  %9.2f  %8.3f  %7.0f%%  %7.0f%%\n", s->batch,
	       s->ctx, d.bp.n_layers, d.bp.kv_bytes / 1048576.0, ns / 1e3 / d.bp.n_layers,
	       bw / 1e12, 100 * bw / ref->read, 100 * bw / ref->copy);
	if (s->batch >= GOAL_BATCH && bw / ref->read < ref->worst_goal) {
		ref->worst_goal = bw / ref->read;
		ref->worst = *s;
	}
out:
	kv_cuda_free(ws);
	gpu_setup_free(&d);
	return ret;
}

/*
 * Extend (prefill) of one request: NEW tokens over a cached PREFIX, causal,
 * every q head; FLOP = 4 x D x q heads x (keys each new token sees, summed):
 * 2 x D for q.k and 2 x D for p.v per (q head, key).
 */
static const uint32_t ext_news[] = { 1024, 4096, 8192 };
static const uint32_t ext_prefixes[] = { 0, 8192, 32768 };

static double ext_flop(uint32_t n_new, uint32_t prefix)
{
	return 4.0 * DIM * N_Q * ((double)n_new * prefix + (double)n_new * (n_new + 1) / 2);
}

static int gpu_extend_pass(struct gpu_setup *d)
{
	return kv_attn_extend_cuda(&d->bp.kv, &d->b, &d->p, d->q, d->out, NULL);
}

static int gpu_extend_row(uint32_t n_new, uint32_t prefix)
{
	struct shape s = { 1, prefix + n_new };
	uint32_t q_indptr[2] = { 0, n_new }, *d_qptr = NULL;
	struct gpu_setup d;
	uint64_t ns;
	int ret;

	ret = gpu_setup_init(&d, &s, (size_t)n_new * N_Q * DIM);
	if (ret)
		goto out;
	d_qptr = to_device(q_indptr, sizeof(q_indptr));
	ret = -ENOMEM;
	if (!d_qptr)
		goto out;
	d.bp.kv.layer = 0;
	d.b.q_indptr = d_qptr;
	d.b.max_q_len = n_new;
	ret = gpu_time(gpu_extend_pass, &d, &ns);
	if (ret)
		goto out;
	printf("extend %5u  %7u  %10.1f  %9.2f\n", n_new, prefix, ns / 1e3,
	       ext_flop(n_new, prefix) / ns / 1e3);
out:
	kv_cuda_free(d_qptr);
	gpu_setup_free(&d);
	return ret;
}

static int cmd_gpu(void)
{
	struct gpu_ref ref = { .worst_goal = 1e9 };
	char name[128] = "";
	uint32_t i, j;
	int ret = 0;

	if (kv_cuda_available() <= 0) {
		printf("# kvbench attn --gpu: no GPU (%s): nothing to measure\n", kv_cuda_error());
		return 0;
	}
	kv_cuda_device_name(name, sizeof(name));
	ref.copy = gpu_copy_bw();
	ref.read = gpu_read_bw();
	if (ref.copy <= 0 || ref.read <= 0) {
		fprintf(stderr, "kvbench attn --gpu: the %s failed: %s\n",
			ref.copy <= 0 ? "device copy" : "read kernel", kv_cuda_error());
		return 1;
	}
	printf("# kvbench attn --gpu: CUDA decode on %s, bf16, page %u, head dim %u, "
	       "%u KV heads, %u q heads\n", name, TPP, DIM, N_KV, N_Q);
	printf("# read-only kernel (16-byte loads, folded; the reference): %.3f TB/s read\n",
	       ref.read / 1e12);
	printf("# device-to-device cudaMemcpy (read + write): %.3f TB/s\n", ref.copy / 1e12);
	printf("# eager launches, one per layer; median of %u groups of passes of ~%llu ms\n",
	       GPU_GROUPS, GPU_GROUP_NS / 1000000);
	printf("       batch  context  layers  KV MiB/L   us/layer      TB/s   of read   of copy\n");
	for (i = 0; i < sizeof(gpu_batches) / sizeof(gpu_batches[0]) && !ret; i++)
		for (j = 0; j < sizeof(gpu_ctxs) / sizeof(gpu_ctxs[0]) && !ret; j++) {
			struct shape s = { gpu_batches[i], gpu_ctxs[j] };

			ret = gpu_row(&s, &ref);
		}
	if (!ret) {
		printf("# extend: one request, NEW tokens over a cached PREFIX, causal; "
		       "FLOP = 4 x D x q heads x keys seen, summed over the new tokens\n");
		printf("         new   prefix    us/call   TFLOP/s\n");
	}
	for (i = 0; i < sizeof(ext_news) / sizeof(ext_news[0]) && !ret; i++)
		for (j = 0; j < sizeof(ext_prefixes) / sizeof(ext_prefixes[0]) && !ret; j++)
			ret = gpu_extend_row(ext_news[i], ext_prefixes[j]);
	if (ret) {
		fprintf(stderr, "kvbench attn --gpu: %s (%s)\n", strerror(-ret), kv_cuda_error());
		return 1;
	}
	/* The goal these figures decide alone; those against torch need attn_torch.py. */
	printf("goal decode >= %.0f%% of the read kernel at batch >= %u: %s (lowest %.0f%%, "
	       "batch %u context %u)\n", 100 * GOAL_OF_READ, GOAL_BATCH,
	       ref.worst_goal >= GOAL_OF_READ ? "met" : "NOT met", 100 * ref.worst_goal,
	       ref.worst.batch, ref.worst.ctx);
	return 0;
}

static void attn_usage(FILE *f)
{
	fputs("usage: kvbench attn [--threads N] [--quick] [--isa base|avx2|avx512]\n"
	      "       kvbench attn --gpu\n\n"
	      "Decode bandwidth (K and V bytes read per second) of the paged attention\n"
	      "code, bf16, page size 16, head dim 128, 8 KV heads, 32 q heads.\n"
	      "CPU: the C reference on N threads (default: every online CPU) for batch\n"
	      "1..32 and context 1k..32k, next to a streaming read of memory on the\n"
	      "same number of threads.  --gpu: the CUDA kernels for batch 1..128 and\n"
	      "context 1k..32k, against a read-only kernel and a device-to-device\n"
	      "copy, then extend (1k..8k new tokens over a 0..32k prefix) in TFLOP/s;\n"
	      "with no GPU it says so and succeeds.\n", f);
}

int bench_attn_main(int argc, char **argv)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct attn_opts o = { .threads = ncpu > 0 ? (uint32_t)ncpu : 1 };
	int i;

	for (i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--gpu")) {
			o.gpu = true;
		} else if (!strcmp(argv[i], "--quick")) {
			o.quick = true;
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			attn_usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
			if (bench_parse_u32(argv[++i], 1, 256, &o.threads)) {
				fprintf(stderr, "kvbench attn: --threads: '%s' is not 1..256\n",
					argv[i]);
				return 2;
			}
		} else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
			o.isa = argv[++i];
		} else {
			fprintf(stderr, "kvbench attn: unknown option '%s'\n", argv[i]);
			attn_usage(stderr);
			return 2;
		}
	}
	return o.gpu ? cmd_gpu() : cmd_cpu(&o);
}
