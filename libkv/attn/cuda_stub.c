// SPDX-License-Identifier: MIT
/*
 * build/libkv_cuda_stub.a: the CUDA entry points of <kvshare/attn.h> for
 * binaries that must not need the CUDA runtime (static guest binaries).
 * There is no device: every call says so.
 */
#include <errno.h>
#include <stdio.h>

#include <kvshare/attn.h>

int kv_cuda_available(void)
{
	return 0;
}

const char *kv_cuda_error(void)
{
	return "built without CUDA (libkv_cuda_stub)";
}

int kv_cuda_device_name(char *buf, size_t len)
{
	if (len)
		snprintf(buf, len, "none");
	return -ENODEV;
}

int kv_cuda_malloc(void **p, size_t bytes)
{
	(void)bytes;
	*p = NULL;
	return -ENODEV;
}

int kv_cuda_free(void *p)
{
	return p ? -ENODEV : 0;
}

int kv_cuda_memcpy(void *dst, const void *src, size_t bytes)
{
	(void)dst;
	(void)src;
	(void)bytes;
	return -ENODEV;
}

int kv_cuda_memset(void *p, int byte, size_t bytes)
{
	(void)p;
	(void)byte;
	(void)bytes;
	return -ENODEV;
}

int kv_cuda_sync(void)
{
	return -ENODEV;
}

int kv_attn_write_cuda(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
		       const struct kv_attn_params *p, const void *k, const void *v)
{
	(void)kv, (void)b, (void)p, (void)k, (void)v;
	return -ENODEV;
}

int kv_attn_decode_cuda(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
			const struct kv_attn_params *p, const void *q,
			void *out, float *lse)
{
	(void)kv, (void)b, (void)p, (void)q, (void)out, (void)lse;
	return -ENODEV;
}

int kv_attn_extend_cuda(const struct kv_attn_kv *kv, const struct kv_attn_batch *b,
			const struct kv_attn_params *p, const void *q,
			void *out, float *lse)
{
	(void)kv, (void)b, (void)p, (void)q, (void)out, (void)lse;
	return -ENODEV;
}

size_t kv_attn_decode_cuda_workspace(const struct kv_attn_kv *kv,
				     const struct kv_attn_batch *b,
				     const struct kv_attn_params *p)
{
	(void)kv, (void)b, (void)p;
	return 0;
}
