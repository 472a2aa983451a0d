// SPDX-License-Identifier: MIT
/*
 * Device-to-device copies on a CUDA stream, for engine glue that moves KV
 * blocks between an engine's GPU cache and a GPU pool (kvshare.vllm): the
 * driver's cuMemcpy2DAsync, one call per (dst, src) pair, all with the
 * same pitches and box.  Debian's torch is CPU-only, so Python has no
 * other way to issue such a copy.
 *
 * The driver is the one libkv dlopen()s for device pools (libcuda.so.1;
 * the tests' stand-in in CI).  Addresses are plain integers: the driver
 * checks that each range lies in memory mapped on the device and fails
 * the call otherwise (CUDA_ERROR_INVALID_VALUE), so a wrong address is an
 * error here, not a fault.  Arguments are checked before any copy starts.
 * The calling thread needs a current context: if it has none, the
 * device's primary context is retained once and made current.
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
			  r == CUDA_ERROR_INVALID_CONTEXT ? EINVAL : EIO,
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

const char cuda_copy2d__doc__[] = PyDoc_STR(
"cuda_copy2d(dsts, srcs, dpitch, spitch, width, height, stream=0, device=0)\n"
"\n"
"Enqueue one device-to-device cuMemcpy2DAsync per (dsts[i], srcs[i]) on\n"
"stream (a CUstream as an int, 0 the legacy default stream): height rows\n"
"of width bytes, rows dpitch and spitch bytes apart.  dsts and srcs are\n"
"equal-length sequences of device addresses.  Everything is checked\n"
"before the first copy; a copy the driver refuses raises kvshare.Error\n"
"naming it (copies before it stay enqueued).  Without a current context\n"
"the primary context of device is made current on this thread.");

PyObject *cuda_copy2d(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "dsts", "srcs", "dpitch", "spitch", "width", "height",
				  "stream", "device", NULL };
	unsigned long long stream = 0;
	Py_ssize_t dpitch, spitch, width, height, n, m, i;
	PyObject *dsts_o, *srcs_o, *ret = NULL;
	CUdeviceptr *dsts = NULL, *srcs = NULL;
	CUDA_MEMCPY2D c;
	CUresult r = CUDA_SUCCESS;
	int dev = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOnnnn|Ki:cuda_copy2d", kwlist, &dsts_o,
					 &srcs_o, &dpitch, &spitch, &width, &height,
					 &stream, &dev))
		return NULL;
	if (width <= 0 || height <= 0)
		return PyErr_Format(PyExc_ValueError, "width (%zd) and height (%zd) must be "
				    "positive", width, height);
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
	for (i = 0; i < n; i++)
		if (dc_wraps(dsts[i], dpitch, width, height) ||
		    dc_wraps(srcs[i], spitch, width, height)) {
			PyErr_Format(PyExc_OverflowError, "copy %zd: the box wraps around the "
				     "address space", i);
			goto out;
		}
	if (dc_ready(dev))
		goto out;
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	c.srcPitch = spitch;
	c.dstPitch = dpitch;
	c.WidthInBytes = width;
	c.Height = height;
	Py_BEGIN_ALLOW_THREADS
	for (i = 0; i < n; i++) {
		c.dstDevice = dsts[i];
		c.srcDevice = srcs[i];
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
