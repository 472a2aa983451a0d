/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Closing a client's descriptor off the event loop.  close() calls the
 * file's ->flush, and a file system served by a client (FUSE, mountable
 * by anyone in a user namespace) answers a flush when it likes: the
 * daemon's one thread must never be the one waiting.  So a descriptor
 * that may be foreign is handed to a closer thread, and a client may hold
 * only a bounded number of slots there: a slot is reserved before
 * recvmsg() is given room for a descriptor, and freed once the closer has
 * closed it.  With no slot free, recvmsg() gets no room and the kernel
 * drops what comes, with fput(), which calls no ->flush.
 */
#ifndef _KVSHARED_CLOSER_H
#define _KVSHARED_CLOSER_H

#include <stdint.h>

#define KVSD_CLOSE_SLOTS	64	/* descriptors held or being closed, in all */
#define KVSD_CLOSE_PER_UID	8	/* of which one uid's */

/* Start the closer thread.  0 or -errno. */
int kvsd_closer_start(void);
/*
 * A slot for one descriptor of @uid: its index, or -EAGAIN when all are
 * taken or @uid holds KVSD_CLOSE_PER_UID of them.
 */
int kvsd_closer_reserve(uint32_t uid);
/* Give back a reserved slot that received no descriptor. */
void kvsd_closer_unreserve(int slot);
/*
 * Dispose of @fd, received into @slot: a memfd (a shmem or hugetlbfs
 * file, which has no ->flush) is closed here and now, anything else by
 * the closer thread, which then frees the slot.
 */
void kvsd_closer_close(int slot, int fd);
/* Slots taken now (held, queued or being closed): for the metrics. */
unsigned int kvsd_closer_busy(void);

#endif /* _KVSHARED_CLOSER_H */
