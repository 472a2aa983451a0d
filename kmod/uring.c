// SPDX-License-Identifier: GPL-2.0
/*
 * io_uring passthrough for /dev/kvshare: IORING_OP_URING_CMD with the
 * ioctl number as cmd_op and the command struct itself in the 80-byte
 * payload of a 128-byte SQE, as NVMe's passthrough shares its command set
 * between ioctl and uring_cmd.  The page commands are the ones that fit
 * and the ones worth batching: one SQE looks up or releases a whole
 * prefix, and the CQE carries the count result.
 *
 * Completions are posted synchronously from ->uring_cmd, except for a
 * LOOKUP with KVS_LOOKUP_WAIT that finds keys in flight: it parks (one
 * per file) until the claim it waits on ends, then looks up again in its
 * submitter's task (task work), where the keys and pages arrays are that
 * task's memory.  6.1 cannot cancel a uring_cmd, and ring teardown and
 * exec wait for every command, so a parked one always completes by its
 * deadline, and within a tick once its process is exiting.  A parked
 * command holds the file, so the file is never released under it.
 */
#include <linux/version.h>
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 8, 0)
#include <linux/io_uring/cmd.h>
#else
#include <linux/io_uring.h>
#endif
#include <linux/fs.h>
#include <linux/jiffies.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
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
 * Debian 12's 6.1.23+ has the 4-argument form (backported from 6.3), and
 * its task work callback takes issue_flags; 6.18 dropped res2.
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 1, 23)
#define KVS_TW_ARGS	struct io_uring_cmd *ioucmd, unsigned int issue_flags
#define KVS_TW_FLAGS	issue_flags
#else
#define KVS_TW_ARGS	struct io_uring_cmd *ioucmd
#define KVS_TW_FLAGS	0
#endif

static void kvs_uring_done(struct io_uring_cmd *ioucmd, ssize_t res,
			   ssize_t res2, unsigned int issue_flags)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 18, 0)
	io_uring_cmd_done(ioucmd, res, issue_flags);
#elif LINUX_VERSION_CODE >= KERNEL_VERSION(6, 1, 23)
	io_uring_cmd_done(ioucmd, res, res2, issue_flags);
#else
	io_uring_cmd_done(ioucmd, res, res2);
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

/*
 * sqe->uring_cmd_flags that io_uring hands on: 6.1 knows only
 * IORING_URING_CMD_FIXED (a registered buffer, which no command here
 * addresses, so it cannot mean what the submitter meant) and refuses
 * the rest itself; later kernels name theirs in IORING_URING_CMD_MASK.
 * The bits above the mask are io_uring's own, never the submitter's.
 */
#ifdef IORING_URING_CMD_MASK
#define KVS_URING_CMD_FLAGS	IORING_URING_CMD_MASK
#else
#define KVS_URING_CMD_FLAGS	IORING_URING_CMD_FIXED
#endif

/*
 * Are the payload's bytes from @from on zero?  Those past a command's
 * struct are reserved, as a reserved field is, so that the struct may
 * grow into them.
 */
static bool kvs_uring_zero_from(const u8 *raw, size_t from)
{
	return !memchr_inv(raw + from, 0, KVS_URING_PAYLOAD_MAX - from);
}

/*
 * The core's call for a command io_uring issues: the credentials the file
 * was opened with (as for the ioctl), the arrays in the submitter's
 * memory, and EAGAIN rather than sleep on a pool lock when issued inline.
 */
static void kvs_uring_call(struct kvs_call *call, struct kvs_cred *cred,
			   const struct io_uring_cmd *ioucmd, unsigned int issue_flags)
{
	kvs_file_call(ioucmd->file, call, cred);
	call->nonblock = !!(issue_flags & IO_URING_F_NONBLOCK);
}

/* How often a parked command looks whether its process is exiting. */
#define KVS_UWAIT_TICK_MS	20

