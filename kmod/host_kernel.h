/* SPDX-License-Identifier: GPL-2.0 */
#ifndef _KVS_HOST_KERNEL_H
#define _KVS_HOST_KERNEL_H

#include <linux/atomic.h>
#include <linux/errno.h>
#include <linux/list.h>
#include <linux/minmax.h>
#include <linux/mm.h>
#include <linux/mutex.h>
#include <linux/nospec.h>
#include <linux/overflow.h>
#include <linux/prefetch.h>
#include <linux/printk.h>
#include <linux/refcount.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/string.h>

#endif /* _KVS_HOST_KERNEL_H */
