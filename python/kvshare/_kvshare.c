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
 *   Node         a tree node handed out by match_prefix
 *
 * Node pointers are only valid while the node exists: a Node remembers the
 * tree's "epoch" (bumped by every call that may free nodes) and is usable
 * while the epoch is unchanged or while it holds a lock taken through it;
 * otherwise it raises instead of touching freed memory.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <pythread.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <kvshare/arbiter.h>
#include <kvshare/blockhash.h>
#include <kvshare/kv_layout.h>
#include <kvshare/radix.h>
#include <kvshare/req_table.h>

/* ------------------------------------------------------------------ */
/* DLPack (the public ABI, legacy "dltensor" capsule, v0.6-0.8)        */

enum { KVPY_DL_CPU = 1, KVPY_DL_CUDA = 2 };
enum { KVPY_DL_INT = 0, KVPY_DL_UINT = 1, KVPY_DL_FLOAT = 2, KVPY_DL_BFLOAT = 4 };

typedef struct {
	int32_t device_type;
	int32_t device_id;
} kvpy_dl_device;

typedef struct {
	uint8_t code;
	uint8_t bits;
	uint16_t lanes;
} kvpy_dl_dtype;

typedef struct {
	void *data;
	kvpy_dl_device device;
	int32_t ndim;
	kvpy_dl_dtype dtype;
	int64_t *shape;
	int64_t *strides;		/* in elements; NULL means compact */
	uint64_t byte_offset;
} kvpy_dl_tensor;

typedef struct kvpy_dl_managed {
	kvpy_dl_tensor dl_tensor;
	void *manager_ctx;
	void (*deleter)(struct kvpy_dl_managed *self);
} kvpy_dl_managed;

#define KVPY_VIEW_NDIM	6	/* pages, layers, K|V, tokens, heads, dim */

/* ------------------------------------------------------------------ */
/* Errors                                                              */

static PyObject *KvError;		/* kvshare.Error(OSError) */

/*
 * Bumped in the child of every fork().  A handle belongs to the process
 * that opened it: after fork() parent and child share its arbiter file
 * (or daemon connection), so the child using it would take or drop the
 * parent's holdings, and on the socket interleave its messages with the
 * parent's.  Objects remember the generation they were opened in.
 */
static volatile unsigned long fork_gen;

static PyObject *kv_raise(int neg, const char *fmt, ...);

static void on_fork_child(void)
{
	fork_gen++;
}

static int forked_raise(const char *what)
{
	kv_raise(EBADFD, "this %s was opened in the parent process before fork(): "
		 "open it again in this process", what);
	return -1;
}

/*
 * Raise kvshare.Error(errno, "<what>: <strerror>[ (<hint>)]") for the
 * negative errno @neg libkv returned.  Returns NULL.
 */
static PyObject *kv_raise(int neg, const char *fmt, ...)
{
	char what[384];
	PyObject *args;
	va_list ap;
	int e = neg < 0 ? -neg : neg;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	args = Py_BuildValue("(is)", e, what);
	if (args) {
		PyErr_SetObject(KvError, args);
		Py_DECREF(args);
	}
	return NULL;
}

/* strerror of @neg, and a hint for the errnos whose cause is not obvious. */
static const char *kv_hint(int neg)
{
	switch (neg) {
	case -ENOSPC: return "no free or evictable page left in the pool";
	case -EDQUOT: return "this holder's quota (Pool.quota) or a per-user limit is reached";
	case -ENOENT: return "a page this pool handle does not hold, or no such pool";
	case -ENOTCONN: return "the kvshared daemon went away: open the pool again";
	case -EBADFD: return "the handle is not attached to a pool";
	case -EACCES: return "the pool's mode forbids it";
	case -EPERM: return "not allowed for this user";
	}
	return strerror(-neg);
}

#define KV_RAISE(ret, what, ...) \
	kv_raise((ret), what ": %s", ##__VA_ARGS__, kv_hint(ret))

/* ------------------------------------------------------------------ */
/* Inputs                                                              */

/*
 * A C-contiguous run of @n uint32 from @obj: any buffer of 4-byte integers
 * (numpy int32/uint32, array('i'/'I'), a PoolView is not one), or else a
 * sequence of ints (copied).  Negative values of a signed buffer are taken
 * as their uint32 bit pattern, as the C API would see them.
 */
struct u32in {
	Py_buffer view;
	int have_view;
	uint32_t *copy;
	const uint32_t *p;
	Py_ssize_t n;
};

static int is_int4_format(const char *f)
{
	if (!f)
		return 0;	/* unsigned bytes */
	if (*f == '<' || *f == '=' || *f == '@')
		f++;
	if (f[0] && !f[1])
		return f[0] == 'i' || f[0] == 'I' ||
		       ((f[0] == 'l' || f[0] == 'L') && sizeof(long) == 4);
	return 0;
}

static int u32_from(PyObject *obj, struct u32in *in, const char *what)
{
	Py_ssize_t i;
	PyObject *seq;

	memset(in, 0, sizeof(*in));
	if (PyObject_CheckBuffer(obj)) {
		if (PyObject_GetBuffer(obj, &in->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT))
			return -1;
		in->have_view = 1;
		if (in->view.itemsize != 4 || !is_int4_format(in->view.format)) {
			PyErr_Format(PyExc_TypeError, "%s: expected 32-bit integers "
				     "(numpy int32/uint32), got a buffer of format '%s'",
				     what, in->view.format ? in->view.format : "B");
			PyBuffer_Release(&in->view);
			in->have_view = 0;
			return -1;
		}
		in->p = in->view.buf;
		in->n = in->view.len / 4;
		return 0;
	}
	seq = PySequence_Fast(obj, "");
	if (!seq) {
		PyErr_Format(PyExc_TypeError, "%s: expected a buffer of 32-bit integers "
			     "or a sequence of ints, not %.100s", what, Py_TYPE(obj)->tp_name);
		return -1;
	}
	in->n = PySequence_Fast_GET_SIZE(seq);
	in->copy = PyMem_Malloc((in->n ? in->n : 1) * sizeof(uint32_t));
	if (!in->copy) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return -1;
	}
	for (i = 0; i < in->n; i++) {
		PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
		unsigned long long v;

		if (!PyLong_Check(it)) {
			PyErr_Format(PyExc_TypeError, "%s[%zd]: expected int, not %.100s",
				     what, i, Py_TYPE(it)->tp_name);
			goto fail;
		}
		v = PyLong_AsUnsignedLongLong(it);
		if ((v == (unsigned long long)-1 && PyErr_Occurred()) || v > UINT32_MAX) {
			PyErr_Clear();
			PyErr_Format(PyExc_OverflowError, "%s[%zd]: not in 0..4294967295",
				     what, i);
			goto fail;
		}
		in->copy[i] = (uint32_t)v;
	}
	Py_DECREF(seq);
	in->p = in->copy;
	return 0;
fail:
	Py_DECREF(seq);
	PyMem_Free(in->copy);
	in->copy = NULL;
	return -1;
}

static void u32_release(struct u32in *in)
{
	if (in->have_view)
		PyBuffer_Release(&in->view);
	PyMem_Free(in->copy);
	in->have_view = 0;
	in->copy = NULL;
}

/* Keys: any C-contiguous buffer whose length is a multiple of 32 bytes. */
static int keys_from(PyObject *obj, Py_buffer *view, Py_ssize_t *n)
{
	if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS))
		return -1;
	if (view->len % (Py_ssize_t)sizeof(struct kvs_key)) {
		PyErr_Format(PyExc_ValueError, "keys: %zd bytes is not a whole number of "
			     "32-byte keys (expected an (n, 4) uint64 array)", view->len);
		PyBuffer_Release(view);
		return -1;
	}
	*n = view->len / (Py_ssize_t)sizeof(struct kvs_key);
	return 0;
}

/* A batch count the arbiter accepts. */
static int check_batch(Py_ssize_t n, const char *what)
{
	if (n < 1 || n > KVS_MAX_BATCH) {
		PyErr_Format(PyExc_ValueError, "%s: %zd entries; a batch holds 1..%d",
			     what, n, KVS_MAX_BATCH);
		return -1;
	}
	return 0;
}

static PyObject *new_u32(Py_ssize_t n, uint32_t **data)
{
	npy_intp dims[1] = { n };
	PyObject *a = PyArray_SimpleNew(1, dims, NPY_UINT32);

	if (a)
		*data = PyArray_DATA((PyArrayObject *)a);
	return a;
}

static PyObject *new_keys(Py_ssize_t n, struct kvs_key **data)
{
	npy_intp dims[2] = { n, 4 };
	PyObject *a = PyArray_SimpleNew(2, dims, NPY_UINT64);

	if (a)
		*data = PyArray_DATA((PyArrayObject *)a);
	return a;
}

