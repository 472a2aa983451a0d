// SPDX-License-Identifier: MIT
/*
 * kvshare.BlockHasher: chained SHA-256 / XXH3 page keys, equal to libkv's.
 */
#include <string.h>

#include "kvshare.h"

typedef struct {
	PyObject_HEAD
	struct kv_block_hasher h;
	int ready;
} HasherObject;

static int Hasher_init(HasherObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "tokens_per_page", "salt", "algo", NULL };
	PyObject *salt_o = Py_None;
	const char *algo_s = "sha256";
	uint32_t tpp;
	unsigned int algo;
	char *salt;
	size_t salt_len;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|O$s:BlockHasher", kwlist,
					 conv_u32, &tpp, &salt_o, &algo_s))
		return -1;
	if (algo_parse(algo_s, &algo) || salt_arg(salt_o, &salt, &salt_len))
		return -1;
	if (!tpp || tpp > 65536) {
		PyMem_Free(salt);
		PyErr_Format(PyExc_ValueError, "tokens_per_page %u: expected 1..65536", tpp);
		return -1;
	}
	ret = kv_hasher_init_algo(&self->h, algo, salt, salt_len, tpp);
	PyMem_Free(salt);
	if (ret) {
		KV_RAISE(ret, "BlockHasher");
		return -1;
	}
	self->ready = 1;
	return 0;
}

PyDoc_STRVAR(Hasher_hash__doc__,
"hash(tokens, parent=None, extra=()) -> numpy.ndarray[uint64] of shape (n, 4)\n"
"\n"
"The chained keys of the full pages of tokens (n = len // tokens_per_page),\n"
"chained from parent (a key, 4 uint64; None: the salted root), with the\n"
"extra keys (bytes or str each, e.g. a LoRA id) on every page.  Equal to\n"
"libkv's kv_hash_chain().");

static PyObject *Hasher_hash(HasherObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "tokens", "parent", "extra", NULL };
	PyObject *tok_o, *parent_o = Py_None, *extra_o = Py_None, *out = NULL;
	struct kvs_key *keys, parent;
	struct extras ex;
	struct u32in tok;
	long ret;
	int have_parent = 0;

	if (!self->ready) {
		PyErr_SetString(PyExc_ValueError, "BlockHasher not initialized");
		return NULL;
	}
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO:hash", kwlist, &tok_o, &parent_o,
					 &extra_o))
		return NULL;
	if (parent_o != Py_None) {
		Py_buffer pb;

		if (PyObject_GetBuffer(parent_o, &pb, PyBUF_C_CONTIGUOUS))
			return NULL;
		if (pb.len != sizeof(parent)) {
			PyBuffer_Release(&pb);
			PyErr_Format(PyExc_ValueError, "parent: a key is 32 bytes (4 uint64), "
				     "got %zd", pb.len);
			return NULL;
		}
		memcpy(&parent, pb.buf, sizeof(parent));
		PyBuffer_Release(&pb);
		have_parent = 1;
	}
	if (extras_arg(extra_o, &ex))
		return NULL;
	if (u32_from(tok_o, &tok, "tokens")) {
		extras_free(&ex);
		return NULL;
	}
	out = new_keys(tok.n / self->h.tokens_per_page, &keys);
	if (out) {
		Py_BEGIN_ALLOW_THREADS
		ret = kv_hash_chain(&self->h, have_parent ? &parent : NULL, tok.p, tok.n,
				    ex.e, ex.n, keys);
		Py_END_ALLOW_THREADS
		if (ret < 0) {
			Py_CLEAR(out);
			KV_RAISE((int)ret, "hash of %zd tokens", tok.n);
		}
	}
	u32_release(&tok);
	extras_free(&ex);
	return out;
}

static PyObject *Hasher_get_root(HasherObject *self, void *c)
{
	struct kvs_key *k;
	PyObject *a;
	npy_intp dims[1] = { 4 };

	a = PyArray_SimpleNew(1, dims, NPY_UINT64);
	if (a) {
		k = PyArray_DATA((PyArrayObject *)a);
		*k = self->h.root;
	}
	return a;
}

static PyObject *Hasher_get_tpp(HasherObject *self, void *c)
{
	return PyLong_FromUnsignedLong(self->h.tokens_per_page);
}

static PyObject *Hasher_get_algo(HasherObject *self, void *c)
{
	return PyUnicode_FromString(self->h.algo == KV_HASH_XXH3 ? "xxh3" : "sha256");
}

static PyMethodDef Hasher_methods[] = {
	{ "hash", (PyCFunction)(void (*)(void))Hasher_hash, METH_VARARGS | METH_KEYWORDS,
	  Hasher_hash__doc__ },
	{ NULL }
};

static PyGetSetDef Hasher_getset[] = {
	{ "root", (getter)Hasher_get_root, NULL,
	  PyDoc_STR("The salted key before page 0 (4 uint64)."), NULL },
	{ "tokens_per_page", (getter)Hasher_get_tpp, NULL, NULL, NULL },
	{ "algo", (getter)Hasher_get_algo, NULL, PyDoc_STR("'sha256' or 'xxh3'."), NULL },
	{ NULL }
};

PyDoc_STRVAR(Hasher__doc__,
"BlockHasher(tokens_per_page, salt=None, *, algo='sha256')\n"
"\n"
"Chained page keys, vLLM style (<kvshare/blockhash.h>): SHA-256 (the\n"
"default, collision resistant) or 'xxh3' (fast; only for pools whose\n"
"attachers all trust each other).  salt None differs from b''.");

PyTypeObject Hasher_Type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvshare._kvshare.BlockHasher",
	.tp_basicsize = sizeof(HasherObject),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = Hasher__doc__,
	.tp_methods = Hasher_methods,
	.tp_getset = Hasher_getset,
	.tp_init = (initproc)Hasher_init,
	.tp_new = PyType_GenericNew,
};
