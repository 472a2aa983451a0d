// SPDX-License-Identifier: GPL-2.0
/*
 * io_uring passthrough for /dev/kvshare: IORING_OP_URING_CMD with the
 * ioctl number as cmd_op and the command struct itself in the 80-byte
 * payload of a 128-byte SQE, as NVMe's passthrough shares its command set
 * between ioctl and uring_cmd.  The page commands are the ones that fit
 * and the ones worth batching: one SQE looks up or releases a whole
 * prefix, and the CQE carries the count result.
 *
 * Completions are posted synchronously from ->uring_cmd, so nothing is
 * ever parked: a submitter that dies leaves no command pinning the file,
 * and its holdings go in ->release as the ioctl path's do.
 */
#include <linux/version.h>
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 8, 0)
#include <linux/io_uring/cmd.h>
#else
#include <linux/io_uring.h>
#endif
#include <linux/fs.h>
#include <linux/string.h>

#include "core.h"
#include "kvshare_kernel.h"

/* The payload moved behind the SQE in 6.4. */
static const void *kvs_uring_payload(struct io_uring_cmd *ioucmd)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 4, 0)
	return io_uring_sqe_cmd(ioucmd->sqe);
#else
	return ioucmd->cmd;
#endif
}

/*
 * Debian 12's 6.1.23+ has the 4-argument form (backported from 6.3);
 * 6.18 dropped res2.
 */
static void kvs_uring_done(struct io_uring_cmd *ioucmd, ssize_t res,
			   unsigned int issue_flags)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 18, 0)
	io_uring_cmd_done(ioucmd, res, issue_flags);
#elif LINUX_VERSION_CODE >= KERNEL_VERSION(6, 1, 23)
	io_uring_cmd_done(ioucmd, res, 0, issue_flags);
#else
	io_uring_cmd_done(ioucmd, res, 0);
#endif
}

/*
 * The commands io_uring carries, and what each puts in cqe->res.  Nothing
 * is ever written back to the SQE, so CREATE and ATTACH, whose results
 * must reach the caller (or be undone) and whose memory fd is installed
 * only then, stay ioctl-only, as does every other command not listed.
 */
static int kvs_uring_result(unsigned int op, const union kvs_cmd_buf *buf)
{
	switch (_IOC_NR(op)) {
	case _IOC_NR(KVS_IOC_LOOKUP):
		return buf->lookup.n_hit;
	case _IOC_NR(KVS_IOC_PUBLISH):
		return buf->publish.n_dup;
	case _IOC_NR(KVS_IOC_ALLOC):
	case _IOC_NR(KVS_IOC_PUT):
		return 0;
	}
	return -EOPNOTSUPP;
}

int kvs_uring_cmd(struct io_uring_cmd *ioucmd, unsigned int issue_flags)
{
	unsigned int op = ioucmd->cmd_op;
	size_t ksize = kvs_cmd_size(op), usize = _IOC_SIZE(op);
	union kvs_cmd_buf buf;
	struct kvs_cred cred;
	struct kvs_call call = {
		.cred = &cred,
		.copy_in = kvs_copy_in,
		.copy_out = kvs_copy_out,
		.nonblock = !!(issue_flags & IO_URING_F_NONBLOCK),
	};
	int ret;

	if (!ksize)
		return -ENOTTY;
	memset(&buf, 0, sizeof(buf));
	if (kvs_uring_result(op, &buf) < 0)
		return -EOPNOTSUPP;
	if (!(issue_flags & IO_URING_F_SQE128))
		return -EINVAL;
	if (usize > KVS_URING_PAYLOAD_MAX)
		return -E2BIG;
	/*
	 * The SQE lives in memory the submitter can still write: copy the
	 * payload once, and look only at the copy from here on.
	 */
	memcpy(&buf, kvs_uring_payload(ioucmd), usize);
	if (usize > ksize && memchr_inv((char *)&buf + ksize, 0, usize - ksize))
		return -E2BIG;
	/* Its second result, n_inflight, has no room in the CQE. */
	if (_IOC_NR(op) == _IOC_NR(KVS_IOC_LOOKUP) &&
	    (buf.lookup.flags & KVS_LOOKUP_WAIT))
		return -EOPNOTSUPP;

	kvs_file_cred(ioucmd->file, &cred);
	ret = kvs_cmd(ioucmd->file->private_data, op, &buf, &call);
	if (ret)
		return ret;	/* 0 or -errno: safe to return in 6.1 */
	ret = kvs_uring_result(op, &buf);
	if (!ret)
		return 0;
	/* 6.1 drops a positive return from io-wq: complete explicitly. */
	kvs_uring_done(ioucmd, ret, issue_flags);
	return -EIOCBQUEUED;
}
