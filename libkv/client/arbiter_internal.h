/* SPDX-License-Identifier: MIT */
/*
 * Inside libkv's arbiter client: one handle, four transports, chosen once
 * when the handle is opened and kept in arb->ops, as file_operations are:
 *
 *   ioctl        /dev/kvshare, every command an ioctl     (arbiter_dev.c)
 *   io_uring     /dev/kvshare, page commands as uring_cmd (arbiter_dev.c)
 *   daemon ring  kvshared, page commands on the shared ring (arbiter_sock.c)
 *   socket       kvshared, every command on the socket    (arbiter_sock.c)
 *
 * All take the command structs of <linux/kvshare.h> as they are.  Calls
 * flow one way: arbiter.c (the API) calls the transports, never the
 * reverse.
 */
#ifndef KV_ARBITER_INTERNAL_H
#define KV_ARBITER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <liburing.h>

#include <kvshare/arbiter.h>

struct kv_arbiter;

struct kv_transport_ops {
	const char *name;
	bool daemon;			/* kvshared: socket-only commands, peer_uid */
	/* Any command, as the ioctl takes it: 0 or -errno. */
	int (*call)(struct kv_arbiter *arb, unsigned long cmd, void *arg);
	/*
	 * A page command of @size bytes whose result (the count it ran for)
	 * the transport returns itself, as io_uring's CQE does; NULL: @call,
	 * then the count is read back from the struct.
	 */
	int (*page_cmd)(struct kv_arbiter *arb, unsigned int cmd, void *arg,
			size_t size);
	/*
	 * kv_lookup_wait() parked in the arbiter; NULL or -EOPNOTSUPP: wait
	 * by @wait_ready.  On any error the first *@n_held of @pages are hits
	 * the caller must put.
	 */
	int (*lookup_park)(struct kv_arbiter *arb, const struct kvs_key *keys,
			   uint32_t count, uint32_t *pages, int timeout_ms,
			   uint32_t *n_inflight, uint32_t *n_held);
	/*
	 * Sleep up to @ms for the claim the handle's latest LOOKUP waits on:
	 * 0, or -errno when the handle broke meanwhile (ETIMEDOUT).
	 */
	int (*wait_ready)(struct kv_arbiter *arb, int ms);
	void (*close)(struct kv_arbiter *arb);
};

extern const struct kv_transport_ops kv_ioctl_ops, kv_uring_ops;
extern const struct kv_transport_ops kv_ring_ops, kv_socket_ops;

struct kv_arbiter {
	const struct kv_transport_ops *ops;	/* set by the open, never changed */
	int fd;
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

/* arbiter_dev.c: sets arb->ops to kv_uring_ops or kv_ioctl_ops. */
int kv_dev_open(struct kv_arbiter *arb, const char *path, unsigned int flags);

/* arbiter_sock.c: sets arb->ops to kv_ring_ops or kv_socket_ops. */
/* $KVSHARE_CALL_TIMEOUT_MS, else KV_DEFAULT_TIMEOUT_MS: 0 or -EINVAL. */
int kv_timeout_from_env(unsigned int *ms);
int kv_sock_open(struct kv_arbiter *arb, const char *path, unsigned int flags);

#endif /* KV_ARBITER_INTERNAL_H */
