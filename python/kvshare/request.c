// SPDX-License-Identifier: MIT
/*
 * kvshare.Request: one running request, a row of a PrefixCache's
 * request table.
 */
#include "prefix.h"

static void Request_dealloc(RequestObject *self)
{
	/* A request dropped while running: give its pages back. */
	if (self->active && self->pc->pc && self->pc->t.gen == fork_gen) {
		OBJ_LOCK(self->pc->t.lock);
		kv_prefix_abort(self->pc->pc, self->pc->rt, &self->req);
		self->pc->t.epoch++;
		OBJ_UNLOCK(self->pc->t.lock);
	}
	if (self->active)
		self->pc->live--;
	PyMem_Free(self->tokens);
	Py_DECREF(self->pc);
	PyObject_Free(self);
}

static PyObject *Request_get_pages(RequestObject *self, void *c)
{
	PrefixObject *pc = self->pc;
	uint32_t tpp, n, i, *d;
	PyObject *out;

	if (!self->active) {
		PyErr_SetString(PyExc_ValueError, "the Request is finished (cached or aborted)");
		return NULL;
	}
	tpp = kv_req_table_tokens_per_page(pc->rt);
	n = (self->req.n_tokens + tpp - 1) / tpp;
	out = new_u32(n, &d);
	for (i = 0; out && i < n; i++)
		d[i] = kv_req_page(pc->rt, self->req.slot, i);
	return out;
}

static PyObject *Request_get_last_node(RequestObject *self, void *c)
{
	NodeObject *n;

	if (!self->active) {
		PyErr_SetString(PyExc_ValueError, "the Request is finished (cached or aborted)");
		return NULL;
	}
	n = (NodeObject *)Node_new(&self->pc->t, self->req.last_node);
	return (PyObject *)n;
}

static PyObject *Request_get_u32(RequestObject *self, void *which)
{
	switch ((intptr_t)which) {
	case 0: return PyLong_FromLong(self->active ? self->req.slot : -1);
	case 1: return PyLong_FromUnsignedLong(self->req.n_tokens);
	case 2: return PyLong_FromUnsignedLong(self->req.cached_len);
	}
	return PyBool_FromLong(self->active);
}

static PyGetSetDef Request_getset[] = {
	{ "slot", (getter)Request_get_u32, NULL, PyDoc_STR("Row in the request table."),
	  (void *)0 },
	{ "n_tokens", (getter)Request_get_u32, NULL,
	  PyDoc_STR("Tokens whose KV the row holds (or will, after reserve)."), (void *)1 },
	{ "cached_len", (getter)Request_get_u32, NULL,
	  PyDoc_STR("Leading tokens whose pages came from the cache (prefix_indices)."),
	  (void *)2 },
	{ "active", (getter)Request_get_u32, NULL, PyDoc_STR("Not yet finished."), (void *)3 },
	{ "pages", (getter)Request_get_pages, NULL,
	  PyDoc_STR("The row's page table: ceil(n_tokens / tokens_per_page) pages."), NULL },
	{ "last_node", (getter)Request_get_last_node, NULL,
	  PyDoc_STR("The locked node the cached prefix ends in."), NULL },
	{ NULL }
};

PyTypeObject Request_Type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvshare._kvshare.Request",
	.tp_basicsize = sizeof(RequestObject),
	.tp_dealloc = (destructor)Request_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = PyDoc_STR("A running request of a PrefixCache (PrefixCache.match()).\n"
			    "Dropping it unfinished aborts it."),
	.tp_getset = Request_getset,
};
