// SPDX-License-Identifier: MIT
/*
 * What every type of kvshare._kvshare uses: arguments converted and
 * range-checked (never silently truncated), result dicts, the
 * context-manager methods, and arbiter calls without the GIL.
 */
#include <errno.h>
#include <string.h>

#include "kvshare.h"

/*
 * A C-contiguous run of @n uint32 from @obj: any buffer of 4-byte integers
 * (numpy int32/uint32, array('i'/'I'), a PoolView is not one), or else a
 * sequence of ints (copied).  Negative values of a signed buffer are taken
 * as their uint32 bit pattern, as the C API would see them.
 */
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

/*
 * Each caller's exception as it was: a uint32 out of range overflows, a
 * uint64 out of range (a negative address) is a bad value.
 */
static void uint_range_error(const char *what, Py_ssize_t i, PyObject *it, size_t width)
{
	PyErr_Clear();
	if (width == sizeof(uint32_t))
		PyErr_Format(PyExc_OverflowError, "%s[%zd]: not in 0..4294967295", what, i);
	else
		PyErr_Format(PyExc_ValueError, "%s[%zd]: expected an int in 0..2**64-1, "
			     "got %R", what, i, it);
}

void *seq_uints(PyObject *seq, const char *what, size_t width, Py_ssize_t *n)
{
	Py_ssize_t i;
	void *out;

	*n = PySequence_Fast_GET_SIZE(seq);
	out = PyMem_Malloc((*n ? *n : 1) * width);
	if (!out) {
		PyErr_NoMemory();
		return NULL;
	}
	for (i = 0; i < *n; i++) {
		PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
		unsigned long long v;

		if (!PyLong_Check(it)) {
			PyErr_Format(PyExc_TypeError, "%s[%zd]: expected int, not %.100s",
				     what, i, Py_TYPE(it)->tp_name);
			goto fail;
		}
		v = PyLong_AsUnsignedLongLong(it);
		if ((v == (unsigned long long)-1 && PyErr_Occurred()) ||
		    (width == sizeof(uint32_t) && v > UINT32_MAX)) {
			uint_range_error(what, i, it, width);
			goto fail;
		}
		if (width == sizeof(uint32_t))
			((uint32_t *)out)[i] = (uint32_t)v;
		else
			((uint64_t *)out)[i] = v;
	}
	return out;
fail:
	PyMem_Free(out);
	return NULL;
}

int u32_from(PyObject *obj, struct u32in *in, const char *what)
{
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
	in->copy = seq_uints(seq, what, sizeof(*in->copy), &in->n);
	Py_DECREF(seq);
	if (!in->copy)
		return -1;
	in->p = in->copy;
	return 0;
}

void u32_release(struct u32in *in)
{
	if (in->have_view)
		PyBuffer_Release(&in->view);
	PyMem_Free(in->copy);
	in->have_view = 0;
	in->copy = NULL;
}

/* Keys: any C-contiguous buffer whose length is a multiple of 32 bytes. */
int keys_from(PyObject *obj, Py_buffer *view, Py_ssize_t *n)
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
int check_batch(Py_ssize_t n, const char *what)
{
	if (n < 1 || n > KVS_MAX_BATCH) {
		PyErr_Format(PyExc_ValueError, "%s: %zd entries; a batch holds 1..%d",
			     what, n, KVS_MAX_BATCH);
		return -1;
	}
	return 0;
}

/* keys_from() then check_batch(): the view is held only on success. */
int keys_batch_from(PyObject *obj, Py_buffer *view, Py_ssize_t *n, const char *what)
{
	if (keys_from(obj, view, n))
		return -1;
	if (check_batch(*n, what)) {
		PyBuffer_Release(view);
		return -1;
	}
	return 0;
}

PyObject *new_u32(Py_ssize_t n, uint32_t **data)
{
	npy_intp dims[1] = { n };
	PyObject *a = PyArray_SimpleNew(1, dims, NPY_UINT32);

	if (a)
		*data = PyArray_DATA((PyArrayObject *)a);
	return a;
}

PyObject *new_keys(Py_ssize_t n, struct kvs_key **data)
{
	npy_intp dims[2] = { n, 4 };
	PyObject *a = PyArray_SimpleNew(2, dims, NPY_UINT64);

	if (a)
		*data = PyArray_DATA((PyArrayObject *)a);
	return a;
}

/*
 * @o as a Python int (new reference): an int, or any integer type's value
 * through __index__, as CPython's own "I" format takes it, so that a page
 * or count read from a numpy array passes as it is.  Floats and strings
 * are refused, never rounded.
 */
