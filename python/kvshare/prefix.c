// SPDX-License-Identifier: MIT
/*
 * kvshare.PrefixCache: the tree wired to the arbiter (kv_prefix_cache),
 * with a request table whose rows are Requests (request.c).
 */
#include <errno.h>
#include <string.h>

#include "prefix.h"

static int Prefix_init(PrefixObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "pool", "salt", "algo", "extra", "max_reqs",
				  "max_context", "inflight_wait_ms", NULL };
	PyObject *pool_o, *salt_o = Py_None, *extra_o = Py_None, *wait_o = NULL;
	unsigned int wait_ms = 0;
	const char *algo_s = "sha256";
	uint32_t max_reqs = 16, max_context = 131072;
	struct kv_prefix_config cfg = { 0 };
	PoolObject *pool;
	size_t salt_len;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|O$sOO&O&O:PrefixCache", kwlist,
					 &Pool_Type, &pool_o, &salt_o, &algo_s, &extra_o,
					 conv_u32, &max_reqs, conv_u32, &max_context, &wait_o))
		return -1;
	if (wait_o && ms_arg(wait_o, &wait_ms, "inflight_wait_ms"))
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
	cfg.inflight_wait_ms = (int)wait_ms;
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
	self->inflight_wait_ms = wait_ms;
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
			return kvpy_raise((int)ret, "match: all %u request rows are in use "
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

/*
 * The Request @req_o of this cache, told the tokens @tok_o (None: no
 * change).  For @what (NULL: abort(), which needs no tokens) every token
 * the row holds KV of must be known; the error names @what, then @hint.
 * NULL with an exception.
 */
static RequestObject *req_to_cache(PrefixObject *self, PyObject *req_o, PyObject *tok_o,
				   const char *what, const char *hint)
{
	RequestObject *r = req_get(self, req_o);

	if (!r)
		return NULL;
	if (tok_o != Py_None && req_tokens(self, r, tok_o))
		return NULL;
	if (what && r->n_given < r->req.n_tokens) {
		PyErr_Format(PyExc_ValueError, "%s: the row holds KV of %u tokens but only "
			     "%u tokens are known%s", what, r->req.n_tokens, r->n_given, hint);
		return NULL;
	}
	return r;
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
	r = req_to_cache(self, req_o, tok_o, abort ? NULL : "cache_finished_req",
			 "; pass tokens=prompt + output");
	if (!r)
		return NULL;
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
	r = req_to_cache(self, req_o, tok_o, "cache_unfinished_req", "");
	if (!r)
		return NULL;
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
	struct u32in tok, pg;
	uint32_t tpp;
	size_t present = 0;
	long ret;

	if (insert_args(&self->t, args, &tok, &pg))
		return NULL;
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

#define PREFIX_STAT(m)	U64_FIELD(struct kv_prefix_stats, m)

static const struct u64_field prefix_stat_fields[] = {
	PREFIX_STAT(local_hit_pages),
	PREFIX_STAT(remote_hit_pages),
	PREFIX_STAT(lookups),
	PREFIX_STAT(published),
	PREFIX_STAT(dup_published),
	PREFIX_STAT(local_dups),
	PREFIX_STAT(allocated),
	PREFIX_STAT(alloc_evictions),
	PREFIX_STAT(put_pages),
	PREFIX_STAT(errors),
	PREFIX_STAT(claimed),
	PREFIX_STAT(claim_conflicts),
};

static PyObject *Prefix_get_stats(PrefixObject *self, void *c)
{
	TREE_OPEN(&self->t, NULL);
	return u64_dict(kv_prefix_stats(self->pc), prefix_stat_fields,
			ARRAY_SIZE(prefix_stat_fields));
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
	  PyDoc_STR("Counters: local/remote hit pages, lookups, published, ...,\n"
		    "claimed and claim_conflicts (inflight_wait_ms)."), NULL },
	{ NULL }
};

static PyMemberDef Prefix_members[] = {
	{ "pool", T_OBJECT, offsetof(PrefixObject, pool), READONLY, NULL },
	{ "max_context", T_UINT, offsetof(PrefixObject, max_context), READONLY, NULL },
	{ "inflight_wait_ms", T_UINT, offsetof(PrefixObject, inflight_wait_ms), READONLY,
	  PyDoc_STR("How long match() waits for pages others are computing (0: off).") },
	{ NULL }
};

PyDoc_STRVAR(Prefix__doc__,
"PrefixCache(pool, salt=None, *, algo='sha256', extra=(), max_reqs=16,\n"
"            max_context=131072, inflight_wait_ms=0)\n"
"\n"
"libkv's prefix cache: a radix tree whose every page holds one arbiter\n"
"reference of this process, backed by the pool's arbiter (LOOKUP on a\n"
"local miss, PUBLISH of new full pages, PUT on eviction), with a request\n"
"table of max_reqs rows of max_context tokens.  The salt names the model:\n"
"keys under another salt never match.  One thread at a time per cache.\n"
"\n"
"inflight_wait_ms > 0 turns on in-flight dedupe: match() waits up to that\n"
"long (GIL released) for prompt pages other processes have claimed and are\n"
"computing, and claims the full prompt pages it still misses, so that the\n"
"others wait for this process in turn.  The claims end when the pages are\n"
"published: call cache_unfinished_req() right after prefill (else waiters\n"
"wait out the decode), or put (abort()).  stats counts them: 'claimed',\n"
"'claim_conflicts' (claims refused, computed unclaimed).");

PyTypeObject Prefix_Type = {
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
