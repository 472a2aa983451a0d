/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The read-only bandwidth kernel of kvbench attn --gpu (bench_read.cu; in
 * builds without CUDA, bench_read_stub.c: -ENODEV).
 */
#ifndef KVBENCH_READ_H
#define KVBENCH_READ_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of device memory the kernel writes its folds to; 0: no device. */
size_t kvbench_read_sink_bytes(void);
/* Launch one read of @bytes (a multiple of 16) at @buf (16-byte aligned). */
int kvbench_read_launch(const void *buf, size_t bytes, void *sink);

#ifdef __cplusplus
}
#endif
#endif
