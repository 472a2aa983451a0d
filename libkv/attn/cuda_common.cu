// SPDX-License-Identifier: MIT
/*
 * CUDA side of <kvshare/attn.h>: device discovery, errors, the memory
 * helpers C callers use, the argument checks, and the KV write.
 *
 * Linked with libcudart_static: a machine with no driver gets
 * cudaErrorInsufficientDriver (or NoDevice) from the first call, which
 * kv_cuda_available() turns into 0.
 */
#include <stdio.h>
#include <string.h>

#include "cuda_internal.cuh"

static __thread char last_error[256] = "no CUDA call made yet";

int kv_cuda_fail(cudaError_t e)
{
	snprintf(last_error, sizeof(last_error), "%s (%s)", cudaGetErrorString(e),
		 cudaGetErrorName(e));
	/* Clear the sticky-less error so the next call starts clean. */
	cudaGetLastError();
	switch (e) {
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
		return -ENODEV;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidConfiguration:
		return -EINVAL;
	default:
		return -EIO;
	}
}

static int check(cudaError_t e)
{
	return e == cudaSuccess ? 0 : kv_cuda_fail(e);
}

extern "C" int kv_cuda_available(void)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess) {
		kv_cuda_fail(e);
		return 0;
	}
	if (!n)
		snprintf(last_error, sizeof(last_error), "no CUDA device");
	return n;
}

extern "C" const char *kv_cuda_error(void)
{
	return last_error;
}

extern "C" int kv_cuda_device_name(char *buf, size_t len)
{
	struct cudaDeviceProp prop;
	int dev, ret;

	ret = check(cudaGetDevice(&dev));
	if (!ret)
		ret = check(cudaGetDeviceProperties(&prop, dev));
	if (!ret && len)
		snprintf(buf, len, "%s (sm_%d%d, %d SMs)", prop.name, prop.major,
			 prop.minor, prop.multiProcessorCount);
	return ret;
}

int kv_cuda_sm_count(void)
{
	static int cached[64];
	int dev = 0, n = 0;

	if (cudaGetDevice(&dev) != cudaSuccess)
		return 0;
	if (dev >= 0 && dev < 64 && cached[dev])
		return cached[dev];
	if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
		return 0;
	if (dev >= 0 && dev < 64)
		cached[dev] = n;
	return n;
}

extern "C" int kv_cuda_malloc(void **p, size_t bytes)
{
	return check(cudaMalloc(p, bytes));
}

extern "C" int kv_cuda_free(void *p)
{
	return p ? check(cudaFree(p)) : 0;
}

extern "C" int kv_cuda_memcpy(void *dst, const void *src, size_t bytes)
{
	return check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

extern "C" int kv_cuda_memset(void *p, int byte, size_t bytes)
{
	return check(cudaMemset(p, byte, bytes));
}

extern "C" int kv_cuda_sync(void)
{
	return check(cudaDeviceSynchronize());
}

int kv_cuda_check(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
		  const struct kv_attn_params *p)
{
	const struct kvs_geometry *g;

	if (!kv || !b || !p || !kv->base || !kv->n_pages)
		return -EINVAL;
	g = &kv->geom;
	if (!g->n_layers || !g->n_kv_heads || !g->tokens_per_page ||
	    kv->layer >= g->n_layers)
		return -EINVAL;
	if (g->dtype != KVS_DTYPE_F16 && g->dtype != KVS_DTYPE_BF16)
		return -EOPNOTSUPP;
	if (g->head_dim != 64 && g->head_dim != 128 && g->head_dim != 256)
		return -EOPNOTSUPP;
	if (g->page_bytes && g->page_bytes != kv_page_bytes(g))
		return -EINVAL;
	if (!kv_aligned16(kv->base) || g->n_kv_heads > 65535 || b->n_reqs > 65535)
		return -EINVAL;
	if (b->n_reqs && (!b->page_indptr || !b->pages || !b->seq_lens))
		return -EINVAL;
	if (!p->n_q_heads || p->n_q_heads % g->n_kv_heads || !isfinite(p->scale))
		return -EINVAL;
	return 0;
}

/*
 * KV write: block (request, token slice); one token's K (or V) for every
 * head is one contiguous row on both sides (tensor [row][head][dim], pool
 * [slot][head][dim]), so the copy is a row of 16-byte vectors whatever
 * the dtype.
 */
__global__ void kv_write_kernel(struct kv_dev_layer L, const uint32_t *page_indptr,
				const uint32_t *pages, const uint32_t *seq_lens,
				const uint32_t *q_indptr, const uint4 *k, const uint4 *v,
				uint32_t vecs_per_row)
{
	const uint32_t r = blockIdx.x;
	const uint32_t row0 = q_indptr ? q_indptr[r] : r;
	const uint32_t n_new = q_indptr ? q_indptr[r + 1] - row0 : 1;
	const uint32_t *pt = pages + page_indptr[r];
	const uint32_t seq = seq_lens[r];
	char *base = const_cast<char *>(L.base);

	for (uint32_t i = blockIdx.y; i < n_new; i += gridDim.y) {
		uint32_t pos = seq - n_new + i;
		uint64_t off = (uint64_t)pt[pos / L.tpp] * L.page_bytes + (pos % L.tpp) * L.tok_stride;
		uint4 *dk = reinterpret_cast<uint4 *>(base + L.k_off + off);
		uint4 *dv = reinterpret_cast<uint4 *>(base + L.v_off + off);
		const uint4 *sk = k + (size_t)(row0 + i) * vecs_per_row;
		const uint4 *sv = v + (size_t)(row0 + i) * vecs_per_row;

		for (uint32_t j = threadIdx.x; j < vecs_per_row; j += blockDim.x) {
			dk[j] = sk[j];
			dv[j] = sv[j];
		}
	}
}

extern "C" int kv_attn_write_cuda(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
				  const struct kv_attn_params *p, const void *k, const void *v)
{
	struct kv_attn_params dummy = {};
	cudaStream_t stream;
	uint32_t vecs, y;
	int ret;

	/* The write needs no q heads: borrow the KV heads' count. */
	dummy.n_q_heads = kv ? kv->geom.n_kv_heads : 1;
	ret = kv_cuda_check(kv, b, &dummy);
	if (ret)
		return ret;
	if (!b->n_reqs)
		return 0;
	if (!k || !v || !kv_aligned16(k) || !kv_aligned16(v))
		return -EINVAL;
	stream = p ? (cudaStream_t)p->stream : 0;
	vecs = kv->geom.n_kv_heads * kv->geom.head_dim * 2 / 16;
	y = b->q_indptr ? (b->max_q_len ? b->max_q_len : 64) : 1;
	y = y > 1024 ? 1024 : y;
	KV_LAUNCH(dim3(b->n_reqs, y), vecs < 256 ? vecs : 256, 0, stream, kv_write_kernel)(
		kv_dev_layer_of(kv), b->page_indptr, b->pages, b->seq_lens, b->q_indptr,
		(const uint4 *)k, (const uint4 *)v, vecs);
	return check(cudaGetLastError());
}
