/* SPDX-License-Identifier: MIT */
/*
 * libkv arbiter client: one handle on the kvshare arbiter, whichever
 * transport serves it.  Today that is /dev/kvshare (ioctl, and io_uring
 * for the page commands when the module offers it); the kvshared daemon's
 * socket plugs in behind the same calls.
 *
 * Every function returns 0 (or a count, where stated) on success and a
 * negative errno on failure, with the meanings of <linux/kvshare.h>.
 * A handle may be shared by the threads of one process.
 */
#ifndef KVSHARE_ARBITER_H
#define KVSHARE_ARBITER_H

#include <stddef.h>
#include <stdint.h>
#include <linux/kvshare.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kv_arbiter;

/* Open flags. */
#define KV_ARBITER_NO_URING	(1u << 0)	/* page commands by ioctl (or socket) only */

/*
 * Open the arbiter at @path: the module's device or the daemon's socket,
 * told apart by the file's type.  With @path NULL: $KVSHARE_ARBITER if
 * set, else /dev/kvshare if it exists, else the daemon at
 * $KVSHARE_SOCKET or KVS_DAEMON_SOCKET.  On the module, io_uring carries
 * the page commands when it can (see KV_ARBITER_NO_URING).
 *
 * If the daemon goes away, every call on the handle fails with -ENOTCONN
 * from then on: the handle's holdings are gone, and the caller must open,
 * attach and map again.  A call that times out breaks the handle too (see
 * the deadlines below).
 *
 * On the daemon, the page commands travel through a ring shared with the
 * daemon (<linux/kvshare.h>, "The shared ring") when it offers one, and
 * through the socket otherwise; KV_ARBITER_NO_URING asks for the socket
 * alone.
 */
int kv_arbiter_open(const char *path, unsigned int flags, struct kv_arbiter **out);

/*
 * Deadlines (the daemon's socket).  Every call to the daemon, connecting
 * included, must be over within the handle's timeout, else it fails with
 * -ETIMEDOUT: a stopped or wedged daemon never blocks a caller for longer.
 * The timeout is $KVSHARE_CALL_TIMEOUT_MS at open (decimal milliseconds,
 * 0..KV_MAX_TIMEOUT_MS; anything else fails the open with -EINVAL, never
 * ignored), else KV_DEFAULT_TIMEOUT_MS; 0 means none (wait forever).
 *
 * After -ETIMEDOUT the handle's state is unknown (the daemon may still
 * answer, late), so the handle is broken, as after the daemon died: every
 * later call fails with -ENOTCONN and kv_arbiter_broken() says why.
 * Its holdings stay with it until kv_arbiter_close() (or kv_pool_close()),
 * so that pages it mapped are not handed to others while still in use;
 * closing it gives them back as soon as the daemon runs again.  A caller
 * that can do without sharing (kvserve) stops using the pool's pages,
 * closes the handle, and computes on its own, reopening later if it likes.
 *
 * On /dev/kvshare no call blocks, and the timeout is kept but unused.
 */
#define KV_DEFAULT_TIMEOUT_MS	2000u
#define KV_MAX_TIMEOUT_MS	(24u * 3600 * 1000)

/* Set the timeout of later calls on @arb, in ms (0: none); -EINVAL above the max. */
int kv_arbiter_set_timeout(struct kv_arbiter *arb, unsigned int ms);
unsigned int kv_arbiter_timeout(const struct kv_arbiter *arb);

/*
 * 0 while the handle works; else why it no longer does: -ETIMEDOUT (a call
 * timed out), -ENOTCONN (the daemon closed the connection), -EPROTO (the
 * daemon's answer made no sense).  Every call then fails with -ENOTCONN.
 */
int kv_arbiter_broken(struct kv_arbiter *arb);

/* Whether this handle talks to the kvshared daemon rather than the module. */
int kv_arbiter_is_daemon(const struct kv_arbiter *arb);
void kv_arbiter_close(struct kv_arbiter *arb);

/* Whether page commands travel through io_uring on this handle. */
int kv_arbiter_uses_uring(const struct kv_arbiter *arb);
/* Whether page commands travel through the daemon's shared ring. */
int kv_arbiter_uses_ring(const struct kv_arbiter *arb);

/* Any command of <linux/kvshare.h>, by its control path (ioctl). */
int kv_arbiter_call(struct kv_arbiter *arb, unsigned long cmd, void *arg);

/*
 * Pools are named per owner (uid): attaching names the owner as well as
 * the name, and another user's pool of the same name is never attached.
 *
 * Attach this handle to pool @name of uid @owner; @info (may be NULL)
 * gives the flags (KVS_ATTACH_MEM_FD) and receives geometry and limits.
 * -ENOENT: @owner has no pool of that name.
 */