/* A uint32 argument from a Python int, with a clear range error. */
static int u32_arg(PyObject *o, uint32_t *out, const char *what)
{
	unsigned long long v;

	if (!PyLong_Check(o)) {
		PyErr_Format(PyExc_TypeError, "%s: expected int, not %.100s", what,
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	v = PyLong_AsUnsignedLongLong(o);
	if ((v == (unsigned long long)-1 && PyErr_Occurred()) || v > UINT32_MAX) {
		PyErr_Clear();
		PyErr_Format(PyExc_ValueError, "%s: %R is not in 0..4294967295", what, o);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

/* PyArg "O&" converters: ints range-checked, never silently truncated. */
static int conv_u32(PyObject *o, void *p)
{
	return u32_arg(o, p, "argument") ? 0 : 1;
}

static int conv_u64(PyObject *o, void *p)
{
	unsigned long long v;

	if (!PyLong_Check(o)) {
		PyErr_Format(PyExc_TypeError, "expected int, not %.100s", Py_TYPE(o)->tp_name);
		return 0;
	}
	v = PyLong_AsUnsignedLongLong(o);
	if (v == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_Clear();
		PyErr_Format(PyExc_ValueError, "%R is not in 0..2**64-1", o);
		return 0;
	}
	*(uint64_t *)p = v;
	return 1;
}

/* An optional owner uid (None: libkv's default). */
static int owner_arg(PyObject *o, uint32_t *owner, int *have)
{
	*have = 0;
	if (!o || o == Py_None)
		return 0;
	if (PyUnicode_Check(o)) {
		const char *s = PyUnicode_AsUTF8(o);
		int ret;

		if (!s)
			return -1;
		ret = kv_uid_parse(s, owner);
		if (ret) {
			kv_raise(ret, "owner '%s' is neither a uid nor a known user", s);
			return -1;
		}
		*have = 1;
		return 0;
	}
	if (u32_arg(o, owner, "owner"))
		return -1;
	*have = 1;
	return 0;
}

static const char *dtype_name(uint32_t dtype)
{
	switch (dtype) {
	case KVS_DTYPE_F16: return "float16";
	case KVS_DTYPE_BF16: return "bfloat16";
	case KVS_DTYPE_F32: return "float32";
	case KVS_DTYPE_FP8: return "fp8";
	}
	return "unknown";
}

static int dtype_parse(const char *s, uint32_t *dtype)
{
	static const struct { const char *n; uint32_t d; } names[] = {
		{ "f16", KVS_DTYPE_F16 }, { "fp16", KVS_DTYPE_F16 },
		{ "float16", KVS_DTYPE_F16 }, { "bf16", KVS_DTYPE_BF16 },
		{ "bfloat16", KVS_DTYPE_BF16 }, { "f32", KVS_DTYPE_F32 },
		{ "fp32", KVS_DTYPE_F32 }, { "float32", KVS_DTYPE_F32 },
		{ "fp8", KVS_DTYPE_FP8 },
	};
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!strcmp(s, names[i].n)) {
			*dtype = names[i].d;
			return 0;
		}
	}
	PyErr_Format(PyExc_ValueError, "dtype '%s': expected one of float16, bfloat16, "
		     "float32, fp8", s);
	return -1;
}

/* Hash algorithm by name. */
static int algo_parse(const char *s, unsigned int *algo)
{
	if (!strcmp(s, "sha256")) {
		*algo = KV_HASH_SHA256;
		return 0;
	}
	if (!strcmp(s, "xxh3")) {
		*algo = KV_HASH_XXH3;
		return 0;
	}
	PyErr_Format(PyExc_ValueError, "algo '%s': expected 'sha256' or 'xxh3' "
		     "(xxh3 only for pools whose attachers all trust each other)", s);
	return -1;
}

/*
 * A salt: None (no salt, which differs from b""), str (UTF-8) or bytes.
 * The bytes are copied into *@out (PyMem; NULL for None).
 */
static int salt_arg(PyObject *o, char **out, size_t *len)
{
	const char *p;
	Py_ssize_t n;

	*out = NULL;
	*len = 0;
	if (!o || o == Py_None)
		return 0;
	if (PyUnicode_Check(o)) {
		p = PyUnicode_AsUTF8AndSize(o, &n);
		if (!p)
			return -1;
	} else if (PyBytes_Check(o)) {
		p = PyBytes_AS_STRING(o);
		n = PyBytes_GET_SIZE(o);
	} else {
		PyErr_Format(PyExc_TypeError, "salt: expected str, bytes or None, not %.100s",
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	*out = PyMem_Malloc(n ? n : 1);
	if (!*out) {
		PyErr_NoMemory();
		return -1;
	}
	memcpy(*out, p, n);
	*len = n;
	return 0;
}

/* Extra keys: a sequence of bytes/str, copied into one block. */
struct extras {
	struct kv_extra *e;
	size_t n;
	char *data;
};

static void extras_free(struct extras *x)
{
	PyMem_Free(x->e);
	PyMem_Free(x->data);
	memset(x, 0, sizeof(*x));
}

static int extras_arg(PyObject *o, struct extras *x)
{
	PyObject *seq;
	Py_ssize_t n, i, total = 0, off = 0;

	memset(x, 0, sizeof(*x));
	if (!o || o == Py_None)
		return 0;
	if (PyBytes_Check(o) || PyUnicode_Check(o)) {
		PyErr_SetString(PyExc_TypeError, "extra: expected a sequence of bytes or "
				"str (e.g. (b'lora-7',)), not a single bytes/str");
		return -1;
	}
	seq = PySequence_Fast(o, "extra: expected a sequence of bytes or str");
	if (!seq)
		return -1;
	n = PySequence_Fast_GET_SIZE(seq);
	for (i = 0; i < n; i++) {
		PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
		Py_ssize_t l;

		if (PyBytes_Check(it)) {
			l = PyBytes_GET_SIZE(it);
		} else if (PyUnicode_Check(it)) {
			if (!PyUnicode_AsUTF8AndSize(it, &l))
				goto fail;
		} else {
			PyErr_Format(PyExc_TypeError, "extra[%zd]: expected bytes or str, "
				     "not %.100s", i, Py_TYPE(it)->tp_name);
			goto fail;
		}
		total += l;
	}
	x->e = PyMem_Calloc(n ? n : 1, sizeof(*x->e));
	x->data = PyMem_Malloc(total ? total : 1);
	if (!x->e || !x->data) {
		PyErr_NoMemory();
		goto fail;
	}
	for (i = 0; i < n; i++) {
		PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
		const char *p;
		Py_ssize_t l;

		if (PyBytes_Check(it)) {
			p = PyBytes_AS_STRING(it);
			l = PyBytes_GET_SIZE(it);
		} else {
			p = PyUnicode_AsUTF8AndSize(it, &l);
		}
		memcpy(x->data + off, p, l);
		x->e[i].data = x->data + off;
		x->e[i].len = l;
		off += l;
	}
	x->n = n;
	Py_DECREF(seq);
	return 0;
fail:
	Py_DECREF(seq);
	extras_free(x);
	return -1;
}

/* The per-object lock taken around calls that release the GIL. */
#define OBJ_LOCK(lock) do { \
	if (!PyThread_acquire_lock((lock), 0)) { \
		Py_BEGIN_ALLOW_THREADS \
		PyThread_acquire_lock((lock), 1); \
		Py_END_ALLOW_THREADS \
	} \
} while (0)
#define OBJ_UNLOCK(lock) PyThread_release_lock(lock)

static PyObject *stats_dict(const struct kvs_pool_stats *st)
{
	return Py_BuildValue(
		"{sKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsK}",
		"n_pages", (unsigned long long)st->n_pages,
		"n_free", (unsigned long long)st->n_free,
		"n_owned", (unsigned long long)st->n_owned,
		"n_shared", (unsigned long long)st->n_shared,
		"n_cached", (unsigned long long)st->n_cached,
		"n_evictable", (unsigned long long)st->n_evictable,
		"n_refs", (unsigned long long)st->n_refs,
		"n_held", (unsigned long long)st->n_held,
		"n_files", (unsigned long long)st->n_files,
		"allocs", (unsigned long long)st->allocs,
		"alloc_fails", (unsigned long long)st->alloc_fails,
		"publishes", (unsigned long long)st->publishes,
		"dup_publishes", (unsigned long long)st->dup_publishes,
		"lookups", (unsigned long long)st->lookups,
		"hits", (unsigned long long)st->hits,
		"evictions", (unsigned long long)st->evictions);
}

static PyObject *geom_dict(const struct kvs_geometry *g)
{
	return Py_BuildValue("{sIsIsIsIsssK}", "n_layers", g->n_layers,
			     "n_kv_heads", g->n_kv_heads, "head_dim", g->head_dim,
			     "tokens_per_page", g->tokens_per_page,
			     "dtype", dtype_name(g->dtype),
			     "page_bytes", (unsigned long long)g->page_bytes);
}

/* ------------------------------------------------------------------ */
/* Arbiter                                                             */

typedef struct {
	PyObject_HEAD
	struct kv_arbiter *arb;
	PyObject *path;			/* str or None */
	Py_ssize_t busy;		/* calls running without the GIL */
	unsigned long gen;		/* fork_gen at open */
} ArbiterObject;

static PyTypeObject Arbiter_Type;

#define ARB_OPEN(self, ret) do { \
	if (!(self)->arb) { \
		PyErr_SetString(PyExc_ValueError, "operation on a closed Arbiter"); \
		return ret; \
	} \
	if ((self)->gen != fork_gen) { \
		forked_raise("Arbiter"); \
		return ret; \
	} \
} while (0)

static int Arbiter_init(ArbiterObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "path", "no_uring", NULL };
	PyObject *path = Py_None;
	const char *p = NULL;
	int no_uring = 0, ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$p:Arbiter", kwlist, &path,
					 &no_uring))
		return -1;
	if (self->arb) {
		PyErr_SetString(PyExc_ValueError, "Arbiter is already open");
		return -1;
	}
	if (path != Py_None) {
		if (!PyUnicode_Check(path)) {
			PyErr_Format(PyExc_TypeError, "path: expected str or None, not %.100s",
				     Py_TYPE(path)->tp_name);
			return -1;
		}
		p = PyUnicode_AsUTF8(path);
		if (!p)
			return -1;
	}
	Py_BEGIN_ALLOW_THREADS
	ret = kv_arbiter_open(p, no_uring ? KV_ARBITER_NO_URING : 0, &self->arb);
	Py_END_ALLOW_THREADS
	if (ret) {
		self->arb = NULL;
		KV_RAISE(ret, "cannot open the arbiter %s%s%s", p ? "'" : "",
			 p ? p : "(module or $KVSHARE_ARBITER / daemon socket)", p ? "'" : "");
		return -1;
	}
	self->gen = fork_gen;
	Py_INCREF(path);
	Py_XSETREF(self->path, path);
	return 0;
}

static void Arbiter_dealloc(ArbiterObject *self)
{
	if (self->arb)
		kv_arbiter_close(self->arb);
	Py_XDECREF(self->path);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Arbiter_close(ArbiterObject *self, PyObject *Py_UNUSED(ignored))
{
	if (self->arb) {
		struct kv_arbiter *arb = self->arb;

		if (self->busy) {
			PyErr_SetString(PyExc_BufferError, "cannot close the Arbiter: another "
					"thread is in a call on it");
			return NULL;
		}
		self->arb = NULL;
		Py_BEGIN_ALLOW_THREADS
		kv_arbiter_close(arb);
		Py_END_ALLOW_THREADS
	}
	Py_RETURN_NONE;
}

static PyObject *self_enter(PyObject *self, PyObject *Py_UNUSED(ignored))
{
	return Py_NewRef(self);
}

static PyObject *call_close(PyObject *self, PyObject *Py_UNUSED(args))
{
	return PyObject_CallMethod(self, "close", NULL);
}

static int arb_call(struct kv_arbiter *arb, unsigned long cmd, void *arg)
{
	int ret;

	Py_BEGIN_ALLOW_THREADS
	ret = kv_arbiter_call(arb, cmd, arg);
	Py_END_ALLOW_THREADS
	return ret;
}

/* The same, counted in *@busy so that close() cannot free @arb meanwhile. */
static int arb_call_b(Py_ssize_t *busy, struct kv_arbiter *arb, unsigned long cmd,
		      void *arg)
{
	int ret;

	(*busy)++;
	ret = arb_call(arb, cmd, arg);
	(*busy)--;
	return ret;
}

static PyObject *Arbiter_info(ArbiterObject *self, PyObject *Py_UNUSED(ignored))
{
	struct kvs_info in = { 0 };
	int ret;

	ARB_OPEN(self, NULL);
	ret = arb_call_b(&self->busy, self->arb, KVS_IOC_INFO, &in);
	if (ret)
		return KV_RAISE(ret, "INFO");
	return Py_BuildValue("{sIsKsKsIsIsIsKsOsO}", "abi_version", in.abi_version,
			     "features", (unsigned long long)in.features,
			     "max_pool_pages", (unsigned long long)in.max_pool_pages,
			     "max_batch", in.max_batch, "max_pools", in.max_pools,
			     "n_pools", in.n_pools,
			     "n_objects", (unsigned long long)in.n_objects,
			     "daemon", kv_arbiter_is_daemon(self->arb) ? Py_True : Py_False,
			     "uring", kv_arbiter_uses_uring(self->arb) ? Py_True : Py_False);
}

/* Every pool the arbiter lists (up to max_pools). */
static int list_pools(Py_ssize_t *busy, struct kv_arbiter *arb,
		      struct kvs_pool_desc **out, uint32_t *n)
{
	struct kvs_pool_list l = { 0 };
	struct kvs_pool_desc *d;
	int ret;

	ret = arb_call_b(busy, arb, KVS_IOC_POOL_LIST, &l);
	if (ret)
		return ret;
	d = PyMem_Calloc(l.count ? l.count : 1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	l.pools = (uintptr_t)d;
	ret = l.count ? arb_call_b(busy, arb, KVS_IOC_POOL_LIST, &l) : 0;
	if (ret) {
		PyMem_Free(d);
		return ret;
	}
	*out = d;
	*n = l.count;
	return 0;
}

static PyObject *Arbiter_pools(ArbiterObject *self, PyObject *Py_UNUSED(ignored))
{
	struct kvs_pool_desc *d;
	PyObject *list;
	uint32_t n, i;
	int ret;

	ARB_OPEN(self, NULL);
	ret = list_pools(&self->busy, self->arb, &d, &n);
	if (ret)
		return ret == -ENOMEM ? PyErr_NoMemory() : KV_RAISE(ret, "POOL_LIST");
	list = PyList_New(0);
	for (i = 0; list && i < n; i++) {
		PyObject *g = geom_dict(&d[i].geom), *it;

		it = g ? Py_BuildValue("{sssIsIsIsIsKsNsIsIsIsO}", "name", d[i].name,
				       "pool_id", d[i].pool_id, "mode", d[i].mode,
				       "uid", d[i].uid, "gid", d[i].gid,
				       "n_pages", (unsigned long long)d[i].n_pages,
				       "geometry", g, "flags", d[i].flags,
				       "n_files", d[i].n_files,
				       "max_pages_per_file", d[i].max_pages_per_file,
				       "memory", d[i].has_mem_fd ? Py_True : Py_False) : NULL;
		if (!it || PyList_Append(list, it))
			Py_CLEAR(list);
		Py_XDECREF(it);
	}
	PyMem_Free(d);
	return list;
}

/* The id of pool @name owned by @owner, or -ENOENT. */
static int find_pool(Py_ssize_t *busy, struct kv_arbiter *arb, const char *name,
		     uint32_t owner, uint32_t *id)
{
	struct kvs_pool_desc *d;
	uint32_t n, i;
	int ret;

	ret = list_pools(busy, arb, &d, &n);
	if (ret)
		return ret;
	ret = -ENOENT;
	for (i = 0; i < n; i++) {
		if (d[i].uid == owner && !strcmp(d[i].name, name)) {
			*id = d[i].pool_id;
			ret = 0;
			break;
		}
	}
	PyMem_Free(d);
	return ret;
}

static int resolve_owner(ArbiterObject *self, PyObject *o, uint32_t *owner)
{
	int have, ret;

	if (owner_arg(o, owner, &have))
		return -1;
	if (have)
		return 0;
	ret = kv_arbiter_default_owner(self->arb, owner);
	if (ret) {
		KV_RAISE(ret, "the default pool owner ($KVSHARE_POOL_OWNER)");
		return -1;
	}
	return 0;
}

PyDoc_STRVAR(Arbiter_create_pool__doc__,
"create_pool(name, *, pages, layers, kv_heads, head_dim, tokens_per_page,\n"
"            dtype='bfloat16', mode=0o600, quota=0, memory=True,\n"
"            ns_per_uid=False) -> int\n"
"\n"
"Create a pool owned by the caller and return its id.  memory=True backs\n"
"it with a host memfd (sealed against shrinking) that every attacher maps;\n"
"quota is max_pages_per_file (0: the whole pool).");

static PyObject *Arbiter_create_pool(ArbiterObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "name", "pages", "layers", "kv_heads", "head_dim",
				  "tokens_per_page", "dtype", "mode", "quota", "memory",
				  "ns_per_uid", NULL };
	struct kvs_pool_create pc = { 0 };
	uint64_t pages;
	const char *name, *dtype = "bfloat16";
	uint32_t mode = 0600, quota = 0;
	int memory = 1, per_uid = 0, ret, fd = -1;
	uint64_t size;

	ARB_OPEN(self, NULL);
	pages = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|$O&O&O&O&O&sO&O&pp:create_pool",
					 kwlist, &name, conv_u64, &pages, conv_u32,
					 &pc.geom.n_layers, conv_u32, &pc.geom.n_kv_heads,
					 conv_u32, &pc.geom.head_dim, conv_u32,
					 &pc.geom.tokens_per_page, &dtype, conv_u32, &mode,
					 conv_u32, &quota, &memory, &per_uid))
		return NULL;
	if (!pages || !pc.geom.n_layers || !pc.geom.n_kv_heads || !pc.geom.head_dim ||
	    !pc.geom.tokens_per_page) {
		PyErr_SetString(PyExc_TypeError, "create_pool: pages, layers, kv_heads, head_dim "
				"and tokens_per_page are required and must be >= 1");
		return NULL;
	}
	if (strlen(name) >= KVS_NAME_MAX) {
		PyErr_Format(PyExc_ValueError, "name: at most %d bytes", KVS_NAME_MAX - 1);
		return NULL;
	}
	if (dtype_parse(dtype, &pc.geom.dtype))
		return NULL;
	strcpy(pc.name, name);
	pc.n_pages = pages;
	pc.mode = mode;
	pc.max_pages_per_file = quota;
	pc.flags = per_uid ? KVS_POOL_NS_PER_UID : 0;
	pc.mem_fd = -1;
	size = kv_page_bytes(&pc.geom);
	if (memory) {
		if (!size || pages > KVS_MAX_POOL_PAGES || pages * size > (uint64_t)PY_SSIZE_T_MAX)
			return kv_raise(EINVAL, "create_pool '%s': geometry or page count out "
					"of range (pages 1..%u, each dimension 1..65536)", name,
					KVS_MAX_POOL_PAGES);
		fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (fd < 0 || ftruncate(fd, (off_t)(pages * size)) ||
		    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
			ret = -errno;
			if (fd >= 0)
				close(fd);
			return KV_RAISE(ret, "create_pool '%s': host memory of %llu bytes",
					name, (unsigned long long)(pages * size));
		}
		pc.mem_fd = fd;
	}
	ret = arb_call_b(&self->busy, self->arb, KVS_IOC_POOL_CREATE, &pc);
	if (fd >= 0)
		close(fd);
	if (ret == -EINVAL)
		return kv_raise(ret, "create_pool '%s': invalid name (1..63 of [A-Za-z0-9._-]), "
				"geometry (each dimension 1..65536, page <= 1 GiB), page count, "
				"mode or quota", name);
	if (ret == -EEXIST)
		return kv_raise(ret, "create_pool '%s': you already own a pool of that name",
				name);
	if (ret == -EPERM || ret == -ERANGE)
		return kv_raise(ret, "create_pool '%s': the arbiter refused the pool's memory "
				"(it takes a memfd sealed with F_SEAL_SHRINK and F_SEAL_SEAL, "
				"as long as the pool)", name);
	if (ret)
		return KV_RAISE(ret, "create_pool '%s'", name);
	return PyLong_FromUnsignedLong(pc.pool_id);
}

