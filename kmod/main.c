// SPDX-License-Identifier: GPL-2.0
/*
 * kvshare.ko: the kernel host of the kvshare arbiter.
 *
 * /dev/kvshare is a misc device; every open file description is one
 * arbiter client, and ->release frees it, dropping every page reference
 * and OWNED page it held, whichever way its process ended.  The arbiter
 * itself is the portable core (core_*.c); this file only moves command
 * structs and arrays across the user boundary and supplies the opener's
 * credentials, files and randomness.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/fcntl.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/hugetlb.h>
#include <linux/magic.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/poll.h>
#include <linux/random.h>
#include <linux/shmem_fs.h>
#include <linux/uaccess.h>

#include "core.h"
#include "kvshare_kernel.h"

static unsigned int max_pools = 64;
module_param(max_pools, uint, 0444);
MODULE_PARM_DESC(max_pools, "Pools that may exist at once (1..1024, default 64)");

static unsigned int max_pool_pages = KVS_MAX_POOL_PAGES;
module_param(max_pool_pages, uint, 0444);
MODULE_PARM_DESC(max_pool_pages, "Largest pool in pages (default and limit 4194304)");

/*
 * Per-user limits: what one uid that is not admin can take from everyone
 * else (0: no limit).  The defaults let one user own a few pools and hold
 * up to one maximal pool's worth of pages, while max_pools leaves room
 * for several such users.
 */
static unsigned int max_user_pools = 8;
module_param(max_user_pools, uint, 0444);
MODULE_PARM_DESC(max_user_pools,
		 "Pools one non-admin uid may own (0: no limit; default 8)");

static unsigned long long max_user_pool_pages = KVS_MAX_POOL_PAGES;
module_param(max_user_pool_pages, ullong, 0444);
MODULE_PARM_DESC(max_user_pool_pages,
		 "Pages of all the pools one non-admin uid owns (0: no limit; default 4194304)");

static unsigned long long max_user_held = KVS_MAX_POOL_PAGES;
module_param(max_user_held, ullong, 0444);
MODULE_PARM_DESC(max_user_held,
		 "Pages one non-admin uid's files hold, owned or referenced, in all pools (0: no limit; default 4194304)");

static unsigned long long max_user_held_bytes;
module_param(max_user_held_bytes, ullong, 0444);
MODULE_PARM_DESC(max_user_held_bytes,
		 "The same as max_user_held in bytes of pool memory (0: no limit; default 0)");

/*
 * In-flight dedupe: how long a claimed key (KVS_ALLOC_CLAIM) is reported
 * in flight to other files' LOOKUPs, so that a stalled owner delays the
 * others at most this long.  0 turns the reporting off.
 */
static unsigned int claim_timeout_ms = KVS_CLAIM_TIMEOUT_MS;
module_param(claim_timeout_ms, uint, 0444);
MODULE_PARM_DESC(claim_timeout_ms,
		 "How long a claimed key is reported in flight, ms (0: never; default 10000)");

/*
 * The device node's mode, in octal.  The default 0660, with the udev rule
 * that gives /dev/kvshare to group kvshare, lets the administrator choose
 * who may use the arbiter at all.  0666 (every local user) is allowed when
 * the administrator asks for it: pool modes and per-user limits still
 * hold.  Only read and write bits mean something on a device node; any
 * other bit, or 0 (which misc devices would turn into 0600), is refused
 * and the module does not load.
 */
static unsigned int dev_mode = 0660;

static int kvs_dev_mode_set(const char *val, const struct kernel_param *kp)
{
	unsigned int mode;
	int ret;

	ret = kstrtouint(val, 8, &mode);
	if (ret || !mode || (mode & ~0666)) {
		pr_err("dev_mode=%s: want octal read/write bits within 0666, e.g. 0660\n",
		       val);
		return -EINVAL;
	}
	*(unsigned int *)kp->arg = mode;
	return 0;
}

static int kvs_dev_mode_get(char *buf, const struct kernel_param *kp)
{
	return scnprintf(buf, PAGE_SIZE, "%#o\n", *(unsigned int *)kp->arg);
}

static const struct kernel_param_ops kvs_dev_mode_ops = {
	.set = kvs_dev_mode_set,
	.get = kvs_dev_mode_get,
};

module_param_cb(dev_mode, &kvs_dev_mode_ops, &dev_mode, 0444);
MODULE_PARM_DESC(dev_mode,
		 "Mode of /dev/kvshare in octal (read/write bits only; default 0660)");

