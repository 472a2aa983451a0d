// SPDX-License-Identifier: GPL-2.0
/*
 * The event channel's file (KVS_IOC_CHAN_OPEN on /dev/kvshare): an
 * anon-inode file around a core channel (core/core_chan.c).  read(2)
 * drains whole records, poll(2) says when one is pending, and ioctl(2)
 * takes the channel's PUT and PUBLISH and KVS_IOC_CHAN_STATS.  It is an
 * ordinary file, so io_uring reads and polls it too.  ->release closes the
 * channel, which gives back every reference and claim it holds, however
 * its holder ended.
 */
#include <linux/anon_inodes.h>
#include <linux/fcntl.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/poll.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "core.h"
#include "kvshare_kernel.h"

/* Records one read(2) moves at most: a page of them. */
#define KVS_CHAN_READ_BATCH	(PAGE_SIZE / sizeof(struct kvs_event))

struct kvs_chan_file {
	struct kvs_chan *ch;
	wait_queue_head_t wq;
};

/* Called by the core with the pool lock held, when a record is queued. */
static void kvs_chan_wake(void *arg)
{
	struct kvs_chan_file *cf = arg;

	wake_up_interruptible_poll(&cf->wq, EPOLLIN | EPOLLRDNORM);
}

static ssize_t kvs_chan_read_file(struct file *file, char __user *buf,
				  size_t len, loff_t *pos)
{
	struct kvs_chan_file *cf = file->private_data;
	size_t max = min_t(size_t, len / sizeof(struct kvs_event),
			   KVS_CHAN_READ_BATCH);
	struct kvs_event *ev;
	u32 n;
	int ret;

	if (!max)
		return -EINVAL;
	ev = kmalloc_array(max, sizeof(*ev), GFP_KERNEL);
	if (!ev)
		return -ENOMEM;
	for (;;) {
		n = kvs_chan_read(cf->ch, ev, max);
		if (n)
			break;
		ret = -EAGAIN;
		if (file->f_flags & O_NONBLOCK)
			goto out;
		ret = wait_event_interruptible(cf->wq, kvs_chan_ready(cf->ch));
		if (ret)
			goto out;
	}
	/*
	 * Records read are gone from the ring: one that cannot be delivered
	 * is lost, as a read(2) into a bad buffer loses a pipe's bytes.
	 * What it held stays held until PUT or close.
	 */
	ret = copy_to_user(buf, ev, n * sizeof(*ev)) ? -EFAULT : n * sizeof(*ev);
out:
	kfree(ev);
	return ret;
}

static __poll_t kvs_chan_poll(struct file *file, poll_table *pt)
{
	struct kvs_chan_file *cf = file->private_data;

	poll_wait(file, &cf->wq, pt);
	return kvs_chan_ready(cf->ch) ? EPOLLIN | EPOLLRDNORM : 0;
}

static int kvs_chan_release(struct inode *inode, struct file *file)
{
	struct kvs_chan_file *cf = file->private_data;

	kvs_chan_close(cf->ch);
	kfree(cf);
	return 0;
}

static long kvs_chan_stats_ioctl(struct kvs_chan_file *cf, void __user *uarg)
{
	struct kvs_chan_stats st;
	int ret;

	ret = copy_struct_from_user(&st, sizeof(st), uarg, _IOC_SIZE(KVS_IOC_CHAN_STATS));
	if (ret)
		return ret;
	ret = kvs_chan_stats(cf->ch, &st);
	if (ret)
		return ret;
	return copy_to_user(uarg, &st, sizeof(st)) ? -EFAULT : 0;
}

/* PUT and PUBLISH of what the records hold, as on /dev/kvshare. */
static long kvs_chan_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct kvs_chan_file *cf = file->private_data;
	void __user *uarg = (void __user *)arg;
	union kvs_cmd_buf buf;
	struct kvs_cred cred;
	struct kvs_call call;
	size_t usize;
	int ret;

	if (cmd == KVS_IOC_CHAN_STATS)
		return kvs_chan_stats_ioctl(cf, uarg);
	if (!kvs_chan_cmd_ok(cmd))
		return -ENOTTY;
	ret = kvs_ioctl_copy_in(cmd, uarg, &buf, &usize);
	if (ret)
		return ret;
	kvs_file_call(file, &call, &cred);
	ret = kvs_cmd(kvs_chan_client(cf->ch), cmd, &buf, &call);
	if (ret)
		return ret;
	/*
	 * The struct was probed writable above; PUBLISH's entries were
	 * written back (or its holdings undone) inside kvs_cmd().
	 */
	if (copy_to_user(uarg, &buf, usize))
		return -EFAULT;
	return 0;
}

static const struct file_operations kvs_chan_fops = {
	.owner		= THIS_MODULE,
	.read		= kvs_chan_read_file,
	.poll		= kvs_chan_poll,
	.release	= kvs_chan_release,
	.unlocked_ioctl	= kvs_chan_ioctl,
	.compat_ioctl	= compat_ptr_ioctl,
	.llseek		= noop_llseek,
};

bool kvs_is_chan_file(const struct file *file)
{
	return file->f_op == &kvs_chan_fops;
}

/*
 * KVS_IOC_CHAN_OPEN.  The fd is reserved first, so that running out of
 * fds fails before the channel exists, and installed only once its
 * number reached user space.
 */
long kvs_chan_open_ioctl(struct file *dev, void __user *uarg, unsigned int cmd)
{
	struct kvs_chan_open req;
	struct kvs_chan_file *cf;
	struct kvs_cred cred;
	struct file *file;
	int fd, ret;

	ret = copy_struct_from_user(&req, sizeof(req), uarg, _IOC_SIZE(cmd));
	if (ret)
		return ret;
	cf = kzalloc(sizeof(*cf), GFP_KERNEL_ACCOUNT);
	if (!cf)
		return -ENOMEM;
	init_waitqueue_head(&cf->wq);
	fd = get_unused_fd_flags(O_CLOEXEC);
	if (fd < 0) {
		kfree(cf);
		return fd;
	}
	kvs_file_cred(dev, &cred);
	ret = kvs_chan_open(&req, &cred, kvs_chan_wake, cf, &cf->ch);
	if (ret)
		goto fail_fd;
	file = anon_inode_getfile("[kvshare-chan]", &kvs_chan_fops, cf,
				  O_RDWR | O_CLOEXEC);
	if (IS_ERR(file)) {
		ret = PTR_ERR(file);
		goto fail_chan;
	}
	req.fd = fd;
	if (copy_to_user(uarg, &req, min_t(size_t, sizeof(req), _IOC_SIZE(cmd)))) {
		fput(file);		/* ->release closes the channel */
		put_unused_fd(fd);
		return -EFAULT;
	}
	fd_install(fd, file);
	return 0;
fail_chan:
	kvs_chan_close(cf->ch);
fail_fd:
	put_unused_fd(fd);
	kfree(cf);
	return ret;
}