PyDoc_STRVAR(Arbiter_destroy_pool__doc__,
"destroy_pool(name, owner=None)\n"
"\n"
"Remove pool name (of owner, default: libkv's default owner) at once; its\n"
"pages and memory go when the last attacher closes.");

static PyObject *Arbiter_destroy_pool(ArbiterObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "name", "owner", NULL };
	struct kvs_pool_destroy pd = { 0 };
	PyObject *owner_o = Py_None;
	const char *name;
	uint32_t owner;
	int ret;

	ARB_OPEN(self, NULL);
	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|O:destroy_pool", kwlist, &name,
					 &owner_o))
		return NULL;
	if (resolve_owner(self, owner_o, &owner))
		return NULL;
	ret = find_pool(&self->busy, self->arb, name, owner, &pd.pool_id);
	if (!ret)
		ret = arb_call_b(&self->busy, self->arb, KVS_IOC_POOL_DESTROY, &pd);
	if (ret)
		return KV_RAISE(ret, "destroy_pool '%s' of uid %u", name, owner);
	Py_RETURN_NONE;
}

PyDoc_STRVAR(Arbiter_stats__doc__,
"stats(name, owner=None, check=False) -> dict\n"
"\n"
"The pool's counters, as kvctl stats shows them.  check=True also has the\n"
"arbiter verify the pool's invariants (admin only; EUCLEAN if broken).");

static PyObject *Arbiter_stats(ArbiterObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "name", "owner", "check", NULL };
	struct kvs_pool_stats st = { 0 };
	PyObject *owner_o = Py_None;
	const char *name;
	uint32_t owner;
	int check = 0, ret;

	ARB_OPEN(self, NULL);
	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|Op:stats", kwlist, &name, &owner_o,
					 &check))
		return NULL;
	if (resolve_owner(self, owner_o, &owner))
		return NULL;
	ret = find_pool(&self->busy, self->arb, name, owner, &st.pool_id);
	st.flags = check ? KVS_STATS_CHECK : 0;
	if (!ret)
		ret = arb_call_b(&self->busy, self->arb, KVS_IOC_POOL_STATS, &st);
	if (ret == -EUCLEAN)
		return kv_raise(ret, "stats '%s': the pool's invariants are broken", name);
	if (ret)
		return KV_RAISE(ret, "stats '%s' of uid %u", name, owner);
	return stats_dict(&st);
}

static PyObject *Arbiter_get_is_daemon(ArbiterObject *self, void *c)
{
	ARB_OPEN(self, NULL);
	return PyBool_FromLong(kv_arbiter_is_daemon(self->arb));
}

static PyObject *Arbiter_get_default_owner(ArbiterObject *self, void *c)
{
	uint32_t owner;
	int ret;

	ARB_OPEN(self, NULL);
	ret = kv_arbiter_default_owner(self->arb, &owner);
	if (ret)
		return KV_RAISE(ret, "default owner ($KVSHARE_POOL_OWNER)");
	return PyLong_FromUnsignedLong(owner);
}

static PyObject *Arbiter_get_closed(ArbiterObject *self, void *c)
{
	return PyBool_FromLong(!self->arb);
}

static PyMethodDef Arbiter_methods[] = {
	{ "info", (PyCFunction)Arbiter_info, METH_NOARGS,
	  PyDoc_STR("info() -> dict\n\nWhat the arbiter is (ABI version, features, limits).") },
	{ "pools", (PyCFunction)Arbiter_pools, METH_NOARGS,
	  PyDoc_STR("pools() -> list of dict\n\nEvery pool: name, id, owner, mode, geometry.") },
	{ "create_pool", (PyCFunction)(void (*)(void))Arbiter_create_pool,
	  METH_VARARGS | METH_KEYWORDS, Arbiter_create_pool__doc__ },
	{ "destroy_pool", (PyCFunction)(void (*)(void))Arbiter_destroy_pool,
	  METH_VARARGS | METH_KEYWORDS, Arbiter_destroy_pool__doc__ },
	{ "stats", (PyCFunction)(void (*)(void))Arbiter_stats,
	  METH_VARARGS | METH_KEYWORDS, Arbiter_stats__doc__ },
	{ "close", (PyCFunction)Arbiter_close, METH_NOARGS,
	  PyDoc_STR("close()\n\nClose the handle (idempotent).") },
	{ "__enter__", self_enter, METH_NOARGS, NULL },
	{ "__exit__", call_close, METH_VARARGS, NULL },
	{ NULL }
};

static PyGetSetDef Arbiter_getset[] = {
	{ "is_daemon", (getter)Arbiter_get_is_daemon, NULL,
	  PyDoc_STR("True when kvshared serves this handle, False for /dev/kvshare."), NULL },
	{ "default_owner", (getter)Arbiter_get_default_owner, NULL,
	  PyDoc_STR("The uid whose pools are attached when no owner is given."), NULL },
	{ "closed", (getter)Arbiter_get_closed, NULL, PyDoc_STR("Whether close() ran."), NULL },
	{ NULL }
};

static PyMemberDef Arbiter_members[] = {
	{ "path", T_OBJECT, offsetof(ArbiterObject, path), READONLY,
	  PyDoc_STR("The path given (None: libkv's choice).") },
	{ NULL }
};

PyDoc_STRVAR(Arbiter__doc__,
"Arbiter(path=None, *, no_uring=False)\n"
"\n"
"A handle on the kvshare arbiter for pool administration.  path names the\n"
"module's device or the kvshared socket; None lets libkv choose\n"
"($KVSHARE_ARBITER, /dev/kvshare, then the daemon's socket).");

static PyTypeObject Arbiter_Type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvshare._kvshare.Arbiter",
	.tp_basicsize = sizeof(ArbiterObject),
	.tp_dealloc = (destructor)Arbiter_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = Arbiter__doc__,
	.tp_methods = Arbiter_methods,
	.tp_getset = Arbiter_getset,
	.tp_members = Arbiter_members,
	.tp_init = (initproc)Arbiter_init,
	.tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------ */
/* Pool                                                                */

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

static PyTypeObject Pool_Type;

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

static int Pool_init(PoolObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "name", "arbiter", "ns", "owner", "no_uring", NULL };
	PyObject *arb_o = Py_None, *owner_o = Py_None, *name_o;
	uint64_t ns = 0;
	const char *name, *path = NULL;
	int no_uring = 0, have, ret;
	uint32_t owner = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "U|O$O&Op:Pool", kwlist, &name_o,
					 &arb_o, conv_u64, &ns, &owner_o, &no_uring))
		return -1;
	if (self->pool) {
		PyErr_SetString(PyExc_ValueError, "Pool is already open");
		return -1;
	}
	name = PyUnicode_AsUTF8(name_o);
	if (!name)
		return -1;
	if (arb_o != Py_None) {
		if (!PyUnicode_Check(arb_o)) {
			PyErr_Format(PyExc_TypeError, "arbiter: expected a path (str) or None, "
				     "not %.100s", Py_TYPE(arb_o)->tp_name);
			return -1;
		}
		path = PyUnicode_AsUTF8(arb_o);
		if (!path)
			return -1;
	}
	if (owner_arg(owner_o, &owner, &have))
		return -1;
	Py_BEGIN_ALLOW_THREADS
	if (have)
		ret = kv_pool_open_owner(path, owner, name, ns,
					 no_uring ? KV_ARBITER_NO_URING : 0, &self->pool);
	else
		ret = kv_pool_open(path, name, ns, no_uring ? KV_ARBITER_NO_URING : 0,
				   &self->pool);
	Py_END_ALLOW_THREADS
	if (ret) {
		self->pool = NULL;
		if (ret == -ENOENT && !have)
			kv_raise(ret, "pool '%s': no such pool of the default owner "
				 "($KVSHARE_POOL_OWNER, else the daemon's uid, else root; "
				 "pass owner= for another), or no arbiter at %s", name,
				 path ? path : "libkv's default path");
		else if (ret == -ENOENT)
			kv_raise(ret, "pool '%s': uid %u has no pool of that name", name, owner);
		else if (ret == -ENODATA)
			kv_raise(ret, "pool '%s' has no memory to map", name);
		else
			KV_RAISE(ret, "pool '%s'", name);
		return -1;
	}
	self->arb = kv_pool_arbiter(self->pool);
	self->gen = fork_gen;
	self->info = *kv_pool_info(self->pool);
	self->ns = ns;
	self->owner = have ? owner : 0;
	if (!have)
		kv_arbiter_default_owner(self->arb, &self->owner);
	Py_INCREF(name_o);
	Py_XSETREF(self->name, name_o);
	return 0;
}