int kv_arbiter_attach_owner(struct kv_arbiter *arb, uint32_t owner,
			    const char *name, uint64_t ns,
			    struct kvs_pool_attach *info);

/*
 * The owner that kv_arbiter_attach() and kv_pool_open() expect:
 *   1. $KVSHARE_POOL_OWNER when set and not empty: a uid number or a user
 *      name (kv_uid_parse()); anything else is -EINVAL, never ignored;
 *   2. else, on the kvshared socket, the daemon's uid as the kernel gives
 *      it (SO_PEERCRED at connect): the daemon creates the pools it
 *      serves, and a client trusts the daemon it connected to;
 *   3. else (the module) 0: the pools of root, as the system kvshared
 *      runs.
 * A caller that knows the owner (it created the pool, say) passes it to
 * kv_arbiter_attach_owner() or kv_pool_open_owner() instead.
 */
int kv_arbiter_default_owner(const struct kv_arbiter *arb, uint32_t *owner);

/* Attach to pool @name of the default owner (above). */
int kv_arbiter_attach(struct kv_arbiter *arb, const char *name, uint64_t ns,
		      struct kvs_pool_attach *info);

/*
 * kvshared only (KVS_SOCK_REMOTE_TIER): turn the remote tier named @tier
 * in kvshared's configuration on for pool @name of uid @owner, its pages
 * stored under namespace @ns (NULL or "": the pool's name); with @off
 * turn the pool's tier off (@tier NULL, "" or its name).  Only the pool's
 * owner or an admin may (-EPERM).  -EOPNOTSUPP on the module;
 * -ENAMETOOLONG a name too long; the daemon's errors as <linux/kvshare.h>
 * lists them.  *pool_id (may be NULL) receives the pool's id.
 */
int kv_arbiter_remote_tier(struct kv_arbiter *arb, uint32_t owner,
			   const char *name, const char *tier, const char *ns,
			   int off, uint32_t *pool_id);

/*
 * A uid from decimal digits, or from a user name (getpwnam_r: in a static
 * binary that needs the NSS modules of the glibc it was linked with).
 * -EINVAL: neither a uid (0..4294967294) nor a known user.
 */
int kv_uid_parse(const char *s, uint32_t *uid);

/* The page commands.  Batches of 1..KVS_MAX_BATCH entries. */
int kv_alloc(struct kv_arbiter *arb, uint32_t count, uint32_t *pages);
/* Returns the number of duplicates; entries[i].result is the page to use. */
int kv_publish(struct kv_arbiter *arb, struct kvs_publish_entry *entries,
	       uint32_t count);
/* Returns the number of leading hits, with a reference taken on each. */
int kv_lookup(struct kv_arbiter *arb, const struct kvs_key *keys,
	      uint32_t count, uint32_t *pages);
int kv_put(struct kv_arbiter *arb, const uint32_t *pages, uint32_t count);
/*
 * kv_lookup_peek: the number of leading keys kv_lookup() would hit, and
 * nothing else (KVS_LOOKUP_PEEK): no reference, no page numbers, no change
 * to the eviction order or the pool's counters, one round trip.  An
 * arbiter older than the flag refuses it with EINVAL; then this looks up
 * and puts the run back, which counts the same but is two calls, takes
 * the references for a moment (EDQUOT if they do not fit the quota) and
 * counts as hits.
 */
int kv_lookup_peek(struct kv_arbiter *arb, const struct kvs_key *keys,
		   uint32_t count);

/*
 * In-flight dedupe (<linux/kvshare.h>, "In-flight dedupe").
 *
 * kv_alloc_claim: kv_alloc() that also claims the pages under @keys, so
 * that other handles' kv_lookup_wait() wait for them instead of computing
 * them too.  Publish or put every page: a claim lives until then (or the
 * handle closes, or the arbiter's claim timeout passes).  -EEXIST: some
 * key exists already, published or in flight: look it up (again).
 *
 * kv_lookup_wait: kv_lookup() that, while the first key after the hit run
 * is in flight in another handle, waits (without holding the arbiter) for
 * that claim to end and looks the rest up again, up to @timeout_ms in all
 * (0: never wait).  Returns the number of leading hits, with a reference
 * on each, as kv_lookup(); the keys after them are to be computed (and
 * claimed) by the caller.  If @n_inflight is not NULL it receives the
 * keys still in flight when the wait gave up (0 when it did not).  On an
 * error nothing is held.  On the module the wait is poll() on the device
 * file; on kvshared it is poll() on the connection's wait bell
 * (KVS_SOCK_WAIT_FD), each sleep no longer than the handle's call timeout,
 * so that a stopped daemon fails the wait with ETIMEDOUT.  Threads
 * sharing a handle share its one wait: they may wake each other early;
 * on the module none misses a wake, on kvshared one whose wake another
 * drained looks again after the call timeout.
 */
