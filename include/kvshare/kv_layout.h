/* SPDX-License-Identifier: MIT */
/*
 * Where a KV element lives inside a kvshare pool: the one statement of the
 * layout.  The C reference, the CUDA kernels and anything else that reads
 * or writes KV bytes use these helpers and nothing else.
 *
 * A pool is n_pages pages of page_bytes each, back to back from the start
 * of the pool's memory (libkv's kv_page_addr(), or the device address the
 * GPU code mapped).  Inside one page, for tokens_per_page (T) tokens:
 *
 *   page = [layer 0..L-1] [K, V] [token in page 0..T-1] [KV head 0..H-1] [dim 0..D-1]
 *
 * i.e. per layer, K and V, each a FlashInfer "NHD" block of T x H x D
 * elements.  One (layer, K|V) block of a page is T*H*D contiguous
 * elements; one token's row of one head is D contiguous elements, and the
 * H heads of a token are adjacent, so a token's K (or V) for one layer is
 * H*D contiguous elements.  The product over every field is exactly the
 * uapi's page_bytes = 2 * L * H * D * T * sizeof(dtype).
 *
 * Page tables (struct kv_attn_batch in <kvshare/attn.h>) are per request
 * lists of page indices: token t of a request is slot t % T of page
 * pages[t / T].  Pages need not be contiguous, ordered or distinct
 * between requests (a shared prefix is the same page in many tables).
 *
 * Storage types: fp16 (IEEE binary16), bf16 (the top half of an fp32),
 * fp32.  FP8 pools exist in the uapi; no attention code here reads them
 * yet.  The conversions below round to nearest even and keep NaN and Inf;
 * the attention code accumulates in fp32 whatever the storage type.
 *
 * Usable from C and from CUDA device code.
 */
#ifndef KVSHARE_KV_LAYOUT_H
#define KVSHARE_KV_LAYOUT_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <linux/kvshare.h>

#if defined(__CUDACC__)
#define KV_HD	__host__ __device__ __forceinline__
#else
#define KV_HD	static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum kv_which {
	KV_K = 0,
	KV_V = 1,
};

/* Bytes of one element of @dtype; 0 for a dtype this code does not know. */
KV_HD uint32_t kv_dtype_size(uint32_t dtype)
{
	return KVS_DTYPE_SIZE(dtype);
}

/*
 * The storage types by name: the one table of them.  @name is the short
 * spelling the configuration, kvctl and the remote tier's keys use; @torch
 * is torch's (and the Python package's); @alias is one more spelling
 * accepted, or NULL.  Matching is case-insensitive.  Sizes are
 * kv_dtype_size()'s, which device code can call.  Host code only.
 */
struct kv_dtype_name {
	uint32_t dtype;			/* KVS_DTYPE_* */
	const char *name;		/* "bf16" */
	const char *torch;		/* "bfloat16" */
	const char *alias;		/* "fp16", or NULL */
};

static const struct kv_dtype_name kv_dtype_names[] = {
	{ KVS_DTYPE_F16,  "f16",  "float16",  "fp16" },
	{ KVS_DTYPE_BF16, "bf16", "bfloat16", NULL },
	{ KVS_DTYPE_F32,  "f32",  "float32",  "fp32" },
	{ KVS_DTYPE_FP8,  "fp8",  "fp8",      NULL },
};

#define KV_N_DTYPES	(sizeof(kv_dtype_names) / sizeof(kv_dtype_names[0]))

/* The entry of @dtype, or NULL for a dtype this code does not know. */
static inline const struct kv_dtype_name *kv_dtype_by_id(uint32_t dtype)
{
	size_t i;

	for (i = 0; i < KV_N_DTYPES; i++)
		if (kv_dtype_names[i].dtype == dtype)
			return &kv_dtype_names[i];
	return NULL;
}

/* The entry spelt @s in any of its spellings, or NULL. */
static inline const struct kv_dtype_name *kv_dtype_by_name(const char *s)
{
	size_t i;

	for (i = 0; i < KV_N_DTYPES; i++) {
		const struct kv_dtype_name *d = &kv_dtype_names[i];

		if (!strcasecmp(s, d->name) || !strcasecmp(s, d->torch) ||
		    (d->alias && !strcasecmp(s, d->alias)))
			return d;
	}
	return NULL;
}

/*
 * The names, "f16|bf16|f32|fp8" (@torch: torch's), for error messages;
 * @buf of @len bytes, returned.
 */
static inline const char *kv_dtype_choices(char *buf, size_t len, int torch)
{
	size_t i, at = 0;

	buf[0] = '\0';
	for (i = 0; i < KV_N_DTYPES && at < len; i++)
		at += snprintf(buf + at, len - at, "%s%s", i ? "|" : "",
			       torch ? kv_dtype_names[i].torch : kv_dtype_names[i].name);
	return buf;
}

/* Elements in one (layer, K|V) block of a page: T x H x D. */
KV_HD uint64_t kv_block_elems(const struct kvs_geometry *g)
{
	return (uint64_t)g->tokens_per_page * g->n_kv_heads * g->head_dim;
}