static void Pool_dealloc(PoolObject *self)
{
	/* Views and caches hold a reference, so none is alive here. */
	kv_pool_close(self->pool);
	Py_XDECREF(self->name);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Pool_close(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
	if (!self->pool)
		Py_RETURN_NONE;
	if (self->exports) {
		PyErr_Format(PyExc_BufferError, "cannot close Pool '%U': %zd view(s) of its "
			     "memory (numpy arrays, tensors) are still alive", self->name,
			     self->exports);
		return NULL;
	}
	if (self->busy) {
		PyErr_Format(PyExc_BufferError, "cannot close Pool '%U': another thread is in "
			     "a call on it", self->name);
		return NULL;
	}
	if (self->users) {
		PyErr_Format(PyExc_BufferError, "cannot close Pool '%U': %zd PrefixCache(s) "
			     "still use it; close them first", self->name, self->users);
		return NULL;
	}
	{
		struct kv_pool *pool = self->pool;

		/* Gone for every other thread before the GIL is released. */
		self->pool = NULL;
		self->arb = NULL;
		Py_BEGIN_ALLOW_THREADS
		kv_pool_close(pool);
		Py_END_ALLOW_THREADS
	}
	Py_RETURN_NONE;
}

PyDoc_STRVAR(Pool_alloc__doc__,
"alloc(n) -> numpy.ndarray[uint32]\n"
"\n"
"ALLOC n pages (1..65536), OWNED by this handle: invisible to lookups\n"
"until published.  All or nothing; the arbiter evicts CACHED pages when\n"
"too few are free.  Errors: ENOSPC, EDQUOT.");

static PyObject *Pool_alloc(PoolObject *self, PyObject *arg)
{
	Py_ssize_t n = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
	uint32_t *pages;
	PyObject *out;
	int ret;

	POOL_OPEN(self, NULL);
	if (n == -1 && PyErr_Occurred())
		return NULL;
	if (check_batch(n, "alloc"))
		return NULL;
	out = new_u32(n, &pages);
	if (!out)
		return NULL;
	self->busy++;
	Py_BEGIN_ALLOW_THREADS
	ret = kv_alloc(self->arb, (uint32_t)n, pages);
	Py_END_ALLOW_THREADS
	self->busy--;
	if (ret) {
		Py_DECREF(out);
		return KV_RAISE(ret, "alloc of %zd pages", n);
	}
	return out;
}

PyDoc_STRVAR(Pool_publish__doc__,
"publish(pages, keys, parent=NO_PAGE) -> (results, n_dup)\n"
"\n"
"PUBLISH OWNED pages under their chained keys ((n, 4) uint64), as one\n"
"chain: entry 0 hangs from parent (a page this handle holds, or NO_PAGE),\n"
"each next one from the previous result.  A key that exists already is a\n"
"duplicate: that page goes back FREE and results[i] is the canonical page,\n"
"on which this handle now holds a reference.");

static PyObject *Pool_publish(PoolObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "pages", "keys", "parent", NULL };
	PyObject *pages_o, *keys_o, *parent_o = NULL, *res = NULL, *arr;
	struct kvs_publish_entry *e = NULL;
	const struct kvs_key *keys;
	uint32_t parent = KVS_NO_PAGE, *out;
	struct u32in pg;
	Py_buffer kb;
	Py_ssize_t nk, i;
	int ret;

	POOL_OPEN(self, NULL);
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:publish", kwlist, &pages_o,
					 &keys_o, &parent_o))
		return NULL;
	if (parent_o && parent_o != Py_None && u32_arg(parent_o, &parent, "parent"))
		return NULL;
	if (u32_from(pages_o, &pg, "pages"))
		return NULL;
	if (keys_from(keys_o, &kb, &nk)) {
		u32_release(&pg);
		return NULL;
	}
	keys = kb.buf;
	if (nk != pg.n) {
		PyErr_Format(PyExc_ValueError, "publish: %zd pages but %zd keys", pg.n, nk);
		goto out;
	}
	if (check_batch(nk, "publish"))
		goto out;
	e = PyMem_Calloc(nk, sizeof(*e));
	if (!e) {
		PyErr_NoMemory();
		goto out;
	}
	for (i = 0; i < nk; i++) {
		e[i].page = pg.p[i];
		e[i].parent = i ? KVS_PARENT_PREV : parent;
		e[i].key = keys[i];
	}
	self->busy++;
	Py_BEGIN_ALLOW_THREADS
	ret = kv_publish(self->arb, e, (uint32_t)nk);
	Py_END_ALLOW_THREADS
	self->busy--;
	if (ret < 0) {
		if (ret == -ENOENT)
			kv_raise(ret, "publish: a page is not OWNED by this handle, or the "
				 "parent %u is not held by it", parent);
		else if (ret == -EINVAL)
			kv_raise(ret, "publish: a page is listed twice");
		else
			KV_RAISE(ret, "publish of %zd pages", nk);
		goto out;
	}
	arr = new_u32(nk, &out);
	if (!arr)
		goto out;
	for (i = 0; i < nk; i++)
		out[i] = e[i].result;
	res = Py_BuildValue("(Ni)", arr, ret);
out:
	PyMem_Free(e);
	PyBuffer_Release(&kb);
	u32_release(&pg);
	return res;
}

PyDoc_STRVAR(Pool_lookup__doc__,
"lookup(keys) -> numpy.ndarray[uint32]\n"
"\n"
"LOOKUP a key chain ((n, 4) uint64, 1..65536 keys): the pages of the\n"
"longest run of hits from the first key, one reference taken on each\n"
"(give them back with put()).  The result's length is the number of hits.");

static PyObject *Pool_lookup(PoolObject *self, PyObject *keys_o)
{
	uint32_t *pages;
	PyObject *out;
	Py_buffer kb;
	Py_ssize_t n;
	int ret;

	POOL_OPEN(self, NULL);
	if (keys_from(keys_o, &kb, &n))
		return NULL;
	if (check_batch(n, "lookup")) {
		PyBuffer_Release(&kb);
		return NULL;
	}
	pages = PyMem_Malloc(n * sizeof(*pages));
	if (!pages) {
		PyBuffer_Release(&kb);
		return PyErr_NoMemory();
	}
	self->busy++;
	Py_BEGIN_ALLOW_THREADS
	ret = kv_lookup(self->arb, kb.buf, (uint32_t)n, pages);
	Py_END_ALLOW_THREADS
	self->busy--;
	PyBuffer_Release(&kb);
	if (ret < 0) {
		PyMem_Free(pages);
		return KV_RAISE(ret, "lookup of %zd keys", n);
	}
	{
		uint32_t *data;

		out = new_u32(ret, &data);
		if (out)
			memcpy(data, pages, ret * sizeof(*pages));
	}
	PyMem_Free(pages);
	return out;
}

PyDoc_STRVAR(Pool_put__doc__,
"put(pages)\n"
"\n"
"PUT holdings back: an OWNED page goes FREE, a reference is dropped (the\n"
"last one leaves the page CACHED, findable).  All or nothing; ENOENT if a\n"
"page is not held (as often as listed) by this handle.");

static PyObject *Pool_put(PoolObject *self, PyObject *pages_o)
{
	struct u32in pg;
	int ret;

	POOL_OPEN(self, NULL);
	if (u32_from(pages_o, &pg, "pages"))
		return NULL;
	if (check_batch(pg.n, "put")) {
		u32_release(&pg);
		return NULL;
	}
	self->busy++;
	Py_BEGIN_ALLOW_THREADS
	ret = kv_put(self->arb, pg.p, (uint32_t)pg.n);
	Py_END_ALLOW_THREADS
	self->busy--;
	u32_release(&pg);
	if (ret == -ENOENT)
		return kv_raise(ret, "put: a page is not held by this handle (as many times "
				"as listed); nothing was put");
	if (ret)
		return KV_RAISE(ret, "put of %zd pages", pg.n);
	Py_RETURN_NONE;
}

PyDoc_STRVAR(Pool_quota__doc__,
"quota(max_pages=None) -> (max_pages, held)\n"
"\n"
"This handle's quota and what it holds; with max_pages, set it first (up\n"
"to the pool's max_pages_per_file, not below what is held).");

static PyObject *Pool_quota(PoolObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "max_pages", NULL };
	struct kvs_quota q = { 0 };
	PyObject *m = Py_None;
	int ret;

	POOL_OPEN(self, NULL);
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:quota", kwlist, &m))
		return NULL;
	if (m != Py_None) {
		if (u32_arg(m, &q.max_pages, "max_pages"))
			return NULL;
		q.flags = KVS_QUOTA_SET;
	}
	self->busy++;
	ret = arb_call(self->arb, KVS_IOC_QUOTA, &q);
	self->busy--;
	if (ret == -EINVAL)
		return kv_raise(ret, "quota: %u is above the pool's max_pages_per_file (%u) "
				"or below what this handle holds", q.max_pages,
				self->info.max_pages_per_file);
	if (ret)
		return KV_RAISE(ret, "quota");
	return Py_BuildValue("(II)", q.max_pages, q.held);
}

PyDoc_STRVAR(Pool_stats__doc__,
"stats(check=False) -> dict\n"
"\n"
"The pool's counters (kvctl stats); check=True verifies the invariants\n"
"(admin only; EUCLEAN if broken).");

static PyObject *Pool_stats(PoolObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "check", NULL };
	struct kvs_pool_stats st = { 0 };
	int check = 0, ret;

	POOL_OPEN(self, NULL);
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|p:stats", kwlist, &check))
		return NULL;
	st.flags = check ? KVS_STATS_CHECK : 0;
	self->busy++;
	ret = arb_call(self->arb, KVS_IOC_POOL_STATS, &st);
	self->busy--;
	if (ret == -EUCLEAN)
		return kv_raise(ret, "stats: the pool's invariants are broken");
	if (ret)
		return KV_RAISE(ret, "stats");
	return stats_dict(&st);
}

static PyObject *PoolView_make(PoolObject *pool, uint32_t start, uint32_t count);

/* Whether the pool's memory is device memory (ATTACH's pool_flags; readable after close). */
static int pool_is_device(const PoolObject *p)
{
	return !!(p->info.pool_flags & KVS_POOL_DEVICE_MEM);
}

/* The DLPack device of the pool's memory: the CPU, or the GPU it is mapped on. */
static void pool_dl_device(const PoolObject *p, int *type, int *id)
{
	int dev = p->pool ? kv_pool_device(p->pool) : -1;

	*type = dev >= 0 ? KVPY_DL_CUDA : KVPY_DL_CPU;
	*id = dev >= 0 ? dev : 0;
}

static PyObject *Pool_get_is_device(PoolObject *self, void *c)
{
	return PyBool_FromLong(pool_is_device(self));
}

PyDoc_STRVAR(Pool_view__doc__,
"view(start=0, count=None) -> PoolView\n"
"\n"
"Pages [start, start + count) of the pool's memory (count None: to the\n"
"end), without a copy.  numpy.asarray(view) and torch.from_dlpack(view)\n"
"give arrays of shape (pages, layers, 2, tokens_per_page, kv_heads,\n"
"head_dim) over the mapped memory; writes are seen by every process.\n"
"A device pool's view is DLPack only (kDLCUDA): the buffer protocol\n"
"refuses it with BufferError.");

static PyObject *Pool_view(PoolObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "start", "count", NULL };
	PyObject *start_o = NULL, *count_o = Py_None;
	uint32_t start = 0, count;

	POOL_OPEN(self, NULL);
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:view", kwlist, &start_o, &count_o))
		return NULL;
	if (start_o && u32_arg(start_o, &start, "start"))
		return NULL;
	if (start >= self->info.n_pages) {
		PyErr_Format(PyExc_IndexError, "start %u: the pool has %llu pages", start,
			     (unsigned long long)self->info.n_pages);
		return NULL;
	}
	count = (uint32_t)(self->info.n_pages - start);
	if (count_o != Py_None) {
		uint32_t c;

		if (u32_arg(count_o, &c, "count"))
			return NULL;
		if (!c || c > count) {
			PyErr_Format(PyExc_IndexError, "count %u: pages %u.. of a pool of %llu "
				     "pages allow 1..%u", c, start,
				     (unsigned long long)self->info.n_pages, count);
			return NULL;
		}
		count = c;
	}
	return PoolView_make(self, start, count);
}

