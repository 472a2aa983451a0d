// SPDX-License-Identifier: GPL-2.0
/*
 * The CPU stand-in's own tests (tests/simt): small kernels, written as
 * CUDA, whose results CUDA's documented semantics fix: the warp
 * collectives with their widths, barriers, the scheduling seed, the
 * shared-memory checker (it must report a missing barrier, a write/write
 * race, an unwritten read, and nothing on correct code under any seed),
 * divergence, masks naming exited lanes, launch limits, the runtime's
 * error codes, and the fp16/bf16 conversions against libkv's
 * (include/kvshare/kv_layout.h).  kselftest-style TAP on stdout.
 */
#include "simt.h"

#include <stdio.h>
#include <stdlib.h>

#include <kvshare/kv_layout.h>

/* The kernels' own wrappers of mma.sync and cp.async. */
#include "../../libkv/attn/cuda_internal.cuh"

static int n_done, n_failed;

static void result(bool ok, const char *name)
{
	n_done++;
	n_failed += !ok;
	printf("%sok %d %s\n", ok ? "" : "not ", n_done, name);
	fflush(stdout);
}

#define LAUNCH(grid, block, ...) KV_SIMT_LAUNCH(grid, block, 0, 0, __VA_ARGS__)

/* Device memory (host-readable here: the stand-in's is malloc'ed). */
template <typename T> static T *dev(size_t n)
{
	void *p = NULL;

	if (cudaMalloc(&p, n * sizeof(T)))
		abort();
	return (T *)p;
}

/* ---- warp collectives ---- */

__global__ void k_shfl(int *out, int width)
{
	int v = (int)threadIdx.x * 10 + 1, *o = out + threadIdx.x * 7;

	o[0] = __shfl_xor_sync(0xffffffffu, v, 5, width);
	o[1] = __shfl_up_sync(0xffffffffu, v, 3, width);
	o[2] = __shfl_down_sync(0xffffffffu, v, 3, width);
	o[3] = __shfl_sync(0xffffffffu, v, 7, width);
	o[4] = (int)__ballot_sync(0xffffffffu, threadIdx.x % 3 == 0);
	o[5] = __any_sync(0xffffffffu, threadIdx.x == 40);
	o[6] = __all_sync(0xffffffffu, threadIdx.x < 40);
}

/* What the CUDA programming guide says each lane gets. */
static void shfl_expect(int *e, unsigned int t, int width)
{
	int lane = (int)(t % 32), seg = lane & ~(width - 1), base = (int)t - lane;
	int src;
	unsigned int ballot = 0;
	int i;

	src = lane ^ 5;
	e[0] = (src < seg + width ? base + src : (int)t) * 10 + 1;
	e[1] = (lane - 3 >= seg ? (int)t - 3 : (int)t) * 10 + 1;
	e[2] = (lane + 3 < seg + width ? (int)t + 3 : (int)t) * 10 + 1;
	e[3] = (base + seg + 7 % width) * 10 + 1;
	for (i = 0; i < 32; i++)
		ballot |= (unsigned int)((base + i) % 3 == 0) << i;
	e[4] = (int)ballot;
	e[5] = base == 32;		/* thread 40 is in the second warp */
	e[6] = base + 31 < 40;
}

static void test_shuffles(void)
{
	static const int widths[] = { 32, 16, 4, 1 };
	int *out = dev<int>(64 * 7), e[7];
	unsigned int i, k, bad = 0;

	for (k = 0; k < 4; k++) {
		memset(out, 0, 64 * 7 * sizeof(int));
		LAUNCH(1, 64, k_shfl)(out, widths[k]);
		bad += cudaGetLastError() != cudaSuccess;
		for (i = 0; i < 64; i++) {
			shfl_expect(e, i, widths[k]);
			if (memcmp(e, out + i * 7, sizeof(e))) {
				if (!bad)
					printf("# width %d thread %u: got %d %d %d %d %#x %d %d, want %d %d %d %d %#x %d %d\n",
					       widths[k], i, out[i * 7], out[i * 7 + 1], out[i * 7 + 2],
					       out[i * 7 + 3], out[i * 7 + 4], out[i * 7 + 5], out[i * 7 + 6],
					       e[0], e[1], e[2], e[3], e[4], e[5], e[6]);
				bad++;
			}
		}
	}
	cudaFree(out);
	result(!bad, "shuffle, ballot, any, all at widths 32, 16, 4, 1");
}