/* groups_search(), which 6.1 does not export: @gi is sorted by set_groups(). */
static bool kvs_groups_search(const struct group_info *gi, kgid_t gid)
{
	unsigned int left = 0, right;

	if (!gi)
		return false;
	right = gi->ngroups;
	while (left < right) {
		unsigned int mid = left + (right - left) / 2;

		if (gid_gt(gid, gi->gid[mid]))
			left = mid + 1;
		else if (gid_lt(gid, gi->gid[mid]))
			right = mid;
		else
			return true;
	}
	return false;
}

/*
 * in_group_p() for the opener's credentials rather than current's (see
 * kvs_file_cred() in call.c): its fsgid, then its supplementary groups.
 */
int kvs_host_in_group(const struct kvs_cred *cred, __u32 gid)
{
	const struct cred *fc = cred->host_cred;
	kgid_t kgid = make_kgid(&init_user_ns, gid);

	if (!fc || !gid_valid(kgid))
		return 0;
	return gid_eq(kgid, fc->fsgid) || kvs_groups_search(fc->group_info, kgid);
}

/*
 * The seals of a memfd, or NULL if @file is none.  A memfd is a shmem or
 * hugetlbfs file on the kernel's internal mount of either (memfd_create(),
 * MFD_HUGETLB); mm/memfd.c finds its seals the same way, but does not
 * export memfd_fcntl().  A file of a mounted tmpfs or hugetlbfs is refused
 * here even though its inode has seals: they are F_SEAL_SEAL from birth,
 * so it could never be sealed against shrinking anyway.
 */
static unsigned int *kvs_memfd_seals(struct file *file)
{
	struct inode *inode = file_inode(file);

	if (!(inode->i_sb->s_flags & SB_KERNMOUNT))
		return NULL;
	if (shmem_file(file))
		return &SHMEM_I(inode)->seals;
#ifdef CONFIG_HUGETLBFS
	if (inode->i_sb->s_magic == HUGETLBFS_MAGIC)
		return &HUGETLBFS_I(inode)->seals;
#endif
	return NULL;
}

/*
 * Sealed against shrinking, so no holder can make another's mapping fault,
 * and against new seals, so no holder can add F_SEAL_FUTURE_WRITE and make
 * every later writable mmap fail; and writable, or the pool is useless.
 */
static bool kvs_mem_seals_ok(unsigned int seals)
{
	BUILD_BUG_ON(KVS_MEM_SEALS_REQUIRED != (F_SEAL_SEAL | F_SEAL_SHRINK));
	BUILD_BUG_ON(KVS_MEM_SEALS_FORBIDDEN != (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE));
	return (seals & KVS_MEM_SEALS_REQUIRED) == KVS_MEM_SEALS_REQUIRED &&
	       !(seals & KVS_MEM_SEALS_FORBIDDEN);
}

/*
 * Pool memory is a file the pool keeps open and hands to every attacher
 * (KVS_ATTACH_MEM_FD installs that same open file), so whatever the file
 * allows its creator, every attacher may do.  Only a memfd sealed against
 * shrinking and further sealing is taken (kvs_mem_seals_ok()): anyone
 * holding the file could otherwise ftruncate() it and make every other
 * process's mapping of it fault (SIGBUS).  Seals
 * are never removed, so once F_SEAL_SHRINK is seen the size checked after
 * it stays.  A kvshare or io_uring file is no memfd, so a pool never holds
 * a file that holds the pool (a reference cycle nothing would free).
 */
static const struct file_operations kvs_fops;

static int kvs_host_mem_check(struct file *file, __u64 bytes)
{
	unsigned int *seals = kvs_memfd_seals(file);

	if (!seals)
		return -EINVAL;
	if (!kvs_mem_seals_ok(READ_ONCE(*seals)))
		return -EPERM;
	if ((__u64)i_size_read(file_inode(file)) < bytes)
		return -ERANGE;
	return 0;
}

/*
 * Device memory (KVS_POOL_DEVICE_MEM): a driver's export handle, kept and
 * handed out, never mapped or read.  What file NVIDIA's driver exports for
 * a CUDA VMM POSIX-fd handle has not been checked on a machine with a GPU
 * (it is not a memfd), so the file is accepted by exclusion of what must
 * never be held: this module's own files and io_uring files (a pool that
 * holds a file holding the pool is a reference cycle nothing frees; io_uring
 * is told by its anon inode's name, as io_is_uring_fops() is not exported),
 * sockets (a unix socket may carry in-flight files, the pool's among them),
 * pipes (whose release waits for a lock a client can hold forever, copying
 * from a page of a file its FUSE server never reads in),
 * directories, and regular files that are not memfds (host memory takes
 * the host rules).  A memfd (the test stand-in's handles) takes the host
 * rules: sealed against shrinking, as long as the pool.
 */