static PyObject *Pool_page(PoolObject *self, PyObject *arg)
{
	uint32_t page;

	POOL_OPEN(self, NULL);
	if (u32_arg(arg, &page, "page"))
		return NULL;
	if (page >= self->info.n_pages) {
		PyErr_Format(PyExc_IndexError, "page %u: the pool has %llu pages", page,
			     (unsigned long long)self->info.n_pages);
		return NULL;
	}
	return PoolView_make(self, page, 1);
}

static PyObject *Pool_get_geometry(PoolObject *self, void *c)
{
	return geom_dict(&self->info.geom);
}

static PyObject *Pool_get_page_shape(PoolObject *self, void *c)
{
	const struct kvs_geometry *g = &self->info.geom;

	return Py_BuildValue("(IIIII)", g->n_layers, 2, g->tokens_per_page, g->n_kv_heads,
			     g->head_dim);
}

static PyObject *Pool_get_dtype(PoolObject *self, void *c)
{
	return PyUnicode_FromString(dtype_name(self->info.geom.dtype));
}

static PyObject *Pool_get_closed(PoolObject *self, void *c)
{
	return PyBool_FromLong(!self->pool);
}

static PyObject *Pool_get_is_daemon(PoolObject *self, void *c)
{
	POOL_OPEN(self, NULL);
	return PyBool_FromLong(kv_arbiter_is_daemon(self->arb));
}

static PyObject *Pool_get_address(PoolObject *self, void *c)
{
	POOL_OPEN(self, NULL);
	return PyLong_FromVoidPtr(kv_page_addr(self->pool, 0));
}

static PyObject *Pool_repr(PoolObject *self)
{
	const struct kvs_geometry *g = &self->info.geom;

	if (!self->name)
		return PyUnicode_FromString("<kvshare.Pool (not open)>");
	return PyUnicode_FromFormat("<kvshare.Pool '%U'%s: %llu pages of %u tokens, %u layers, "
				    "%u kv heads x %u, %s>", self->name,
				    self->pool ? "" : " (closed)",
				    (unsigned long long)self->info.n_pages,
				    g->tokens_per_page, g->n_layers, g->n_kv_heads,
				    g->head_dim, dtype_name(g->dtype));
}

static PyMethodDef Pool_methods[] = {
	{ "alloc", (PyCFunction)Pool_alloc, METH_O, Pool_alloc__doc__ },
	{ "publish", (PyCFunction)(void (*)(void))Pool_publish, METH_VARARGS | METH_KEYWORDS,
	  Pool_publish__doc__ },
	{ "lookup", (PyCFunction)Pool_lookup, METH_O, Pool_lookup__doc__ },
	{ "put", (PyCFunction)Pool_put, METH_O, Pool_put__doc__ },
	{ "quota", (PyCFunction)(void (*)(void))Pool_quota, METH_VARARGS | METH_KEYWORDS,
	  Pool_quota__doc__ },
	{ "stats", (PyCFunction)(void (*)(void))Pool_stats, METH_VARARGS | METH_KEYWORDS,
	  Pool_stats__doc__ },
	{ "view", (PyCFunction)(void (*)(void))Pool_view, METH_VARARGS | METH_KEYWORDS,
	  Pool_view__doc__ },
	{ "page", (PyCFunction)Pool_page, METH_O,
	  PyDoc_STR("page(i) -> PoolView\n\nview(i, 1): one page's memory, no copy.") },
	{ "close", (PyCFunction)Pool_close, METH_NOARGS,
	  PyDoc_STR("close()\n\nDetach and unmap; every holding of this handle is released "
		    "by the arbiter.  BufferError while views of the memory are alive.") },
	{ "__enter__", self_enter, METH_NOARGS, NULL },
	{ "__exit__", call_close, METH_VARARGS, NULL },
	{ NULL }
};

static PyMemberDef Pool_members[] = {
	{ "name", T_OBJECT, offsetof(PoolObject, name), READONLY, PyDoc_STR("Pool name.") },
	{ "n_pages", T_ULONGLONG, offsetof(PoolObject, info.n_pages), READONLY,
	  PyDoc_STR("Pages in the pool.") },
	{ "page_bytes", T_ULONGLONG, offsetof(PoolObject, info.geom.page_bytes), READONLY,
	  PyDoc_STR("Bytes of one page.") },
	{ "tokens_per_page", T_UINT, offsetof(PoolObject, info.geom.tokens_per_page),
	  READONLY, PyDoc_STR("Tokens in one page.") },
	{ "n_layers", T_UINT, offsetof(PoolObject, info.geom.n_layers), READONLY, NULL },
	{ "n_kv_heads", T_UINT, offsetof(PoolObject, info.geom.n_kv_heads), READONLY, NULL },
	{ "head_dim", T_UINT, offsetof(PoolObject, info.geom.head_dim), READONLY, NULL },
	{ "pool_id", T_UINT, offsetof(PoolObject, info.pool_id), READONLY, NULL },
	{ "max_pages_per_file", T_UINT, offsetof(PoolObject, info.max_pages_per_file),
	  READONLY, PyDoc_STR("The pool's per-handle quota limit.") },
	{ "ns", T_ULONGLONG, offsetof(PoolObject, ns), READONLY,
	  PyDoc_STR("The key namespace this handle attached with.") },
	{ "owner", T_UINT, offsetof(PoolObject, owner), READONLY,
	  PyDoc_STR("The uid that owns the pool.") },
	{ NULL }
};

static PyGetSetDef Pool_getset[] = {
	{ "geometry", (getter)Pool_get_geometry, NULL, PyDoc_STR("The geometry as a dict."), NULL },
	{ "page_shape", (getter)Pool_get_page_shape, NULL,
	  PyDoc_STR("(layers, 2, tokens_per_page, kv_heads, head_dim): one page (kv_layout.h)."),
	  NULL },
	{ "dtype", (getter)Pool_get_dtype, NULL, PyDoc_STR("Element type name."), NULL },
	{ "closed", (getter)Pool_get_closed, NULL, PyDoc_STR("Whether close() ran."), NULL },
	{ "is_daemon", (getter)Pool_get_is_daemon, NULL,
	  PyDoc_STR("True when kvshared serves this pool."), NULL },
	{ "address", (getter)Pool_get_address, NULL,
	  PyDoc_STR("Address of page 0 in this process (for checks and engine glue);\n"
		    "a device pointer (CUdeviceptr) for a device pool."), NULL },
	{ "is_device", (getter)Pool_get_is_device, NULL,
	  PyDoc_STR("True when the pool's memory is GPU device memory (kvshared's\n"
		    "memory=cuda): exported as kDLCUDA DLPack only, never to numpy."), NULL },
	{ NULL }
};

PyDoc_STRVAR(Pool__doc__,
"Pool(name, arbiter=None, *, ns=0, owner=None, no_uring=False)\n"
"\n"
"Attach to pool name of owner (None: $KVSHARE_POOL_OWNER, else the daemon's\n"
"uid, else root) through the arbiter at path arbiter (None: libkv's\n"
"choice) with key namespace ns, and map its memory.  Every page this\n"
"handle holds is released when it is closed, or when the process ends.");

static PyTypeObject Pool_Type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvshare._kvshare.Pool",
	.tp_basicsize = sizeof(PoolObject),
	.tp_dealloc = (destructor)Pool_dealloc,
	.tp_repr = (reprfunc)Pool_repr,
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = Pool__doc__,
	.tp_methods = Pool_methods,
	.tp_members = Pool_members,
	.tp_getset = Pool_getset,
	.tp_init = (initproc)Pool_init,
	.tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------ */
/* PoolView: buffer protocol and DLPack over pages of a pool           */

typedef struct {
	PyObject_HEAD
	PoolObject *pool;		/* strong */
	uint32_t start, count;
	Py_ssize_t shape[KVPY_VIEW_NDIM];
	Py_ssize_t strides[KVPY_VIEW_NDIM];	/* bytes */
} PoolViewObject;

static PyTypeObject PoolView_Type;

static uint32_t dtype_itemsize(uint32_t dtype)
{
	return kv_dtype_size(dtype);
}

static PyObject *PoolView_make(PoolObject *pool, uint32_t start, uint32_t count)
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

static PyTypeObject PoolView_Type = {
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

/* ------------------------------------------------------------------ */
/* BlockHasher                                                         */

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

static PyTypeObject Hasher_Type = {
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

/* ------------------------------------------------------------------ */
/* Trees: the part RadixCache and PrefixCache share                    */

typedef struct {
	PyObject_HEAD
	struct kv_radix *tree;		/* NULL: closed */
	uint64_t epoch;			/* bumped by anything that may free nodes */
	PyThread_type_lock lock;
	int wired;			/* a PrefixCache */
	uint32_t *scratch;		/* match results before they are copied out */
	size_t scratch_cap;
	unsigned long gen;		/* fork_gen at creation (wired trees) */
} TreeObject;

/* Room for @n pages in t->scratch. */
static uint32_t *tree_scratch(TreeObject *t, size_t n)
{
	if (n > t->scratch_cap) {
		uint32_t *p = PyMem_Realloc(t->scratch, (n ? n : 1) * sizeof(*p));

		if (!p) {
			PyErr_NoMemory();
			return NULL;
		}
		t->scratch = p;
		t->scratch_cap = n;
	}
	return t->scratch ? t->scratch : tree_scratch(t, 1);
}

/* A uint32 array holding a copy of @n pages. */
static PyObject *u32_copy(const uint32_t *src, size_t n)
{
	uint32_t *d;
	PyObject *a = new_u32(n, &d);

	if (a)
		memcpy(d, src, n * sizeof(*d));
	return a;
}

typedef struct {
	PyObject_HEAD
	TreeObject *tree;		/* strong */
	struct kv_radix_node *node;
	uint64_t epoch;
	Py_ssize_t locks;		/* taken through this object */
} NodeObject;

static PyTypeObject Node_Type;
static PyTypeObject MatchResult_Type;

static PyStructSequence_Field match_fields[] = {
	{ "pages", "numpy uint32 array: the matched pages, in order" },
	{ "length", "tokens matched (whole pages)" },
	{ "last_node", "the Node the match ends in (lock it to protect the pages)" },
	{ NULL }
};

static PyStructSequence_Desc match_desc = {
	"kvshare.MatchResult",
	"match_prefix()'s result: (pages, length, last_node).",
	match_fields, 3,
};

#define TREE_OPEN(self, ret) do { \
	if (!(self)->tree) { \
		PyErr_Format(PyExc_ValueError, "operation on a closed %s", \
			     Py_TYPE(self)->tp_name); \
		return ret; \
	} \
	if ((self)->wired && (self)->gen != fork_gen) { \
		forked_raise("PrefixCache"); \
		return ret; \
	} \
} while (0)

static PyObject *Node_new(TreeObject *t, struct kv_radix_node *n)
{
	NodeObject *o = PyObject_New(NodeObject, &Node_Type);

	if (!o)
		return NULL;
	o->tree = (TreeObject *)Py_NewRef(t);
	o->node = n;
	o->epoch = t->epoch;
	o->locks = 0;
	return (PyObject *)o;
}

static void Node_dealloc(NodeObject *self)
{
	Py_DECREF(self->tree);
	PyObject_Free(self);
}

/* The node if still alive in @t, else raise. */
static struct kv_radix_node *node_get(TreeObject *t, PyObject *o)
{
	NodeObject *n;

	if (!PyObject_TypeCheck(o, &Node_Type)) {
		PyErr_Format(PyExc_TypeError, "expected a Node (from match_prefix), not %.100s",
			     Py_TYPE(o)->tp_name);
		return NULL;
	}
	n = (NodeObject *)o;
	if (n->tree != t) {
		PyErr_SetString(PyExc_ValueError, "the Node belongs to another tree");
		return NULL;
	}
	if (!t->tree || (n->epoch != t->epoch && !n->locks)) {
		kv_raise(ESTALE, "stale Node: the tree may have evicted it since match_prefix "
			 "returned it (lock a node to keep it)");
		return NULL;
	}
	return n->node;
}

static PyObject *Node_get_info(NodeObject *self, void *c)
{
	struct kv_radix_node_info ni;
	struct kv_radix_node *n = node_get(self->tree, (PyObject *)self);

	if (!n)
		return NULL;
	kv_radix_node_info(self->tree->tree, n, &ni);
	return Py_BuildValue("{sKsKsKsnsIsIsIsI}", "id", (unsigned long long)ni.id,
			     "parent_id", (unsigned long long)ni.parent_id,
			     "last_access", (unsigned long long)ni.last_access,
			     "depth", (Py_ssize_t)ni.depth, "n_pages", ni.n_pages,
			     "lock_ref", ni.lock_ref, "n_children", ni.n_children,
			     "flags", ni.flags);
}

static PyObject *Node_get_is_root(NodeObject *self, void *c)
{
	return PyBool_FromLong(self->tree->tree && self->node == kv_radix_root(self->tree->tree));
}

static PyGetSetDef Node_getset[] = {
	{ "info", (getter)Node_get_info, NULL,
	  PyDoc_STR("dict: id, parent_id, last_access, depth, n_pages, lock_ref, ..."), NULL },
	{ "is_root", (getter)Node_get_is_root, NULL, NULL, NULL },
	{ NULL }
};

static PyMemberDef Node_members[] = {
	{ "locks", T_PYSSIZET, offsetof(NodeObject, locks), READONLY,
	  PyDoc_STR("Locks taken through this object and not yet released.") },
	{ NULL }
};

static PyTypeObject Node_Type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvshare._kvshare.Node",
	.tp_basicsize = sizeof(NodeObject),
	.tp_dealloc = (destructor)Node_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = PyDoc_STR("A node of a radix tree, as match_prefix() returns it (SGLang's\n"
			    "last_node).  Valid until the tree next evicts, or while locked\n"
			    "through it; use after that raises kvshare.Error(ESTALE)."),
	.tp_getset = Node_getset,
	.tp_members = Node_members,
};

