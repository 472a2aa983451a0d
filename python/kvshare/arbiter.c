// SPDX-License-Identifier: MIT
/*
 * kvshare.Arbiter: a libkv arbiter handle (module or daemon), for pool
 * administration.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvshare.h"

typedef struct {
	PyObject_HEAD
	struct kv_arbiter *arb;
	PyObject *path;			/* str or None */
	Py_ssize_t busy;		/* calls running without the GIL */
	unsigned long gen;		/* fork_gen at open */
} ArbiterObject;

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
	static char *kwlist[] = { "path", "no_uring", "timeout_ms", NULL };
	PyObject *path = Py_None, *tmo_o = Py_None;
	const char *p = NULL;
	int no_uring = 0, ret;
	unsigned int tmo = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$pO:Arbiter", kwlist, &path,
					 &no_uring, &tmo_o))
		return -1;
	if (tmo_o != Py_None && ms_arg(tmo_o, &tmo, "timeout_ms"))
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
	/* In range (ms_arg), so it cannot fail; opening ran under $KVSHARE_CALL_TIMEOUT_MS. */
	if (tmo_o != Py_None)
		kv_arbiter_set_timeout(self->arb, tmo);
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
	char err[256];
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
			return kvpy_raise(EINVAL, "create_pool '%s': geometry or page count out "
					"of range (pages 1..%u, each dimension 1..65536)", name,
					KVS_MAX_POOL_PAGES);
		fd = kv_pool_memfd(name, pages * size, 0, err, sizeof(err));
		if (fd < 0)
			return KV_RAISE(fd, "create_pool '%s': host memory of %llu bytes: %s",
					name, (unsigned long long)(pages * size), err);
		pc.mem_fd = fd;
	}
	ret = arb_call_b(&self->busy, self->arb, KVS_IOC_POOL_CREATE, &pc);
	if (fd >= 0)
		close(fd);
	if (ret == -EINVAL)
		return kvpy_raise(ret, "create_pool '%s': invalid name (1..63 of [A-Za-z0-9._-]), "
				"geometry (each dimension 1..65536, page <= 1 GiB), page count, "
				"mode or quota", name);
	if (ret == -EEXIST)
		return kvpy_raise(ret, "create_pool '%s': you already own a pool of that name",
				name);
	if (ret == -EPERM || ret == -ERANGE)
		return kvpy_raise(ret, "create_pool '%s': the arbiter refused the pool's memory "
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
		return kvpy_raise(ret, "stats '%s': the pool's invariants are broken", name);
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

static PyObject *Arbiter_get_timeout(ArbiterObject *self, void *c)
{
	ARB_OPEN(self, NULL);
	return PyLong_FromUnsignedLong(kv_arbiter_timeout(self->arb));
}

static int Arbiter_set_timeout(ArbiterObject *self, PyObject *v, void *c)
{
	ARB_OPEN(self, -1);
	return set_timeout(self->arb, v);
}

static PyObject *Arbiter_get_broken(ArbiterObject *self, void *c)
{
	ARB_OPEN(self, NULL);
	return broken_errno(self->arb);
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
	{ "timeout_ms", (getter)Arbiter_get_timeout, (setter)Arbiter_set_timeout,
	  PyDoc_STR("The call deadline in ms (0: none), as Pool.timeout_ms: a call to\n"
		    "kvshared with no answer in time raises CallTimeout and breaks the\n"
		    "handle."), NULL },
	{ "broken", (getter)Arbiter_get_broken, NULL,
	  PyDoc_STR("None while the handle works, else the errno that broke it."), NULL },
	{ "closed", (getter)Arbiter_get_closed, NULL, PyDoc_STR("Whether close() ran."), NULL },
	{ NULL }
};

static PyMemberDef Arbiter_members[] = {
	{ "path", T_OBJECT, offsetof(ArbiterObject, path), READONLY,
	  PyDoc_STR("The path given (None: libkv's choice).") },
	{ NULL }
};

PyDoc_STRVAR(Arbiter__doc__,
"Arbiter(path=None, *, no_uring=False, timeout_ms=None)\n"
"\n"
"A handle on the kvshare arbiter for pool administration.  path names the\n"
"module's device or the kvshared socket; None lets libkv choose\n"
"($KVSHARE_ARBITER, /dev/kvshare, then the daemon's socket).  timeout_ms\n"
"sets the call deadline once open (None: $KVSHARE_CALL_TIMEOUT_MS, else 2000).");

PyTypeObject Arbiter_Type = {
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