/*
 * Is the task watched for the parked command going away (exiting, or
 * exec'ing), or its whole process (killed, exiting or exec'ing)?  Then
 * nobody will read the answer, and its exit or exec is waiting for it.
 * in_execve is a racy read of a bit field: a stale value only delays the
 * answer by a tick.
 */
static bool kvs_uwait_dying(struct task_struct *task)
{
	const struct signal_struct *sig = task->signal;

	return (READ_ONCE(task->flags) & PF_EXITING) || task->in_execve ||
	       (READ_ONCE(sig->flags) & SIGNAL_GROUP_EXIT) ||
	       READ_ONCE(sig->group_exec_task);
}

static unsigned long kvs_uwait_next(const struct kvs_uwait *uw)
{
	unsigned long tick = jiffies + msecs_to_jiffies(KVS_UWAIT_TICK_MS);

	return time_before(uw->expires, tick) ? uw->expires : tick;
}

static void kvs_uwait_tw(KVS_TW_ARGS);

/* Under uw->lock: have the submitter's task look again (kvs_uwait_tw()). */
static void kvs_uwait_fire(struct kvs_uwait *uw)
{
	uw->running = true;
	del_timer(&uw->timer);
	io_uring_cmd_complete_in_task(uw->cmd, kvs_uwait_tw);
}

/* From kvs_wake(), under a pool lock: the parked wait's claim ended. */
void kvs_uwait_wake(struct kvs_uwait *uw)
{
	spin_lock_bh(&uw->lock);
	if (uw->cmd && !uw->running && !kvs_client_parked(uw->cl))
		kvs_uwait_fire(uw);
	spin_unlock_bh(&uw->lock);
}

/* The claim's timeout, the deadline, or a tick to look at the process. */
static void kvs_uwait_timer(struct timer_list *t)
{
	struct kvs_uwait *uw = from_timer(uw, t, timer);

	spin_lock_bh(&uw->lock);
	if (uw->cmd && !uw->running) {
		if (time_after_eq(jiffies, uw->expires) || kvs_uwait_dying(uw->task))
			kvs_uwait_fire(uw);
		else
			mod_timer(&uw->timer, kvs_uwait_next(uw));
	}
	spin_unlock_bh(&uw->lock);
}

void kvs_uwait_init(struct kvs_uwait *uw, struct kvs_client *cl)
{
	spin_lock_init(&uw->lock);
	timer_setup(&uw->timer, kvs_uwait_timer, 0);
	uw->cl = cl;
}

/* At release: a parked command holds the file, so none is left. */
void kvs_uwait_fini(struct kvs_uwait *uw)
{
	WARN_ON_ONCE(uw->cmd);
	del_timer_sync(&uw->timer);
}

/*
 * Park: the core armed the file's parked wait on a claim that stays in
 * flight for @park_ms at most.  Called by the task that looked up, which
 * must not touch @uw after this: the command may complete at once.
 */
static void kvs_uwait_park(struct kvs_uwait *uw, u32 park_ms)
{
	unsigned long claim_end = jiffies + msecs_to_jiffies(park_ms) + 1;

	spin_lock_bh(&uw->lock);
	uw->expires = time_before(claim_end, uw->deadline) ? claim_end : uw->deadline;
	uw->running = false;
	/* A claim that ended since the lookup found nobody to wake. */
	if (!kvs_client_parked(uw->cl))
		kvs_uwait_fire(uw);
	else
		mod_timer(&uw->timer, kvs_uwait_next(uw));
	spin_unlock_bh(&uw->lock);
}

/* Free the file's slot; the caller then completes the command. */
static void kvs_uwait_release(struct kvs_uwait *uw)
{
	struct task_struct *task = uw->task;
	struct mm_struct *mm = uw->mm;

	spin_lock_bh(&uw->lock);
	del_timer(&uw->timer);
	uw->cmd = NULL;
	uw->running = false;
	uw->task = NULL;
	uw->mm = NULL;
	spin_unlock_bh(&uw->lock);
	put_task_struct(task);
	mmdrop(mm);
}