static PyObject *match_result(TreeObject *t, PyObject *pages, size_t len,
			      struct kv_radix_node *last)
{
	PyObject *r, *node;

	if (!pages)
		return NULL;
	r = PyStructSequence_New(&MatchResult_Type);
	if (!r) {
		Py_DECREF(pages);
		return NULL;
	}
	node = Node_new(t, last);
	if (!node) {
		Py_DECREF(pages);
		Py_DECREF(r);
		return NULL;
	}
	PyStructSequence_SET_ITEM(r, 0, pages);
	PyStructSequence_SET_ITEM(r, 1, PyLong_FromSize_t(len));
	PyStructSequence_SET_ITEM(r, 2, node);
	if (!PyStructSequence_GET_ITEM(r, 1)) {
		Py_DECREF(r);
		return NULL;
	}
	return r;
}

/*
 * Tree calls: a PrefixCache's may talk to the arbiter (its release PUTs),
 * so they run with the GIL released under the object's lock.  A RadixCache
 * never blocks and keeps the GIL (its calls take microseconds).
 */
#define TREE_CALL(t, stmt) do { \
	if ((t)->wired) { \
		OBJ_LOCK((t)->lock); \
		Py_BEGIN_ALLOW_THREADS \
		stmt; \
		Py_END_ALLOW_THREADS \
		OBJ_UNLOCK((t)->lock); \
	} else { \
		stmt; \
	} \
} while (0)

static PyObject *Tree_lock_node(TreeObject *self, PyObject *o)
{
	struct kv_radix_node *n;
	long d;

	TREE_OPEN(self, NULL);
	n = node_get(self, o);
	if (!n)
		return NULL;
	TREE_CALL(self, d = kv_radix_lock(self->tree, n));
	((NodeObject *)o)->locks++;
	return PyLong_FromLong(d);
}

static PyObject *Tree_unlock_node(TreeObject *self, PyObject *o)
{
	struct kv_radix_node *n;
	long d;

	TREE_OPEN(self, NULL);
	n = node_get(self, o);
	if (!n)
		return NULL;
	TREE_CALL(self, d = kv_radix_unlock(self->tree, n));
	if (d < 0)
		return kv_raise((int)d, "unlock: the node is not locked");
	if (((NodeObject *)o)->locks)
		((NodeObject *)o)->locks--;
	return PyLong_FromLong(d);
}

static PyObject *Tree_evict(TreeObject *self, PyObject *arg)
{
	Py_ssize_t n = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
	size_t done;

	TREE_OPEN(self, NULL);
	if (n == -1 && PyErr_Occurred())
		return NULL;
	if (n < 0) {
		PyErr_Format(PyExc_ValueError, "evict: %zd pages; expected >= 0", n);
		return NULL;
	}
	self->epoch++;
	TREE_CALL(self, done = kv_radix_evict(self->tree, (size_t)n));
	return PyLong_FromSize_t(done);
}

static PyObject *Tree_check(TreeObject *self, PyObject *Py_UNUSED(i))
{
	int ret;

	TREE_OPEN(self, NULL);
	TREE_CALL(self, ret = kv_radix_check(self->tree));
	if (ret)
		return kv_raise(ret, "check: the tree's counts or structure are inconsistent");
	Py_RETURN_NONE;
}

static PyObject *Tree_peek(TreeObject *self, PyObject *tok_o)
{
	struct u32in tok;
	uint32_t *pages;
	PyObject *out;
	size_t len;

	TREE_OPEN(self, NULL);
	if (u32_from(tok_o, &tok, "tokens"))
		return NULL;
	pages = PyMem_Malloc((tok.n / kv_radix_tokens_per_page(self->tree) + 1) * 4);
	if (!pages) {
		u32_release(&tok);
		return PyErr_NoMemory();
	}
	TREE_CALL(self, len = kv_radix_peek(self->tree, tok.p, tok.n, pages));
	u32_release(&tok);
	{
		uint32_t *d;
		size_t np = len / kv_radix_tokens_per_page(self->tree);

		out = new_u32(np, &d);
		if (out)
			memcpy(d, pages, np * 4);
	}
	PyMem_Free(pages);
	return out ? Py_BuildValue("(Nn)", out, (Py_ssize_t)len) : NULL;
}

static PyObject *Tree_get_size(TreeObject *self, void *which)
{
	size_t v = 0;

	TREE_OPEN(self, NULL);
	switch ((intptr_t)which) {
	case 0: v = kv_radix_evictable_pages(self->tree); break;
	case 1: v = kv_radix_protected_pages(self->tree); break;
	case 2: v = kv_radix_total_pages(self->tree); break;
	case 3: v = kv_radix_node_count(self->tree); break;
	}
	return PyLong_FromSize_t(v);
}

static PyObject *Tree_get_tpp(TreeObject *self, void *c)
{
	TREE_OPEN(self, NULL);
	return PyLong_FromUnsignedLong(kv_radix_tokens_per_page(self->tree));
}

static PyObject *Tree_get_root(TreeObject *self, void *c)
{
	TREE_OPEN(self, NULL);
	return Node_new(self, kv_radix_root(self->tree));
}

static PyObject *Tree_get_closed(TreeObject *self, void *c)
{
	return PyBool_FromLong(!self->tree);
}

#define TREE_COMMON_METHODS \
	{ "lock", (PyCFunction)Tree_lock_node, METH_O, \
	  PyDoc_STR("lock(node) -> int\n\ninc_lock_ref: protect node and its ancestors from " \
		    "eviction; returns the change of the evictable size (<= 0).") }, \
	{ "unlock", (PyCFunction)Tree_unlock_node, METH_O, \
	  PyDoc_STR("unlock(node) -> int\n\ndec_lock_ref; returns the change of the evictable " \
		    "size (>= 0).  ESTALE/EINVAL if the node is gone or not locked.") }, \
	{ "inc_lock_ref", (PyCFunction)Tree_lock_node, METH_O, \
	  PyDoc_STR("inc_lock_ref(node) -> int\n\nSGLang's name of lock().") }, \
	{ "dec_lock_ref", (PyCFunction)Tree_unlock_node, METH_O, \
	  PyDoc_STR("dec_lock_ref(node) -> int\n\nSGLang's name of unlock().") }, \
	{ "evict", (PyCFunction)Tree_evict, METH_O, \
	  PyDoc_STR("evict(n) -> int\n\nFree up to n unlocked pages, least recently used " \
		    "leaves first, deepest first; returns the pages freed.") }, \
	{ "peek", (PyCFunction)Tree_peek, METH_O, \
	  PyDoc_STR("peek(tokens) -> (pages, length)\n\nThe cached prefix without changing " \
		    "anything (no split, no stamp).") }, \
	{ "check", (PyCFunction)Tree_check, METH_NOARGS, \
	  PyDoc_STR("check()\n\nRecount the tree and verify it (tests); Error(EUCLEAN) if " \
		    "inconsistent.") }

#define TREE_COMMON_GETSET \
	{ "evictable_size", (getter)Tree_get_size, NULL, \
	  PyDoc_STR("Pages that evict() could free now."), (void *)0 }, \
	{ "protected_size", (getter)Tree_get_size, NULL, \
	  PyDoc_STR("Pages under a locked node."), (void *)1 }, \
	{ "total_size", (getter)Tree_get_size, NULL, PyDoc_STR("Pages in the tree."), \
	  (void *)2 }, \
	{ "node_count", (getter)Tree_get_size, NULL, PyDoc_STR("Nodes, root excluded."), \
	  (void *)3 }, \
	{ "tokens_per_page", (getter)Tree_get_tpp, NULL, NULL, NULL }, \
	{ "root", (getter)Tree_get_root, NULL, PyDoc_STR("The root Node."), NULL }, \
	{ "closed", (getter)Tree_get_closed, NULL, NULL, NULL }

/* ------------------------------------------------------------------ */
/* RadixCache: the tree alone                                          */

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
	PyObject *tok_o, *pg_o;
	struct u32in tok, pg;
	uint32_t tpp;
	long ret;

	TREE_OPEN(&self->t, NULL);
	if (!PyArg_ParseTuple(args, "OO:insert", &tok_o, &pg_o))
		return NULL;
	if (u32_from(tok_o, &tok, "tokens"))
		return NULL;
	if (u32_from(pg_o, &pg, "pages")) {
		u32_release(&tok);
		return NULL;
	}
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

static PyTypeObject Radix_Type = {
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

/* ------------------------------------------------------------------ */
/* PrefixCache: the tree wired to the arbiter, with a request table   */

typedef struct {
	TreeObject t;
	struct kv_prefix_cache *pc;
	struct kv_req_table *rt;	/* the requests' rows */
	struct kv_req_table *scratch;	/* one row for match_prefix() */
	PoolObject *pool;		/* strong */
	char *salt;
	struct extras extra;
	uint32_t max_context;
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

static PyTypeObject Prefix_Type;
static PyTypeObject Request_Type;

static int Prefix_init(PrefixObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "pool", "salt", "algo", "extra", "max_reqs",
				  "max_context", NULL };
	PyObject *pool_o, *salt_o = Py_None, *extra_o = Py_None;
	const char *algo_s = "sha256";
	uint32_t max_reqs = 16, max_context = 131072;
	struct kv_prefix_config cfg = { 0 };
	PoolObject *pool;
	size_t salt_len;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|O$sOO&O&:PrefixCache", kwlist,
					 &Pool_Type, &pool_o, &salt_o, &algo_s, &extra_o,
					 conv_u32, &max_reqs, conv_u32, &max_context))
		return -1;
	if (self->pc) {
		PyErr_SetString(PyExc_ValueError, "PrefixCache is already initialized");
		return -1;
	}
	pool = (PoolObject *)pool_o;
	POOL_OPEN(pool, -1);
	if (!max_reqs || max_reqs > 65536 || !max_context || max_context > (1u << 24)) {
		PyErr_Format(PyExc_ValueError, "max_reqs %u (1..65536) or max_context %u "
			     "(1..16777216) out of range", max_reqs, max_context);
		return -1;
	}
	if (algo_parse(algo_s, &cfg.algo))
		return -1;
	if (salt_arg(salt_o, &self->salt, &salt_len))
		return -1;
	if (extras_arg(extra_o, &self->extra))
		return -1;
	cfg.salt = self->salt;
	cfg.salt_len = salt_len;
	cfg.extra = self->extra.e;
	cfg.n_extra = self->extra.n;
	ret = kv_prefix_create(pool->arb, &pool->info, &cfg, &self->pc);
	if (!ret)
		ret = kv_req_table_create(max_reqs, max_context,
					  pool->info.geom.tokens_per_page, &self->rt);
	if (!ret)
		ret = kv_req_table_create(1, max_context, pool->info.geom.tokens_per_page,
					  &self->scratch);
	if (!ret)
		self->t.lock = PyThread_allocate_lock();
	if (!ret && !self->t.lock)
		ret = -ENOMEM;
	if (ret) {
		KV_RAISE(ret, "PrefixCache on pool '%U'", pool->name);
		return -1;
	}
	self->t.tree = kv_prefix_tree(self->pc);
	self->t.wired = 1;
	self->t.gen = fork_gen;
	self->max_context = max_context;
	self->pool = (PoolObject *)Py_NewRef(pool);
	pool->users++;
	return 0;
}