static int kvs_device_mem_check(struct file *file, __u64 bytes)
{
	umode_t mode = file_inode(file)->i_mode;

	if (file->f_op == &kvs_fops || kvs_is_chan_file(file) || S_ISSOCK(mode) || S_ISDIR(mode) || S_ISFIFO(mode))
		return -EINVAL;
	if (!strcmp(file->f_path.dentry->d_name.name, "[io_uring]"))
		return -EINVAL;
	if (S_ISREG(mode))
		return kvs_host_mem_check(file, bytes);
	return 0;
}

int kvs_host_mem_get(int fd, __u64 bytes, enum kvs_mem_kind kind, void **mem)
{
	struct file *file = fget(fd);
	int ret;

	if (!file)
		return -EBADF;
	if (kind == KVS_MEM_DEVICE)
		ret = kvs_device_mem_check(file, bytes);
	else
		ret = kvs_host_mem_check(file, bytes);
	if (ret) {
		fput(file);
		return ret;
	}
	*mem = file;
	return 0;
}

void kvs_host_mem_dup(void *mem)
{
	get_file(mem);
}

void kvs_host_mem_put(void *mem)
{
	fput(mem);
}

__u64 kvs_host_random(void)
{
	return get_random_u64();
}

/*
 * In-flight dedupe's readiness: the core calls this, under a pool lock,
 * when a claim the file waits on ends (the poll wait, the parked io_uring
 * LOOKUP, or both).
 */
static void kvs_wake(void *arg)
{
	struct kvs_file_ctx *ctx = arg;

	wake_up_interruptible_poll(&ctx->wq, EPOLLIN | EPOLLRDNORM);
	kvs_uwait_wake(&ctx->uwait);
}

static int kvs_open(struct inode *inode, struct file *file)
{
	struct kvs_file_ctx *ctx = kzalloc(sizeof(*ctx), GFP_KERNEL_ACCOUNT);
	struct kvs_client *cl;

	if (!ctx)
		return -ENOMEM;
	cl = kvs_client_new();
	if (!cl) {
		kfree(ctx);
		return -ENOMEM;
	}
	init_waitqueue_head(&ctx->wq);
	kvs_uwait_init(&ctx->uwait, cl);
	kvs_client_set_waker(cl, kvs_wake, ctx);
	file->private_data = cl;
	return 0;
}

/*
 * A parked io_uring command holds the file, so none is left by now; the
 * context goes after the client, whose pool could still call kvs_wake().
 */
static int kvs_release(struct inode *inode, struct file *file)
{
	struct kvs_client *cl = file->private_data;
	struct kvs_file_ctx *ctx = kvs_client_wake_arg(cl);

	kvs_client_free(cl);
	kvs_uwait_fini(&ctx->uwait);
	/* No poller is left: the file is going, so no one is polling it. */
	kfree(ctx);
	return 0;
}

/*
 * Readable except while the wait armed by the file's latest LOOKUP with
 * KVS_LOOKUP_WAIT is pending: then the waiter looks its keys up again.
 * The waker clears the flag before it wakes the queue, and poll_wait()
 * queues us before we read it, so no wake is lost.
 */
static __poll_t kvs_poll(struct file *file, poll_table *pt)
{
	struct kvs_client *cl = file->private_data;
	struct kvs_file_ctx *ctx = kvs_client_wake_arg(cl);

	poll_wait(file, &ctx->wq, pt);
	return kvs_client_waiting(cl) ? 0 : EPOLLIN | EPOLLRDNORM;
}

/*
 * ATTACH with KVS_ATTACH_MEM_FD hands the pool memory over as a new fd.
 * The fd is reserved before the command runs, so that running out of fds
 * fails the call before it attaches anything, and installed only after
 * the struct carrying its number reached user space (as dma-heap does).
 */
static bool kvs_wants_mem_fd(unsigned int cmd, const union kvs_cmd_buf *buf)
{
	return _IOC_NR(cmd) == _IOC_NR(KVS_IOC_POOL_ATTACH) &&
	       (buf->attach.flags & KVS_ATTACH_MEM_FD);
}

