/* SPDX-License-Identifier: MIT */
/*
 * Inside libkv's arbiter client: one handle, two transports.  The device
 * transport (arbiter_dev.c) speaks ioctl and io_uring to /dev/kvshare;
 * the socket transport (arbiter_sock.c) speaks the kvshared protocol.
 * Both take the command structs of <linux/kvshare.h> as they are.
 * Calls flow one way: arbiter.c (the API) calls the transports, never
 * the reverse.
 */
#ifndef KV_ARBITER_INTERNAL_H
#define KV_ARBITER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <liburing.h>

#include <kvshare/arbiter.h>

struct kv_arbiter {
	int fd;
	bool daemon;
	bool uring;
	bool dead;			/* out of step with the daemon for good:
					   set under @lock, read atomically */
	int broken;			/* why (-errno), for kv_arbiter_broken() */
	uint32_t peer_uid;		/* the daemon's uid (SO_PEERCRED) */
	pthread_mutex_t lock;		/* one ring submission or socket exchange */
	struct io_uring ring;
	uint64_t seq;
	/*
	 * Deadlines (socket): 0 means none; what SO_*TIMEO are set to now.
	 * timeout_ms is written under @lock (atomically, for the one
	 * unlocked reader, kv_arbiter_timeout()).
	 */
	unsigned int timeout_ms;
	unsigned int rcvtimeo_ms, sndtimeo_ms;
	/* The daemon's shared ring (socket), NULL without one. */
	struct kvs_ring_ctl *sring;
	uint8_t *sring_area;
	uint32_t sring_size;
	size_t sring_map_len;
	int sq_bell, cq_bell;		/* its doorbells (eventfd, socket) */
	/* KVS_SOCK_WAIT_FD's bell: KV_WAIT_FD_UNSET until first needed. */
	pthread_mutex_t wait_lock;
	int wait_fd;
};

#define KV_WAIT_FD_UNSET	(-1)
#define KV_WAIT_FD_NONE		(-2)	/* the daemon has none: poll by LOOKUP */

/* arbiter_dev.c */
int kv_dev_open(struct kv_arbiter *arb, const char *path, unsigned int flags);
void kv_dev_close(struct kv_arbiter *arb);
int kv_dev_call(struct kv_arbiter *arb, unsigned long cmd, void *arg);
/* A page command: the CQE result when io_uring carries it, else 0/-errno. */
int kv_dev_page_cmd(struct kv_arbiter *arb, unsigned int cmd, void *arg,
		    size_t size);
/*
 * kv_lookup_wait() parked in the kernel; -EOPNOTSUPP: wait by poll().  On
 * any error the first *@n_held of @pages are hits the caller must put.
 */
int kv_dev_lookup_wait(struct kv_arbiter *arb, const struct kvs_key *keys,
		       uint32_t count, uint32_t *pages, int timeout_ms,
		       uint32_t *n_inflight, uint32_t *n_held);

/* arbiter_sock.c */
/* $KVSHARE_CALL_TIMEOUT_MS, else KV_DEFAULT_TIMEOUT_MS: 0 or -EINVAL. */
int kv_timeout_from_env(unsigned int *ms);
int kv_sock_open(struct kv_arbiter *arb, const char *path, unsigned int flags);
void kv_sock_close(struct kv_arbiter *arb);
int kv_sock_call(struct kv_arbiter *arb, unsigned long cmd, void *arg);
/*
 * kv_lookup_wait()'s sleep, up to @ms, for the claim its LOOKUP waits on:
 * 0, or -errno when the handle broke meanwhile (ETIMEDOUT).
 */
int kv_sock_wait_ready(struct kv_arbiter *arb, int ms);

#endif /* KV_ARBITER_INTERNAL_H */
