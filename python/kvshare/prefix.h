/* SPDX-License-Identifier: MIT */
/*
 * PrefixCache (prefix.c) and its Requests (request.c): the two look
 * inside each other, so both objects are declared here.
 */
#ifndef KVPY_PREFIX_H
#define KVPY_PREFIX_H

#include "pool.h"
#include "tree.h"

typedef struct {
	TreeObject t;
	struct kv_prefix_cache *pc;
	struct kv_req_table *rt;	/* the requests' rows */
	struct kv_req_table *scratch;	/* one row for match_prefix() */
	PoolObject *pool;		/* strong */
	char *salt;
	struct extras extra;
	uint32_t max_context;
	unsigned int inflight_wait_ms;	/* 0: no in-flight dedupe */
	Py_ssize_t live;		/* Requests started and not finished */
} PrefixObject;

typedef struct {
	PyObject_HEAD
	PrefixObject *pc;		/* strong */
	struct kv_radix_req req;
	uint32_t *tokens;		/* prompt + output, as given */
	size_t cap;
	uint32_t n_given;		/* tokens given so far */
	int active;
} RequestObject;

#endif /* KVPY_PREFIX_H */
