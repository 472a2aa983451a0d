// SPDX-License-Identifier: MIT
/*
 * Copies between an engine's KV cache and a kvshare pool on CUDA streams,
 * for engine glue (kvshare.blockcopy): the driver's cuMemcpy2DAsync in any
 * direction between device and host memory, events to wait for part of a
 * stream's work, cuMemHostRegister to pin a host pool's mapping, and
 * cuPointerGetAttribute to tell device memory from host memory.  Debian's
 * torch is CPU-only, so Python has no other way to issue such a copy.
 *
 * The driver is the one libkv dlopen()s for device pools (libcuda.so.1;
 * the tests' stand-in in CI).  Addresses are plain integers: the driver
 * checks that each device range lies in memory mapped on the device and
 * fails the call otherwise (CUDA_ERROR_INVALID_VALUE), so a wrong device
 * address is an error here, not a fault.  A host address is the caller's
 * promise (the driver cannot check it): kvshare.blockcopy passes only
 * ranges of the pool's mapping and of the engine's tensors.  Arguments
 * are checked before any copy starts.  The calling thread needs a current
 * context: if it has none, the device's primary context is retained once
 * and made current.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <cuda.h>

#include "kvshare.h"

#define DC_STR_(x)	#x
#define DC_STR(x)	DC_STR_(x)	/* the versioned name cuda.h maps to */
#define DC_MAX_COPIES	(1 << 22)

static struct {
	int state;		/* 0 not tried, 1 loaded, -1 unusable */
	char why[160];
	CUresult (*get_error_name)(CUresult, const char **);
	CUresult (*init)(unsigned int);
	CUresult (*ctx_get)(CUcontext *);
	CUresult (*ctx_set)(CUcontext);
	CUresult (*primary_retain)(CUcontext *, CUdevice);
	CUresult (*copy2d)(const CUDA_MEMCPY2D *, CUstream);
	CUresult (*sync)(CUstream);
	CUresult (*ptr_attr)(void *, CUpointer_attribute, CUdeviceptr);
	CUresult (*host_register)(void *, size_t, unsigned int);
	CUresult (*host_unregister)(void *);
	CUresult (*event_create)(CUevent *, unsigned int);
	CUresult (*event_record)(CUevent, CUstream);
	CUresult (*event_sync)(CUevent);
	CUresult (*event_destroy)(CUevent);
} dc;

static int dc_load(void)
{
	void *lib;
	CUresult r;

	if (dc.state)
		return dc.state;
	dc.state = -1;
	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		snprintf(dc.why, sizeof(dc.why), "no CUDA driver (%s)", dlerror());
		return -1;
	}
#define DC_SYM(field, fn) do {						\
		*(void **)&dc.field = dlsym(lib, DC_STR(fn));		\
		if (!dc.field) {					\
			snprintf(dc.why, sizeof(dc.why), "CUDA driver lacks %s", \
				 DC_STR(fn));				\
			return -1;					\
		}							\
	} while (0)
	DC_SYM(get_error_name, cuGetErrorName);
	DC_SYM(init, cuInit);
	DC_SYM(ctx_get, cuCtxGetCurrent);
	DC_SYM(ctx_set, cuCtxSetCurrent);
	DC_SYM(primary_retain, cuDevicePrimaryCtxRetain);
	DC_SYM(copy2d, cuMemcpy2DAsync);
	DC_SYM(sync, cuStreamSynchronize);
	DC_SYM(ptr_attr, cuPointerGetAttribute);
	DC_SYM(host_register, cuMemHostRegister);
	DC_SYM(host_unregister, cuMemHostUnregister);
	DC_SYM(event_create, cuEventCreate);
	DC_SYM(event_record, cuEventRecord);
	DC_SYM(event_sync, cuEventSynchronize);
	DC_SYM(event_destroy, cuEventDestroy);
#undef DC_SYM
	r = dc.init(0);
	if (r != CUDA_SUCCESS) {
		snprintf(dc.why, sizeof(dc.why), "cuInit failed (CUresult %d)", (int)r);
		return -1;
	}
	dc.state = 1;
	return 1;
}