static PyObject *int_arg(PyObject *o, const char *what, const char *expected)
{
	if (PyLong_Check(o))
		return Py_NewRef(o);
	if (PyIndex_Check(o))
		return PyNumber_Index(o);
	PyErr_Format(PyExc_TypeError, "%s: expected %s, not %.100s", what, expected,
		     Py_TYPE(o)->tp_name);
	return NULL;
}

/* A uint32 argument from a Python int, with a clear range error. */
int u32_arg(PyObject *o, uint32_t *out, const char *what)
{
	unsigned long long v;
	PyObject *i = int_arg(o, what, "int");

	if (!i)
		return -1;
	v = PyLong_AsUnsignedLongLong(i);
	Py_DECREF(i);
	if ((v == (unsigned long long)-1 && PyErr_Occurred()) || v > UINT32_MAX) {
		PyErr_Clear();
		PyErr_Format(PyExc_ValueError, "%s: %R is not in 0..4294967295", what, o);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

/* PyArg "O&" converters: ints range-checked, never silently truncated. */
int conv_u32(PyObject *o, void *p)
{
	return u32_arg(o, p, "argument") ? 0 : 1;
}

int conv_u64(PyObject *o, void *p)
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

/*
 * A duration in ms for @what: an int (not a bool) in 0..KV_MAX_TIMEOUT_MS,
 * which also keeps it within the C API's int.
 */
int ms_arg(PyObject *o, unsigned int *ms, const char *what)
{
	long long v;
	PyObject *i;

	if (PyBool_Check(o)) {
		PyErr_Format(PyExc_TypeError, "%s: expected an int of milliseconds, not bool",
			     what);
		return -1;
	}
	i = int_arg(o, what, "an int of milliseconds");
	if (!i)
		return -1;
	v = PyLong_AsLongLong(i);
	Py_DECREF(i);
	if (v == -1 && PyErr_Occurred()) {
		if (!PyErr_ExceptionMatches(PyExc_OverflowError))
			return -1;
		PyErr_Clear();
		v = -1;		/* reported below, with the range */
	}
	if (v < 0 || v > KV_MAX_TIMEOUT_MS) {
		PyErr_Format(PyExc_ValueError, "%s: %R ms is out of range; expected "
			     "0..%u (24 hours)", what, o, KV_MAX_TIMEOUT_MS);
		return -1;
	}
	*ms = (unsigned int)v;
	return 0;
}

/* The call deadline of @arb from a Python value: timeout_ms's setter and keyword. */
int set_timeout(struct kv_arbiter *arb, PyObject *o)
{
	unsigned int ms;
	int ret;

	if (!o) {
		PyErr_SetString(PyExc_AttributeError, "timeout_ms cannot be deleted (0: no "
				"deadline)");
		return -1;
	}
	if (ms_arg(o, &ms, "timeout_ms"))
		return -1;
	ret = kv_arbiter_set_timeout(arb, ms);
	if (ret) {
		KV_RAISE(ret, "timeout_ms = %u", ms);
		return -1;
	}
	return 0;
}

/* Why a handle no longer works: None, or the errno that broke it. */
PyObject *broken_errno(struct kv_arbiter *arb)
{
	int ret = kv_arbiter_broken(arb);

	if (!ret)
		Py_RETURN_NONE;
	return PyLong_FromLong(-ret);
}

/* An optional owner uid (None: libkv's default). */
int owner_arg(PyObject *o, uint32_t *owner, int *have)
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
			kvpy_raise(ret, "owner '%s' is neither a uid nor a known user", s);
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

/* Python speaks torch's names (<kvshare/kv_layout.h>'s table). */
const char *dtype_name(uint32_t dtype)
{
	const struct kv_dtype_name *d = kv_dtype_by_id(dtype);

	return d ? d->torch : "unknown";
}

int dtype_parse(const char *s, uint32_t *dtype)
{
	const struct kv_dtype_name *d = kv_dtype_by_name(s);
	char torch[64], names[64];

	if (!d) {
		PyErr_Format(PyExc_ValueError, "dtype '%s': expected one of %s (or %s)", s,
			     kv_dtype_choices(torch, sizeof(torch), 1),
			     kv_dtype_choices(names, sizeof(names), 0));
		return -1;
	}
	*dtype = d->dtype;
	return 0;
}

const char dtypes__doc__[] = PyDoc_STR(
"dtypes() -> tuple of (name, torch_name, alias, itemsize)\n"
"\n"
"The KV storage types kvshare knows, from <kvshare/kv_layout.h>: the short\n"
"name (kvshared's configuration, kvctl), torch's name (what Pool.dtype and\n"
"create_pool use), one more accepted spelling or None, and the bytes per\n"
"element.  Any of the names is accepted wherever a dtype is asked for.");

PyObject *dtypes(PyObject *mod, PyObject *unused)
{
	PyObject *t = PyTuple_New(KV_N_DTYPES);
	size_t i;

	if (!t)
		return NULL;
	for (i = 0; i < KV_N_DTYPES; i++) {
		const struct kv_dtype_name *d = &kv_dtype_names[i];
		PyObject *e = Py_BuildValue("(sszI)", d->name, d->torch, d->alias,
					    kv_dtype_size(d->dtype));

		if (!e) {
			Py_DECREF(t);
			return NULL;
		}
		PyTuple_SET_ITEM(t, i, e);
	}
	return t;
}

/* Hash algorithm by name. */
int algo_parse(const char *s, unsigned int *algo)
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
int salt_arg(PyObject *o, char **out, size_t *len)
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
void extras_free(struct extras *x)
{
	PyMem_Free(x->e);
	PyMem_Free(x->data);
	memset(x, 0, sizeof(*x));
}

int extras_arg(PyObject *o, struct extras *x)
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

PyObject *u64_dict(const void *base, const struct u64_field *fields, size_t n)
{
	PyObject *d = PyDict_New();
	size_t i;

	if (!d)
		return NULL;
	for (i = 0; i < n; i++) {
		PyObject *v;
		uint64_t x;

		memcpy(&x, (const char *)base + fields[i].off, sizeof(x));
		v = PyLong_FromUnsignedLongLong(x);
		if (!v || PyDict_SetItemString(d, fields[i].name, v)) {
			Py_XDECREF(v);
			Py_DECREF(d);
			return NULL;
		}
		Py_DECREF(v);
	}
	return d;
}

#define POOL_STAT(m)	U64_FIELD(struct kvs_pool_stats, m)

/* kvctl stats' counters, in its order (pool_id and flags are not counters). */
static const struct u64_field pool_stat_fields[] = {
	POOL_STAT(n_pages),
	POOL_STAT(n_free),
	POOL_STAT(n_owned),
	POOL_STAT(n_shared),
	POOL_STAT(n_cached),
	POOL_STAT(n_evictable),
	POOL_STAT(n_refs),
	POOL_STAT(n_held),
	POOL_STAT(n_files),
	POOL_STAT(allocs),
	POOL_STAT(alloc_fails),
	POOL_STAT(publishes),
	POOL_STAT(dup_publishes),
	POOL_STAT(lookups),
	POOL_STAT(hits),
	POOL_STAT(evictions),
	POOL_STAT(n_claimed),
	POOL_STAT(inflight_waits),
};

PyObject *stats_dict(const struct kvs_pool_stats *st)
{
	return u64_dict(st, pool_stat_fields, ARRAY_SIZE(pool_stat_fields));
}

PyObject *geom_dict(const struct kvs_geometry *g)
{
	return Py_BuildValue("{sIsIsIsIsssK}", "n_layers", g->n_layers,
			     "n_kv_heads", g->n_kv_heads, "head_dim", g->head_dim,
			     "tokens_per_page", g->tokens_per_page,
			     "dtype", dtype_name(g->dtype),
			     "page_bytes", (unsigned long long)g->page_bytes);
}
PyObject *self_enter(PyObject *self, PyObject *Py_UNUSED(ignored))
{
	return Py_NewRef(self);
}

PyObject *call_close(PyObject *self, PyObject *Py_UNUSED(args))
{
	return PyObject_CallMethod(self, "close", NULL);
}

int arb_call(struct kv_arbiter *arb, unsigned long cmd, void *arg)
{
	int ret;

	Py_BEGIN_ALLOW_THREADS
	ret = kv_arbiter_call(arb, cmd, arg);
	Py_END_ALLOW_THREADS
	return ret;
}

/* The same, counted in *@busy so that close() cannot free @arb meanwhile. */
int arb_call_b(Py_ssize_t *busy, struct kv_arbiter *arb, unsigned long cmd, void *arg)
{
	int ret;

	(*busy)++;
	ret = arb_call(arb, cmd, arg);
	(*busy)--;
	return ret;
}