/* ---- barriers and the shared-memory checker ---- */

__global__ void k_neighbour(int *out, int sync)
{
	__shared__ int s[256];

	s[threadIdx.x] = (int)(threadIdx.x + 1000 * blockIdx.x);
	if (sync)
		__syncthreads();
	out[blockIdx.x * blockDim.x + threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

static void test_barrier(void)
{
	int *out = dev<int>(4 * 256);
	bool ok = true;
	unsigned int seed, i;

	/* Correct code: right under every order, and nothing reported. */
	for (seed = 0; seed < 6; seed++) {
		kv_simt::set_seed(seed);
		LAUNCH(4, 256, k_neighbour)(out, 1);
		ok &= cudaGetLastError() == cudaSuccess;
		for (i = 0; i < 4 * 256; i++)
			ok &= out[i] == (int)((i % 256 + 1) % 256 + 1000 * (i / 256));
	}
	result(ok, "a barrier orders shared memory (6 seeds, one copy per block)");
	for (seed = 0; seed < 3; seed++) {
		kv_simt::set_seed(seed);
		LAUNCH(4, 256, k_neighbour)(out, 0);
		ok = cudaGetLastError() == cudaErrorLaunchFailure &&
		     strstr(cudaGetErrorString(cudaErrorLaunchFailure), "k_neighbour");
		if (!ok)
			break;
	}
	result(ok, "the checker reports the same code without its barrier (3 seeds)");
	kv_simt::set_seed(0);
	cudaFree(out);
}

__global__ void k_ww(int *out)
{
	__shared__ int s;

	s = (int)threadIdx.x;
	__syncthreads();
	out[threadIdx.x] = s;
}

__global__ void k_unwritten(int *out)
{
	__shared__ int s[64];

	if (threadIdx.x)
		s[threadIdx.x] = 1;
	__syncthreads();
	out[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}

/* Lanes of one warp in lockstep through shuffles; shared writes by one lane only. */
__global__ void k_warp_ok(int *out)
{
	__shared__ int s[32];
	int v = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);

	s[threadIdx.x] = v;
	__syncthreads();
	out[threadIdx.x] = s[31 - threadIdx.x];
}

__global__ void k_copy(const int *in, int *out)
{
	out[threadIdx.x] = in[threadIdx.x];
}

static const char *err_text(void)
{
	return cudaGetErrorString(cudaErrorLaunchFailure);
}

static void test_checker(void)
{
	int *out = dev<int>(256), *in = dev<int>(31), host[32] = { 0 };
	bool ok;

	LAUNCH(1, 64, k_ww)(out);
	ok = cudaGetLastError() == cudaErrorLaunchFailure && strstr(err_text(), "::s,") &&
	     strstr(err_text(), "written by thread 0");
	result(ok, "a write/write race is reported with the variable and threads");
	LAUNCH(1, 64, k_unwritten)(out);
	ok = cudaGetLastError() == cudaErrorLaunchFailure &&
	     strstr(err_text(), "no thread of the block wrote");
	result(ok, "a read of shared memory no thread wrote is reported");
	LAUNCH(1, 32, k_warp_ok)(out);
	ok = cudaGetLastError() == cudaSuccess && out[0] == 30 && out[31] == 1;
	result(ok, "shuffles and a barrier: no report, right values");
	LAUNCH(1, 31, k_copy)(in, out);
	ok = cudaGetLastError() == cudaSuccess;
	LAUNCH(1, 32, k_copy)(in, out);
	ok &= cudaGetLastError() == cudaErrorLaunchFailure && strstr(err_text(), "past its end");
	LAUNCH(1, 32, k_copy)(host, out);
	ok &= cudaGetLastError() == cudaErrorLaunchFailure &&
	      strstr(err_text(), "in no device allocation");
	result(ok, "reads past a device allocation or of host memory are reported");
	cudaFree(in);
	cudaFree(out);
}

/* ---- divergence, exited lanes, scheduling ---- */

__global__ void k_diverge(void)
{
	if (threadIdx.x < 32)
		__syncthreads();
	else
		__syncthreads();
}

__global__ void k_exited_lane(int *out)
{
	if (threadIdx.x == 3)
		return;
	out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
}

__global__ void k_order(unsigned int *log, unsigned int *pos)
{
	log[(*pos)++] = threadIdx.x;	/* one OS thread: no real race */
	__syncthreads();
	log[(*pos)++] = threadIdx.x;
}

static void test_scheduling(void)
{
	unsigned int *log = dev<unsigned int>(256), *pos = dev<unsigned int>(1);
	unsigned int i, in_order = 0, second = 0;
	int *out = dev<int>(64);

	LAUNCH(1, 64, k_diverge)();
	result(cudaGetLastError() == cudaErrorLaunchFailure &&
	       strstr(err_text(), "deadlock or divergence"),
	       "two different barriers are reported as divergence");
	LAUNCH(1, 32, k_exited_lane)(out);
	result(cudaGetLastError() == cudaErrorLaunchFailure && strstr(err_text(), "has exited"),
	       "a shuffle whose mask names an exited lane is reported");

	kv_simt::set_seed(0);
	*pos = 0;
	LAUNCH(1, 128, k_order)(log, pos);
	for (i = 0; i < 256; i++)
		in_order += log[i] == i % 128;
	kv_simt::set_seed(12345);
	*pos = 0;
	LAUNCH(1, 128, k_order)(log, pos);
	for (i = 0; i < 128; i++)
		second += log[i] == i;
	kv_simt::set_seed(0);
	result(in_order == 256 && second < 128 && *pos == 256,
	       "seed 0 runs threads in order, another seed shuffles them");
	cudaFree(log);
	cudaFree(pos);
	cudaFree(out);
}

/* ---- launch limits and the runtime's errors ---- */

static void test_runtime(void)
{
	unsigned int *logv = dev<unsigned int>(2), *pos = dev<unsigned int>(1);
	char host[64] = { 0 }, *d = NULL;
	bool ok;

	*pos = 0;

	LAUNCH(1, 1025, k_order)(logv, pos);
	ok = cudaGetLastError() == cudaErrorInvalidConfiguration;
	LAUNCH(dim3(1, 65536), 1, k_order)(logv, pos);
	ok &= cudaGetLastError() == cudaErrorInvalidConfiguration;
	LAUNCH(1, dim3(1, 1, 65), k_order)(logv, pos);
	ok &= cudaGetLastError() == cudaErrorInvalidConfiguration;
	LAUNCH(0, 32, k_order)(logv, pos);
	ok &= cudaGetLastError() == cudaErrorInvalidConfiguration && *pos == 0;
	cudaFree(logv);
	cudaFree(pos);
	result(ok, "launches past the driver's limits fail with cudaErrorInvalidConfiguration");

	ok = cudaMalloc((void **)&d, 64) == cudaSuccess && d && (unsigned char)d[63] == 0xff;
	ok &= cudaMemcpy(d + 32, host, 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue;
	ok &= cudaMemcpy(host, host + 1, 8, cudaMemcpyHostToDevice) == cudaErrorInvalidValue;
	ok &= cudaMemcpy(d, host, 8, (enum cudaMemcpyKind)7) == cudaErrorInvalidMemcpyDirection;
	ok &= cudaMemset(host, 0, 8) == cudaErrorInvalidValue;
	ok &= cudaMemset(d, 0, 65) == cudaErrorInvalidValue;
	ok &= cudaGetLastError() == cudaErrorInvalidValue && cudaGetLastError() == cudaSuccess;
	ok &= cudaMemcpy(d, host, 64, cudaMemcpyDefault) == cudaSuccess;
	ok &= cudaFree(host) == cudaErrorInvalidValue;
	ok &= cudaFree(d) == cudaSuccess && cudaFree(d) == cudaErrorInvalidValue;
	cudaGetLastError();
	result(ok, "cudaMalloc/Memcpy/Memset/Free check ranges and return the real codes");
}

/* ---- tensor cores: mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16} ---- */

/*
 * Every lane builds its fragments from row-major A (16x16), B (16x8), C
 * (16x8) by the PTX ISA's table, written out here independently of the
 * stand-in's, and stores its part of D where the table says.
 */
template <typename T>
__global__ void k_mma(const float *A, const float *B, const float *C, float *D)
{
	unsigned int g = threadIdx.x >> 2, t = threadIdx.x & 3, i;
	uint32_t a[4], b[2];
	float c[4], d[4];

	a[0] = kv_mma<T>::pack(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1]);
	a[1] = kv_mma<T>::pack(A[(g + 8) * 16 + 2 * t], A[(g + 8) * 16 + 2 * t + 1]);
	a[2] = kv_mma<T>::pack(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9]);
	a[3] = kv_mma<T>::pack(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9]);
	b[0] = kv_mma<T>::pack(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g]);
	b[1] = kv_mma<T>::pack(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g]);
	for (i = 0; i < 4; i++)
		c[i] = C[(g + (i / 2) * 8) * 8 + 2 * t + i % 2];
	kv_mma<T>::run(d, a, b, c);
	for (i = 0; i < 4; i++)
		D[(g + (i / 2) * 8) * 8 + 2 * t + i % 2] = d[i];
}

