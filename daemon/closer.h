/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Closing a client's descriptor off the event loop.  close() calls the
 * file's ->flush, and its last reference ->release, and a file system
 * served by a client (FUSE, mountable by anyone in a user namespace)
 * answers when it likes: the daemon's one thread must never be the one
 * waiting.  Nor may the kernel drop a client's file for it: a descriptor
 * that recvmsg() has no room for, or one still queued on a socket the
 * daemon closes, is released by the kernel on the daemon's thread too.
 *
 * So every descriptor a client sent, and every client socket that may
 * still hold some, goes to its uid's close queue, served by at most
 * KVSD_CLOSE_PER_UID closer threads of that uid (KVSD_CLOSE_THREADS in
 * all, past which a queue no closer serves still gets one): a closer
 * stuck on one user's file holds back only that user's queue.  Room in a queue is reserved before the descriptors exist
 * (kvsd_closeq_reserve()), so handing one over never fails; the server
 * stops reading the connections of a uid whose queue is long
 * (kvsd_closeq_len()) until the closers catch up.
 */
#ifndef _KVSHARED_CLOSER_H
#define _KVSHARED_CLOSER_H

#include <stdbool.h>
#include <stdint.h>

#define KVSD_CLOSE_THREADS	64	/* closer threads, the standing one too */
#define KVSD_CLOSE_PER_UID	8	/* of which serve one uid */
#define KVSD_CLOSE_QUEUE_UID	1024	/* queued for one uid: no more reading */
#define KVSD_CLOSE_QUEUE_MAX	16384	/* for all: no more accepting */
#define KVSD_RECV_FDS		253	/* SCM_MAX_FD: what one recvmsg() may bring */

struct kvsd_closeq;

/* Start the standing closer thread.  0 or -errno. */
int kvsd_closer_start(void);
/* @uid's queue, referenced (kvsd_closeq_put()); NULL: out of memory. */
struct kvsd_closeq *kvsd_closeq_get(uint32_t uid);
/* Drop a reference; the queue's reservations must be given back first. */
void kvsd_closeq_put(struct kvsd_closeq *q);
/* Room for @n more descriptors in @q: 0 or -ENOMEM. */
int kvsd_closeq_reserve(struct kvsd_closeq *q, unsigned int n);
/* Give back @n reserved and unused places. */
void kvsd_closeq_unreserve(struct kvsd_closeq *q, unsigned int n);
/*
 * Dispose of @fd in a place reserved in @q: a memfd (a shmem or hugetlbfs
 * file, which has no ->flush and releases nothing another process serves)
 * is closed here and now, anything else by @q's closers.
 */
void kvsd_closeq_close(struct kvsd_closeq *q, int fd);
/* Descriptors waiting in @q (the server reads no more past a limit). */
unsigned int kvsd_closeq_len(const struct kvsd_closeq *q);
/* Whether all queues together hold KVSD_CLOSE_QUEUE_MAX (no accepting). */
bool kvsd_closer_full(void);
/* Descriptors in close() now, and waiting in the queues: for the metrics. */
unsigned int kvsd_closer_busy(void);
unsigned int kvsd_closer_queued(void);

#endif /* _KVSHARED_CLOSER_H */
