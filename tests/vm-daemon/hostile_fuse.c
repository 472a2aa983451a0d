// SPDX-License-Identifier: GPL-2.0
/*
 * The hostile FUSE server (hostile_fuse.h).  The protocol is the kernel's
 * <linux/fuse.h>: read one request from /dev/fuse, write one reply (or
 * none) that echoes its unique id.  Node 1 is the root directory, node 2
 * the file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <linux/fuse.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>

#include "hostile_fuse.h"

#define FILE_NODE	2
#define MAX_WRITE	4096
#define READ_BUF	(64u << 10)	/* at least FUSE_MIN_READ_BUFFER */
#define FUSECTL		"/sys/fs/fuse/connections"

static void reply(struct hfuse *f, const struct fuse_in_header *in, int error,
		  const void *out, size_t len)
{
	struct fuse_out_header oh = {
		.len = sizeof(oh) + (error ? 0 : len),
		.error = error,
		.unique = in->unique,
	};
	struct iovec iov[2] = { { &oh, sizeof(oh) }, { (void *)out, len } };

	/* ENOENT: the requester was interrupted; nothing waits any more. */
	if (writev(f->dev_fd, iov, error ? 1 : 2) < 0 && errno != ENOENT)
		perror("hostile_fuse: reply");
}

static void fill_attr(struct fuse_attr *a, uint64_t node)
{
	memset(a, 0, sizeof(*a));
	a->ino = node;
	a->nlink = 1;
	a->blksize = 4096;
	if (node == FILE_NODE) {
		a->mode = S_IFREG | 0666;
		a->size = 4096;
		a->blocks = 8;
	} else {
		a->mode = S_IFDIR | 0755;
		a->nlink = 2;
	}
}

static void do_init(struct hfuse *f, const struct fuse_in_header *in)
{
	const struct fuse_init_in *ii = (const void *)(in + 1);
	struct fuse_init_out io;

	memset(&io, 0, sizeof(io));
	io.major = FUSE_KERNEL_VERSION;
	io.minor = ii->minor < FUSE_KERNEL_MINOR_VERSION ? ii->minor :
		   FUSE_KERNEL_MINOR_VERSION;
	io.max_write = MAX_WRITE;
	/* Written pages stay dirty until whoever releases the file last. */
	io.flags = ii->flags & FUSE_WRITEBACK_CACHE;
	io.max_background = 16;
	io.congestion_threshold = 12;
	reply(f, in, 0, &io, sizeof(io));
}

static void do_lookup(struct hfuse *f, const struct fuse_in_header *in)
{
	const char *name = (const char *)(in + 1);
	struct fuse_entry_out eo;

	if (in->nodeid != FUSE_ROOT_ID || strcmp(name, HFUSE_FILE)) {
		reply(f, in, -ENOENT, NULL, 0);
		return;
	}
	memset(&eo, 0, sizeof(eo));
	eo.nodeid = FILE_NODE;
	eo.generation = 1;
	eo.entry_valid = 3600;
	/* No attribute caching: an fstat() of the file must ask us. */
	eo.attr_valid = 0;
	fill_attr(&eo.attr, FILE_NODE);
	reply(f, in, 0, &eo, sizeof(eo));
}

static void do_getattr(struct hfuse *f, const struct fuse_in_header *in)
{
	struct fuse_attr_out ao;

	memset(&ao, 0, sizeof(ao));
	ao.attr_valid = in->nodeid == FILE_NODE ? 0 : 3600;
	fill_attr(&ao.attr, in->nodeid);
	reply(f, in, 0, &ao, sizeof(ao));
}

static void do_open(struct hfuse *f, const struct fuse_in_header *in)
{
	struct fuse_open_out oo;

	memset(&oo, 0, sizeof(oo));
	oo.fh = in->nodeid;
	reply(f, in, 0, &oo, sizeof(oo));
	if (in->nodeid == FILE_NODE)
		atomic_fetch_add(&f->opens, 1);
}

/* Reads see zeros; writes all go in (and nowhere). */
static void do_read(struct hfuse *f, const struct fuse_in_header *in)
{
	static const char zeros[MAX_WRITE];
	const struct fuse_read_in *ri = (const void *)(in + 1);

	reply(f, in, 0, zeros, ri->size < sizeof(zeros) ? ri->size : sizeof(zeros));
}

static void do_write(struct hfuse *f, const struct fuse_in_header *in)
{
	const struct fuse_write_in *wi = (const void *)(in + 1);
	struct fuse_write_out wo = { .size = wi->size };

	reply(f, in, 0, &wo, sizeof(wo));
}

static void do_statfs(struct hfuse *f, const struct fuse_in_header *in)
{
	struct fuse_statfs_out so;

	memset(&so, 0, sizeof(so));
	so.st.bsize = 4096;
	so.st.frsize = 4096;
	so.st.namelen = 255;
	reply(f, in, 0, &so, sizeof(so));
}

/* Whether thread @tid belongs to process @pid. */
static bool thread_of(pid_t pid, pid_t tid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/task/%d", pid, tid);
	return !access(path, F_OK);
}

