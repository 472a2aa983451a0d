/* SPDX-License-Identifier: MIT */
/*
 * DLPack: the public ABI, legacy "dltensor" capsule, v0.6-0.8, as
 * pool_view.c exports it.  The ABI is small and fixed, so it is declared
 * here rather than taken from a dlpack.h.
 */
#ifndef KVPY_DLPACK_H
#define KVPY_DLPACK_H

#include <stdint.h>

enum { KVPY_DL_CPU = 1, KVPY_DL_CUDA = 2 };
enum { KVPY_DL_INT = 0, KVPY_DL_UINT = 1, KVPY_DL_FLOAT = 2, KVPY_DL_BFLOAT = 4 };

typedef struct {
	int32_t device_type;
	int32_t device_id;
} kvpy_dl_device;

typedef struct {
	uint8_t code;
	uint8_t bits;
	uint16_t lanes;
} kvpy_dl_dtype;

typedef struct {
	void *data;
	kvpy_dl_device device;
	int32_t ndim;
	kvpy_dl_dtype dtype;
	int64_t *shape;
	int64_t *strides;		/* in elements; NULL means compact */
	uint64_t byte_offset;
} kvpy_dl_tensor;

typedef struct kvpy_dl_managed {
	kvpy_dl_tensor dl_tensor;
	void *manager_ctx;
	void (*deleter)(struct kvpy_dl_managed *self);
} kvpy_dl_managed;

#define KVPY_VIEW_NDIM	6	/* pages, layers, K|V, tokens, heads, dim */

#endif /* KVPY_DLPACK_H */
