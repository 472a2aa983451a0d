// SPDX-License-Identifier: MIT
/*
 * kvshare.Error, and the fork generation that tells a handle opened in
 * the parent from one of this process.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kvshare.h"

PyObject *KvError;		/* kvshare.Error(OSError) */
PyObject *KvTimeout;		/* kvshare.CallTimeout(Error, TimeoutError) */

/*
 * Bumped in the child of every fork().  A handle belongs to the process
 * that opened it: after fork() parent and child share its arbiter file
 * (or daemon connection), so the child using it would take or drop the
 * parent's holdings, and on the socket interleave its messages with the
 * parent's.  Objects remember the generation they were opened in.
 */
volatile unsigned long fork_gen;

void on_fork_child(void)
{
	fork_gen++;
}

int forked_raise(const char *what)
{
	kvpy_raise(EBADFD, "this %s was opened in the parent process before fork(): "
		 "open it again in this process", what);
	return -1;
}

/*
 * Raise kvshare.Error(errno, "<what>: <strerror>[ (<hint>)]") for the
 * negative errno @neg libkv returned; for -ETIMEDOUT kvshare.CallTimeout,
 * its subclass that is a TimeoutError too.  Returns NULL.
 */
PyObject *kvpy_raise(int neg, const char *fmt, ...)
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
		/* A missed deadline is caught by "except TimeoutError" too. */
		PyErr_SetObject(e == ETIMEDOUT ? KvTimeout : KvError, args);
		Py_DECREF(args);
	}
	return NULL;
}

/* strerror of @neg, and a hint for the errnos whose cause is not obvious. */
const char *kvpy_hint(int neg)
{
	switch (neg) {
	case -ENOSPC: return "no free or evictable page left in the pool";
	case -EDQUOT: return "this holder's quota (Pool.quota) or a per-user limit is reached";
	case -ENOENT: return "a page this pool handle does not hold, or no such pool";
	case -ENOTCONN: return "the kvshared daemon went away, or an earlier call on this "
			       "handle timed out (see .broken): open it again";
	case -ETIMEDOUT: return "no answer within the call deadline (timeout_ms): the "
				"daemon is stopped or wedged; this handle is broken now, "
				"close it and open it again";
	case -EBADFD: return "the handle is not attached to a pool";
	case -EACCES: return "the pool's mode forbids it";
	case -EPERM: return "not allowed for this user";
	}
	return strerror(-neg);
}
