/* SPDX-License-Identifier: MIT */
/*
 * What every file of kvshare._kvshare shares: the Python and numpy
 * headers, kvshare.Error and the fork generation (errors.c), the argument
 * conversions and result dicts (util.c), and the type objects, which only
 * module.c uses by name.  A type's own structure is in its header (pool.h,
 * tree.h, prefix.h), for the files that look inside it.
 *
 * numpy's C API is a table filled by import_array() in module.c; the other
 * files reach it through the same symbol (NO_IMPORT_ARRAY).
 */
#ifndef KVPY_KVSHARE_H
#define KVPY_KVSHARE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <pythread.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL kvpy_ARRAY_API
#ifndef KVPY_IMPORT_ARRAY
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include <stdint.h>

#include <kvshare/arbiter.h>
#include <kvshare/blockhash.h>
#include <kvshare/kv_layout.h>
#include <kvshare/prefix.h>
#include <kvshare/req_table.h>

/* errors.c */
extern PyObject *KvError;		/* kvshare.Error(OSError) */
extern PyObject *KvTimeout;		/* kvshare.CallTimeout: ETIMEDOUT */
extern volatile unsigned long fork_gen;
void on_fork_child(void);
int forked_raise(const char *what);
PyObject *kvpy_raise(int neg, const char *fmt, ...);
const char *kvpy_hint(int neg);

#define KV_RAISE(ret, what, ...) \
	kvpy_raise((ret), what ": %s", ##__VA_ARGS__, kvpy_hint(ret))

/* util.c: inputs */
struct u32in {
	Py_buffer view;
	int have_view;
	uint32_t *copy;
	const uint32_t *p;
	Py_ssize_t n;
};

/*
 * The ints of the fast sequence @seq as *@n unsigned ints of @width bytes
 * (4 or 8) in a new PyMem buffer, or NULL with an exception naming @what[i].
 */
void *seq_uints(PyObject *seq, const char *what, size_t width, Py_ssize_t *n);
int u32_from(PyObject *obj, struct u32in *in, const char *what);
void u32_release(struct u32in *in);
int keys_from(PyObject *obj, Py_buffer *view, Py_ssize_t *n);
int check_batch(Py_ssize_t n, const char *what);
int keys_batch_from(PyObject *obj, Py_buffer *view, Py_ssize_t *n, const char *what);
PyObject *new_u32(Py_ssize_t n, uint32_t **data);
PyObject *new_keys(Py_ssize_t n, struct kvs_key **data);
int u32_arg(PyObject *o, uint32_t *out, const char *what);
int conv_u32(PyObject *o, void *p);
int conv_u64(PyObject *o, void *p);
int owner_arg(PyObject *o, uint32_t *owner, int *have);
int ms_arg(PyObject *o, unsigned int *ms, const char *what);
int set_timeout(struct kv_arbiter *arb, PyObject *o);
PyObject *broken_errno(struct kv_arbiter *arb);
const char *dtype_name(uint32_t dtype);
int dtype_parse(const char *s, uint32_t *dtype);
/* dtypes(): <kvshare/kv_layout.h>'s table, for the Python side. */
PyObject *dtypes(PyObject *mod, PyObject *unused);
extern const char dtypes__doc__[];
int algo_parse(const char *s, unsigned int *algo);
int salt_arg(PyObject *o, char **out, size_t *len);

struct extras {
	struct kv_extra *e;
	size_t n;
	char *data;
};

void extras_free(struct extras *x);
int extras_arg(PyObject *o, struct extras *x);

/* util.c: results, methods and calls every type uses */
/* A dict of uint64_t fields of a struct: their names and offsets. */
struct u64_field {
	const char *name;
	size_t off;
};
#define U64_FIELD(type, member)	{ #member, offsetof(type, member) }
#define ARRAY_SIZE(a)		(sizeof(a) / sizeof((a)[0]))
PyObject *u64_dict(const void *base, const struct u64_field *fields, size_t n);
PyObject *stats_dict(const struct kvs_pool_stats *st);
PyObject *geom_dict(const struct kvs_geometry *g);
PyObject *self_enter(PyObject *self, PyObject *Py_UNUSED(ignored));
PyObject *call_close(PyObject *self, PyObject *Py_UNUSED(args));
int arb_call(struct kv_arbiter *arb, unsigned long cmd, void *arg);
int arb_call_b(Py_ssize_t *busy, struct kv_arbiter *arb, unsigned long cmd, void *arg);

/* The per-object lock taken around calls that release the GIL. */
#define OBJ_LOCK(lock) do { \
	if (!PyThread_acquire_lock((lock), 0)) { \
		Py_BEGIN_ALLOW_THREADS \
		PyThread_acquire_lock((lock), 1); \
		Py_END_ALLOW_THREADS \
	} \
} while (0)
#define OBJ_UNLOCK(lock) PyThread_release_lock(lock)

/* The types, one file each (module.c readies them). */
extern PyTypeObject Arbiter_Type;	/* arbiter.c */
extern PyTypeObject Pool_Type;		/* pool.c */
extern PyTypeObject LookupResult_Type;	/* pool.c, a struct sequence */
extern PyStructSequence_Desc lookup_desc;
extern PyTypeObject PoolView_Type;	/* pool_view.c */
extern PyTypeObject Hasher_Type;	/* hasher.c */
extern PyTypeObject Node_Type;		/* tree.c */
extern PyTypeObject MatchResult_Type;	/* tree.c, a struct sequence */
extern PyStructSequence_Desc match_desc;
extern PyTypeObject Radix_Type;		/* radix.c */
extern PyTypeObject Prefix_Type;	/* prefix.c */
extern PyTypeObject Request_Type;	/* request.c */

/* bench.c */
PyObject *bench_match_prefix(PyObject *mod, PyObject *args);
PyObject *bench_lookup_put(PyObject *mod, PyObject *args);
extern const char bench_match_prefix__doc__[];
extern const char bench_lookup_put__doc__[];

/* devcopy.c: device-to-device copies on a stream (engine glue) */
PyObject *cuda_copy2d(PyObject *mod, PyObject *args, PyObject *kw);
PyObject *cuda_synchronize(PyObject *mod, PyObject *args, PyObject *kw);
extern const char cuda_copy2d__doc__[];
extern const char cuda_synchronize__doc__[];
PyObject *cuda_pointer_info(PyObject *mod, PyObject *arg);
PyObject *cuda_host_register(PyObject *mod, PyObject *args, PyObject *kw);
PyObject *cuda_host_unregister(PyObject *mod, PyObject *args, PyObject *kw);
PyObject *cuda_event(PyObject *mod, PyObject *args, PyObject *kw);
extern const char cuda_pointer_info__doc__[], cuda_host_register__doc__[],
	cuda_host_unregister__doc__[], cuda_event__doc__[];

#endif /* KVPY_KVSHARE_H */
