// SPDX-License-Identifier: MIT
/*
 * kvshare.PoolView: pages [start, start + count) of a pool's memory,
 * exported without a copy through the buffer protocol and DLPack; it
 * keeps the pool open while alive.
 */
#include <stdlib.h>
#include <string.h>

#include "dlpack.h"
#include "pool.h"

typedef struct {
	PyObject_HEAD
	PoolObject *pool;		/* strong */
	uint32_t start, count;
	Py_ssize_t shape[KVPY_VIEW_NDIM];
	Py_ssize_t strides[KVPY_VIEW_NDIM];	/* bytes */
} PoolViewObject;

/* The DLPack device of the pool's memory: the CPU, or the GPU it is mapped on. */
static void pool_dl_device(const PoolObject *p, int *type, int *id)
{
	int dev = p->pool ? kv_pool_device(p->pool) : -1;

	*type = dev >= 0 ? KVPY_DL_CUDA : KVPY_DL_CPU;
	*id = dev >= 0 ? dev : 0;
}

static uint32_t dtype_itemsize(uint32_t dtype)
{
	return kv_dtype_size(dtype);
}

PyObject *PoolView_make(PoolObject *pool, uint32_t start, uint32_t count)
{
	const struct kvs_geometry *g = &pool->info.geom;
	PoolViewObject *v = PyObject_New(PoolViewObject, &PoolView_Type);
	Py_ssize_t item = dtype_itemsize(g->dtype);
	int i;

	if (!v)
		return NULL;
	Py_INCREF(pool);
	v->pool = pool;
	v->start = start;
	v->count = count;
	v->shape[0] = count;
	v->shape[1] = g->n_layers;
	v->shape[2] = 2;
	v->shape[3] = g->tokens_per_page;
	v->shape[4] = g->n_kv_heads;
	v->shape[5] = g->head_dim;
	v->strides[5] = item;
	for (i = 4; i >= 0; i--)
		v->strides[i] = v->strides[i + 1] * v->shape[i + 1];
	return (PyObject *)v;
}

static void PoolView_dealloc(PoolViewObject *self)
{
	Py_XDECREF(self->pool);
	PyObject_Free(self);
}

static void *PoolView_data(PoolViewObject *self)
{
	return kv_page_addr(self->pool->pool, self->start);
}

static const char *buffer_format(uint32_t dtype)
{
	switch (dtype) {
	case KVS_DTYPE_F16: return "e";
	case KVS_DTYPE_F32: return "f";
	case KVS_DTYPE_BF16: return "H";	/* numpy has no bfloat16: the bits */
	}
	return "B";
}

static int PoolView_getbuffer(PoolViewObject *self, Py_buffer *view, int flags)
{
	if (!self->pool->pool) {
		PyErr_SetString(PyExc_ValueError, "view of a closed Pool");
		view->obj = NULL;
		return -1;
	}
	if (pool_is_device(self->pool)) {
		/* On a real GPU the CPU must not dereference device pointers. */
		PyErr_Format(PyExc_BufferError, "pool '%U' is GPU device memory: no buffer "
			     "protocol (memoryview, numpy), which would have the CPU read "
			     "device pointers; use DLPack (torch.from_dlpack(view) or "
			     "Pool.tensor(), with a CUDA build of torch)", self->pool->name);
		view->obj = NULL;
		return -1;
	}
	view->buf = PoolView_data(self);
	view->obj = Py_NewRef(self);
	view->len = self->shape[0] * self->strides[0];
	view->readonly = 0;
	view->itemsize = self->strides[KVPY_VIEW_NDIM - 1];
	view->format = (flags & PyBUF_FORMAT) ? (char *)buffer_format(self->pool->info.geom.dtype)
					      : NULL;
	view->ndim = KVPY_VIEW_NDIM;
	view->shape = (flags & PyBUF_ND) ? self->shape : NULL;
	view->strides = (flags & PyBUF_STRIDES) ? self->strides : NULL;
	view->suboffsets = NULL;
	view->internal = NULL;
	if (!(flags & PyBUF_ND))
		view->ndim = 1;		/* a flat run of bytes-like items */
	self->pool->exports++;
	return 0;
}

