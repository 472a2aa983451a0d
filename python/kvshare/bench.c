// SPDX-License-Identifier: MIT
/*
 * C-side timings for the benchmark (tools/kvbench/py_bench.py): the
 * same calls as the binding makes, without Python.
 */
#include <time.h>

#include "pool.h"
#include "tree.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

const char bench_match_prefix__doc__[] = PyDoc_STR(
"_bench_match_prefix(radix, tokens, iters) -> int\n"
"\n"
"Nanoseconds for iters calls of kv_radix_match_prefix() from C (bench).");

PyObject *bench_match_prefix(PyObject *mod, PyObject *args)
{
	struct kv_radix_match m;
	TreeObject *tree;	/* a RadixCache begins with its tree */
	struct u32in tok;
	PyObject *tok_o;
	uint32_t *pages;
	uint32_t iters, i;
	uint64_t t0, t;

	if (!PyArg_ParseTuple(args, "O!OO&", &Radix_Type, &tree, &tok_o, conv_u32, &iters))
		return NULL;
	TREE_OPEN(tree, NULL);
	if (u32_from(tok_o, &tok, "tokens"))
		return NULL;
	pages = PyMem_Malloc((tok.n + 1) * 4);
	if (!pages) {
		u32_release(&tok);
		return PyErr_NoMemory();
	}
	t0 = now_ns();
	for (i = 0; i < iters; i++)
		kv_radix_match_prefix(tree->tree, tok.p, tok.n, pages, &m);
	t = now_ns() - t0;
	PyMem_Free(pages);
	u32_release(&tok);
	return PyLong_FromUnsignedLongLong(t);
}

const char bench_lookup_put__doc__[] = PyDoc_STR(
"_bench_lookup_put(pool, keys, iters) -> int\n"
"\n"
"Nanoseconds for iters rounds of kv_lookup() + kv_put() from C (bench).");

PyObject *bench_lookup_put(PyObject *mod, PyObject *args)
{
	PoolObject *p;
	PyObject *keys_o;
	Py_buffer kb;
	Py_ssize_t n;
	uint32_t iters, i, *pages;
	uint64_t t0, t;
	int ret = 0;

	if (!PyArg_ParseTuple(args, "O!OO&", &Pool_Type, &p, &keys_o, conv_u32, &iters))
		return NULL;
	POOL_OPEN(p, NULL);
	if (keys_batch_from(keys_o, &kb, &n, "keys"))
		return NULL;
	pages = PyMem_Malloc(n * 4);
	if (!pages) {
		PyBuffer_Release(&kb);
		return PyErr_NoMemory();
	}
	Py_BEGIN_ALLOW_THREADS
	t0 = now_ns();
	for (i = 0; i < iters && ret >= 0; i++) {
		ret = kv_lookup(p->arb, kb.buf, (uint32_t)n, pages);
		if (ret > 0)
			ret = kv_put(p->arb, pages, ret);
	}
	t = now_ns() - t0;
	Py_END_ALLOW_THREADS
	PyMem_Free(pages);
	PyBuffer_Release(&kb);
	if (ret < 0)
		return KV_RAISE(ret, "bench lookup+put");
	return PyLong_FromUnsignedLongLong(t);
}
