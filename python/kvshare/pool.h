/* SPDX-License-Identifier: MIT */
/*
 * The Pool object, for the files that look inside it: pool.c, its views
 * (pool_view.c), the PrefixCache built on it and the benchmark.
 */
#ifndef KVPY_POOL_H
#define KVPY_POOL_H

#include "kvshare.h"

typedef struct {
	PyObject_HEAD
	struct kv_pool *pool;
	struct kv_arbiter *arb;		/* borrowed from pool */
	struct kvs_pool_attach info;	/* copy: stays readable after close */
	PyObject *name;
	Py_ssize_t exports;		/* live buffer / DLPack exports */
	Py_ssize_t users;		/* PrefixCaches on this pool */
	Py_ssize_t busy;		/* calls running without the GIL */
	uint64_t ns;
	uint32_t owner;
	unsigned long gen;		/* fork_gen at open */
} PoolObject;

#define POOL_OPEN(self, ret) do { \
	if (!(self)->pool) { \
		PyErr_SetString(PyExc_ValueError, "operation on a closed Pool"); \
		return ret; \
	} \
	if ((self)->gen != fork_gen) { \
		forked_raise("Pool"); \
		return ret; \
	} \
} while (0)

/* Whether the pool's memory is device memory (ATTACH's pool_flags; readable after close). */
static inline int pool_is_device(const PoolObject *p)
{
	return !!(p->info.pool_flags & KVS_POOL_DEVICE_MEM);
}

/* pool_view.c: pages [start, start + count) of @pool, without a copy. */
PyObject *PoolView_make(PoolObject *pool, uint32_t start, uint32_t count);

/* pagecopy.c: Pool.copy_pages(). */
extern const char Pool_copy_pages__doc__[];
PyObject *Pool_copy_pages(PoolObject *self, PyObject *args, PyObject *kw);

/* prefault.c: Pool.prefault(). */
extern const char Pool_prefault__doc__[];
PyObject *Pool_prefault(PoolObject *self, PyObject *args);

#endif /* KVPY_POOL_H */