template <typename T> static bool mma_matches(uint64_t seed)
{
	float *A = dev<float>(256), *B = dev<float>(128), *C = dev<float>(128), *D = dev<float>(128);
	uint64_t rng = seed;
	bool ok = true;
	int i, r, c, k;

	for (i = 0; i < 256 + 128 + 128; i++) {
		float x;

		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		x = (float)((int)(rng >> 40) % 4001 - 2000) / 997.0f;
		/* A and B in the operand type (what the fragments carry exactly), C in f32. */
		if (i < 256)
			A[i] = (float)T(x);
		else if (i < 384)
			B[i - 256] = (float)T(x);
		else
			C[i - 384] = x;
	}
	LAUNCH(1, 32, k_mma<T>)(A, B, C, D);
	ok = cudaGetLastError() == cudaSuccess;
	for (r = 0; r < 16 && ok; r++)
		for (c = 0; c < 8; c++) {
			double want = C[r * 8 + c];

			for (k = 0; k < 16; k++)
				want += (double)A[r * 16 + k] * B[k * 8 + c];
			if (fabs(D[r * 8 + c] - want) > 1e-6 * (1 + fabs(want))) {
				printf("# mma: D[%d][%d] = %g, want %g\n", r, c, D[r * 8 + c], want);
				ok = false;
				break;
			}
		}
	cudaFree(A);
	cudaFree(B);
	cudaFree(C);
	cudaFree(D);
	return ok;
}

