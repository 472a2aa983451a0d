/* SPDX-License-Identifier: GPL-2.0 */
/*
 * How many file descriptors this process (or another: kvshared) has
 * open, for the tests that prove a call, failed or done, left none behind
 * (a pool's memfd, an exported handle): count before, count after.
 *
 * System headers only, so that a suite's own header (tests/core/kt.h) or
 * a test (tests/gpu/gpu_pool_test.c) includes it without taking in
 * another suite's helpers.
 */
#ifndef KVS_TESTS_OPEN_FDS_H
#define KVS_TESTS_OPEN_FDS_H

#include <dirent.h>

/* The entries of a /proc/<pid>/fd directory @dir, or -1 (errno set). */
static inline int test_fds_in(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* The entries of /proc/self/fd (the count's own among them), or -1. */
static inline int test_open_fds(void)
{
	return test_fds_in("/proc/self/fd");
}

#endif /* KVS_TESTS_OPEN_FDS_H */