/* page_bytes as the arbiter computes it; equal to the layout's extent. */
KV_HD uint64_t kv_page_bytes(const struct kvs_geometry *g)
{
	return 2 * (uint64_t)g->n_layers * kv_block_elems(g) * kv_dtype_size(g->dtype);
}

/*
 * kv_page_bytes() for a geometry not yet validated: 0 if a dimension is 0,
 * the dtype unknown, or the page would be larger than @max bytes.  Never
 * wraps, whatever the fields hold.
 */
KV_HD uint64_t kv_page_bytes_max(const struct kvs_geometry *g, uint64_t max)
{
	const uint32_t dims[4] = { g->n_layers, g->n_kv_heads, g->head_dim,
				   g->tokens_per_page };
	uint64_t per_elem = 2 * (uint64_t)kv_dtype_size(g->dtype), elems = 1;
	int i;

	if (!per_elem)
		return 0;
	for (i = 0; i < 4; i++) {
		if (!dims[i] || elems > max / per_elem / dims[i])
			return 0;
		elems *= dims[i];
	}
	return kv_page_bytes(g);
}

/*
 * Element index, inside one page, of (layer, K|V, token in page, head,
 * dim).  No range checks: callers validate the geometry once.
 */
KV_HD uint64_t kv_elem_in_page(const struct kvs_geometry *g, uint32_t layer,
			       uint32_t which, uint32_t slot, uint32_t head,
			       uint32_t dim)
{
	uint64_t blk = (uint64_t)layer * 2 + which;

	return (blk * g->tokens_per_page + slot) * ((uint64_t)g->n_kv_heads * g->head_dim) +
	       (uint64_t)head * g->head_dim + dim;
}

/* Byte offset from the start of the pool memory. */
KV_HD uint64_t kv_offset(const struct kvs_geometry *g, uint32_t page,
			 uint32_t layer, uint32_t which, uint32_t slot,
			 uint32_t head, uint32_t dim)
{
	return (uint64_t)page * kv_page_bytes(g) +
	       kv_elem_in_page(g, layer, which, slot, head, dim) * kv_dtype_size(g->dtype);
}

/* Byte offset inside a page of the first element of (layer, K|V). */
KV_HD uint64_t kv_block_offset(const struct kvs_geometry *g, uint32_t layer,
			       uint32_t which)
{
	return kv_elem_in_page(g, layer, which, 0, 0, 0) * kv_dtype_size(g->dtype);
}

/* Bytes between token rows (slot s and s + 1) of one head. */
KV_HD uint64_t kv_token_stride(const struct kvs_geometry *g)
{
	return (uint64_t)g->n_kv_heads * g->head_dim * kv_dtype_size(g->dtype);
}

/* ---- storage conversions (host code; CUDA uses its own intrinsics) ---- */

static inline uint32_t kv_f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float kv_bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline float kv_bf16_to_f32(uint16_t h)
{
	return kv_bits_f32((uint32_t)h << 16);
}

/* Round to nearest even; NaN stays NaN (made quiet), Inf stays Inf. */
static inline uint16_t kv_f32_to_bf16(float f)
{
	uint32_t u = kv_f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x0040u);
	/* Adding 0x7fff plus the kept LSB rounds ties to even; a carry out
	 * of the mantissa bumps the exponent, up to Inf, as it should. */
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

static inline float kv_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t em = h & 0x7fffu;

	if (em >= 0x7c00u)		/* Inf or NaN: payload kept */
		return kv_bits_f32(sign | 0x7f800000u | (em & 0x3ffu) << 13);
	/*
	 * Put exponent and mantissa where fp32 has them and rebias by a
	 * multiply by 2^112: exact for normals and, because the multiply
	 * normalizes, for subnormals too.
	 */
	return kv_bits_f32(sign | kv_f32_bits(kv_bits_f32(em << 13) * 0x1p112f));
}

/* Round to nearest even; overflow gives Inf; NaN stays NaN (quiet). */
static inline uint16_t kv_f32_to_f16(float f)
{
	uint32_t u = kv_f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t x = u & 0x7fffffffu;
	uint32_t mant, q, rem, half;
	int shift;

	if (x > 0x7f800000u)
		return sign | 0x7e00u | ((x >> 13) & 0x3ffu);
	if (x >= 0x477ff000u)		/* >= 65520 rounds past 65504 */
		return sign | 0x7c00u;
	if (x >= 0x38800000u) {		/* >= 2^-14: a normal half */
		x -= (uint32_t)(127 - 15) << 23;
		x += 0xfffu + ((x >> 13) & 1);
		return sign | (uint16_t)(x >> 13);
	}
	if (x <= 0x33000000u)		/* <= 2^-25: ties to even zero */
		return sign;
	/* Subnormal half: count units of 2^-24, rounding to nearest even. */
	mant = (x & 0x7fffffu) | 0x800000u;
	shift = 126 - (int)(x >> 23);
	q = mant >> shift;
	rem = mant & ((1u << shift) - 1);
	half = 1u << (shift - 1);
	if (rem > half || (rem == half && (q & 1)))
		q++;
	return sign | (uint16_t)q;
}

#ifdef __cplusplus
}
#endif

#endif /* KVSHARE_KV_LAYOUT_H */
