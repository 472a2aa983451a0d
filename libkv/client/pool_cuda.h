/* SPDX-License-Identifier: MIT */
/* Inside libkv: a device pool's CUDA mapping (pool_cuda.c). */
#ifndef KV_POOL_CUDA_H
#define KV_POOL_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <kvshare/arbiter.h>

struct kv_cuda_map {
	unsigned long long ptr;		/* CUdeviceptr of the reservation */
	size_t size;			/* bytes reserved and mapped */
	unsigned long long handle;	/* the imported allocation handle */
	int dev;			/* the device the memory lives on */
	int ctx;			/* its primary context is retained */
	int mapped;
};

/*
 * Import the POSIX-fd handle @fd and map @bytes of it (rounded up to the
 * granularity) read-write on its device.  0, or -errno with nothing left
 * mapped, reserved or held (kv_cuda_last_error() says which call failed).
 */
int kv_cuda_map(int fd, size_t bytes, struct kv_cuda_map *m);
void kv_cuda_unmap(struct kv_cuda_map *m);

#endif /* KV_POOL_CUDA_H */
