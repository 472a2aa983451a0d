/* SPDX-License-Identifier: MIT */
/*
 * libkv/cache's one growable-array helper, private to the folder: the
 * radix tree's heap and scratch lists and the prefix cache's buffers grow
 * by doubling through it, so that pushes after a reserve never fail.
 */
#ifndef KVSHARE_CACHE_GROW_H
#define KVSHARE_CACHE_GROW_H

#include <errno.h>
#include <stdlib.h>

/*
 * Grow the array *@buf (of *@cap elements of @size bytes) to hold @n,
 * doubling from @first: 0, or -ENOMEM with the array as it was.
 */
static inline int kv_grow(void *buf, size_t *cap, size_t n, size_t size, size_t first)
{
	void **p = buf, *q;
	size_t c = *cap ? *cap : first;

	while (c < n)
		c *= 2;
	if (c == *cap)
		return 0;
	q = realloc(*p, c * size);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

#endif