/* Free everything; the tree's pages are PUT (the pool must be open). */
static void prefix_teardown(PrefixObject *self)
{
	if (self->pc && self->t.gen != fork_gen) {
		/* The parent's cache: its PUTs would drop the parent's holdings. */
		self->pc = NULL;
		self->rt = self->scratch = NULL;
	}
	if (self->pc) {
		Py_BEGIN_ALLOW_THREADS
		kv_prefix_destroy(self->pc);
		Py_END_ALLOW_THREADS
	}
	kv_req_table_destroy(self->rt);
	kv_req_table_destroy(self->scratch);
	self->pc = NULL;
	self->rt = self->scratch = NULL;
	self->t.tree = NULL;
	self->t.epoch++;
	if (self->pool) {
		self->pool->users--;
		Py_CLEAR(self->pool);
	}
}

static void Prefix_dealloc(PrefixObject *self)
{
	/* Live Requests hold a reference: none is left here. */
	prefix_teardown(self);
	PyMem_Free(self->salt);
	extras_free(&self->extra);
	if (self->t.lock)
		PyThread_free_lock(self->t.lock);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Prefix_close(PrefixObject *self, PyObject *Py_UNUSED(i))
{
	if (!self->pc)
		Py_RETURN_NONE;
	if (self->live && self->t.gen == fork_gen) {
		PyErr_Format(PyExc_BufferError, "cannot close the PrefixCache: %zd request(s) "
			     "are still running (finish or abort them)", self->live);
		return NULL;
	}
	OBJ_LOCK(self->t.lock);
	prefix_teardown(self);
	OBJ_UNLOCK(self->t.lock);
	Py_RETURN_NONE;
}

/* Tokens for a request: copied, at most max_context. */
static int req_tokens(PrefixObject *pc, RequestObject *r, PyObject *tok_o)
{
	struct u32in tok;

	if (u32_from(tok_o, &tok, "tokens"))
		return -1;
	if (tok.n > pc->max_context) {
		PyErr_Format(PyExc_ValueError, "tokens: %zd tokens; this PrefixCache's "
			     "max_context is %u", tok.n, pc->max_context);
		u32_release(&tok);
		return -1;
	}
	if ((size_t)tok.n > r->cap) {
		uint32_t *p = PyMem_Realloc(r->tokens, tok.n * sizeof(uint32_t));

		if (!p) {
			u32_release(&tok);
			PyErr_NoMemory();
			return -1;
		}
		r->tokens = p;
		r->cap = tok.n;
		r->req.tokens = p;	/* the row's tokens, as libkv reads them */
	}
	memcpy(r->tokens, tok.p, tok.n * sizeof(uint32_t));
	r->n_given = (uint32_t)tok.n;
	u32_release(&tok);
	return 0;
}

PyDoc_STRVAR(Prefix_match__doc__,
"match(tokens, n_match=None) -> Request\n"
"\n"
"Start a request: match tokens[:n_match] (default len(tokens) - 1, since\n"
"the last prompt token's logits are computed anyway) against the local\n"
"tree, then LOOKUP the rest of the chain at the arbiter; the request's\n"
"row holds the cached pages and its cached prefix is locked.");

static PyObject *Prefix_match(PrefixObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "tokens", "n_match", NULL };
	PyObject *tok_o, *nm_o = Py_None;
	RequestObject *r;
	uint32_t n_match;
	long ret;

	TREE_OPEN(&self->t, NULL);
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:match", kwlist, &tok_o, &nm_o))
		return NULL;
	r = PyObject_New(RequestObject, &Request_Type);
	if (!r)
		return NULL;
	r->pc = (PrefixObject *)Py_NewRef(self);
	r->active = 0;
	r->n_given = 0;
	memset(&r->req, 0, sizeof(r->req));
	r->req.slot = -1;
	r->tokens = NULL;
	r->cap = 0;
	if (req_tokens(self, r, tok_o)) {
		Py_DECREF(r);
		return NULL;
	}
	n_match = r->n_given ? r->n_given - 1 : 0;
	if (nm_o != Py_None) {
		if (u32_arg(nm_o, &n_match, "n_match")) {
			Py_DECREF(r);
			return NULL;
		}
		if (n_match > r->n_given) {
			PyErr_Format(PyExc_ValueError, "n_match %u: only %u tokens given",
				     n_match, r->n_given);
			Py_DECREF(r);
			return NULL;
		}
	}
	OBJ_LOCK(self->t.lock);
	Py_BEGIN_ALLOW_THREADS
	ret = kv_req_alloc(self->rt);
	if (ret >= 0) {
		r->req.slot = (int)ret;
		ret = kv_prefix_match(self->pc, self->rt, &r->req, n_match);
		if (ret < 0)
			kv_req_free(self->rt, r->req.slot);
	}
	Py_END_ALLOW_THREADS
	self->t.epoch++;	/* a LOOKUP over quota evicts locally */
	OBJ_UNLOCK(self->t.lock);
	if (ret < 0) {
		r->req.slot = -1;
		Py_DECREF(r);
		if (ret == -ENOSPC)
			return kv_raise((int)ret, "match: all %u request rows are in use "
					"(max_reqs)", kv_req_table_available(self->rt));
		return KV_RAISE((int)ret, "match");
	}
	r->active = 1;
	self->live++;
	return (PyObject *)r;
}

static RequestObject *req_get(PrefixObject *self, PyObject *o)
{
	RequestObject *r;

	if (!PyObject_TypeCheck(o, &Request_Type)) {
		PyErr_Format(PyExc_TypeError, "expected a Request (from match), not %.100s",
			     Py_TYPE(o)->tp_name);
		return NULL;
	}
	r = (RequestObject *)o;
	if (r->pc != self) {
		PyErr_SetString(PyExc_ValueError, "the Request belongs to another PrefixCache");
		return NULL;
	}
	if (!r->active) {
		PyErr_SetString(PyExc_ValueError, "the Request is finished (cached or aborted)");
		return NULL;
	}
	return r;
}

PyDoc_STRVAR(Prefix_reserve__doc__,
"reserve(req, new_len)\n"
"\n"
"Grow the request's row to new_len tokens with newly ALLOCated pages (the\n"
"tree evicts locally under pressure).  req.pages then lists every page.");

static PyObject *Prefix_reserve(PrefixObject *self, PyObject *args)
{
	PyObject *req_o;
	RequestObject *r;
	uint32_t new_len;
	int ret;

	TREE_OPEN(&self->t, NULL);
	if (!PyArg_ParseTuple(args, "OO&:reserve", &req_o, conv_u32, &new_len))
		return NULL;
	r = req_get(self, req_o);
	if (!r)
		return NULL;
	if (new_len > self->max_context) {
		PyErr_Format(PyExc_ValueError, "reserve: %u tokens; max_context is %u",
			     new_len, self->max_context);
		return NULL;
	}
	OBJ_LOCK(self->t.lock);
	Py_BEGIN_ALLOW_THREADS
	ret = kv_prefix_reserve(self->pc, self->rt, &r->req, new_len);
	Py_END_ALLOW_THREADS
	self->t.epoch++;
	OBJ_UNLOCK(self->t.lock);
	if (ret)
		return KV_RAISE(ret, "reserve of %u tokens", new_len);
	Py_RETURN_NONE;
}

/* Finish a request: cache it (finished), or abort it. */
static PyObject *prefix_finish(PrefixObject *self, PyObject *args, int abort)
{
	PyObject *req_o, *tok_o = Py_None;
	RequestObject *r;
	int ret = 0;

	TREE_OPEN(&self->t, NULL);
	if (!PyArg_ParseTuple(args, abort ? "O:abort" : "O|O:cache_finished_req", &req_o,
			      &tok_o))
		return NULL;
	r = req_get(self, req_o);
	if (!r)
		return NULL;
	if (tok_o != Py_None && req_tokens(self, r, tok_o))
		return NULL;
	if (!abort && r->n_given < r->req.n_tokens) {
		PyErr_Format(PyExc_ValueError, "cache_finished_req: the row holds KV of %u "
			     "tokens but only %u tokens are known; pass tokens=prompt + output",
			     r->req.n_tokens, r->n_given);
		return NULL;
	}
	OBJ_LOCK(self->t.lock);
	Py_BEGIN_ALLOW_THREADS
	if (abort)
		kv_prefix_abort(self->pc, self->rt, &r->req);
	else
		ret = kv_prefix_cache_finished(self->pc, self->rt, &r->req);
	Py_END_ALLOW_THREADS
	self->t.epoch++;
	OBJ_UNLOCK(self->t.lock);
	/* Either way the row is gone (an error released its pages instead). */
	r->active = 0;
	self->live--;
	if (ret)
		return KV_RAISE(ret, "cache_finished_req (its pages were released)");
	Py_RETURN_NONE;
}

static PyObject *Prefix_cache_finished(PrefixObject *self, PyObject *args)
{
	return prefix_finish(self, args, 0);
}

static PyObject *Prefix_abort(PrefixObject *self, PyObject *args)
{
	return prefix_finish(self, args, 1);
}

PyDoc_STRVAR(Prefix_cache_unfinished__doc__,
"cache_unfinished_req(req, tokens=None)\n"
"\n"
"Chunked prefill: PUBLISH and insert the row's full pages now, point the\n"
"row at the tree's pages and move the lock; the partial last page stays\n"
"the request's.  tokens replaces the known tokens (prompt so far).");

static PyObject *Prefix_cache_unfinished(PrefixObject *self, PyObject *args)
{
	PyObject *req_o, *tok_o = Py_None;
	RequestObject *r;
	int ret;

	TREE_OPEN(&self->t, NULL);
	if (!PyArg_ParseTuple(args, "O|O:cache_unfinished_req", &req_o, &tok_o))
		return NULL;
	r = req_get(self, req_o);
	if (!r)
		return NULL;
	if (tok_o != Py_None && req_tokens(self, r, tok_o))
		return NULL;
	if (r->n_given < r->req.n_tokens) {
		PyErr_Format(PyExc_ValueError, "cache_unfinished_req: the row holds KV of %u "
			     "tokens but only %u tokens are known", r->req.n_tokens, r->n_given);
		return NULL;
	}
	OBJ_LOCK(self->t.lock);
	Py_BEGIN_ALLOW_THREADS
	ret = kv_prefix_cache_unfinished(self->pc, self->rt, &r->req);
	Py_END_ALLOW_THREADS
	self->t.epoch++;
	OBJ_UNLOCK(self->t.lock);
	if (ret)
		return KV_RAISE(ret, "cache_unfinished_req");
	Py_RETURN_NONE;
}

PyDoc_STRVAR(Prefix_match_prefix__doc__,
"match_prefix(tokens) -> MatchResult(pages, length, last_node)\n"
"\n"
"The longest cached prefix of tokens: the local tree, then the arbiter\n"
"for the rest of the chain (LOOKUP; hits enter the tree).  Nothing stays\n"
"locked: lock(last_node) to keep the pages, or use match() to start a\n"
"request.");

static PyObject *Prefix_match_prefix(PrefixObject *self, PyObject *tok_o)
{
	struct kv_radix_req req = { 0 };
	struct u32in tok;
	uint32_t *pages, tpp;
	long ret;
	size_t n;

	TREE_OPEN(&self->t, NULL);
	if (u32_from(tok_o, &tok, "tokens"))
		return NULL;
	if (tok.n > self->max_context) {
		PyErr_Format(PyExc_ValueError, "match_prefix: %zd tokens; max_context is %u",
			     tok.n, self->max_context);
		u32_release(&tok);
		return NULL;
	}
	tpp = kv_radix_tokens_per_page(self->t.tree);
	pages = tree_scratch(&self->t, tok.n / tpp);
	if (!pages) {
		u32_release(&tok);
		return NULL;
	}
	req.tokens = tok.p;
	OBJ_LOCK(self->t.lock);
	Py_BEGIN_ALLOW_THREADS
	req.slot = kv_req_alloc(self->scratch);
	ret = kv_prefix_match(self->pc, self->scratch, &req, (uint32_t)tok.n);
	if (ret >= 0) {
		for (n = 0; n < (size_t)ret / tpp; n++)
			pages[n] = kv_req_page(self->scratch, req.slot, n);
		kv_radix_unlock(self->t.tree, req.last_node);
	}
	kv_req_free(self->scratch, req.slot);
	Py_END_ALLOW_THREADS
	self->t.epoch++;
	OBJ_UNLOCK(self->t.lock);
	u32_release(&tok);
	if (ret < 0)
		return KV_RAISE((int)ret, "match_prefix");
	/* The node outlives this call only until the next eviction. */
	return match_result(&self->t, u32_copy(pages, ret / tpp), (size_t)ret,
			    req.last_node);
}