int kv_alloc_claim(struct kv_arbiter *arb, const struct kvs_key *keys,
		   uint32_t count, uint32_t *pages);
int kv_lookup_wait(struct kv_arbiter *arb, const struct kvs_key *keys,
		   uint32_t count, uint32_t *pages, int timeout_ms,
		   uint32_t *n_inflight);

/*
 * A pool as an engine uses it: an arbiter handle attached to the pool,
 * and the pool's memory mapped, so that a page index becomes an address.
 */
struct kv_pool;

/*
 * Host memory for a new pool (KVS_IOC_POOL_CREATE's mem_fd): a memfd
 * named @name of @bytes, sealed against shrinking (the arbiter demands
 * it: a holder that shrank it would make every other mapping fault),
 * against growing, and against further seals (F_SEAL_WRITE or
 * F_SEAL_FUTURE_WRITE added by a holder would deny the others writable
 * mappings).  KV_MEMFD_HUGETLB: on hugetlbfs, @bytes a multiple of the
 * huge page size, every page reserved now (a hugetlb mapping that cannot
 * be backed fails only at fault time, in some client, with SIGBUS).
 * Returns the descriptor (close-on-exec), or -errno with the step that
 * failed, and why, in @err (@err_len bytes; may be NULL).
 */
#define KV_MEMFD_HUGETLB	(1u << 0)
int kv_pool_memfd(const char *name, uint64_t bytes, unsigned int flags,
		  char *err, size_t err_len);

/*
 * Open the arbiter (@arbiter as for kv_arbiter_open), attach to pool @name
 * of the default owner (kv_arbiter_default_owner()), map its memory.
 * The memory must be a memfd sealed against shrinking (F_SEAL_SHRINK) and
 * as long as the pool, as the arbiter demands at CREATE: else -EINVAL
 * (not a memfd), -EPERM (not sealed) or -ERANGE (too short), and nothing
 * is mapped.  -ENODEV: the memory is not a file; -ENODATA: the pool has no
 * memory.
 *
 * A device pool (ATTACH's pool_flags has KVS_POOL_DEVICE_MEM: kvshared's
 * memory=cuda) is imported with the CUDA driver, loaded at run time
 * (libcuda.so.1): cuMemImportFromShareableHandle, reserve, map, and
 * read-write access on the device the memory lives on; kv_page_addr() then
 * returns device pointers, for kernels, not for host code.  -ENODEV: no
 * usable driver; other errors are the driver's (-EINVAL, -ENOMEM, -EIO...),
 * with kv_cuda_last_error() naming the call.  Nothing stays mapped or held
 * after a failure.  The mapping keeps the memory: if the daemon exits it
 * stays valid (the arbiter's calls fail -ENOTCONN) until kv_pool_close(),
 * which unmaps, frees the address range and releases the handle.
 */
int kv_pool_open(const char *arbiter, const char *name, uint64_t ns,
		 unsigned int flags, struct kv_pool **out);
/* The same, for pool @name of uid @owner. */
int kv_pool_open_owner(const char *arbiter, uint32_t owner, const char *name,
		       uint64_t ns, unsigned int flags, struct kv_pool **out);
void kv_pool_close(struct kv_pool *pool);
struct kv_arbiter *kv_pool_arbiter(struct kv_pool *pool);
const struct kvs_pool_attach *kv_pool_info(const struct kv_pool *pool);
/*
 * Address of page @page in this process's mapping; NULL if out of range.
 * On a device pool, a device pointer (CUdeviceptr).
 */
void *kv_page_addr(const struct kv_pool *pool, uint32_t page);
/* Whether the pool's memory is device memory (KVS_POOL_DEVICE_MEM). */
int kv_pool_is_device(const struct kv_pool *pool);
/* The CUDA ordinal of the GPU a device pool is mapped on; -1 for a host pool. */
int kv_pool_device(const struct kv_pool *pool);

/*
 * The CUDA driver libkv maps device pools with: 1 the real driver, 0 the
 * test stand-in (tests/gpu/cudastub: host memory, no kernels can run on
 * it), or -ENODEV none usable (kv_cuda_last_error() says why).
 */
int kv_cuda_driver(void);
/* Why this thread's last device-pool call failed ("" if none did). */
const char *kv_cuda_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* KVSHARE_ARBITER_H */
