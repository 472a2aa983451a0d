// SPDX-License-Identifier: MIT
/* The reference's inner loops for any CPU (SSE2 on x86-64): see ref_kern.h. */
#define KV_VL		4
#define KV_OPS		kv_ref_ops_base
#define KV_OPS_NAME	"base"
#include "ref_kern.h"
