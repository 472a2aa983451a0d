/* SPDX-License-Identifier: MIT */
/* The CPU stand-in's <cuda_runtime.h> (test-only): everything is in ../simt.h. */
#ifndef KV_SIMT_CUDA_RUNTIME_H
#define KV_SIMT_CUDA_RUNTIME_H
#include "../simt.h"
#endif
