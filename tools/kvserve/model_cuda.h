/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvserve's model, attention on the CUDA kernels (model_cuda.c): what
 * model.c calls for a layer whose KV lives in a device pool.  Internal to
 * the model; kvserve itself sees model.h only.
 */
#ifndef KVSERVE_MODEL_CUDA_H
#define KVSERVE_MODEL_CUDA_H

#include <stdbool.h>
#include <stdint.h>

#include <kvshare/attn.h>

struct model_cuda;

/* Device buffers for up to @max_rows rows of @n_q_heads query heads over @g. */
int model_cuda_create(const struct kvs_geometry *g, uint32_t n_q_heads, uint32_t max_rows,
		      struct model_cuda **out);
void model_cuda_destroy(struct model_cuda *c);

/*
 * @b's page tables (host memory) to the device for the layers of one
 * forward pass: *db is @b with device pointers, valid until the next call.
 */
int model_cuda_tables(struct model_cuda *c, const struct kv_attn_batch *b,
		      struct kv_attn_batch *db);

/*
 * One layer on the device: @rows rows of k and v (fp32, host) written to
 * their pages of @kv (device memory) by the KV-write kernel, then decode
 * or extend for q, the output back to the host as fp32 in @out.
 */
int model_cuda_layer(struct model_cuda *c, const struct kv_attn_kv *kv,
		     const struct kv_attn_batch *db, const struct kv_attn_params *p, bool decode,
		     uint32_t rows, const float *q, const float *k, const float *v, float *out);

#endif /* KVSERVE_MODEL_CUDA_H */
