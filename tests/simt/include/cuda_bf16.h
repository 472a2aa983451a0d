/* SPDX-License-Identifier: MIT */
/* The CPU stand-in's <cuda_bf16.h> (test-only): everything is in ../simt.h. */
#ifndef KV_SIMT_CUDA_BF16_H
#define KV_SIMT_CUDA_BF16_H
#include "../simt.h"
#endif
