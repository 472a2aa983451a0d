/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvshared's one clock: CLOCK_MONOTONIC, for deadlines, timeouts, backoff
 * and latencies (the loop's, the remote tier's thread's, the log's rate
 * limits).  Wall time appears only where a human reads it.
 */
#ifndef _KVSHARED_CLOCK_H
#define _KVSHARED_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t kvsd_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
}

static inline uint64_t kvsd_now_ms(void)
{
	return kvsd_now_ns() / 1000000;
}

#endif /* _KVSHARED_CLOCK_H */