__global__ void k_mma_partial(float *D)
{
	uint32_t a[4] = { 0, 0, 0, 0 }, b[2] = { 0, 0 };
	float c[4] = { 0, 0, 0, 0 };

	if (threadIdx.x == 5)
		return;
	kv_mma<__half>::run(D + threadIdx.x * 4, a, b, c);
}

static void test_mma(void)
{
	float *D = dev<float>(128);
	bool ok = true;
	int s;

	for (s = 0; s < 4; s++)
		ok &= mma_matches<__nv_bfloat16>(1000 + s);
	result(ok, "mma m16n8k16 bf16: every lane's fragment of D = A B + C (PTX ISA layout)");
	ok = true;
	for (s = 0; s < 4; s++)
		ok &= mma_matches<__half>(2000 + s);
	result(ok, "mma m16n8k16 f16: every lane's fragment of D = A B + C (PTX ISA layout)");
	LAUNCH(1, 32, k_mma_partial)(D);
	result(cudaGetLastError() == cudaErrorLaunchFailure && strstr(err_text(), "has exited"),
	       "mma.sync with a lane missing (exited) is reported");
	cudaFree(D);
}

/* ---- ldmatrix.x4, plain and transposed ---- */

/* Four 8x8 matrices of 16-bit values in shared memory, rows 32 bytes apart (16-byte aligned, as ldmatrix wants). */
__global__ void k_ldmatrix(const uint16_t *in, uint32_t *out, int trans)
{
	__shared__ uint16_t s[4][8][16];
	unsigned int l = threadIdx.x, i, k;
	uint32_t r[4];

	for (k = 0; k < 8; k++)
		s[l / 8][l % 8][k] = in[(l / 8) * 64 + (l % 8) * 8 + k];
	__syncthreads();
	if (trans)
		kv_ldmatrix_x4<true>(r, &s[l / 8][l % 8][0]);
	else
		kv_ldmatrix_x4<false>(r, &s[l / 8][l % 8][0]);
	for (i = 0; i < 4; i++)
		out[l * 4 + i] = r[i];
}

