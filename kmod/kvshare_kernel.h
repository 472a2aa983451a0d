/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the module's ioctl (main.c) and io_uring (uring.c) paths share.
 * Calls flow one way: main.c -> uring.c -> call.c.
 */
#ifndef _KVSHARE_KERNEL_H
#define _KVSHARE_KERNEL_H

#include <linux/spinlock.h>
#include <linux/timer.h>
#include <linux/wait.h>

#include "core.h"

struct file;
struct io_uring_cmd;
struct mm_struct;
struct task_struct;

/*
 * A LOOKUP with KVS_LOOKUP_WAIT parked by io_uring (uring.c), one per
 * file.  @cmd is set from submission to completion; @running says a task
 * (the submitter, or its task work) is looking up, so neither a wake nor
 * the timer may queue the completion again.  Under @lock.
 */
struct kvs_uwait {
	spinlock_t lock;
	struct io_uring_cmd *cmd;
	bool running;
	struct kvs_client *cl;
	struct kvs_lookup req;		/* as submitted */
	__u32 done;			/* hits taken so far: req's first keys */
	unsigned long deadline;		/* jiffies: answer by then */
	unsigned long expires;		/* jiffies: look again by then */
	struct timer_list timer;
	struct task_struct *task;	/* watched for exit, referenced */
	struct mm_struct *mm;		/* submitter's, grabbed */
};

/* What the module keeps for each open /dev/kvshare beside its client. */
struct kvs_file_ctx {
	wait_queue_head_t wq;		/* poll readiness of KVS_LOOKUP_WAIT */
	struct kvs_uwait uwait;
};

/* call.c */
void kvs_file_cred(const struct file *file, struct kvs_cred *cred);
void kvs_file_call(const struct file *file, struct kvs_call *call, struct kvs_cred *cred);
int kvs_ioctl_copy_in(unsigned int cmd, void __user *uarg, union kvs_cmd_buf *buf,
		      size_t *usize);
/* uring.c */
int kvs_uring_cmd(struct io_uring_cmd *ioucmd, unsigned int issue_flags);
void kvs_uwait_init(struct kvs_uwait *uw, struct kvs_client *cl);
void kvs_uwait_wake(struct kvs_uwait *uw);
void kvs_uwait_fini(struct kvs_uwait *uw);
/* chan.c */
long kvs_chan_open_ioctl(struct file *dev, void __user *uarg, unsigned int cmd);
bool kvs_is_chan_file(const struct file *file);

#endif /* _KVSHARE_KERNEL_H */
