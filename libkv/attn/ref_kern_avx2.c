// SPDX-License-Identifier: MIT
/* The reference's inner loops for AVX2 + FMA + F16C: see ref_kern.h. */
#if defined(__x86_64__)
#define KV_VL		8
#define KV_OPS		kv_ref_ops_avx2
#define KV_OPS_NAME	"avx2"
#include "ref_kern.h"
#endif
