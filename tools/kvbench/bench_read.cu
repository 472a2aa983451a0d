// SPDX-License-Identifier: GPL-2.0
/*
 * kvbench attn --gpu's reference: what reading memory alone reaches on
 * this GPU, against which decode (which only reads K and V) is measured.
 *
 * Every thread reads 16-byte vectors, READ_UNROLL of them in flight per
 * step, grid-stride over the buffer; the words are XOR-folded and each
 * block writes its fold, so nothing can be optimized away, and the only
 * writes are one 16-byte word per thread at the end.  The grid is
 * READ_BLOCKS_PER_SM full blocks per SM: enough loads in flight to cover
 * DRAM latency on A100, H100 and H200.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <stdint.h>

#include "bench_read.h"

#define READ_THREADS		512
#define READ_BLOCKS_PER_SM	4
#define READ_UNROLL		4

__global__ void __launch_bounds__(READ_THREADS)
kvbench_read_kernel(const uint4 *__restrict__ p, size_t n, uint4 *sink)
{
	const size_t stride = (size_t)gridDim.x * READ_THREADS;
	size_t i = (size_t)blockIdx.x * READ_THREADS + threadIdx.x;
	uint4 acc = make_uint4(0, 0, 0, 0);

	for (; i + (READ_UNROLL - 1) * stride < n; i += READ_UNROLL * stride) {
		uint4 v[READ_UNROLL];

#pragma unroll
		for (int u = 0; u < READ_UNROLL; u++)
			v[u] = __ldcs(p + i + u * stride);	/* streaming: no reuse */
#pragma unroll
		for (int u = 0; u < READ_UNROLL; u++) {
			acc.x ^= v[u].x;
			acc.y ^= v[u].y;
			acc.z ^= v[u].z;
			acc.w ^= v[u].w;
		}
	}
	for (; i < n; i += stride) {
		uint4 v = __ldcs(p + i);

		acc.x ^= v.x;
		acc.y ^= v.y;
		acc.z ^= v.z;
		acc.w ^= v.w;
	}
	sink[(size_t)blockIdx.x * READ_THREADS + threadIdx.x] = acc;
}

extern "C" size_t kvbench_read_sink_bytes(void)
{
	int dev = 0, sms = 0;

	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
		return 0;
	return (size_t)sms * READ_BLOCKS_PER_SM * READ_THREADS * sizeof(uint4);
}

extern "C" int kvbench_read_launch(const void *buf, size_t bytes, void *sink)
{
	size_t blocks = kvbench_read_sink_bytes() / (READ_THREADS * sizeof(uint4));

	if (!buf || !sink || !blocks || bytes % sizeof(uint4) || (uintptr_t)buf % 16)
		return -EINVAL;
	kvbench_read_kernel<<<(unsigned int)blocks, READ_THREADS>>>(
		(const uint4 *)buf, bytes / sizeof(uint4), (uint4 *)sink);
	return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}