static PyObject *dc_raise(const char *what, CUresult r)
{
	const char *name = NULL;

	if (dc.get_error_name(r, &name) != CUDA_SUCCESS || !name)
		name = "unknown CUDA error";
	return kvpy_raise(r == CUDA_ERROR_OUT_OF_MEMORY ? ENOMEM :
			  r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_INVALID_HANDLE ||
			  r == CUDA_ERROR_INVALID_CONTEXT ? EINVAL :
			  r == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED ? EEXIST :
			  r == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED ? ENOENT :
			  r == CUDA_ERROR_NOT_SUPPORTED ? EOPNOTSUPP :
			  r == CUDA_ERROR_NOT_PERMITTED ? EPERM : EIO,
			  "%s: %s", what, name);
}

/* The driver loaded and a context current on this thread (@dev's primary). */
static int dc_ready(int dev)
{
	CUcontext ctx = NULL;
	CUresult r;

	if (dc_load() < 0) {
		kvpy_raise(ENODEV, "device copy: %s", dc.why);
		return -1;
	}
	r = dc.ctx_get(&ctx);
	if (r == CUDA_SUCCESS && ctx)
		return 0;
	r = dc.primary_retain(&ctx, dev);
	if (r == CUDA_SUCCESS)
		r = dc.ctx_set(ctx);
	if (r != CUDA_SUCCESS) {
		dc_raise("device copy: making the primary context current", r);
		return -1;
	}
	return 0;
}

/* The addresses of sequence @o as uint64, in *out (PyMem); -1 on error. */
static Py_ssize_t dc_addrs(PyObject *o, const char *what, CUdeviceptr **out)
{
	PyObject *seq = PySequence_Fast(o, "");
	Py_ssize_t n, i;

	*out = NULL;
	if (!seq) {
		PyErr_Format(PyExc_TypeError, "%s must be a sequence of addresses (ints)", what);
		return -1;
	}
	n = PySequence_Fast_GET_SIZE(seq);
	if (n > DC_MAX_COPIES) {
		PyErr_Format(PyExc_ValueError, "%s: %zd copies, at most %d", what, n,
			     DC_MAX_COPIES);
		goto fail;
	}
	*out = PyMem_Malloc(((size_t)n + 1) * sizeof(**out));
	if (!*out) {
		PyErr_NoMemory();
		goto fail;
	}
	for (i = 0; i < n; i++) {
		PyObject *v = PySequence_Fast_GET_ITEM(seq, i);
		unsigned long long a;

		if (!PyLong_Check(v)) {
			PyErr_Format(PyExc_TypeError, "%s[%zd] is %.50s, not an int", what, i,
				     Py_TYPE(v)->tp_name);
			goto fail;
		}
		a = PyLong_AsUnsignedLongLong(v);
		if (a == (unsigned long long)-1 && PyErr_Occurred()) {
			PyErr_Format(PyExc_OverflowError, "%s[%zd] is not a 64-bit address",
				     what, i);
			goto fail;
		}
		if (!a) {
			PyErr_Format(PyExc_ValueError, "%s[%zd] is a null address", what, i);
			goto fail;
		}
		(*out)[i] = (CUdeviceptr)a;
	}
	Py_DECREF(seq);
	return n;
fail:
	PyMem_Free(*out);
	*out = NULL;
	Py_DECREF(seq);
	return -1;
}

/* Whether a box of @height rows of @width bytes, @pitch apart, from @a wraps. */
static int dc_wraps(unsigned long long a, size_t pitch, size_t width, size_t height)
{
	unsigned long long span;

	if (__builtin_mul_overflow((unsigned long long)(height - 1), pitch, &span) ||
	    __builtin_add_overflow(span, width, &span))
		return 1;
	return a + span < a;
}

/* The heights of @n copies in *out (PyMem): @o an int for all, or one each. */
static int dc_heights(PyObject *o, Py_ssize_t n, size_t **out)
{
	PyObject *seq = NULL;
	Py_ssize_t i;

	*out = PyMem_Malloc(((size_t)n + 1) * sizeof(**out));
	if (!*out) {
		PyErr_NoMemory();
		return -1;
	}
	if (!PyLong_Check(o)) {
		seq = PySequence_Fast(o, "height must be an int or a sequence of ints");
		if (!seq)
			goto fail;
		if (PySequence_Fast_GET_SIZE(seq) != n) {
			PyErr_Format(PyExc_ValueError, "%zd heights for %zd copies",
				     PySequence_Fast_GET_SIZE(seq), n);
			goto fail;
		}
	}
	for (i = 0; i < n; i++) {
		PyObject *v = seq ? PySequence_Fast_GET_ITEM(seq, i) : o;
		Py_ssize_t h = PyLong_Check(v) ? PyLong_AsSsize_t(v) : -1;

		if (h <= 0 || h > DC_MAX_COPIES) {
			if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_OverflowError)) {
				PyErr_Clear();
				PyErr_Format(PyExc_ValueError, "height[%zd] must be an int in "
					     "1..%d", i, DC_MAX_COPIES);
			}
			goto fail;
		}
		(*out)[i] = (size_t)h;
	}
	Py_XDECREF(seq);
	return 0;
