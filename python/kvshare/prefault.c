// SPDX-License-Identifier: MIT
/*
 * Pool.prefault(): the pool's pages entered in this process's page tables
 * ahead of use, without the GIL (kvshare.vllm's workers, at attach).
 *
 * Why: a process that reads pool pages it never touched takes a page fault
 * for them (the kernel maps up to 16 pages of 4 KiB a fault, fault-around),
 * and on the machines the engine benchmark runs on that costs about 1 us a
 * 4 KiB page: loading a 64 MiB prefix from pages another process wrote
 * cost 18 ms more in a fresh mapping than in one that had touched them,
 * more than the copy itself.  Every page is faulted once per process, so
 * doing it at attach takes the cost off the requests.
 *
 * MADV_POPULATE_WRITE (Linux 5.14) faults the pages in writable, as a write
 * would, without writing: the bytes are untouched, and pages nobody wrote
 * yet (holes of the memfd) are allocated, zeroed, as a first write
 * allocates them.  Older kernels answer EINVAL, which the caller reads as
 * "not supported here".
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pool.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE	23
#endif

const char Pool_prefault__doc__[] = PyDoc_STR(
"prefault(first, count)\n"
"\n"
"Enter pages [first, first + count) of this pool in this process's page\n"
"tables (madvise MADV_POPULATE_WRITE), without the GIL, so that the first\n"
"copy from or to them takes no page faults.  Bytes are not changed; pages\n"
"never written are allocated (zeroed).  ValueError for a device pool,\n"
"IndexError for a range outside the pool, OSError from madvise (EINVAL:\n"
"the kernel has no MADV_POPULATE_WRITE, before Linux 5.14).");

PyObject *Pool_prefault(PoolObject *self, PyObject *args)
{
	unsigned long long first, count;
	size_t pb, off, len, sys_page;
	int ret, err;
	char *base;

	if (!PyArg_ParseTuple(args, "KK:prefault", &first, &count))
		return NULL;
	POOL_OPEN(self, NULL);
	if (pool_is_device(self))
		return PyErr_Format(PyExc_ValueError, "prefault: pool '%U' is device memory; "
				    "it has no host mapping", self->name);
	if (first > self->info.n_pages || count > self->info.n_pages - first)
		return PyErr_Format(PyExc_IndexError, "prefault: pages [%llu, +%llu) are not "
				    "in the pool's %llu pages", first, count,
				    (unsigned long long)self->info.n_pages);
	if (!count)
		Py_RETURN_NONE;
	/* madvise takes whole system pages; the mapping is whole ones too. */
	sys_page = (size_t)sysconf(_SC_PAGESIZE);
	pb = self->info.geom.page_bytes;
	off = (size_t)first * pb / sys_page * sys_page;
	len = (size_t)(first + count) * pb - off;
	base = kv_page_addr(self->pool, 0);
	self->busy++;
	Py_BEGIN_ALLOW_THREADS
	ret = madvise(base + off, len, MADV_POPULATE_WRITE);
	err = errno;
	Py_END_ALLOW_THREADS
	self->busy--;
	if (ret) {
		PyObject *msg, *exc_args;

		msg = PyUnicode_FromFormat("prefault: madvise(MADV_POPULATE_WRITE) of pool "
					   "'%U' pages [%llu, +%llu): %s", self->name,
					   first, count, strerror(err));
		exc_args = msg ? Py_BuildValue("(iN)", err, msg) : NULL;
		if (exc_args) {
			PyErr_SetObject(PyExc_OSError, exc_args);
			Py_DECREF(exc_args);
		}
		return NULL;
	}
	Py_RETURN_NONE;
}
