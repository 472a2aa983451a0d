/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Theoretical occupancy of a kernel on the GPUs the kernels are built for,
 * with NVIDIA's own calculator (<cuda_occupancy.h>, header-only: it needs
 * no GPU and no driver).
 */
#ifndef PTX_OCCUPANCY_H
#define PTX_OCCUPANCY_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ptx_occ {
	int blocks;		/* resident blocks per SM; 0: cannot launch */
	int warps;		/* resident warps per SM */
	const char *limit;	/* "registers", "shared memory", "warps", "blocks", ... */
};

/*
 * @sm: 80 (A100: 108 SMs, 164 KiB shared memory per SM) or 90 (H100/H200:
 * 132 SMs, 228 KiB); -1 for another.  @max_threads: the kernel's launch
 * bound (.maxntid), 0 for none.
 */
int ptx_occupancy(int sm, int threads, int regs, size_t static_smem, size_t dyn_smem,
		  int max_threads, struct ptx_occ *out);
/* The SM count of @sm's reference card (the plan's wave is counted on it). */
int ptx_sm_count(int sm);

#ifdef __cplusplus
}
#endif
#endif