/*
 * Whether to leave @in unanswered: a request that can wait on the file
 * from the watched process, noted by who now waits for it.
 */
static bool left_waiting(struct hfuse *f, const struct fuse_in_header *in)
{
	pid_t pid = atomic_load(&f->watch_pid);

	switch (in->opcode) {
	case FUSE_GETATTR:
	case FUSE_SETATTR:
		if (in->nodeid != FILE_NODE)
			return false;
		break;
	case FUSE_FLUSH:
	case FUSE_STATFS:
	case FUSE_WRITE:
		break;
	default:
		return false;
	}
	if (pid && (pid_t)in->pid == pid)
		atomic_fetch_add(&f->main_waits, 1);
	else if (pid && thread_of(pid, in->pid))
		atomic_fetch_add(&f->thread_waits, 1);
	else
		return false;
	return true;
}

static void serve_one(struct hfuse *f, const struct fuse_in_header *in)
{
	if (left_waiting(f, in))
		return;
	switch (in->opcode) {
	case FUSE_INIT:
		do_init(f, in);
		break;
	case FUSE_LOOKUP:
		do_lookup(f, in);
		break;
	case FUSE_GETATTR:
	case FUSE_SETATTR:		/* as if done: nothing here changes */
		do_getattr(f, in);
		break;
	case FUSE_OPEN:
	case FUSE_OPENDIR:
		do_open(f, in);
		break;
	case FUSE_READ:
		do_read(f, in);
		break;
	case FUSE_WRITE:
		do_write(f, in);
		break;
	case FUSE_STATFS:
		do_statfs(f, in);
		break;
	case FUSE_FLUSH:
	case FUSE_RELEASE:
	case FUSE_RELEASEDIR:
		reply(f, in, 0, NULL, 0);
		break;
	case FUSE_FORGET:
	case FUSE_BATCH_FORGET:
	case FUSE_INTERRUPT:		/* the flush stays unanswered all the same */
	case FUSE_DESTROY:
		break;
	default:
		reply(f, in, -ENOSYS, NULL, 0);
		break;
	}
}

static void *serve(void *arg)
{
	static char buf[READ_BUF];
	struct hfuse *f = arg;
	ssize_t n;

	for (;;) {
		n = read(f->dev_fd, buf, sizeof(buf));
		if (n < 0 && (errno == EINTR || errno == ENOENT || errno == EAGAIN))
			continue;
		if (n < (ssize_t)sizeof(struct fuse_in_header))
			break;		/* ENODEV: aborted or unmounted */
		serve_one(f, (const struct fuse_in_header *)buf);
	}
	return NULL;
}

int hfuse_mount(struct hfuse *f, const char *mnt, char *why, size_t len)
{
	char opts[128];
	struct stat st;
	int ret;

	memset(f, 0, sizeof(*f));
	snprintf(f->mnt, sizeof(f->mnt), "%s", mnt);
	f->dev_fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (f->dev_fd < 0) {
		ret = -errno;
		snprintf(why, len, "/dev/fuse: %s", strerror(errno));
		return ret;
	}
	snprintf(opts, sizeof(opts),
		 "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", f->dev_fd);
	if (mount("hostile", mnt, "fuse", MS_NOSUID | MS_NODEV, opts)) {
		ret = -errno;
		snprintf(why, len, "mount %s: %s", mnt, strerror(errno));
		close(f->dev_fd);
		return ret;
	}
	ret = pthread_create(&f->thread, NULL, serve, f);
	if (ret) {
		snprintf(why, len, "pthread_create: %s", strerror(ret));
		umount2(mnt, MNT_DETACH);
		close(f->dev_fd);
		return -ret;
	}
	f->running = true;
	/* Answered: the file has not been opened yet. */
	if (stat(mnt, &st)) {
		ret = -errno;
		snprintf(why, len, "stat %s: %s", mnt, strerror(errno));
		hfuse_abort(f);
		return ret;
	}
	/* fusectl names a connection by the kernel's dev_t of the mount. */
	f->conn = (major(st.st_dev) << 20) | minor(st.st_dev);
	return 0;
}

static int write_abort(unsigned int conn)
{
	char path[96];
	int fd, ret = 0;

	snprintf(path, sizeof(path), FUSECTL "/%u/abort", conn);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT &&
	    !mount("fusectl", FUSECTL, "fusectl", 0, NULL))
		fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, "1", 1) != 1)
		ret = -errno;
	close(fd);
	return ret;
}

int hfuse_abort(struct hfuse *f)
{
	int ret;

	if (!f->running)
		return 0;
	ret = write_abort(f->conn);
	/*
	 * Aborted, the server's read() fails with ENODEV.  Else take the
	 * server out of its read(): closing the last /dev/fuse descriptor
	 * then aborts the connection as well.
	 */
	if (ret)
		pthread_cancel(f->thread);
	pthread_join(f->thread, NULL);
	close(f->dev_fd);
	umount2(f->mnt, MNT_DETACH);
	f->running = false;
	return ret;
}