static void test_ldmatrix(void)
{
	uint16_t *in = dev<uint16_t>(256);
	uint32_t *out = dev<uint32_t>(128);
	bool ok = true;
	int trans;
	unsigned int l, i;

	for (i = 0; i < 256; i++)
		in[i] = (uint16_t)(i * 2654435761u >> 16);
	for (trans = 0; trans < 2; trans++) {
		LAUNCH(1, 32, k_ldmatrix)(in, out, trans);
		ok &= cudaGetLastError() == cudaSuccess;
		for (l = 0; l < 32 && ok; l++)
			for (i = 0; i < 4; i++) {
				/* PTX ISA: row l/4, columns 2 (l%4), +1; .trans: the transpose's. */
				unsigned int g = l / 4, c = 2 * (l % 4);
				uint32_t want = trans ? in[i * 64 + c * 8 + g] | (uint32_t)in[i * 64 + (c + 1) * 8 + g] << 16
						      : in[i * 64 + g * 8 + c] | (uint32_t)in[i * 64 + g * 8 + c + 1] << 16;

				ok &= out[l * 4 + i] == want;
			}
	}
	result(ok, "ldmatrix.x4 and .x4.trans: every lane's registers as the PTX ISA lays them out");
	cudaFree(in);
	cudaFree(out);
}

/* ---- cp.async with commit and wait groups ---- */

/*
 * Two groups: s1 from in[0..], s2 from in[64..] (lanes >= 32 zero-filled).
 * @mode 0: correct; 1: reads s1 before any wait; 2: waits for the first
 * group only, then reads s2; 3: waits, reads the previous thread's copy
 * with no barrier.
 */
__global__ void k_cp(const uint4 *in, uint4 *out, int mode)
{
	__shared__ uint4 s1[64], s2[64];
	unsigned int i = threadIdx.x, j = (i + 1) % 64;

	kv_cp_async16(&s1[i], &in[i], true);
	kv_cp_async_commit();
	kv_cp_async16(&s2[i], &in[64 + i], i < 32);
	kv_cp_async_commit();
	if (mode == 1)
		out[i] = s1[i];
	kv_cp_async_wait<1>();
	if (mode == 2)
		out[i] = s2[i];
	if (mode == 3 && i)
		out[i] = s1[i - 1];
	__syncthreads();
	out[i] = s1[j];
	kv_cp_async_wait<0>();
	__syncthreads();
	out[64 + i] = s2[j];
}