fail:
	Py_XDECREF(seq);
	PyMem_Free(*out);
	*out = NULL;
	return -1;
}

const char cuda_copy2d__doc__[] = PyDoc_STR(
"cuda_copy2d(dsts, srcs, dpitch, spitch, width, height, stream=0, device=0,\n"
"            dst_host=False, src_host=False)\n"
"\n"
"Enqueue one cuMemcpy2DAsync per (dsts[i], srcs[i]) on stream (a CUstream\n"
"as an int, 0 the legacy default stream): height rows of width bytes, rows\n"
"dpitch and spitch bytes apart; height is an int for every copy or a\n"
"sequence of one per copy.  dsts and srcs are equal-length sequences of\n"
"addresses, device memory unless dst_host / src_host says host memory\n"
"(asynchronous only where it is registered: cuda_host_register).  Every\n"
"argument is checked before the first copy; a copy the driver refuses\n"
"raises kvshare.Error naming it (copies before it stay enqueued).\n"
"Without a current context the primary context of device is made current\n"
"on this thread.");

PyObject *cuda_copy2d(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "dsts", "srcs", "dpitch", "spitch", "width", "height",
				  "stream", "device", "dst_host", "src_host", NULL };
	unsigned long long stream = 0;
	Py_ssize_t dpitch, spitch, width, n, m, i;
	PyObject *dsts_o, *srcs_o, *height_o, *ret = NULL;
	CUdeviceptr *dsts = NULL, *srcs = NULL;
	size_t *heights = NULL;
	int dev = 0, dst_host = 0, src_host = 0;
	CUDA_MEMCPY2D c;
	CUresult r = CUDA_SUCCESS;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOnnnO|Kipp:cuda_copy2d", kwlist,
					 &dsts_o, &srcs_o, &dpitch, &spitch, &width,
					 &height_o, &stream, &dev, &dst_host, &src_host))
		return NULL;
	if (width <= 0)
		return PyErr_Format(PyExc_ValueError, "width (%zd) must be positive", width);
	if (PyLong_Check(height_o) && PyLong_AsSsize_t(height_o) <= 0) {
		if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_OverflowError)) {
			PyErr_Clear();
			PyErr_Format(PyExc_ValueError, "height must be positive");
		}
		return NULL;
	}
	if (dpitch < width || spitch < width)
		return PyErr_Format(PyExc_ValueError, "dpitch (%zd) and spitch (%zd) must be "
				    "at least width (%zd)", dpitch, spitch, width);
	if (dev < 0)
		return PyErr_Format(PyExc_ValueError, "device %d is negative", dev);
	n = dc_addrs(dsts_o, "dsts", &dsts);
	if (n < 0)
		return NULL;
	m = dc_addrs(srcs_o, "srcs", &srcs);
	if (m < 0)
		goto out;
	if (n != m) {
		PyErr_Format(PyExc_ValueError, "%zd dsts but %zd srcs", n, m);
		goto out;
	}
	if (dc_heights(height_o, n, &heights))
		goto out;
	for (i = 0; i < n; i++)
		if (dc_wraps(dsts[i], dpitch, width, heights[i]) ||
		    dc_wraps(srcs[i], spitch, width, heights[i])) {
			PyErr_Format(PyExc_OverflowError, "copy %zd: the box wraps around the "
				     "address space", i);
			goto out;
		}
	if (dc_ready(dev))
		goto out;
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = src_host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
	c.dstMemoryType = dst_host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
	c.srcPitch = spitch;
	c.dstPitch = dpitch;
	c.WidthInBytes = width;
	Py_BEGIN_ALLOW_THREADS
	for (i = 0; i < n; i++) {
		if (dst_host)
			c.dstHost = (void *)(uintptr_t)dsts[i];
		else
			c.dstDevice = dsts[i];
		if (src_host)
			c.srcHost = (const void *)(uintptr_t)srcs[i];
		else
			c.srcDevice = srcs[i];
		c.Height = heights[i];
		r = dc.copy2d(&c, (CUstream)(uintptr_t)stream);
		if (r != CUDA_SUCCESS)
			break;
	}
	Py_END_ALLOW_THREADS
	if (r != CUDA_SUCCESS) {
		char what[96];

		snprintf(what, sizeof(what), "cuMemcpy2DAsync (copy %zd of %zd)", i, n);
		dc_raise(what, r);
		goto out;
	}
	ret = Py_NewRef(Py_None);