static void PoolView_releasebuffer(PoolViewObject *self, Py_buffer *view)
{
	self->pool->exports--;
}

static PyBufferProcs PoolView_as_buffer = {
	(getbufferproc)PoolView_getbuffer,
	(releasebufferproc)PoolView_releasebuffer,
};

/* What a DLPack export owns: the tensor, its shape, and the view. */
struct dl_ctx {
	kvpy_dl_managed m;
	int64_t shape[KVPY_VIEW_NDIM];
	PoolViewObject *view;
};

/* Runs when the consumer's tensor dies, maybe on a thread without the GIL. */
static void dl_deleter(kvpy_dl_managed *m)
{
	struct dl_ctx *c = m->manager_ctx;
	PyGILState_STATE g;

	if (!Py_IsInitialized()) {
		/* Interpreter gone: nothing left to release, only the memory. */
		free(c);
		return;
	}
	g = PyGILState_Ensure();
	c->view->pool->exports--;
	Py_DECREF(c->view);
	PyGILState_Release(g);
	free(c);
}

/* The capsule died without a consumer taking the tensor. */
static void dl_capsule_destructor(PyObject *cap)
{
	kvpy_dl_managed *m;

	if (!PyCapsule_IsValid(cap, "dltensor"))
		return;		/* renamed "used_dltensor": the consumer owns it */
	m = PyCapsule_GetPointer(cap, "dltensor");
	if (m && m->deleter)
		m->deleter(m);
}

static int dl_dtype(uint32_t dtype, kvpy_dl_dtype *d)
{
	d->lanes = 1;
	switch (dtype) {
	case KVS_DTYPE_F16: d->code = KVPY_DL_FLOAT; d->bits = 16; return 0;
	case KVS_DTYPE_BF16: d->code = KVPY_DL_BFLOAT; d->bits = 16; return 0;
	case KVS_DTYPE_F32: d->code = KVPY_DL_FLOAT; d->bits = 32; return 0;
	case KVS_DTYPE_FP8: d->code = KVPY_DL_UINT; d->bits = 8; return 0;	/* raw bytes */
	}
	return -1;
}

PyDoc_STRVAR(PoolView_dlpack__doc__,
"__dlpack__(stream=None) -> PyCapsule\n"
"\n"
"A DLPack 'dltensor' capsule over the view's memory (no copy), for\n"
"torch.from_dlpack().  Host pools export kDLCPU tensors and take no\n"
"stream; device pools (is_device) export kDLCUDA tensors of the pool's\n"
"device (kv_pool_device()) and take any stream,\n"
"having no pending work to order.  fp8 pools as uint8.");

static PyObject *PoolView_dlpack(PoolViewObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "stream", NULL };
	PyObject *stream = Py_None, *cap;
	struct dl_ctx *c;
	int i, type, id;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|$O:__dlpack__", kwlist, &stream))
		return NULL;
	if (!self->pool->pool) {
		PyErr_SetString(PyExc_ValueError, "view of a closed Pool");
		return NULL;
	}
	pool_dl_device(self->pool, &type, &id);
	if (stream != Py_None && type == KVPY_DL_CPU) {
		PyErr_SetString(PyExc_BufferError, "__dlpack__: host memory takes no stream");
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return PyErr_NoMemory();
	if (dl_dtype(self->pool->info.geom.dtype, &c->m.dl_tensor.dtype)) {
		free(c);
		PyErr_SetString(PyExc_BufferError, "__dlpack__: unknown pool dtype");
		return NULL;
	}
	for (i = 0; i < KVPY_VIEW_NDIM; i++)
		c->shape[i] = self->shape[i];
	c->m.dl_tensor.data = PoolView_data(self);
	c->m.dl_tensor.device.device_type = type;
	c->m.dl_tensor.device.device_id = id;
	c->m.dl_tensor.ndim = KVPY_VIEW_NDIM;
	c->m.dl_tensor.shape = c->shape;
	c->m.dl_tensor.strides = NULL;		/* compact, row-major */
	c->m.dl_tensor.byte_offset = 0;
	c->m.manager_ctx = c;
	c->m.deleter = dl_deleter;
	c->view = (PoolViewObject *)Py_NewRef(self);
	self->pool->exports++;
	cap = PyCapsule_New(&c->m, "dltensor", dl_capsule_destructor);
	if (!cap)
		dl_deleter(&c->m);
	return cap;
}

