/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Smaller shapes under compute-sanitizer's racecheck and synccheck, which
 * instrument every shared-memory access (tens to hundreds of times slower):
 * tools/gpu/gpu-checks.sh sets KV_SANITIZER=1 for those runs, and a test
 * whose cases would outlast the kselftest harness's per-test limit there
 * caps its shapes with kv_sanitizer_cap().  Every kernel case still runs,
 * on fewer tokens; memcheck runs the full shapes (KV_SANITIZER=0).
 *
 * In a test (e.g. tests/attn/attn_cuda_test.c):
 *   #include "../gpu/kv_sanitizer.h"
 *   prefix = kv_sanitizer_cap(prefix, 256);    (the full value otherwise)
 */
#ifndef KV_SANITIZER_H
#define KV_SANITIZER_H

#include <stdlib.h>

/* Whether this run is under racecheck or synccheck (KV_SANITIZER set, not 0). */
static inline int kv_under_sanitizer(void)
{
	const char *e = getenv("KV_SANITIZER");

	return e && *e && *e != '0';
}

/* @n, or at most @small under the sanitizer. */
static inline unsigned int kv_sanitizer_cap(unsigned int n, unsigned int small)
{
	return kv_under_sanitizer() && n > small ? small : n;
}

#endif
