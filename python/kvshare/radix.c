// SPDX-License-Identifier: MIT
/*
 * kvshare.RadixCache: kv_radix, the tree alone; pages it releases are
 * collected for take_released().
 */
#include <stdlib.h>
#include <string.h>

#include "tree.h"

typedef struct {
	TreeObject t;
	uint32_t *released;		/* pages the tree gave back, not yet taken */
	size_t n_released, cap_released;
	int oom;			/* a release could not be recorded */
} RadixObject;

static void radix_release(void *priv, const uint32_t *pages, uint32_t n,
			  unsigned int flags)
{
	RadixObject *r = priv;

	if (r->n_released + n > r->cap_released) {
		size_t c = r->cap_released ? r->cap_released : 256;
		uint32_t *p;

		while (c < r->n_released + n)
			c *= 2;
		p = realloc(r->released, c * sizeof(*p));
		if (!p) {
			r->oom = 1;
			return;
		}
		r->released = p;
		r->cap_released = c;
	}
	memcpy(r->released + r->n_released, pages, n * sizeof(*pages));
	r->n_released += n;
}

static int Radix_init(RadixObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "tokens_per_page", NULL };
	struct kv_radix_ops ops = { .release = radix_release };
	uint32_t tpp;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&:RadixCache", kwlist, conv_u32, &tpp))
		return -1;
	if (self->t.tree) {
		PyErr_SetString(PyExc_ValueError, "RadixCache is already initialized");
		return -1;
	}
	if (!tpp || tpp > 65536) {
		PyErr_Format(PyExc_ValueError, "tokens_per_page %u: expected 1..65536", tpp);
		return -1;
	}
	ops.priv = self;
	ret = kv_radix_create(tpp, &ops, &self->t.tree);
	if (ret) {
		self->t.tree = NULL;
		KV_RAISE(ret, "RadixCache");
		return -1;
	}
	return 0;
}

static void Radix_dealloc(RadixObject *self)
{
	kv_radix_destroy(self->t.tree);
	free(self->released);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Radix_close(RadixObject *self, PyObject *Py_UNUSED(i))
{
	if (self->t.tree) {
		kv_radix_destroy(self->t.tree);
		self->t.tree = NULL;
		self->t.epoch++;
	}
	Py_RETURN_NONE;
}

PyDoc_STRVAR(Radix_match_prefix__doc__,
"match_prefix(tokens) -> MatchResult(pages, length, last_node)\n"
"\n"
"The longest cached prefix of tokens, in whole pages: its pages, its\n"
"length in tokens and the node it ends in (split there if needed).\n"
"Stamps the path as used.");

static PyObject *Radix_match_prefix(TreeObject *self, PyObject *tok_o)
{
	struct kv_radix_match m;
	struct u32in tok;
	uint32_t *pages;
	int ret;

	TREE_OPEN(self, NULL);
	if (u32_from(tok_o, &tok, "tokens"))
		return NULL;
	/* Room for every full page; only the match is copied out. */
	pages = tree_scratch(self, tok.n / kv_radix_tokens_per_page(self->tree));
	if (!pages) {
		u32_release(&tok);
		return NULL;
	}
	TREE_CALL(self, ret = kv_radix_match_prefix(self->tree, tok.p, tok.n, pages, &m));
	u32_release(&tok);
	if (ret)
		return KV_RAISE(ret, "match_prefix");
	return match_result(self, u32_copy(pages, m.n_pages), m.len, m.last_node);
}

PyDoc_STRVAR(Radix_insert__doc__,
"insert(tokens, pages) -> int\n"
"\n"
"Insert the full pages of tokens with values pages (one per full page).\n"
"Returns the tokens already present: the tree took pages[len // tpp:],\n"
"the caller still owns the pages before (duplicates).");

static PyObject *Radix_insert(RadixObject *self, PyObject *args)
{
	struct u32in tok, pg;
	uint32_t tpp;
	long ret;

	if (insert_args(&self->t, args, &tok, &pg))
		return NULL;
	tpp = kv_radix_tokens_per_page(self->t.tree);
	if (pg.n < tok.n / tpp) {
		PyErr_Format(PyExc_ValueError, "insert: %zd tokens make %zd full pages but "
			     "%zd pages were given", tok.n, tok.n / tpp, pg.n);
		u32_release(&tok);
		u32_release(&pg);
		return NULL;
	}
	ret = kv_radix_insert(self->t.tree, tok.p, tok.n, pg.p, 0, NULL);
	u32_release(&tok);
	u32_release(&pg);
	if (ret < 0)
		return KV_RAISE((int)ret, "insert");
	return PyLong_FromLong(ret);
}

PyDoc_STRVAR(Radix_take_released__doc__,
"take_released() -> numpy.ndarray[uint32]\n"
"\n"
"The pages the tree gave back (evict, close), in the order given, since\n"
"the last call; the caller frees them in its allocator.");

static PyObject *Radix_take_released(RadixObject *self, PyObject *Py_UNUSED(i))
{
	uint32_t *d;
	PyObject *out;

	if (self->oom) {
		self->oom = 0;
		return PyErr_NoMemory();
	}
	out = new_u32(self->n_released, &d);
	if (out) {
		memcpy(d, self->released, self->n_released * sizeof(*d));
		self->n_released = 0;
	}
	return out;
}

static PyMethodDef Radix_methods[] = {
	{ "match_prefix", (PyCFunction)Radix_match_prefix, METH_O, Radix_match_prefix__doc__ },
	{ "insert", (PyCFunction)Radix_insert, METH_VARARGS, Radix_insert__doc__ },
	{ "take_released", (PyCFunction)Radix_take_released, METH_NOARGS,
	  Radix_take_released__doc__ },
	TREE_COMMON_METHODS,
	{ "close", (PyCFunction)Radix_close, METH_NOARGS,
	  PyDoc_STR("close()\n\nRelease every page (into take_released()) and free the tree.") },
	{ "__enter__", self_enter, METH_NOARGS, NULL },
	{ "__exit__", call_close, METH_VARARGS, NULL },
	{ NULL }
};

static PyGetSetDef Radix_getset[] = {
	TREE_COMMON_GETSET,
	{ NULL }
};

PyDoc_STRVAR(Radix__doc__,
"RadixCache(tokens_per_page)\n"
"\n"
"SGLang's RadixCache at page granularity, on its own (<kvshare/radix.h>):\n"
"keys are token ids, values page indices of your allocator.  Pages the\n"
"tree drops are collected for take_released().  One thread at a time.");

PyTypeObject Radix_Type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvshare._kvshare.RadixCache",
	.tp_basicsize = sizeof(RadixObject),
	.tp_dealloc = (destructor)Radix_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = Radix__doc__,
	.tp_methods = Radix_methods,
	.tp_getset = Radix_getset,
	.tp_init = (initproc)Radix_init,
	.tp_new = PyType_GenericNew,
};