out:
	PyMem_Free(dsts);
	PyMem_Free(srcs);
	PyMem_Free(heights);
	return ret;
}

const char cuda_synchronize__doc__[] = PyDoc_STR(
"cuda_synchronize(stream=0, device=0)\n"
"\n"
"cuStreamSynchronize(stream): wait until every copy enqueued on it is\n"
"done; kvshare.Error if one of them failed.");

PyObject *cuda_synchronize(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "stream", "device", NULL };
	unsigned long long stream = 0;
	CUresult r;
	int dev = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|Ki:cuda_synchronize", kwlist,
					 &stream, &dev))
		return NULL;
	if (dev < 0)
		return PyErr_Format(PyExc_ValueError, "device %d is negative", dev);
	if (dc_ready(dev))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	r = dc.sync((CUstream)(uintptr_t)stream);
	Py_END_ALLOW_THREADS
	if (r != CUDA_SUCCESS)
		return dc_raise("cuStreamSynchronize", r);
	Py_RETURN_NONE;
}

/* An address argument: a positive int of 64 bits. */
static int dc_addr_arg(PyObject *o, const char *what, unsigned long long *a)
{
	*a = PyLong_Check(o) ? PyLong_AsUnsignedLongLong(o) : 0;
	if (PyErr_Occurred() || !*a) {
		PyErr_Clear();
		PyErr_Format(PyExc_ValueError, "%s must be a non-null 64-bit address (an int)",
			     what);
		return -1;
	}
	return 0;
}

const char cuda_pointer_info__doc__[] = PyDoc_STR(
"cuda_pointer_info(address) -> (memory, device, start, size) or None\n"
"\n"
"What the driver knows of address (cuPointerGetAttribute): memory is\n"
"\"device\" or \"host\" (host memory registered with the driver), device the\n"
"ordinal it was allocated or registered on, [start, start + size) its\n"
"range.  None when the driver does not know the address: pageable host\n"
"memory.  kvshare.Error with errno ENODEV when there is no CUDA driver.");

PyObject *cuda_pointer_info(PyObject *self, PyObject *arg)
{
	unsigned int type = 0;
	unsigned long long a;
	CUdeviceptr start = 0;
	size_t size = 0;
	int ord = -1;
	CUresult r;

	if (dc_addr_arg(arg, "address", &a))
		return NULL;
	if (dc_load() < 0)
		return kvpy_raise(ENODEV, "cuda_pointer_info: %s", dc.why);
	/* No context is needed to ask; one is made current only if the driver says so. */
	r = dc.ptr_attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)a);
	if (r == CUDA_ERROR_INVALID_CONTEXT) {
		if (dc_ready(0))
			return NULL;
		r = dc.ptr_attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)a);
	}
	if (r == CUDA_ERROR_INVALID_VALUE)
		Py_RETURN_NONE;
	if (r == CUDA_SUCCESS)
		r = dc.ptr_attr(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)a);
	if (r == CUDA_SUCCESS)
		r = dc.ptr_attr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)a);
	if (r == CUDA_SUCCESS)
		r = dc.ptr_attr(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (CUdeviceptr)a);
	if (r != CUDA_SUCCESS)
		return dc_raise("cuPointerGetAttribute", r);
	if (type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_HOST)
		return kvpy_raise(EIO, "cuPointerGetAttribute: memory type %u of %#llx is "
				  "neither device nor host memory", type, a);
	return Py_BuildValue("(siKn)", type == CU_MEMORYTYPE_DEVICE ? "device" : "host", ord,
			     (unsigned long long)start, (Py_ssize_t)size);
}

const char cuda_host_register__doc__[] = PyDoc_STR(
"cuda_host_register(address, size, flags=0, device=0)\n"
"\n"
"cuMemHostRegister: page-lock [address, address + size) of this process's\n"
"host memory so that copies to and from it are asynchronous DMA.  Undo it\n"
"with cuda_host_unregister(address) before the memory is unmapped.\n"
"kvshare.Error: errno EEXIST when part of it is registered already, EINVAL\n"
"for memory the driver cannot pin.");

