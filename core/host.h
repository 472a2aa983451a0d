/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The few kernel facilities the arbiter core uses, from the kernel itself
 * or from the user-space shim that stands in for them (the way the
 * kernel's tools/testing/radix-tree builds lib/ code for user space).
 */
#ifndef _KVS_HOST_H
#define _KVS_HOST_H

#ifdef __KERNEL__
#include "host_kernel.h"	/* kmod/, on Kbuild's include path */
#else
#include "host_user.h"
#endif

#endif /* _KVS_HOST_H */