PyDoc_STRVAR(Prefix_insert__doc__,
"insert(tokens, pages) -> int\n"
"\n"
"Insert pages this handle OWNS (from alloc(), filled with the KV of\n"
"tokens, one page per tokens_per_page tokens, the last one may be\n"
"partial): the new full pages are PUBLISHed and enter the tree; pages of\n"
"what the tree had already, and the partial last page, are PUT.  Returns\n"
"the tokens the tree had already (SGLang's insert).");

static PyObject *Prefix_insert(PrefixObject *self, PyObject *args)
{
	struct kv_radix_req req = { 0 };
	PyObject *tok_o, *pg_o;
	struct u32in tok, pg;
	uint32_t tpp;
	size_t present = 0;
	long ret;

	TREE_OPEN(&self->t, NULL);
	if (!PyArg_ParseTuple(args, "OO:insert", &tok_o, &pg_o))
		return NULL;
	if (u32_from(tok_o, &tok, "tokens"))
		return NULL;
	if (u32_from(pg_o, &pg, "pages")) {
		u32_release(&tok);
		return NULL;
	}
	tpp = kv_radix_tokens_per_page(self->t.tree);
	if (tok.n > self->max_context || pg.n != (tok.n + tpp - 1) / tpp) {
		PyErr_Format(PyExc_ValueError, "insert: %zd tokens need %zd pages (got %zd), "
			     "at most max_context = %u tokens", tok.n, (tok.n + tpp - 1) / tpp,
			     pg.n, self->max_context);
		goto out;
	}
	/*
	 * The pages of what the tree has already are PUT as duplicates: they
	 * must be the caller's own, never the tree's (that would drop the
	 * tree's reference).
	 */
	{
		uint32_t *have = tree_scratch(&self->t, tok.n / tpp + 1);
		size_t i;

		if (!have)
			goto out;
		present = kv_radix_peek(self->t.tree, tok.p, tok.n, have);
		for (i = 0; i < present / tpp; i++) {
			if (have[i] == pg.p[i]) {
				PyErr_Format(PyExc_ValueError, "insert: page %u is the tree's own "
					     "page for tokens %zu..; pass pages this handle "
					     "allocated", have[i], i * tpp);
				goto out;
			}
		}
	}
	/* A request from the root that holds the caller's pages, finished. */
	req.tokens = tok.p;
	OBJ_LOCK(self->t.lock);
	Py_BEGIN_ALLOW_THREADS
	ret = kv_req_alloc(self->scratch);
	if (ret >= 0) {
		req.slot = (int)ret;
		ret = kv_radix_req_match(self->t.tree, self->scratch, &req, 0);
		if (ret >= 0 && tok.n) {
			kv_req_write_pages(self->scratch, req.slot, 0, pg.p, (uint32_t)tok.n);
			kv_req_set_len(self->scratch, req.slot, (uint32_t)tok.n);
			req.n_tokens = (uint32_t)tok.n;
		}
		if (ret >= 0)
			ret = kv_prefix_cache_finished(self->pc, self->scratch, &req);
		else
			kv_req_free(self->scratch, req.slot);
	}
	Py_END_ALLOW_THREADS
	self->t.epoch++;
	OBJ_UNLOCK(self->t.lock);
	if (ret < 0) {
		KV_RAISE((int)ret, "insert (the pages were released)");
		goto out;
	}
	u32_release(&tok);
	u32_release(&pg);
	return PyLong_FromSize_t(present);
out:
	u32_release(&tok);
	u32_release(&pg);
	return NULL;
}

static PyObject *Prefix_get_stats(PrefixObject *self, void *c)
{
	const struct kv_prefix_stats *s;

	TREE_OPEN(&self->t, NULL);
	s = kv_prefix_stats(self->pc);
	return Py_BuildValue("{sKsKsKsKsKsKsKsKsKsK}",
			     "local_hit_pages", (unsigned long long)s->local_hit_pages,
			     "remote_hit_pages", (unsigned long long)s->remote_hit_pages,
			     "lookups", (unsigned long long)s->lookups,
			     "published", (unsigned long long)s->published,
			     "dup_published", (unsigned long long)s->dup_published,
			     "local_dups", (unsigned long long)s->local_dups,
			     "allocated", (unsigned long long)s->allocated,
			     "alloc_evictions", (unsigned long long)s->alloc_evictions,
			     "put_pages", (unsigned long long)s->put_pages,
			     "errors", (unsigned long long)s->errors);
}

static PyObject *Prefix_page_key(PrefixObject *self, PyObject *arg)
{
	const struct kvs_key *k;
	struct kvs_key *d;
	uint32_t page;
	PyObject *a;
	npy_intp dims[1] = { 4 };

	TREE_OPEN(&self->t, NULL);
	if (u32_arg(arg, &page, "page"))
		return NULL;
	k = kv_prefix_page_key(self->pc, page);
	if (!k) {
		PyErr_Format(PyExc_IndexError, "page %u is outside the pool", page);
		return NULL;
	}
	a = PyArray_SimpleNew(1, dims, NPY_UINT64);
	if (a) {
		d = PyArray_DATA((PyArrayObject *)a);
		*d = *k;
	}
	return a;
}

static PyMethodDef Prefix_methods[] = {
	{ "match_prefix", (PyCFunction)Prefix_match_prefix, METH_O, Prefix_match_prefix__doc__ },
	{ "match", (PyCFunction)(void (*)(void))Prefix_match, METH_VARARGS | METH_KEYWORDS,
	  Prefix_match__doc__ },
	{ "reserve", (PyCFunction)Prefix_reserve, METH_VARARGS, Prefix_reserve__doc__ },
	{ "insert", (PyCFunction)Prefix_insert, METH_VARARGS, Prefix_insert__doc__ },
	{ "cache_finished_req", (PyCFunction)Prefix_cache_finished, METH_VARARGS,
	  PyDoc_STR("cache_finished_req(req, tokens=None)\n\nThe request is done: PUBLISH its "
		    "new full pages (a duplicate becomes the canonical page), insert them, give "
		    "back duplicates and the partial last page, unlock, free the row.  tokens: "
		    "prompt + output, for every token whose KV the row holds.") },
	{ "cache_unfinished_req", (PyCFunction)Prefix_cache_unfinished, METH_VARARGS,
	  Prefix_cache_unfinished__doc__ },
	{ "abort", (PyCFunction)Prefix_abort, METH_VARARGS,
	  PyDoc_STR("abort(req)\n\nDrop a request without caching anything; its own pages "
		    "are PUT.") },
	{ "page_key", (PyCFunction)Prefix_page_key, METH_O,
	  PyDoc_STR("page_key(page) -> key\n\nThe chained key of a page the tree holds.") },
	TREE_COMMON_METHODS,
	{ "close", (PyCFunction)Prefix_close, METH_NOARGS,
	  PyDoc_STR("close()\n\nPUT every page the tree holds and free it.") },
	{ "__enter__", self_enter, METH_NOARGS, NULL },
	{ "__exit__", call_close, METH_VARARGS, NULL },
	{ NULL }
};

static PyGetSetDef Prefix_getset[] = {
	TREE_COMMON_GETSET,
	{ "stats", (getter)Prefix_get_stats, NULL,
	  PyDoc_STR("Counters: local/remote hit pages, lookups, published, ..."), NULL },
	{ NULL }
};

static PyMemberDef Prefix_members[] = {
	{ "pool", T_OBJECT, offsetof(PrefixObject, pool), READONLY, NULL },
	{ "max_context", T_UINT, offsetof(PrefixObject, max_context), READONLY, NULL },
	{ NULL }
};

PyDoc_STRVAR(Prefix__doc__,
"PrefixCache(pool, salt=None, *, algo='sha256', extra=(), max_reqs=16,\n"
"            max_context=131072)\n"
"\n"
"libkv's prefix cache: a radix tree whose every page holds one arbiter\n"
"reference of this process, backed by the pool's arbiter (LOOKUP on a\n"
"local miss, PUBLISH of new full pages, PUT on eviction), with a request\n"
"table of max_reqs rows of max_context tokens.  The salt names the model:\n"
"keys under another salt never match.  One thread at a time per cache.");

static PyTypeObject Prefix_Type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvshare._kvshare.PrefixCache",
	.tp_basicsize = sizeof(PrefixObject),
	.tp_dealloc = (destructor)Prefix_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = Prefix__doc__,
	.tp_methods = Prefix_methods,
	.tp_getset = Prefix_getset,
	.tp_members = Prefix_members,
	.tp_init = (initproc)Prefix_init,
	.tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------ */
/* Request                                                             */

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

static PyTypeObject Request_Type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvshare._kvshare.Request",
	.tp_basicsize = sizeof(RequestObject),
	.tp_dealloc = (destructor)Request_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = PyDoc_STR("A running request of a PrefixCache (PrefixCache.match()).\n"
			    "Dropping it unfinished aborts it."),
	.tp_getset = Request_getset,
};

/* ------------------------------------------------------------------ */
/* C-side timings for the benchmark: the same calls without Python     */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

PyDoc_STRVAR(bench_match_prefix__doc__,
"_bench_match_prefix(radix, tokens, iters) -> int\n"
"\n"
"Nanoseconds for iters calls of kv_radix_match_prefix() from C (bench).");

static PyObject *bench_match_prefix(PyObject *mod, PyObject *args)
{
	struct kv_radix_match m;
	RadixObject *r;
	struct u32in tok;
	PyObject *tok_o;
	uint32_t *pages;
	uint32_t iters, i;
	uint64_t t0, t;

	if (!PyArg_ParseTuple(args, "O!OO&", &Radix_Type, &r, &tok_o, conv_u32, &iters))
		return NULL;
	TREE_OPEN(&r->t, NULL);
	if (u32_from(tok_o, &tok, "tokens"))
		return NULL;
	pages = PyMem_Malloc((tok.n + 1) * 4);
	if (!pages) {
		u32_release(&tok);
		return PyErr_NoMemory();
	}
	t0 = now_ns();
	for (i = 0; i < iters; i++)
		kv_radix_match_prefix(r->t.tree, tok.p, tok.n, pages, &m);
	t = now_ns() - t0;
	PyMem_Free(pages);
	u32_release(&tok);
	return PyLong_FromUnsignedLongLong(t);
}

PyDoc_STRVAR(bench_lookup_put__doc__,
"_bench_lookup_put(pool, keys, iters) -> int\n"
"\n"
"Nanoseconds for iters rounds of kv_lookup() + kv_put() from C (bench).");

static PyObject *bench_lookup_put(PyObject *mod, PyObject *args)
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
	if (keys_from(keys_o, &kb, &n))
		return NULL;
	if (check_batch(n, "keys")) {
		PyBuffer_Release(&kb);
		return NULL;
	}
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

/* ------------------------------------------------------------------ */
/* Module                                                              */

static PyMethodDef module_methods[] = {
	{ "_bench_match_prefix", bench_match_prefix, METH_VARARGS, bench_match_prefix__doc__ },
	{ "_bench_lookup_put", bench_lookup_put, METH_VARARGS, bench_lookup_put__doc__ },
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
	PyObject *m;

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
	if (PyStructSequence_InitType2(&MatchResult_Type, &match_desc) ||
	    PyModule_AddObjectRef(m, "MatchResult", (PyObject *)&MatchResult_Type))
		goto fail;
	if (add_type(m, &Arbiter_Type, "Arbiter") || add_type(m, &Pool_Type, "Pool") ||
	    add_type(m, &PoolView_Type, "PoolView") ||
	    add_type(m, &Hasher_Type, "BlockHasher") || add_type(m, &Node_Type, "Node") ||
	    add_type(m, &Radix_Type, "RadixCache") || add_type(m, &Prefix_Type, "PrefixCache") ||
	    add_type(m, &Request_Type, "Request"))
		goto fail;
	if (PyModule_AddIntConstant(m, "NO_PAGE", KVS_NO_PAGE) ||
	    PyModule_AddIntConstant(m, "MAX_BATCH", KVS_MAX_BATCH) ||
	    PyModule_AddIntConstant(m, "ABI_VERSION", KVS_ABI_VERSION))
		goto fail;
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
