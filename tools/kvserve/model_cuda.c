// SPDX-License-Identifier: GPL-2.0
/*
 * kvserve's model with its attention on the CUDA kernels of <kvshare/attn.h>
 * (kv_attn_write_cuda, kv_attn_extend_cuda, kv_attn_decode_cuda) over a
 * device pool: the KV pages kvshared shares between the workers are written
 * and read by the kernels only, never by the CPU.
 *
 * Only attention moves to the device.  The projections, norms and the
 * greedy choice stay on the CPU, in model.c, on purpose: what kvserve puts
 * on trial is the shared KV memory as the kernels see it (pages written by
 * one process's kernels, read by another's), and the same projections on
 * both sides keep the verification's recompute (model.c on the C
 * reference) comparable operation by operation.  So each layer stages its
 * q, k and v through device buffers: rounded to the pool's dtype on the
 * host (the kernels take fp16/bf16 tensors, and the reference rounds K and
 * V to that dtype the same way, so the KV bytes of a layer fed the same
 * activations are the same), copied in, and the output copied back.
 *
 * Every buffer is allocated once per model (the page tables and the decode
 * workspace grow when a batch needs more), every CUDA call is checked, and
 * a failure is reported with the runtime's reason (kv_cuda_error()).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_cuda.h"

struct model_cuda {
	uint32_t dtype, max_rows, q_row, kv_row;	/* elements in a q and a k row */
	void *q, *k, *v, *out;		/* device: [max_rows][row] of dtype */
	void *tables;			/* device: indptr, q_indptr, seq_lens, pages */
	size_t tables_cap;		/* bytes */
	void *ws;			/* device: decode's split-KV workspace */
	size_t ws_cap;
	uint16_t *host;			/* staging: [max_rows][q_row] */
};

static int cuda_failed(const char *what, int ret)
{
	fprintf(stderr, "kvserve: CUDA: %s failed: %s (%s)\n", what, strerror(-ret),
		kv_cuda_error());
	return ret;
}

void model_cuda_destroy(struct model_cuda *c)
{
	if (!c)
		return;
	kv_cuda_free(c->q);
	kv_cuda_free(c->k);
	kv_cuda_free(c->v);
	kv_cuda_free(c->out);
	kv_cuda_free(c->tables);
	kv_cuda_free(c->ws);
	free(c->host);
	free(c);
}

int model_cuda_create(const struct kvs_geometry *g, uint32_t n_q_heads, uint32_t max_rows,
		      struct model_cuda **out)
{
	struct model_cuda *c;
	size_t qb, kb;
	int ret;

	*out = NULL;
	if (g->dtype != KVS_DTYPE_F16 && g->dtype != KVS_DTYPE_BF16)
		return -EOPNOTSUPP;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->dtype = g->dtype;
	c->max_rows = max_rows;
	c->q_row = n_q_heads * g->head_dim;
	c->kv_row = g->n_kv_heads * g->head_dim;
	qb = (size_t)max_rows * c->q_row * 2;
	kb = (size_t)max_rows * c->kv_row * 2;
	c->host = malloc(qb);
	if (!c->host) {
		free(c);
		return -ENOMEM;
	}
	ret = kv_cuda_malloc(&c->q, qb);
	if (!ret)
		ret = kv_cuda_malloc(&c->out, qb);
	if (!ret)
		ret = kv_cuda_malloc(&c->k, kb);
	if (!ret)
		ret = kv_cuda_malloc(&c->v, kb);
	if (ret) {
		cuda_failed("allocating the model's device buffers", ret);
		model_cuda_destroy(c);
		return ret;
	}
	*out = c;
	return 0;
}

/* A device buffer of at least @bytes, grown (its contents dropped) when smaller. */
static int reserve(void **buf, size_t *cap, size_t bytes, const char *what)
{
	int ret;

	if (bytes <= *cap)
		return 0;
	ret = kv_cuda_free(*buf);
	*buf = NULL;
	*cap = 0;
	if (!ret)
		ret = kv_cuda_malloc(buf, bytes);
	if (ret)
		return cuda_failed(what, ret);
	*cap = bytes;
	return 0;
}

