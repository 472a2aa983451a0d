/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A hostile FUSE file system for the guest's tests, served over a raw
 * /dev/fuse descriptor by a thread of the test (no libfuse): one file,
 * HFUSE_FILE, that anyone may open, read and write (in the page cache:
 * the mount caches writes back), and one process, the watched one, that
 * the server never answers when it asks for the file's FLUSH, WRITE,
 * GETATTR or SETATTR, or a STATFS.  A task that waits for one of those
 * waits in the kernel, a FLUSH or a WRITE unkillably, until the
 * connection is aborted: what a client can do to a daemon it sends such a
 * descriptor to.  Everyone else is answered, so that an attacker can use
 * the file as any.
 *
 * The server counts whom it left waiting, by the pid the kernel gives
 * each request (the thread's id): the watched process's main thread, or
 * its other threads.  Must run as root (mount(2)).
 */
#ifndef HOSTILE_FUSE_H
#define HOSTILE_FUSE_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#define HFUSE_FILE	"file"

struct hfuse {
	char mnt[PATH_MAX];
	int dev_fd;			/* our /dev/fuse end (O_CLOEXEC) */
	unsigned int conn;		/* its name in /sys/fs/fuse/connections */
	pthread_t thread;
	bool running;
	atomic_int watch_pid;		/* the process never answered (0: none) */
	atomic_uint opens;		/* of the file */
	atomic_uint main_waits;		/* left unanswered: watch_pid itself */
	atomic_uint thread_waits;	/* ... its other threads */
};

/*
 * Mount the file system on the directory @mnt (which must exist) and
 * serve it.  0, or -errno with why in @why.
 */
int hfuse_mount(struct hfuse *f, const char *mnt, char *why, size_t len);
/*
 * Abort the connection through fusectl (mounting fusectl if need be):
 * every waiter gets an error at once.  Then detach the mount and end the
 * server.  0, or -errno.
 */
int hfuse_abort(struct hfuse *f);

#endif
