/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvshared: the kvshare daemon.  It owns the memory of the pools it is
 * configured with, creates those pools in /dev/kvshare when the module is
 * loaded, and otherwise serves the whole arbiter protocol on a unix socket
 * with the arbiter core linked in (build/libkvcore.a).  It also exports
 * Prometheus metrics.
 *
 * Shared declarations of pools.c, mem.c, mem_cuda.c and metrics.c.
 * Parsing lives in config.h, the arbiter socket in server.h (its files:
 * conn.h), the log in log.h and the event loop in loop.h.  Calls go one
 * way, down:
 *   main.c -> metrics.c -> server.c (sock_cmd.c, conn.c, accept.c, user.c)
 *   -> ring.c -> remote/tier.c -> pools.c -> mem.c -> mem_cuda.c
 * (each may also call any file further down), and every one of them may
 * call config.c (names, sizes and addresses), listen.c, loop.c and log.c,
 * which call nothing above them (listen.c and loop.c only log.c).  The
 * remote tier's own files sit under remote/tier.c (metrics.c calls
 * remote/metrics.c): remote/tier.c -> remote/thread.c -> remote/cluster.c ->
 * remote/conn.c, and remote/page.c; remote/config.c beside config.c.
 */
#ifndef _KVSHARED_H
#define _KVSHARED_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <linux/kvshare.h>

#include "config.h"
#include "log.h"
#include "loop.h"

struct kvs_call;
struct kvs_client;

#define ARRAY_SIZE(a)	(sizeof(a) / sizeof((a)[0]))

/* Where the arbiter runs. */
enum kvsd_mode {
	KVSD_MODE_NONE,			/* not decided yet */
	KVSD_MODE_SOCKET,		/* the core in this process, served on the socket */
	KVSD_MODE_MODULE,		/* /dev/kvshare; clients use it directly */
};

/* The daemon as a whole; one instance, built by main(). */
struct kvsd {
	struct kvsd_config *cfg;
	enum kvsd_mode mode;
	int dev_fd;			/* module mode: our own /dev/kvshare file */
	struct kvs_client *self;	/* socket mode: the daemon's own client */
	struct kvsd_pool *pools;	/* the pools this daemon created */
};

/*
 * A command on the daemon's own behalf (socket mode: the core with the
 * daemon's admin client; module mode: an ioctl on dev_fd).  Pointer
 * fields are plain addresses.  Returns 0 or -errno.
 */
int kvsd_self_cmd(struct kvsd *d, unsigned int cmd, void *arg);
/*
 * kvs_call's copy_in/copy_out for the daemon's own commands (the remote
 * tier's too): pointer fields are plain addresses.  0 or -EFAULT.
 */
int kvsd_self_copy_in(struct kvs_call *call, void *dst, __u64 src, __u64 len);
int kvsd_self_copy_out(struct kvs_call *call, __u64 dst, const void *src,
		       __u64 len);

/* All pools the arbiter knows now; *out is malloc'd.  0 or -errno. */
int kvsd_pool_list(struct kvsd *d, struct kvs_pool_desc **out, uint32_t *n);
/* A pool's name by id into buf (KVS_NAME_MAX); "#id" if it is gone. */
void kvsd_pool_name(struct kvsd *d, uint32_t id, char *buf);

/* pools.c: the configured pools. */
struct kvsd_pool {
	char name[KVS_NAME_MAX];
	uint32_t pool_id;
	struct kvsd_pool *next;
};

/*
 * Creates every configured pool; a pool that fails is logged and skipped.
 * -EEXIST (logged) when the module holds a pool of a configured name that
 * must not be adopted: the daemon then exits non-zero.
 */
int kvsd_pools_create(struct kvsd *d);
/* Module mode: destroys them in the module.  Frees the list either way. */
void kvsd_pools_destroy(struct kvsd *d);

/* mem.c, mem_cuda.c: pool memory providers. */
struct kvsd_mem {
	int fd;				/* -1: none */
	uint64_t bytes;			/* the memory's size, rounded up */
	uint64_t align;			/* what bytes was rounded to */
};

/*
 * Make the memory for @pc (its geometry's page_bytes already computed).
 * On failure the reason is written to err (one line, no prefix) and a
 * negative errno returned.
 */
int kvsd_mem_create(const struct kvsd_pool_cfg *pc, uint64_t page_bytes,
		    struct kvsd_mem *mem, char *err, size_t err_len);
void kvsd_mem_close(struct kvsd_mem *mem);
int kvsd_cuda_create(const struct kvsd_pool_cfg *pc, uint64_t bytes,
		     struct kvsd_mem *mem, char *err, size_t err_len);

/* metrics.c */
int kvsd_metrics_start(struct kvsd *d, const char *spec);
void kvsd_metrics_tick(void);
void kvsd_metrics_stop(void);

#endif /* _KVSHARED_H */
