// SPDX-License-Identifier: MIT
/*
 * kvshare.Pool: kv_pool, attached and mapped: the page commands
 * (alloc/publish/lookup/put), quota, stats, and views of the memory.
 */
#include <errno.h>
#include <string.h>

#include "pool.h"

static int Pool_init(PoolObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "name", "arbiter", "ns", "owner", "no_uring", "timeout_ms",
				  NULL };
	PyObject *arb_o = Py_None, *owner_o = Py_None, *tmo_o = Py_None, *name_o;
	uint64_t ns = 0;
	const char *name, *path = NULL;
	int no_uring = 0, have, ret;
	uint32_t owner = 0;
	unsigned int tmo = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "U|O$O&OpO:Pool", kwlist, &name_o,
					 &arb_o, conv_u64, &ns, &owner_o, &no_uring, &tmo_o))
		return -1;
	if (tmo_o != Py_None && ms_arg(tmo_o, &tmo, "timeout_ms"))
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
			kvpy_raise(ret, "pool '%s': no such pool of the default owner "
				 "($KVSHARE_POOL_OWNER, else the daemon's uid, else root; "
				 "pass owner= for another), or no arbiter at %s", name,
				 path ? path : "libkv's default path");
		else if (ret == -ENOENT)
			kvpy_raise(ret, "pool '%s': uid %u has no pool of that name", name, owner);
		else if (ret == -ENODATA)
			kvpy_raise(ret, "pool '%s' has no memory to map", name);
		else
			KV_RAISE(ret, "pool '%s'", name);
		return -1;
	}
	self->arb = kv_pool_arbiter(self->pool);
	/* In range (ms_arg), so it cannot fail; opening ran under $KVSHARE_CALL_TIMEOUT_MS. */
	if (tmo_o != Py_None)
		kv_arbiter_set_timeout(self->arb, tmo);
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

PyDoc_STRVAR(Pool_alloc_claim__doc__,
"alloc_claim(keys) -> numpy.ndarray[uint32]\n"
"\n"
"alloc(len(keys)) that also claims the pages under their chained keys\n"
"((n, 4) uint64, 1..65536 keys): until this handle publishes or puts a\n"
"page (or closes, or dies, or the arbiter's claim timeout passes), other\n"
"handles' lookup(keys, wait_ms=...) wait for it instead of computing it\n"
"too.  Claim the pages a lookup missed, compute them, publish them under\n"
"the same keys.  EEXIST: a key exists already, published or claimed by\n"
"another handle: look it up (again), with a wait.  ENOSPC, EDQUOT as\n"
"alloc().  All or nothing.");

