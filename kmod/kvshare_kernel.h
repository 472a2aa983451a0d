/* SPDX-License-Identifier: GPL-2.0 */
/* What the module's ioctl (main.c) and io_uring (uring.c) paths share. */
#ifndef _KVSHARE_KERNEL_H
#define _KVSHARE_KERNEL_H

#include "core.h"

struct file;
struct io_uring_cmd;

int kvs_copy_in(struct kvs_call *call, void *dst, __u64 src, __u64 len);
int kvs_copy_out(struct kvs_call *call, __u64 dst, const void *src, __u64 len);
void kvs_file_cred(const struct file *file, struct kvs_cred *cred);
int kvs_uring_cmd(struct io_uring_cmd *ioucmd, unsigned int issue_flags);

#endif /* _KVSHARE_KERNEL_H */