/* Post the CQE: res the hits (or -errno), res2 the keys still in flight. */
static void kvs_uwait_complete(struct kvs_uwait *uw, int res, u32 n_inflight,
			       unsigned int issue_flags)
{
	struct io_uring_cmd *ioucmd = uw->cmd;

	kvs_uwait_release(uw);
	kvs_uring_done(ioucmd, res, n_inflight, issue_flags);
}

/* LOOKUP the keys not hit yet, arming the parked wait if one is in flight. */
static int kvs_uwait_lookup(struct kvs_uwait *uw, unsigned int issue_flags,
			    u32 *n_inflight, u32 *park_ms)
{
	union kvs_cmd_buf buf;
	struct kvs_lookup *l = &buf.lookup;
	struct kvs_cred cred;
	struct kvs_call call;
	int ret;

	memset(&buf, 0, sizeof(buf));
	*l = uw->req;
	l->count -= uw->done;
	l->keys += (u64)uw->done * sizeof(struct kvs_key);
	l->pages += (u64)uw->done * sizeof(__u32);
	kvs_uring_call(&call, &cred, uw->cmd, issue_flags);
	call.park = 1;
	ret = kvs_cmd(uw->cl, KVS_IOC_LOOKUP, &buf, &call);
	if (ret)
		return ret;
	uw->done += l->n_hit;
	*n_inflight = l->n_inflight;
	*park_ms = call.park_ms;
	return 0;
}

/*
 * Look up, then park again while a key is in flight and the deadline is
 * ahead, or complete.  An error once hits were taken completes with the
 * hits (the rest may be looked up again to see the error).  From the
 * submission (@first), an error with nothing taken is returned instead,
 * so that EAGAIN is retried from io-wq.
 */
static int kvs_uwait_run(struct kvs_uwait *uw, unsigned int issue_flags, bool first)
{
	u32 n_inflight = 0, park_ms = 0;
	int ret;

	ret = kvs_uwait_lookup(uw, issue_flags, &n_inflight, &park_ms);
	if (!ret && n_inflight && time_before(jiffies, uw->deadline)) {
		kvs_uwait_park(uw, park_ms);
		return -EIOCBQUEUED;
	}
	/*
	 * Given up with the wait armed (deadline, or a failed copy-out).
	 * Only then: an EAGAIN from the inline submission armed nothing, and
	 * disarming would sleep on the very locks it found contended.
	 */
	if (kvs_client_parked(uw->cl))
		kvs_client_unpark(uw->cl);
	if (ret && first) {
		kvs_uwait_release(uw);
		return ret;
	}
	kvs_uwait_complete(uw, ret && !uw->done ? ret : uw->done, ret ? 0 : n_inflight,
			   issue_flags);
	return -EIOCBQUEUED;
}

/*
 * Task work of a fired wait.  It runs in the submitter's task unless that
 * task is past running task work (then a kworker runs it), and an exiting
 * task has no memory to write the pages to: give up then.  The hits of
 * earlier rounds are in pages[] and held by the file, which may outlive
 * the task (another thread, or a ring shared across fork, reads the CQE):
 * report them, as any error after hits does.
 */
static void kvs_uwait_tw(KVS_TW_ARGS)
{
	struct kvs_client *cl = ioucmd->file->private_data;
	struct kvs_file_ctx *ctx = kvs_client_wake_arg(cl);
	struct kvs_uwait *uw = &ctx->uwait;

	if ((current->flags & PF_EXITING) || current->mm != uw->mm ||
	    kvs_uwait_dying(uw->task)) {
		kvs_client_unpark(cl);
		kvs_uwait_complete(uw, uw->done ? uw->done : -ECANCELED, 0,
				   KVS_TW_FLAGS);
		return;
	}
	kvs_uwait_run(uw, KVS_TW_FLAGS, false);
}

/*
 * LOOKUP with KVS_LOOKUP_WAIT (see the uapi header): the wait's fields
 * follow the struct in @raw, the payload's one copy; take the file's one
 * slot and look up.
 */
