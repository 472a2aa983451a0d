/* SPDX-License-Identifier: MIT */
/*
 * Trees: the part RadixCache (radix.c) and PrefixCache (prefix.c) share,
 * in tree.c: the object both start with, its Nodes, match results, and the
 * methods and properties both offer (TREE_COMMON_METHODS/GETSET).
 *
 * Node pointers are only valid while the node exists: a Node remembers the
 * tree's "epoch" (bumped by every call that may free nodes) and is usable
 * while the epoch is unchanged or while it holds a lock taken through it;
 * otherwise it raises instead of touching freed memory.
 */
#ifndef KVPY_TREE_H
#define KVPY_TREE_H

#include "kvshare.h"

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

typedef struct {
	PyObject_HEAD
	TreeObject *tree;		/* strong */
	struct kv_radix_node *node;
	uint64_t epoch;
	Py_ssize_t locks;		/* taken through this object */
} NodeObject;

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

uint32_t *tree_scratch(TreeObject *t, size_t n);
PyObject *u32_copy(const uint32_t *src, size_t n);
PyObject *Node_new(TreeObject *t, struct kv_radix_node *n);
PyObject *match_result(TreeObject *t, PyObject *pages, size_t len,
		       struct kv_radix_node *last);
int insert_args(TreeObject *t, PyObject *args, struct u32in *tok, struct u32in *pg);

PyObject *Tree_lock_node(TreeObject *self, PyObject *o);
PyObject *Tree_unlock_node(TreeObject *self, PyObject *o);
PyObject *Tree_evict(TreeObject *self, PyObject *arg);
PyObject *Tree_check(TreeObject *self, PyObject *Py_UNUSED(i));
PyObject *Tree_peek(TreeObject *self, PyObject *tok_o);
PyObject *Tree_get_size(TreeObject *self, void *which);
PyObject *Tree_get_tpp(TreeObject *self, void *c);
PyObject *Tree_get_root(TreeObject *self, void *c);
PyObject *Tree_get_closed(TreeObject *self, void *c);

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

#endif /* KVPY_TREE_H */