/*
 * Write the results back.  If that fails the caller never learns what the
 * command did, so it is taken back (a CREATE's pool destroyed, an
 * ATTACH's client detached) and the memory fd is never installed: nothing
 * is left that the caller could not see.
 */
static int kvs_finish(struct kvs_client *cl, unsigned int cmd, union kvs_cmd_buf *buf,
		      const struct kvs_call *call, int mem_fd, void __user *uarg,
		      size_t usize)
{
	struct file *mem = call->mem_out;

	if (mem)
		buf->attach.mem_fd = mem_fd;
	if (copy_to_user(uarg, buf, usize)) {
		kvs_cmd_undo(cl, cmd, buf, call->cred);
		if (mem)
			fput(mem);
		if (mem_fd >= 0)
			put_unused_fd(mem_fd);
		return -EFAULT;
	}
	if (mem)
		fd_install(mem_fd, mem);
	else if (mem_fd >= 0)
		put_unused_fd(mem_fd);
	return 0;
}

static long kvs_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	void __user *uarg = (void __user *)arg;
	union kvs_cmd_buf buf;
	struct kvs_cred cred;
	struct kvs_call call;
	int mem_fd = -1;
	size_t usize;
	int ret;

	if (_IOC_TYPE(cmd) == KVS_IOC_MAGIC &&
	    _IOC_NR(cmd) == _IOC_NR(KVS_IOC_CHAN_OPEN) &&
	    _IOC_DIR(cmd) == (_IOC_READ | _IOC_WRITE))
		return kvs_chan_open_ioctl(file, uarg, cmd);
	ret = kvs_ioctl_copy_in(cmd, uarg, &buf, &usize);
	if (ret)
		return ret;

	if (kvs_wants_mem_fd(cmd, &buf)) {
		mem_fd = get_unused_fd_flags(O_CLOEXEC);
		if (mem_fd < 0)
			return mem_fd;
	}

	kvs_file_call(file, &call, &cred);
	ret = kvs_cmd(file->private_data, cmd, &buf, &call);
	if (ret) {
		if (mem_fd >= 0)
			put_unused_fd(mem_fd);
		return ret;
	}
	return kvs_finish(file->private_data, cmd, &buf, &call, mem_fd, uarg, usize);
}

static const struct file_operations kvs_fops = {
	.owner		= THIS_MODULE,
	.open		= kvs_open,
	.release	= kvs_release,
	.unlocked_ioctl	= kvs_ioctl,
	.poll		= kvs_poll,
	.compat_ioctl	= compat_ptr_ioctl,
	.uring_cmd	= kvs_uring_cmd,
	.llseek		= noop_llseek,
};

static struct miscdevice kvs_misc = {
	.minor	= MISC_DYNAMIC_MINOR,
	.name	= KVS_DEVICE_NAME,
	.fops	= &kvs_fops,
	/* .mode is dev_mode, set before registering */
};

static int __init kvs_init(void)
{
	struct kvs_limits limits = {
		.max_pools = max_pools,
		.max_pool_pages = max_pool_pages,
		.features = KVS_FEAT_MEM_FD | KVS_FEAT_URING_CMD | KVS_FEAT_DEVICE_MEM,
		.max_user_pools = max_user_pools,
		.max_user_pool_pages = max_user_pool_pages,
		.max_user_held = max_user_held,
		.max_user_held_bytes = max_user_held_bytes,
	};
	int ret;

	kvs_core_set_claim_timeout(claim_timeout_ms);
	ret = kvs_core_init(&limits);
	if (ret) {
		pr_err("bad limits: max_pools=%u max_pool_pages=%u max_user_pools=%u max_user_pool_pages=%llu max_user_held=%llu max_user_held_bytes=%llu\n",
		       max_pools, max_pool_pages, max_user_pools,
		       max_user_pool_pages, max_user_held, max_user_held_bytes);
		return ret;
	}
	kvs_misc.mode = dev_mode;
	ret = misc_register(&kvs_misc);
	if (ret)
		kvs_core_exit();
	return ret;
}

/* No file is open (fops.owner pins the module): only idle pools remain. */
static void __exit kvs_exit(void)
{
	misc_deregister(&kvs_misc);
	kvs_core_exit();
}

module_init(kvs_init);
module_exit(kvs_exit);
MODULE_DESCRIPTION("kvshare: cross-process arbiter of shared KV-cache pages");
MODULE_LICENSE("GPL");
