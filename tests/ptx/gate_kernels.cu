// SPDX-License-Identifier: GPL-2.0
/*
 * Kernels that break one performance gate each, and one that passes them
 * all, for `ptx_check.py --selftest`: proof that every gate of
 * tests/ptx/ptx_check.py can fail, and that the cp.async analysis finds a
 * marked pipeline.  Compiled for sm_90 only; never linked anywhere.
 *
 * Each reads "KV" (16-byte rows) through a page table, as the attention
 * kernels do, and reduces it so that nothing is optimized away.
 */
#include <stdint.h>

#define MAIN_LOOP() asm volatile("// kvshare:main-loop")
#define THREADS 256

/* Every word of a 16-byte row counts: the load stays 16 bytes wide. */
static __device__ __forceinline__ void fold(uint4 &acc, const uint4 &x)
{
	acc.x ^= x.x;
	acc.y ^= x.y;
	acc.z ^= x.z;
	acc.w ^= x.w;
}

/* Passes: page offsets staged in shared memory once per tile, 4-stage
 * cp.async pipeline (3 groups in flight), a cheap reduction. */
extern "C" __global__ void __launch_bounds__(THREADS)
ptxgate_decode_good(const uint4 *kv, const uint32_t *pages, uint32_t n_tiles, uint4 *out)
{
	constexpr int STAGES = 4, VEC = 2;	/* 2 x 16 B per thread per stage */
	__shared__ uint4 buf[STAGES][VEC][THREADS];
	__shared__ uint32_t off[STAGES];
	uint4 acc = make_uint4(0, 0, 0, 0);

	for (int s = 0; s < STAGES - 1; s++) {
		if (threadIdx.x == 0)
			off[s] = pages[s];
		__syncthreads();
		for (int v = 0; v < VEC; v++) {
			uint32_t a = (uint32_t)__cvta_generic_to_shared(&buf[s][v][threadIdx.x]);
			const uint4 *g = kv + (size_t)off[s] * VEC * THREADS + v * THREADS + threadIdx.x;

			asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(a), "l"(g));
		}
		asm volatile("cp.async.commit_group;");
	}
	for (uint32_t t = 0; t < n_tiles; t++) {
		const int s = t % STAGES, n = (t + STAGES - 1) % STAGES;

		MAIN_LOOP();
		if (threadIdx.x == 0)
			off[n] = pages[t + STAGES - 1];	/* to shared memory, a tile ahead */
		asm volatile("cp.async.wait_group 2;");
		__syncthreads();
		for (int v = 0; v < VEC; v++) {
			uint32_t a = (uint32_t)__cvta_generic_to_shared(&buf[n][v][threadIdx.x]);
			const uint4 *g = kv + (size_t)off[(t + 2) % STAGES] * VEC * THREADS +
					 v * THREADS + threadIdx.x;

			asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(a), "l"(g));
		}
		asm volatile("cp.async.commit_group;");
#pragma unroll
		for (int v = 0; v < VEC; v++) {
			fold(acc, buf[s][v][threadIdx.x]);
		}
	}
	out[blockIdx.x * THREADS + threadIdx.x] = acc;
}

/* Fails int_div: the row's page by a runtime division, as kv_dev_row() does. */
extern "C" __global__ void __launch_bounds__(THREADS)
ptxgate_decode_div(const uint4 *kv, const uint32_t *pages, uint32_t n, uint32_t tpp,
		   uint4 *out)
{
	__shared__ uint32_t sp[64];
	uint4 acc = make_uint4(0, 0, 0, 0);

	if (threadIdx.x < 64)
		sp[threadIdx.x] = pages[threadIdx.x];
	__syncthreads();
	for (uint32_t t = threadIdx.x; t < n; t += THREADS) {
		uint4 x = kv[(size_t)sp[(t / tpp) & 63] * 1024 + t % tpp];

		MAIN_LOOP();
		fold(acc, x);
	}
	out[threadIdx.x] = acc;
}

