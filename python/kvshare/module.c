// SPDX-License-Identifier: MIT
/*
 * kvshare._kvshare: the CPython binding of libkv.
 *
 * Written in the style of CPython's own Modules/: the C API only, types
 * with docstrings, errors as an OSError subclass carrying errno, the GIL
 * released around every call that talks to the arbiter or hashes.  Page
 * index arrays and keys travel as numpy arrays (any C-contiguous buffer of
 * 4-byte integers, resp. 32-byte keys, is accepted as input); pool memory
 * is exported without a copy through the buffer protocol and DLPack.
 *
 * Objects and their holdings
 *   Arbiter      a libkv arbiter handle (module or daemon), for pool admin
 *   Pool         kv_pool: attached and mapped; alloc/publish/lookup/put
 *   PoolView     pages [start, start + count) of a pool's memory: buffer
 *                protocol and __dlpack__; keeps the pool open while alive
 *   BlockHasher  chained SHA-256 / XXH3 page keys
 *   RadixCache   kv_radix: the tree alone, pages released into a list
 *   PrefixCache  kv_prefix_cache + request table: the tree on the arbiter
 *   Request      one row of a PrefixCache's request table
 *
 * One file per type (CPython's Modules/_sqlite style); this one only
 * readies them.  Shared helpers are in kvshare.h, errors.c and util.c.
 */
#include <pthread.h>

#define KVPY_IMPORT_ARRAY	/* import_array() fills numpy's table here */
#include "kvshare.h"

/* kvshare.__version__: dist/VERSION, which both builds pass (python.mk, setup.py). */
#ifndef KVSHARE_VERSION
#error "KVSHARE_VERSION is not defined: build with make or pip, which pass dist/VERSION"
#endif

static PyMethodDef module_methods[] = {
	{ "dtypes", dtypes, METH_NOARGS, dtypes__doc__ },
	{ "_bench_match_prefix", bench_match_prefix, METH_VARARGS, bench_match_prefix__doc__ },
	{ "_bench_lookup_put", bench_lookup_put, METH_VARARGS, bench_lookup_put__doc__ },
	{ "cuda_copy2d", (PyCFunction)(void (*)(void))cuda_copy2d,
	  METH_VARARGS | METH_KEYWORDS, cuda_copy2d__doc__ },
	{ "cuda_synchronize", (PyCFunction)(void (*)(void))cuda_synchronize,
	  METH_VARARGS | METH_KEYWORDS, cuda_synchronize__doc__ },
	{ "cuda_pointer_info", cuda_pointer_info, METH_O, cuda_pointer_info__doc__ },
	{ "cuda_host_register", (PyCFunction)(void (*)(void))cuda_host_register,
	  METH_VARARGS | METH_KEYWORDS, cuda_host_register__doc__ },
	{ "cuda_host_unregister", (PyCFunction)(void (*)(void))cuda_host_unregister,
	  METH_VARARGS | METH_KEYWORDS, cuda_host_unregister__doc__ },
	{ "cuda_event", (PyCFunction)(void (*)(void))cuda_event,
	  METH_VARARGS | METH_KEYWORDS, cuda_event__doc__ },
	{ NULL }
};

PyDoc_STRVAR(module__doc__,
"kvshare._kvshare: the C binding of libkv (see the kvshare package).");

static struct PyModuleDef kvshare_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "kvshare._kvshare",
	.m_doc = module__doc__,
	.m_size = -1,
	.m_methods = module_methods,
};

static int add_type(PyObject *m, PyTypeObject *t, const char *name)
{
	if (PyType_Ready(t))
		return -1;
	return PyModule_AddObjectRef(m, name, (PyObject *)t);
}

PyMODINIT_FUNC PyInit__kvshare(void)
{
	PyObject *m, *bases;

	import_array();
	if (pthread_atfork(NULL, NULL, on_fork_child)) {
		PyErr_SetString(PyExc_RuntimeError, "pthread_atfork failed");
		return NULL;
	}
	m = PyModule_Create(&kvshare_module);
	if (!m)
		return NULL;
	KvError = PyErr_NewExceptionWithDoc(
		"kvshare.Error",
		"An arbiter or libkv call failed: an OSError whose errno is the\n"
		"call's (ENOSPC, EDQUOT, ENOENT, ENOTCONN, ...) and whose message\n"
		"says which call and why.", PyExc_OSError, NULL);
	if (!KvError || PyModule_AddObjectRef(m, "Error", KvError))
		goto fail;
	bases = PyTuple_Pack(2, KvError, PyExc_TimeoutError);
	KvTimeout = !bases ? NULL : PyErr_NewExceptionWithDoc(
		"kvshare.CallTimeout",
		"A call got no answer within the handle's deadline (timeout_ms):\n"
		"errno ETIMEDOUT, a kvshare.Error and a TimeoutError.  The handle\n"
		"is broken from then on (ENOTCONN): close it and open it again.",
		bases, NULL);
	Py_XDECREF(bases);
	if (!KvTimeout || PyModule_AddObjectRef(m, "CallTimeout", KvTimeout))
		goto fail;
	if (PyStructSequence_InitType2(&MatchResult_Type, &match_desc) ||
	    PyModule_AddObjectRef(m, "MatchResult", (PyObject *)&MatchResult_Type) ||
	    PyStructSequence_InitType2(&LookupResult_Type, &lookup_desc) ||
	    PyModule_AddObjectRef(m, "LookupResult", (PyObject *)&LookupResult_Type))
		goto fail;
	if (add_type(m, &Arbiter_Type, "Arbiter") || add_type(m, &Pool_Type, "Pool") ||
	    add_type(m, &PoolView_Type, "PoolView") ||
	    add_type(m, &Hasher_Type, "BlockHasher") || add_type(m, &Node_Type, "Node") ||
	    add_type(m, &Radix_Type, "RadixCache") || add_type(m, &Prefix_Type, "PrefixCache") ||
	    add_type(m, &Request_Type, "Request"))
		goto fail;
	if (PyModule_AddIntConstant(m, "NO_PAGE", KVS_NO_PAGE) ||
	    PyModule_AddIntConstant(m, "MAX_BATCH", KVS_MAX_BATCH) ||
	    PyModule_AddIntConstant(m, "ABI_VERSION", KVS_ABI_VERSION) ||
	    PyModule_AddStringConstant(m, "__version__", KVSHARE_VERSION))
		goto fail;
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
