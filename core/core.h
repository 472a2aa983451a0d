/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The kvshare arbiter core: the page state machine of docs/design.md
 * section 3, in plain C.  It is compiled twice (docs/design.md section 2):
 * into kvshare.ko (host_kernel.h) and into user space (host_user.h) for
 * the daemon, the unit tests and the benchmarks.  This interface uses no
 * kernel-only type: a host is a thin layer that turns its transport
 * (ioctl, uring_cmd, socket) into kvs_cmd() calls.
 */
#ifndef _KVS_CORE_H
#define _KVS_CORE_H

#include <linux/types.h>
#include <linux/kvshare.h>

struct kvs_client;

/*
 * Who is calling, as the host knows it: the opener of the file (the
 * module: file->f_cred) or the peer of the connection (the daemon:
 * SO_PEERCRED and SO_PEERGROUPS at connect), never the calling thread.
 */
struct kvs_cred {
	__u32 uid;
	__u32 gid;
	int admin;			/* bypasses pool modes and per-user limits */
	const __u32 *groups;		/* user host only: supplementary groups */
	__u32 n_groups;
	const void *host_cred;		/* kernel host only: the struct cred */
};

/*
 * One call of one command.  The host copies the command struct itself;
 * the arrays it points to (pages, keys, entries, descriptors) are moved
 * through copy_in/copy_out, so each host decides what a "pointer" is: a
 * user address for the module, an offset in the request for the daemon.
 * Both return 0 or -EFAULT.
 */
struct kvs_call {
	const struct kvs_cred *cred;
	int (*copy_in)(struct kvs_call *call, void *dst, __u64 src, __u64 len);
	int (*copy_out)(struct kvs_call *call, __u64 dst, const void *src, __u64 len);
	void *host;			/* host's own context for the copies */
	int nonblock;			/* EAGAIN rather than wait for a pool lock */
	void *mem_out;			/* out of ATTACH: pool memory to hand over */
	/*
	 * LOOKUP with KVS_LOOKUP_WAIT: in, arm the client's parked wait
	 * (kvs_client_parked()) instead of its poll wait; out, when it was
	 * armed, ms until the claim waited on stops being in flight.
	 */
	int park;
	__u32 park_ms;
};

/*
 * Limits, set once by kvs_core_init().  The per-user ones apply to callers
 * that are not admin; 0 means no limit.
 */
struct kvs_limits {
	__u32 max_pools;		/* 1..KVS_MAX_POOLS */
	__u64 max_pool_pages;		/* 1..KVS_MAX_POOL_PAGES */
	__u64 features;			/* KVS_FEAT_* this host serves */
	__u32 max_user_pools;		/* pools one uid may own (registry slots) */
	__u64 max_user_pool_pages;	/* pages of all the pools one uid owns */
	__u64 max_user_held;		/* pages one uid's clients hold, all pools */
	__u64 max_user_held_bytes;	/* the same in bytes of pool memory */
};


int kvs_core_init(const struct kvs_limits *limits);
/* Destroys every pool; all clients must have been freed before. */
void kvs_core_exit(void);

/* Live core objects (pools, clients, tables): back to 0 when all is gone. */
__u64 kvs_core_objects(void);

/*
 * What the core allocates, at most, for a pool of @n_pages (its pages and
 * key index), and for a client holding @n_held pages: hosts charge it to
 * whoever asks for it (kvshared's per-uid ledger).  Never more than these.
 */
__u64 kvs_pool_meta_bytes(__u64 n_pages);
__u64 kvs_client_meta_bytes(__u64 n_held);

struct kvs_client *kvs_client_new(void);
/*
 * Releases everything the client holds, then frees it.  Never fails.  No
 * other call on the client may be in flight.
 */
void kvs_client_free(struct kvs_client *cl);

/* Room for any command struct: hosts keep one on the stack. */
union kvs_cmd_buf {
	struct kvs_info info;
	struct kvs_pool_create create;
	struct kvs_pool_attach attach;
	struct kvs_pool_destroy destroy;
	struct kvs_pool_list list;
	struct kvs_pool_stats stats;
	struct kvs_pages pages;
	struct kvs_quota quota;
	struct kvs_alloc alloc;
	struct kvs_publish publish;
	struct kvs_lookup lookup;
	struct kvs_put put;
	struct kvs_user_limits user;
};