PyObject *cuda_host_register(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "address", "size", "flags", "device", NULL };
	unsigned long long a;
	unsigned int flags = 0;
	PyObject *addr_o;
	Py_ssize_t size;
	CUresult r;
	int dev = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "On|Ii:cuda_host_register", kwlist,
					 &addr_o, &size, &flags, &dev))
		return NULL;
	if (dc_addr_arg(addr_o, "address", &a))
		return NULL;
	if (size <= 0 || a + (unsigned long long)size < a)
		return PyErr_Format(PyExc_ValueError, "size %zd at %#llx is not a range",
				    size, a);
	if (dev < 0)
		return PyErr_Format(PyExc_ValueError, "device %d is negative", dev);
	if (dc_ready(dev))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	r = dc.host_register((void *)(uintptr_t)a, (size_t)size, flags);
	Py_END_ALLOW_THREADS
	if (r != CUDA_SUCCESS) {
		char what[96];

		snprintf(what, sizeof(what), "cuMemHostRegister of %zd bytes at %#llx", size, a);
		return dc_raise(what, r);
	}
	Py_RETURN_NONE;
}

const char cuda_host_unregister__doc__[] = PyDoc_STR(
"cuda_host_unregister(address, device=0)\n"
"\n"
"cuMemHostUnregister: make the range cuda_host_register(address, ...)\n"
"pinned pageable again; kvshare.Error with errno ENOENT when address is not\n"
"the start of a registered range.");

PyObject *cuda_host_unregister(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "address", "device", NULL };
	unsigned long long a;
	PyObject *addr_o;
	CUresult r;
	int dev = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|i:cuda_host_unregister", kwlist,
					 &addr_o, &dev))
		return NULL;
	if (dc_addr_arg(addr_o, "address", &a))
		return NULL;
	if (dev < 0)
		return PyErr_Format(PyExc_ValueError, "device %d is negative", dev);
	if (dc_ready(dev))
		return NULL;
	r = dc.host_unregister((void *)(uintptr_t)a);
	if (r != CUDA_SUCCESS)
		return dc_raise("cuMemHostUnregister", r);
	Py_RETURN_NONE;
}

const char cuda_event__doc__[] = PyDoc_STR(
"cuda_event(op, event=0, stream=0, device=0) -> int or None\n"
"\n"
"CUDA events, to wait for part of a stream's work: op \"create\" returns a\n"
"new event (no timing), \"record\" records event on stream after the work\n"
"enqueued so far, \"synchronize\" waits until that work is done (kvshare.Error\n"
"if some of it failed), \"destroy\" frees it.");

PyObject *cuda_event(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "op", "event", "stream", "device", NULL };
	unsigned long long ev = 0, stream = 0;
	const char *op;
	CUevent e;
	CUresult r;
	int dev = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|KKi:cuda_event", kwlist, &op, &ev,
					 &stream, &dev))
		return NULL;
	if (dev < 0)
		return PyErr_Format(PyExc_ValueError, "device %d is negative", dev);
	if (strcmp(op, "create") && !ev)
		return PyErr_Format(PyExc_ValueError, "cuda_event %s: no event", op);
	if (strcmp(op, "create") && strcmp(op, "record") && strcmp(op, "synchronize") &&
	    strcmp(op, "destroy"))
		return PyErr_Format(PyExc_ValueError, "cuda_event: op %.40s is not create, "
				    "record, synchronize or destroy", op);
	if (dc_ready(dev))
		return NULL;
	e = (CUevent)(uintptr_t)ev;
	if (!strcmp(op, "create")) {
		r = dc.event_create(&e, CU_EVENT_DISABLE_TIMING);
		if (r != CUDA_SUCCESS)
			return dc_raise("cuEventCreate", r);
		return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)e);
	}
	if (!strcmp(op, "record")) {
		r = dc.event_record(e, (CUstream)(uintptr_t)stream);
		op = "cuEventRecord";
	} else if (!strcmp(op, "synchronize")) {
		Py_BEGIN_ALLOW_THREADS
		r = dc.event_sync(e);
		Py_END_ALLOW_THREADS
		op = "cuEventSynchronize";
	} else {
		r = dc.event_destroy(e);
		op = "cuEventDestroy";
	}
	if (r != CUDA_SUCCESS)
		return dc_raise(op, r);
	Py_RETURN_NONE;
}