static PyObject *Pool_alloc_claim(PoolObject *self, PyObject *keys_o)
{
	uint32_t *pages;
	PyObject *out;
	Py_buffer kb;
	Py_ssize_t n;
	int ret;

	POOL_OPEN(self, NULL);
	if (keys_batch_from(keys_o, &kb, &n, "alloc_claim"))
		return NULL;
	out = new_u32(n, &pages);
	if (!out) {
		PyBuffer_Release(&kb);
		return NULL;
	}
	self->busy++;
	Py_BEGIN_ALLOW_THREADS
	ret = kv_alloc_claim(self->arb, kb.buf, (uint32_t)n, pages);
	Py_END_ALLOW_THREADS
	self->busy--;
	PyBuffer_Release(&kb);
	if (ret) {
		Py_DECREF(out);
		if (ret == -EEXIST)
			return kvpy_raise(ret, "alloc_claim of %zd keys: a key exists already, "
					  "published or claimed by another handle; nothing was "
					  "allocated: look the keys up again (wait_ms=...)", n);
		return KV_RAISE(ret, "alloc_claim of %zd pages", n);
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
			kvpy_raise(ret, "publish: a page is not OWNED by this handle, or the "
				 "parent %u is not held by it", parent);
		else if (ret == -EINVAL)
			kvpy_raise(ret, "publish: a page is listed twice");
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
"lookup(keys, wait_ms=0, *, inflight=False) -> numpy.ndarray[uint32]\n"
"\n"
"LOOKUP a key chain ((n, 4) uint64, 1..65536 keys): the pages of the\n"
"longest run of hits from the first key, one reference taken on each\n"
"(give them back with put()).  The result's length is the number of hits.\n"
"\n"
"wait_ms > 0: while the first key after the hits is claimed by another\n"
"handle that is computing it (alloc_claim()), wait for that claim to end\n"
"and look the rest up again, for up to wait_ms in all.  A claim ends in a\n"
"hit when its page is published, in a miss when it is put or its owner\n"
"dies (the wait then ends at once).  The GIL is released meanwhile; the\n"
"call cannot be interrupted (keep wait_ms short of what a page takes to\n"
"compute, a few seconds).  On kvshared each sleep is bounded by the call\n"
"deadline (timeout_ms), so a stopped daemon raises CallTimeout.  Threads\n"
"sharing a handle share its one wait and may wake each other early: give\n"
"each waiting thread its own Pool.\n"
"\n"
"inflight=True returns LookupResult(pages, n_inflight) instead: n_inflight\n"
"is how many keys after the hits were still claimed by others when the\n"
"wait gave up (0: none was, or the wait was not needed): compute those\n"
"unclaimed, or look again.  With wait_ms=0 it only reports them.");

/* kv_lookup(), or kv_lookup_wait() when asked to wait or to report claims. */
static int pool_lookup(PoolObject *self, const struct kvs_key *keys, uint32_t n,
		       uint32_t *pages, unsigned int wait_ms, int report,
		       uint32_t *n_inflight)
{
	int ret;

	self->busy++;
	Py_BEGIN_ALLOW_THREADS
	if (wait_ms || report)
		ret = kv_lookup_wait(self->arb, keys, n, pages, (int)wait_ms, n_inflight);
	else
		ret = kv_lookup(self->arb, keys, n, pages);
	Py_END_ALLOW_THREADS
	self->busy--;
	return ret;
}

static PyStructSequence_Field lookup_fields[] = {
	{ "pages", "numpy uint32 array: the pages of the leading hits, one reference each" },
	{ "n_inflight", "keys after the hits still claimed by others when the wait gave up" },
	{ NULL }
};

PyStructSequence_Desc lookup_desc = {
	"kvshare.LookupResult",
	"lookup(..., inflight=True)'s result: (pages, n_inflight).",
	lookup_fields, 2,
};

PyTypeObject LookupResult_Type;

/* The pages found, as an array, or LookupResult(pages, n_inflight) when @report. */
static PyObject *lookup_result(const uint32_t *pages, int n, int report,
			       uint32_t n_inflight)
{
	PyObject *arr, *cnt, *r;
	uint32_t *data;

	arr = new_u32(n, &data);
	if (!arr)
		return NULL;
	memcpy(data, pages, n * sizeof(*pages));
	if (!report)
		return arr;
	cnt = PyLong_FromUnsignedLong(n_inflight);
	r = cnt ? PyStructSequence_New(&LookupResult_Type) : NULL;
	if (!r) {
		Py_DECREF(arr);
		Py_XDECREF(cnt);
		return NULL;
	}
	PyStructSequence_SET_ITEM(r, 0, arr);
	PyStructSequence_SET_ITEM(r, 1, cnt);
	return r;
}

static PyObject *Pool_lookup(PoolObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "keys", "wait_ms", "inflight", NULL };
	PyObject *keys_o, *wait_o = NULL, *out;
	uint32_t *pages, n_inflight = 0;
	unsigned int wait_ms = 0;
	int report = 0, ret;
	Py_buffer kb;
	Py_ssize_t n;

	POOL_OPEN(self, NULL);
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O$p:lookup", kwlist, &keys_o, &wait_o,
					 &report))
		return NULL;
	if (wait_o && ms_arg(wait_o, &wait_ms, "lookup: wait_ms"))
		return NULL;
	if (keys_batch_from(keys_o, &kb, &n, "lookup"))
		return NULL;
	pages = PyMem_Malloc(n * sizeof(*pages));
	if (!pages) {
		PyBuffer_Release(&kb);
		return PyErr_NoMemory();
	}
	ret = pool_lookup(self, kb.buf, (uint32_t)n, pages, wait_ms, report, &n_inflight);
	PyBuffer_Release(&kb);
	if (ret < 0) {
		PyMem_Free(pages);
		if (wait_ms)
			return KV_RAISE(ret, "lookup of %zd keys, waiting up to %u ms", n,
					wait_ms);
		return KV_RAISE(ret, "lookup of %zd keys", n);
	}
	out = lookup_result(pages, ret, report, n_inflight);
	if (!out && ret) {
		/* The caller never saw the pages: give the references back. */
		self->busy++;
		Py_BEGIN_ALLOW_THREADS
		kv_put(self->arb, pages, (uint32_t)ret);
		Py_END_ALLOW_THREADS
		self->busy--;
	}
	PyMem_Free(pages);
	return out;
}