static PyObject *PoolView_dlpack_device(PoolViewObject *self, PyObject *Py_UNUSED(i))
{
	int type, id;

	pool_dl_device(self->pool, &type, &id);
	return Py_BuildValue("(ii)", type, id);
}

static PyObject *PoolView_get_shape(PoolViewObject *self, void *c)
{
	return Py_BuildValue("(nnnnnn)", self->shape[0], self->shape[1], self->shape[2],
			     self->shape[3], self->shape[4], self->shape[5]);
}

static PyObject *PoolView_get_address(PoolViewObject *self, void *c)
{
	if (!self->pool->pool) {
		PyErr_SetString(PyExc_ValueError, "view of a closed Pool");
		return NULL;
	}
	return PyLong_FromVoidPtr(PoolView_data(self));
}

static PyObject *PoolView_get_nbytes(PoolViewObject *self, void *c)
{
	return PyLong_FromSsize_t(self->shape[0] * self->strides[0]);
}

static PyMethodDef PoolView_methods[] = {
	{ "__dlpack__", (PyCFunction)(void (*)(void))PoolView_dlpack,
	  METH_VARARGS | METH_KEYWORDS, PoolView_dlpack__doc__ },
	{ "__dlpack_device__", (PyCFunction)PoolView_dlpack_device, METH_NOARGS,
	  PyDoc_STR("__dlpack_device__() -> (device_type, device_id): (1, 0), the CPU,\n"
		    "for host pools; (2, ordinal), kDLCUDA, for device pools (the GPU\n"
		    "libkv mapped the pool on).") },
	{ NULL }
};

static PyMemberDef PoolView_members[] = {
	{ "pool", T_OBJECT, offsetof(PoolViewObject, pool), READONLY, NULL },
	{ "start", T_UINT, offsetof(PoolViewObject, start), READONLY, PyDoc_STR("First page.") },
	{ "count", T_UINT, offsetof(PoolViewObject, count), READONLY, PyDoc_STR("Pages.") },
	{ NULL }
};

static PyGetSetDef PoolView_getset[] = {
	{ "shape", (getter)PoolView_get_shape, NULL,
	  PyDoc_STR("(pages, layers, 2, tokens_per_page, kv_heads, head_dim)"), NULL },
	{ "address", (getter)PoolView_get_address, NULL,
	  PyDoc_STR("Address of the view's first byte in this process."), NULL },
	{ "nbytes", (getter)PoolView_get_nbytes, NULL, NULL, NULL },
	{ NULL }
};

PyTypeObject PoolView_Type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvshare._kvshare.PoolView",
	.tp_basicsize = sizeof(PoolViewObject),
	.tp_dealloc = (destructor)PoolView_dealloc,
	.tp_as_buffer = &PoolView_as_buffer,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = PyDoc_STR("Pages of a pool's memory, exported without a copy: the buffer\n"
			    "protocol (numpy.asarray; bfloat16 appears as uint16 bits) and\n"
			    "DLPack (torch.from_dlpack).  Device pools: DLPack (kDLCUDA) only.\n"
			    "Made by Pool.view() and Pool.page()."),
	.tp_methods = PoolView_methods,
	.tp_members = PoolView_members,
	.tp_getset = PoolView_getset,
};
