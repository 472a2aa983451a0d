// SPDX-License-Identifier: GPL-2.0
/*
 * Theoretical occupancy from <cuda_occupancy.h> (NVIDIA's calculator, the
 * one cudaOccupancyMaxActiveBlocksPerMultiprocessor implements), with the
 * per-SM limits of the CUDA Programming Guide's "Technical Specifications
 * per Compute Capability" table:
 *
 *                    sm_80 (A100)        sm_90 (H100, H200)
 *   SMs              108                 132
 *   registers / SM   65536               65536
 *   threads / SM     2048 (64 warps)     2048 (64 warps)
 *   blocks / SM      32                  32
 *   shared mem / SM  164 KiB             228 KiB
 *   per block        48 KiB, 163 KiB opt-in; 227 KiB opt-in on sm_90
 *   reserved / block 1 KiB               1 KiB
 */
#include <climits>
#include <cuda_occupancy.h>

#include "occupancy.h"

static bool props(int sm, cudaOccDeviceProp *p)
{
	if (sm != 80 && sm != 90)
		return false;
	p->computeMajor = sm / 10;
	p->computeMinor = 0;
	p->maxThreadsPerBlock = 1024;
	p->maxThreadsPerMultiprocessor = 2048;
	p->regsPerBlock = 65536;
	p->regsPerMultiprocessor = 65536;
	p->warpSize = 32;
	p->sharedMemPerBlock = 48 << 10;
	p->sharedMemPerMultiprocessor = (sm == 80 ? 164 : 228) << 10;
	p->numSms = sm == 80 ? 108 : 132;
	p->sharedMemPerBlockOptin = (sm == 80 ? 163 : 227) << 10;
	p->reservedSharedMemPerBlock = 1 << 10;
	return true;
}

extern "C" int ptx_sm_count(int sm)
{
	cudaOccDeviceProp p;

	return props(sm, &p) ? p.numSms : 0;
}

extern "C" int ptx_occupancy(int sm, int threads, int regs, size_t static_smem,
			     size_t dyn_smem, int max_threads, struct ptx_occ *out)
{
	cudaOccDeviceProp p;
	cudaOccFuncAttributes a;
	cudaOccDeviceState s;
	cudaOccResult r;
	unsigned int f;

	out->blocks = out->warps = 0;
	out->limit = "?";
	if (!props(sm, &p) || threads <= 0)
		return -1;
	a.maxThreadsPerBlock = max_threads > 0 ? max_threads : INT_MAX;
	a.numRegs = regs;
	a.sharedSizeBytes = static_smem;
	a.partitionedGCConfig = PARTITIONED_GC_OFF;
	a.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
	/* A kernel that launches with more than 48 KiB opts in: allow it all. */
	a.maxDynamicSharedSizeBytes = p.sharedMemPerBlockOptin - static_smem;
	a.numBlockBarriers = 1;
	a.virtualResourceCount = 0;
	if (cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &s, threads, dyn_smem) !=
	    CUDA_OCC_SUCCESS)
		return -1;
	out->blocks = r.activeBlocksPerMultiprocessor;
	out->warps = out->blocks * ((threads + 31) / 32);
	f = r.limitingFactors;
	out->limit = f & OCC_LIMIT_REGISTERS ? "registers" :
		     f & OCC_LIMIT_SHARED_MEMORY ? "shared memory" :
		     f & OCC_LIMIT_WARPS ? "warps" :
		     f & OCC_LIMIT_BLOCKS ? "blocks" :
		     f & OCC_LIMIT_BARRIERS ? "barriers" : "none";
	return 0;
}