/* Fails page_load: the page index from global memory per row, then the row. */
extern "C" __global__ void __launch_bounds__(THREADS)
ptxgate_decode_page(const uint4 *kv, const uint32_t *pages, uint32_t n, uint4 *out)
{
	uint4 acc = make_uint4(0, 0, 0, 0);

	for (uint32_t t = threadIdx.x; t < n; t += THREADS) {
		uint4 x = kv[(size_t)pages[t >> 4] * 1024 + (t & 15)];

		MAIN_LOOP();
		fold(acc, x);
	}
	out[threadIdx.x] = acc;
}

/* Fails bytes_ahead and warps_per_sm: plain loads consumed at once, and
 * 48 KiB of shared memory a block: 4 blocks, 16 warps per SM. */
extern "C" __global__ void __launch_bounds__(128)
ptxgate_decode_sync(const uint4 *kv, uint32_t n, uint4 *out)
{
	uint4 acc = make_uint4(0, 0, 0, 0);

	__shared__ uint4 big[128 * 24];	/* 48 KiB per block */
	big[threadIdx.x] = kv[threadIdx.x];
	__syncthreads();
	for (uint32_t t = threadIdx.x; t < n; t += 128) {
		uint4 x = __ldg(kv + t);

		MAIN_LOOP();
		fold(acc, x);
		acc.x += big[t % (128 * 24)].y;
	}
	out[threadIdx.x] = acc;
}

/* Fails instr_per_kib: hundreds of instructions per 16-byte load. */
extern "C" __global__ void __launch_bounds__(THREADS)
ptxgate_decode_slow(const uint4 *kv, uint32_t n, float *out)
{
	float acc = 0;

	for (uint32_t t = threadIdx.x; t < n; t += THREADS) {
		uint4 x = __ldg(kv + t);
		float f = __uint_as_float(x.x ^ x.z ^ x.w);

		MAIN_LOOP();
#pragma unroll
		for (int i = 0; i < 200; i++)
			f = f * 1.0001f + __uint_as_float(x.y ^ i);
		acc += f;
	}
	out[threadIdx.x] = acc;
}

/* Fails spills: 32 registers a thread (1024 threads, 2 blocks/SM) for far more. */
extern "C" __global__ void __launch_bounds__(1024, 2)
ptxgate_spill(const float *in, float *out, int n)
{
	float v[96];

#pragma unroll
	for (int i = 0; i < 96; i++)
		v[i] = in[threadIdx.x + i * 1024];
	for (int k = 0; k < n; k++)
#pragma unroll
		for (int i = 0; i < 96; i++)
			v[i] = v[i] * v[(i + k) % 96 == i ? i : (i + 1) % 96] + 1.0f;
	float s = 0;
#pragma unroll
	for (int i = 0; i < 96; i++)
		s += v[i];
	out[threadIdx.x] = s;
}

/* Passes through registers: the next step's four rows are loaded before this
 * step's are used (a software pipeline; its loads count as ahead of use). */
extern "C" __global__ void __launch_bounds__(THREADS)
ptxgate_decode_prefetch(const uint4 *kv, uint32_t n, uint4 *out)
{
	uint4 acc = make_uint4(0, 0, 0, 0), cur[4], nxt[4];
	uint32_t t = threadIdx.x;

#pragma unroll
	for (int u = 0; u < 4; u++)
		cur[u] = __ldg(kv + t + u * THREADS);
	for (; t < n; t += 4 * THREADS) {
		MAIN_LOOP();
#pragma unroll
		for (int u = 0; u < 4; u++)
			nxt[u] = __ldg(kv + t + (4 + u) * THREADS);
#pragma unroll
		for (int u = 0; u < 4; u++) {
			fold(acc, cur[u]);
			cur[u] = nxt[u];
		}
	}
	out[threadIdx.x] = acc;
}
