/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvshared's shared rings (<linux/kvshare.h>, "The shared ring"): one
 * sealed memfd per connection that asked, carrying page commands without
 * a system call while the daemon polls, and the two doorbells that wake
 * whichever side sleeps.
 *
 * Below server.c: a ring belongs to an owner (the server's connection)
 * that it knows only as a pointer, and reaches back only through the ops
 * the server registers: run one request copied out of a ring, and drop an
 * owner whose ring holds garbage.  Nothing here knows about sockets,
 * credentials or the core.
 */
#ifndef _KVSHARED_RING_H
#define _KVSHARED_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/kvshare.h>

struct kvsd_ring;

struct kvsd_ring_ops {
	/*
	 * Run the request in @msg (copied out of @owner's ring, checked to
	 * be framed within @len bytes) and turn @msg into its reply, never
	 * longer: the reply's length.
	 */
	uint32_t (*handle)(void *owner, uint8_t *msg);
	/* Close @owner, whose ring held garbage (@why); it frees the ring. */
	void (*drop)(void *owner, const char *why);
};

/*
 * Serve rings from now on, polling each for up to @poll_us after it
 * carried a request (the loop's poller; 0: never poll, doorbells only).
 */
void kvsd_rings_start(const struct kvsd_ring_ops *ops, uint32_t poll_us);
/* Every ring must have been freed. */
void kvsd_rings_stop(void);

/* RING_SETUP's fields and size, against @max_size (max_conn_buffer): 0 or -errno. */
int kvsd_ring_check(const struct kvs_ring_setup *rs, uint64_t max_size);
/*
 * A ring of rs->size bytes for @owner, of @uid (@admin: no per-uid cap),
 * if the rings' share of @budget (max_buffer_total) has room: rings in
 * all at most half of it, one uid's an eighth (ENOBUFS).  On success
 * @fds holds the ring's memfd and the client's ends of its sq and cq
 * doorbells, in that order, for the reply, and @rs says so.
 */
int kvsd_ring_new(void *owner, uint32_t uid, bool admin, uint64_t budget,
		  struct kvs_ring_setup *rs, int fds[3], struct kvsd_ring **out);
void kvsd_ring_free(struct kvsd_ring *r);
/* Bytes of the ring's message area (what it counts against the budget). */
uint32_t kvsd_ring_size(const struct kvsd_ring *r);

/*
 * KVS_SOCK_RING_ENTER (@re checked by the caller): serve the pending
 * request, if any.  -EPROTO if it cannot be framed (@why says why; the
 * caller then closes the owner).
 */
int kvsd_ring_enter(struct kvsd_ring *r, struct kvs_ring_enter *re,
		    char *why, size_t why_len);

#endif /* _KVSHARED_RING_H */