static void test_cp_async(void)
{
	uint4 *in = dev<uint4>(128), *out = dev<uint4>(128);
	bool ok = true;
	unsigned int i;

	for (i = 0; i < 128; i++)
		in[i] = make_uint4(i, i * 3, ~i, 7);
	LAUNCH(1, 64, k_cp)(in, out, 0);
	ok = cudaGetLastError() == cudaSuccess;
	for (i = 0; i < 64 && ok; i++) {
		unsigned int j = (i + 1) % 64;

		ok = out[i].x == j && out[i].y == j * 3 && out[i].z == ~j &&
		     (j < 32 ? out[64 + i].x == 64 + j && out[64 + i].w == 7
			     : !out[64 + i].x && !out[64 + i].y && !out[64 + i].z && !out[64 + i].w);
	}
	result(ok, "cp.async: groups land at their wait_group, src-size 0 zero-fills, no report");
	LAUNCH(1, 64, k_cp)(in, out, 1);
	ok = cudaGetLastError() == cudaErrorLaunchFailure &&
	     strstr(err_text(), "a cp.async not yet waited for");
	LAUNCH(1, 64, k_cp)(in, out, 2);
	ok &= cudaGetLastError() == cudaErrorLaunchFailure &&
	      strstr(err_text(), "k_cp(uint4 const*, uint4*, int)::s2") &&
	      strstr(err_text(), "a cp.async not yet waited for");
	result(ok, "a read before wait_group retires the copy's group is reported");
	LAUNCH(1, 64, k_cp)(in, out, 3);
	ok = cudaGetLastError() == cudaErrorLaunchFailure && strstr(err_text(), "race on") &&
	     strstr(err_text(), "::s1");
	result(ok, "a copy read by another thread with no barrier after the wait is reported");
	cudaFree(in);
	cudaFree(out);
}

/* ---- the occupancy model ---- */

__global__ void k_smem40k(int *out)
{
	__shared__ char s[40000];

	s[threadIdx.x] = 1;
	out[0] = s[0];
}

static void test_occupancy(void)
{
	int n = -1, m = -1;

	cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k_smem40k, 128, 0);
	cudaOccupancyMaxActiveBlocksPerMultiprocessor(&m, k_copy, 1024, 0);
	/* 228 KiB / (40000 rounded to 128 + 1 KiB reserved) = 5; 64 regs x 1024 threads = 1. */
	result(n == 5 && m == 1, "occupancy: blocks per SM from shared memory, threads, registers");
	if (n != 5 || m != 1)
		printf("# occupancy: %d (want 5), %d (want 1)\n", n, m);
}

/* ---- storage types ---- */

static void test_conversions(void)
{
	uint64_t rng = 88172645463325252ull;
	unsigned int h, i, bad = 0;

	for (h = 0; h < 65536; h++) {
		float a = __half2float(__ushort_as_half((unsigned short)h));
		float b = kv_f16_to_f32((uint16_t)h);

		if (isnan(b) ? !isnan(a) : __float_as_uint(a) != __float_as_uint(b))
			bad++;
	}
	for (i = 0; i < 2000000; i++) {
		float f;

		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		/* Every exponent, and the exact ties (low bits cleared) often. */
		f = __uint_as_float((uint32_t)rng & (i & 1 ? 0xffffffffu : 0xffff8000u));
		if (isnan(f))
			continue;
		bad += __half_as_ushort(__float2half_rn(f)) != kv_f32_to_f16(f);
		bad += __bfloat16_as_ushort(__float2bfloat16_rn(f)) != kv_f32_to_bf16(f);
	}
	result(!bad, "fp16/bf16 conversions round to nearest even as libkv's");
	result(kv_simt_ex2_approx_ftz(-INFINITY) == 0.0f && kv_simt_ex2_approx_ftz(0x1p-130f) == 1.0f &&
	       kv_simt_ex2_approx_ftz(-130.0f) == 0.0f && kv_simt_ex2_approx_ftz(3.0f) == 8.0f,
	       "ex2.approx.ftz: 2^-inf = 0, subnormals flushed");
}

int main(void)
{
	printf("TAP version 13\n1..22\n");
	test_shuffles();
	test_barrier();
	test_checker();
	test_scheduling();
	test_runtime();
	test_conversions();
	test_mma();
	test_ldmatrix();
	test_cp_async();
	test_occupancy();
	printf("# Totals: pass:%d fail:%d\n", n_done - n_failed, n_failed);
	return n_failed || n_done != 22 ? 1 : 0;
}
