// SPDX-License-Identifier: GPL-2.0
/* bench_read.cu's entry points where kvbench is built without CUDA (the guest). */
#include <errno.h>

#include "bench_read.h"

size_t kvbench_read_sink_bytes(void)
{
	return 0;
}

int kvbench_read_launch(const void *buf, size_t bytes, void *sink)
{
	(void)buf;
	(void)bytes;
	(void)sink;
	return -ENODEV;
}