PyDoc_STRVAR(Pool_contains__doc__,
"contains(keys) -> int\n"
"\n"
"How many keys of a chain ((n, 4) uint64, 1..65536 keys), from the first,\n"
"lookup() would hit now, without taking anything: no reference, no page\n"
"numbers, no change to the eviction order or to the pool's lookups and\n"
"hits (KVS_LOOKUP_PEEK, one call).  The answer may be stale by the time\n"
"the pages are looked up: lookup() is what holds them.  It answers for\n"
"this handle's namespace, as lookup() does.  Against an arbiter older\n"
"than the peek it looks up and puts back, which counts the same.  The\n"
"GIL is released meanwhile; errors as for lookup().");

static PyObject *Pool_contains(PoolObject *self, PyObject *keys_o)
{
	Py_buffer kb;
	Py_ssize_t n;
	int ret;

	POOL_OPEN(self, NULL);
	if (keys_batch_from(keys_o, &kb, &n, "contains"))
		return NULL;
	self->busy++;
	Py_BEGIN_ALLOW_THREADS
	ret = kv_lookup_peek(self->arb, kb.buf, (uint32_t)n);
	Py_END_ALLOW_THREADS
	self->busy--;
	PyBuffer_Release(&kb);
	if (ret < 0)
		return KV_RAISE(ret, "contains of %zd keys", n);
	return PyLong_FromLong(ret);
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
		return kvpy_raise(ret, "put: a page is not held by this handle (as many times "
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
		return kvpy_raise(ret, "quota: %u is above the pool's max_pages_per_file (%u) "
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
		return kvpy_raise(ret, "stats: the pool's invariants are broken");
	if (ret)
		return KV_RAISE(ret, "stats");
	return stats_dict(&st);
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

static PyObject *Pool_get_timeout(PoolObject *self, void *c)
{
	POOL_OPEN(self, NULL);
	return PyLong_FromUnsignedLong(kv_arbiter_timeout(self->arb));
}

static int Pool_set_timeout(PoolObject *self, PyObject *v, void *c)
{
	POOL_OPEN(self, -1);
	return set_timeout(self->arb, v);
}

static PyObject *Pool_get_broken(PoolObject *self, void *c)
{
	POOL_OPEN(self, NULL);
	return broken_errno(self->arb);
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
	{ "alloc_claim", (PyCFunction)Pool_alloc_claim, METH_O, Pool_alloc_claim__doc__ },
	{ "publish", (PyCFunction)(void (*)(void))Pool_publish, METH_VARARGS | METH_KEYWORDS,
	  Pool_publish__doc__ },
	{ "lookup", (PyCFunction)(void (*)(void))Pool_lookup, METH_VARARGS | METH_KEYWORDS,
	  Pool_lookup__doc__ },
	{ "contains", (PyCFunction)Pool_contains, METH_O, Pool_contains__doc__ },
	{ "copy_pages", (PyCFunction)(void (*)(void))Pool_copy_pages,
	  METH_VARARGS | METH_KEYWORDS, Pool_copy_pages__doc__ },
	{ "prefault", (PyCFunction)Pool_prefault, METH_VARARGS, Pool_prefault__doc__ },
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
	{ "timeout_ms", (getter)Pool_get_timeout, (setter)Pool_set_timeout,
	  PyDoc_STR("The call deadline of this handle, in ms (0: none): a call to kvshared\n"
		    "that gets no answer in time raises CallTimeout (a TimeoutError,\n"
		    "errno ETIMEDOUT) and breaks the handle (see broken): close it, and\n"
		    "serve without sharing or open the pool again.  Starts at\n"
		    "$KVSHARE_CALL_TIMEOUT_MS, else 2000; 0..86400000.  The module\n"
		    "(/dev/kvshare) never blocks and keeps it unused."), NULL },
	{ "broken", (getter)Pool_get_broken, NULL,
	  PyDoc_STR("None while the handle works; else the errno that broke it:\n"
		    "ETIMEDOUT (a call timed out), ENOTCONN (the daemon went away) or\n"
		    "EPROTO.  Every call then raises ENOTCONN until it is reopened."), NULL },
	{ "is_device", (getter)Pool_get_is_device, NULL,
	  PyDoc_STR("True when the pool's memory is GPU device memory (kvshared's\n"
		    "memory=cuda): exported as kDLCUDA DLPack only, never to numpy."), NULL },
	{ NULL }
};

PyDoc_STRVAR(Pool__doc__,
"Pool(name, arbiter=None, *, ns=0, owner=None, no_uring=False,\n"
"     timeout_ms=None)\n"
"\n"
"Attach to pool name of owner (None: $KVSHARE_POOL_OWNER, else the daemon's\n"
"uid, else root) through the arbiter at path arbiter (None: libkv's\n"
"choice) with key namespace ns, and map its memory.  Every page this\n"
"handle holds is released when it is closed, or when the process ends.\n"
"timeout_ms sets the call deadline (see timeout_ms) once attached.");

PyTypeObject Pool_Type = {
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
