// SPDX-License-Identifier: GPL-2.0
/*
 * What one command of /dev/kvshare carries, whichever path brought it
 * (an ioctl in main.c, a uring_cmd in uring.c): the user memory its
 * arrays are copied through, and the rights it is judged by.  Both paths
 * call this file; it calls neither.
 */
#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/fs.h>
#include <linux/uaccess.h>

#include "core.h"
#include "kvshare_kernel.h"

int kvs_copy_in(struct kvs_call *call, void *dst, __u64 src, __u64 len)
{
	return copy_from_user(dst, u64_to_user_ptr(src), len) ? -EFAULT : 0;
}

int kvs_copy_out(struct kvs_call *call, __u64 dst, const void *src, __u64 len)
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