static int kvs_uwait_submit(struct io_uring_cmd *ioucmd, const u8 *raw,
			    unsigned int issue_flags)
{
	struct kvs_client *cl = ioucmd->file->private_data;
	struct kvs_file_ctx *ctx = kvs_client_wake_arg(cl);
	struct kvs_uwait *uw = &ctx->uwait;
	struct kvs_uring_lookup w;

	if (!(issue_flags & IO_URING_F_CQE32) ||
	    _IOC_SIZE(ioucmd->cmd_op) != sizeof(struct kvs_lookup))
		return -EINVAL;
	BUILD_BUG_ON(sizeof(w) > KVS_URING_PAYLOAD_MAX);
	memcpy(&w, raw, sizeof(w));
	if (w.pad || !kvs_uring_zero_from(raw, sizeof(w)))
		return -EINVAL;
	if (!w.timeout_ms || w.timeout_ms > KVS_URING_WAIT_MAX_MS)
		return -ERANGE;

	spin_lock_bh(&uw->lock);
	if (uw->cmd) {
		spin_unlock_bh(&uw->lock);
		return -EBUSY;
	}
	uw->cmd = ioucmd;
	uw->running = true;
	spin_unlock_bh(&uw->lock);
	uw->req = w.lookup;
	uw->done = 0;
	uw->deadline = jiffies + msecs_to_jiffies(w.timeout_ms);
	/*
	 * Watch the submitter, in whose task the wait's task work runs: its
	 * process's main thread may have left long ago.  An io thread (an
	 * io-wq worker that retried it, or SQPOLL's) comes and goes on its
	 * own, so for those watch the process through its leader.
	 */
	uw->task = get_task_struct(current->flags & PF_IO_WORKER ?
				   current->group_leader : current);
	uw->mm = current->mm;
	mmgrab(uw->mm);
	return kvs_uwait_run(uw, issue_flags, true);
}

int kvs_uring_cmd(struct io_uring_cmd *ioucmd, unsigned int issue_flags)
{
	unsigned int op = ioucmd->cmd_op;
	size_t ksize = kvs_cmd_size(op), usize = _IOC_SIZE(op);
	u8 raw[KVS_URING_PAYLOAD_MAX];
	union kvs_cmd_buf buf;
	struct kvs_cred cred;
	struct kvs_call call;
	int ret;

	if (!ksize)
		return -ENOTTY;
	memset(&buf, 0, sizeof(buf));
	if (kvs_uring_result(op, &buf) < 0)
		return -EOPNOTSUPP;
	if (!(issue_flags & IO_URING_F_SQE128) || (ioucmd->flags & KVS_URING_CMD_FLAGS))
		return -EINVAL;
	if (usize > KVS_URING_PAYLOAD_MAX)
		return -E2BIG;
	/*
	 * The SQE lives in memory the submitter can still write: copy the
	 * payload once, and look only at the copy from here on.
	 */
	memcpy(raw, kvs_uring_payload(ioucmd), sizeof(raw));
	if (usize > ksize && memchr_inv(raw + ksize, 0, usize - ksize))
		return -E2BIG;
	memcpy(&buf, raw, min(usize, ksize));
	if (_IOC_NR(op) == _IOC_NR(KVS_IOC_LOOKUP) &&
	    (buf.lookup.flags & KVS_LOOKUP_WAIT))
		return kvs_uwait_submit(ioucmd, raw, issue_flags);
	if (!kvs_uring_zero_from(raw, usize))
		return -EINVAL;

	kvs_uring_call(&call, &cred, ioucmd, issue_flags);
	ret = kvs_cmd(ioucmd->file->private_data, op, &buf, &call);
	if (ret)
		return ret;	/* 0 or -errno: safe to return in 6.1 */
	ret = kvs_uring_result(op, &buf);
	if (!ret)
		return 0;
	/* 6.1 drops a positive return from io-wq: complete explicitly. */
	kvs_uring_done(ioucmd, ret, 0, issue_flags);
	return -EIOCBQUEUED;
}
