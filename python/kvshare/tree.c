// SPDX-License-Identifier: MIT
/*
 * The part RadixCache and PrefixCache share (tree.h): scratch space,
 * Nodes, match results, and the common methods and properties.
 */
#include <errno.h>
#include <string.h>

#include "tree.h"

/* Room for @n pages in t->scratch. */
uint32_t *tree_scratch(TreeObject *t, size_t n)
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
PyObject *u32_copy(const uint32_t *src, size_t n)
{
	uint32_t *d;
	PyObject *a = new_u32(n, &d);

	if (a)
		memcpy(d, src, n * sizeof(*d));
	return a;
}

PyTypeObject MatchResult_Type;

static PyStructSequence_Field match_fields[] = {
	{ "pages", "numpy uint32 array: the matched pages, in order" },
	{ "length", "tokens matched (whole pages)" },
	{ "last_node", "the Node the match ends in (lock it to protect the pages)" },
	{ NULL }
};

PyStructSequence_Desc match_desc = {
	"kvshare.MatchResult",
	"match_prefix()'s result: (pages, length, last_node).",
	match_fields, 3,
};

PyObject *Node_new(TreeObject *t, struct kv_radix_node *n)
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
		kvpy_raise(ESTALE, "stale Node: the tree may have evicted it since match_prefix "
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

PyTypeObject Node_Type = {
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

PyObject *match_result(TreeObject *t, PyObject *pages, size_t len,
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
 * insert(tokens, pages)'s arguments, on an open tree: 0 with both held
 * (the caller releases them), or -1 with an exception.
 */
int insert_args(TreeObject *t, PyObject *args, struct u32in *tok, struct u32in *pg)
{
	PyObject *tok_o, *pg_o;

	TREE_OPEN(t, -1);
	if (!PyArg_ParseTuple(args, "OO:insert", &tok_o, &pg_o))
		return -1;
	if (u32_from(tok_o, tok, "tokens"))
		return -1;
	if (u32_from(pg_o, pg, "pages")) {
		u32_release(tok);
		return -1;
	}
	return 0;
}

/*
 * lock() and unlock(): @op on the tree's node behind Node @o, its result
 * in *@d; 0, or -1 with an exception (a closed tree, not a live Node).
 */
static int node_call(TreeObject *self, PyObject *o,
		     long (*op)(struct kv_radix *, struct kv_radix_node *), long *d)
{
	struct kv_radix_node *n;

	TREE_OPEN(self, -1);
	n = node_get(self, o);
	if (!n)
		return -1;
	TREE_CALL(self, *d = op(self->tree, n));
	return 0;
}

PyObject *Tree_lock_node(TreeObject *self, PyObject *o)
{
	long d;

	if (node_call(self, o, kv_radix_lock, &d))
		return NULL;
	((NodeObject *)o)->locks++;
	return PyLong_FromLong(d);
}

PyObject *Tree_unlock_node(TreeObject *self, PyObject *o)
{
	long d;

	if (node_call(self, o, kv_radix_unlock, &d))
		return NULL;
	if (d < 0)
		return kvpy_raise((int)d, "unlock: the node is not locked");
	if (((NodeObject *)o)->locks)
		((NodeObject *)o)->locks--;
	return PyLong_FromLong(d);
}

PyObject *Tree_evict(TreeObject *self, PyObject *arg)
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

PyObject *Tree_check(TreeObject *self, PyObject *Py_UNUSED(i))
{
	int ret;

	TREE_OPEN(self, NULL);
	TREE_CALL(self, ret = kv_radix_check(self->tree));
	if (ret)
		return kvpy_raise(ret, "check: the tree's counts or structure are inconsistent");
	Py_RETURN_NONE;
}

PyObject *Tree_peek(TreeObject *self, PyObject *tok_o)
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

PyObject *Tree_get_size(TreeObject *self, void *which)
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

PyObject *Tree_get_tpp(TreeObject *self, void *c)
{
	TREE_OPEN(self, NULL);
	return PyLong_FromUnsignedLong(kv_radix_tokens_per_page(self->tree));
}

PyObject *Tree_get_root(TreeObject *self, void *c)
{
	TREE_OPEN(self, NULL);
	return Node_new(self, kv_radix_root(self->tree));
}

PyObject *Tree_get_closed(TreeObject *self, void *c)
{
	return PyBool_FromLong(!self->tree);
}
