// SPDX-License-Identifier: GPL-2.0
/*
 * What one command of /dev/kvshare carries, whichever path brought it
 * (an ioctl in main.c or on a channel file in chan.c, a uring_cmd in
 * uring.c): an ioctl's struct copied in, the user memory its arrays are
 * copied through, and the rights it is judged by.  Every path calls this
 * file; it calls none.
 */
#include <linux/build_bug.h>
#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/fs.h>
#include <linux/minmax.h>
#include <linux/uaccess.h>

#include "core.h"
#include "kvshare_kernel.h"

static int kvs_copy_in(struct kvs_call *call, void *dst, __u64 src, __u64 len)
{
	return copy_from_user(dst, u64_to_user_ptr(src), len) ? -EFAULT : 0;
}

static int kvs_copy_out(struct kvs_call *call, __u64 dst, const void *src, __u64 len)
{
	return copy_to_user(u64_to_user_ptr(dst), src, len) ? -EFAULT : 0;
}

/*
 * Every command, ioctl or uring_cmd, is judged by the credentials of the
 * file's opener (file->f_cred), never by those of the calling thread: an
 * open /dev/kvshare is a capability, and passing it on (fork, SCM_RIGHTS,
 * an io_uring worker) delegates exactly its opener's rights.  So a setuid
 * program fed such an fd cannot be used as a confused deputy, acting on
 * pools with its own rights on behalf of whoever opened the file.
 */
void kvs_file_cred(const struct file *file, struct kvs_cred *cred)
{
	const struct cred *fc = file->f_cred;

	cred->uid = from_kuid_munged(&init_user_ns, fc->fsuid);
	cred->gid = from_kgid_munged(&init_user_ns, fc->fsgid);
	cred->admin = file_ns_capable(file, &init_user_ns, CAP_SYS_ADMIN);
	cred->groups = NULL;
	cred->n_groups = 0;
	cred->host_cred = fc;
}

/* The core's call for a command on @file: its opener's rights, arrays in user memory. */
void kvs_file_call(const struct file *file, struct kvs_call *call, struct kvs_cred *cred)
{
	kvs_file_cred(file, cred);
	*call = (struct kvs_call) {
		.cred = cred,
		.copy_in = kvs_copy_in,
		.copy_out = kvs_copy_out,
	};
}

/*
 * An ioctl's command struct into @buf, the same for /dev/kvshare and a
 * channel file: sized from the command (-ENOTTY where it has none), an
 * older, shorter struct zero-extended, a newer one's unknown tail refused
 * (E2BIG), and the write-back probed before the command takes effect, so
 * that a command never changes a pool and then fails to say so.
 * *@usize: the bytes to copy back.  0 or -errno.
 */
int kvs_ioctl_copy_in(unsigned int cmd, void __user *uarg, union kvs_cmd_buf *buf,
		      size_t *usize)
{
	size_t ksize = kvs_cmd_size(cmd);
	int ret;

	if (!ksize)
		return -ENOTTY;
	BUILD_BUG_ON(sizeof(*buf) > 256);
	ret = copy_struct_from_user(buf, ksize, uarg, _IOC_SIZE(cmd));
	if (ret)
		return ret;
	*usize = min_t(size_t, _IOC_SIZE(cmd), ksize);
	return copy_to_user(uarg, buf, *usize) ? -EFAULT : 0;
}
