// SPDX-License-Identifier: MIT
/* The reference's inner loops for AVX-512F (with AVX2, FMA, F16C): see ref_kern.h. */
#if defined(__x86_64__)
#define KV_VL		16
#define KV_OPS		kv_ref_ops_avx512
#define KV_OPS_NAME	"avx512"
#include "ref_kern.h"
#endif