/*
 * In-flight dedupe (KVS_LOOKUP_WAIT).  @wake(@arg) is called, with a pool
 * lock held (so it must not sleep), when the claim the client waits on
 * ends; set once, before the client's first command.
 */
void kvs_client_set_waker(struct kvs_client *cl, void (*wake)(void *arg), void *arg);
void *kvs_client_wake_arg(struct kvs_client *cl);
/* Whether a wait armed by the client's latest LOOKUP is still pending. */
int kvs_client_waiting(struct kvs_client *cl);
/*
 * The same for the parked wait (kvs_call's park), which a host keeps for
 * one command it completes later: the core clears it before calling @wake
 * when that claim ends; kvs_client_unpark() disarms it when the host
 * gives up first.  Only LOOKUPs with park arm or disarm it.
 */
int kvs_client_parked(struct kvs_client *cl);
void kvs_client_unpark(struct kvs_client *cl);
/* How long a claim is reported in flight, ms (0: never); default 10000. */
#define KVS_CLAIM_TIMEOUT_MS	10000
void kvs_core_set_claim_timeout(__u32 ms);

/* For a host's metrics: the pool a client attached (0: none) and its holdings. */
__u32 kvs_client_pool_id(struct kvs_client *cl);
__u64 kvs_client_held(struct kvs_client *cl);

/*
 * Size of a command's struct as this core knows it, or 0 if @cmd (an
 * ioctl number; its size bits are ignored) is not a kvshare command.
 */
__u32 kvs_cmd_size(unsigned int cmd);

/*
 * Run one command.  @arg is the host's zero-extended copy of the command
 * struct (kvs_cmd_size(cmd) bytes), updated in place with the results.
 * Returns 0 or a negative errno as documented in <linux/kvshare.h>.
 */
int kvs_cmd(struct kvs_client *cl, unsigned int cmd, void *arg, struct kvs_call *call);

/*
 * Take back a kvs_cmd() that succeeded but whose results the host could
 * not deliver (the final copy to the caller failed): a CREATE's pool is
 * destroyed, an ATTACH's client is detached (releasing whatever other
 * threads took through it meanwhile) so that it may attach again.  Other
 * commands undo their own holdings already; for them this does nothing.
 * @arg is the struct as kvs_cmd() left it.
 */
void kvs_cmd_undo(struct kvs_client *cl, unsigned int cmd, void *arg,
		  const struct kvs_cred *cred);

/*
 * Host hooks, implemented once per host.
 */
int kvs_host_in_group(const struct kvs_cred *cred, __u32 gid);
/* What a pool's memory fd is (kvs_host_mem_get()'s @kind). */
enum kvs_mem_kind {
	KVS_MEM_HOST	= 0,	/* a memfd the attachers mmap */
	KVS_MEM_DEVICE	= 1,	/* KVS_POOL_DEVICE_MEM: an opaque driver handle */
};

/*
 * Take a reference on the memory behind @fd for a new pool of @bytes.
 * KVS_MEM_HOST: a memfd (shmem or hugetlbfs) sealed with F_SEAL_SHRINK and
 * F_SEAL_SEAL, without a write seal, and at least @bytes long.
 * KVS_MEM_DEVICE: any file but a kvshare or io_uring file, a socket, a
 * directory or a regular file that is not a memfd; a memfd must pass the
 * host rules (seals, length).  The file is never mapped or read.
 * -EBADF not an open fd; -EINVAL a kind of file refused; -EPERM seals
 * other than those; -ERANGE shorter than @bytes.
 */
int kvs_host_mem_get(int fd, __u64 bytes, enum kvs_mem_kind kind, void **mem);
/* An extra reference on pool memory (for ATTACH's mem_out). */
void kvs_host_mem_dup(void *mem);
void kvs_host_mem_put(void *mem);
__u64 kvs_host_random(void);

#ifndef __KERNEL__
/* User host: the descriptor behind a pool's memory (owned by the core). */
int kvs_host_mem_fd(void *mem);
#endif

#endif /* _KVS_CORE_H */