int model_cuda_tables(struct model_cuda *c, const struct kv_attn_batch *b,
		      struct kv_attn_batch *db)
{
	const uint32_t n = b->n_reqs, n_pages = b->page_indptr[n];
	const size_t words = 2 * ((size_t)n + 1) + n + n_pages;
	uint32_t *t;
	int ret;

	ret = reserve(&c->tables, &c->tables_cap, words * sizeof(uint32_t),
		      "allocating the page tables");
	if (ret)
		return ret;
	t = c->tables;
	*db = *b;
	db->page_indptr = t;
	db->q_indptr = b->q_indptr ? t + n + 1 : NULL;
	db->seq_lens = t + 2 * (n + 1);
	db->pages = t + 2 * (n + 1) + n;
	ret = kv_cuda_memcpy(t, b->page_indptr, (n + 1) * sizeof(uint32_t));
	if (!ret && b->q_indptr)
		ret = kv_cuda_memcpy(t + n + 1, b->q_indptr, (n + 1) * sizeof(uint32_t));
	if (!ret)
		ret = kv_cuda_memcpy((void *)db->seq_lens, b->seq_lens, n * sizeof(uint32_t));
	if (!ret)
		ret = kv_cuda_memcpy((void *)db->pages, b->pages, n_pages * sizeof(uint32_t));
	return ret ? cuda_failed("copying the page tables to the device", ret) : 0;
}

/* @n floats to the device as the pool's dtype, through the staging buffer. */
static int upload(struct model_cuda *c, void *dst, const float *src, size_t n)
{
	size_t i;

	if (c->dtype == KVS_DTYPE_BF16)
		for (i = 0; i < n; i++)
			c->host[i] = kv_f32_to_bf16(src[i]);
	else
		for (i = 0; i < n; i++)
			c->host[i] = kv_f32_to_f16(src[i]);
	return kv_cuda_memcpy(dst, c->host, n * 2);
}

static int download(struct model_cuda *c, float *dst, const void *src, size_t n)
{
	size_t i;
	int ret = kv_cuda_memcpy(c->host, src, n * 2);

	if (ret)
		return ret;
	if (c->dtype == KVS_DTYPE_BF16)
		for (i = 0; i < n; i++)
			dst[i] = kv_bf16_to_f32(c->host[i]);
	else
		for (i = 0; i < n; i++)
			dst[i] = kv_f16_to_f32(c->host[i]);
	return 0;
}

int model_cuda_layer(struct model_cuda *c, const struct kv_attn_kv *kv,
		     const struct kv_attn_batch *db, const struct kv_attn_params *p, bool decode,
		     uint32_t rows, const float *q, const float *k, const float *v, float *out)
{
	struct kv_attn_params dp = *p;
	const char *what = "copying k and v to the device";
	size_t ws;
	int ret;

	if (rows > c->max_rows)
		return -EINVAL;
	ret = upload(c, c->k, k, (size_t)rows * c->kv_row);
	if (!ret)
		ret = upload(c, c->v, v, (size_t)rows * c->kv_row);
	if (!ret) {
		what = "the KV-write kernel";
		ret = kv_attn_write_cuda(kv, db, &dp, c->k, c->v);
	}
	if (!ret) {
		what = "copying q to the device";
		ret = upload(c, c->q, q, (size_t)rows * c->q_row);
	}
	if (ret)
		return cuda_failed(what, ret);
	if (decode) {
		ws = kv_attn_decode_cuda_workspace(kv, db, &dp);
		ret = reserve(&c->ws, &c->ws_cap, ws, "allocating decode's workspace");
		if (ret)
			return ret;
		dp.workspace = c->ws;
		dp.workspace_bytes = c->ws_cap;
		what = "the decode kernel";
		ret = kv_attn_decode_cuda(kv, db, &dp, c->q, c->out, NULL);
	} else {
		what = "the extend kernel";
		ret = kv_attn_extend_cuda(kv, db, &dp, c->q, c->out, NULL);
	}
	/* Launches are asynchronous: their faults show at the sync. */
	if (!ret) {
		what = decode ? "the decode kernels (at sync)" : "the extend kernel (at sync)";
		ret = kv_cuda_sync();
	}
	if (!ret) {
		what = "copying the output to the host";
		ret = download(c, out, c->out, (size_t)rows * c->q_row);
	}
	return ret ? cuda_failed(what, ret) : 0;
}
