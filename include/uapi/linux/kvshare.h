/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * kvshare: cross-process arbitration of shared KV-cache pages.
 *
 * This header is the one ABI of kvshare.  The same request structs travel
 * over ioctl(2) on /dev/kvshare, over io_uring IORING_OP_URING_CMD on the
 * same device (cmd_op is the ioctl number), and over the kvshared daemon's
 * unix socket.
 *
 * Conventions
 * -----------
 * - Every command number is _IOWR(KVS_IOC_MAGIC, nr, struct); the struct's
 *   size is encoded in the number (_IOC_SIZE) and is the ABI's size field,
 *   as in DRM.  An older, shorter struct is zero-extended; a longer struct
 *   is accepted only if the bytes the arbiter does not know are zero, else
 *   the call fails with E2BIG.  Only the struct size the caller passed is
 *   copied back.
 * - All fields are fixed-width and naturally aligned; every struct is a
 *   multiple of 8 bytes with explicit padding.  Pointers are __u64.
 * - Every flags field is checked against its *_VALID mask (EINVAL on an
 *   unknown bit) and every pad/reserved field must be zero (EINVAL).
 *   Fields marked "out" must be zero on input too (as dma-heap's fd is),
 *   so that a later ABI version can give them a meaning as inputs.
 * - Array counts: 0 is EINVAL, more than KVS_MAX_BATCH is E2BIG.
 * - A failed call changes nothing: all-or-nothing unless a command says
 *   otherwise.
 * - Ownership: every page reference and every OWNED page belongs to the
 *   open file description (or daemon connection) that took it, and is
 *   released when that file is closed, however its process ended.  After
 *   fork() parent and child share one file and so one set of holdings.
 * - The arbiter checks that result buffers are writable before it acts.
 *   Only a buffer unmapped concurrently can fail the final write-back;
 *   then ALLOC, PUBLISH and LOOKUP return EFAULT and the file holds none
 *   of the pages the call gave it (PUBLISH: neither the entries' pages nor
 *   their results; pages it published stay published), while pages ALLOC
 *   evicted stay evicted.
 *
 * - Credentials: what a call may do is decided by the credentials of
 *   whoever opened the file (file->f_cred), or connected to the daemon
 *   (SO_PEERCRED and SO_PEERGROUPS, read at connect), never by the thread
 *   that issues the call: a file or connection passed to another process
 *   carries its opener's rights, as any file does.  CAP_SYS_ADMIN in the
 *   initial user namespace (uid 0 for the daemon) is "admin": it bypasses
 *   pool modes and per-user limits.
 * - Per-user limits (module parameters, or kvshared's configuration) bound
 *   what one uid can take from everyone else: pools it owns, pages in those
 *   pools, and pages (and bytes) that its files hold in any pool.  Hitting
 *   one is EDQUOT; KVS_IOC_USER_LIMITS says which.
 *
 * Errors every command may return: ENOTTY (unknown command), EFAULT (bad
 * pointer), EINVAL (flags, pads, reserved fields), E2BIG (struct or batch
 * too large), ENOMEM (kernel or daemon out of memory).
 *
 * Page states (docs/design.md section 3): FREE -> ALLOC -> OWNED ->
 * PUBLISH -> SHARED (refcount = holders) -> last PUT -> CACHED (keyed,
 * findable) -> LOOKUP hit -> SHARED, or eviction -> FREE.
 */
#ifndef _UAPI_LINUX_KVSHARE_H
#define _UAPI_LINUX_KVSHARE_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define KVS_ABI_VERSION		2	/* 2: pool names are scoped by owner */
#define KVS_DEVICE_NAME		"kvshare"

#define KVS_NAME_MAX		64	/* pool name buffer, NUL included */
#define KVS_MAX_BATCH		65536	/* entries in one ALLOC/PUBLISH/LOOKUP/PUT */
#define KVS_MAX_POOL_PAGES	(1u << 22)	/* hard cap, module may set lower */
#define KVS_MAX_POOLS		1024		/* hard cap, module may set lower */
#define KVS_NO_PAGE		0xffffffffu	/* "no page": chain root parent */
#define KVS_PARENT_PREV		0xfffffffeu	/* PUBLISH: previous entry's page */

/* Element types of a pool's KV memory. */
enum kvs_dtype {
	KVS_DTYPE_F16	= 1,
	KVS_DTYPE_BF16	= 2,
	KVS_DTYPE_F32	= 3,
	KVS_DTYPE_FP8	= 4,	/* e4m3 or e5m2: 1 byte, scale kept by the engine */
};

/*
 * Bytes of one element of @d (a KVS_DTYPE_*), 0 for one not listed above:
 * page_bytes' sizeof(dtype).  A macro, so that the module, user space and
 * CUDA device code (kv_dtype_size() in <kvshare/kv_layout.h>) share it.
 */
#define KVS_DTYPE_SIZE(d) \
	((d) == KVS_DTYPE_F16 || (d) == KVS_DTYPE_BF16 ? 2 : \
	 (d) == KVS_DTYPE_F32 ? 4 : (d) == KVS_DTYPE_FP8 ? 1 : 0)

enum kvs_page_state {
	KVS_PAGE_FREE	= 0,
	KVS_PAGE_OWNED	= 1,
	KVS_PAGE_SHARED	= 2,
	KVS_PAGE_CACHED	= 3,
};

/*
 * A page key: the chained block hash of docs/design.md section 4,
 * computed by the client (libkv).  256 bits so that a SHA-256 chain is
 * kept whole.  The arbiter treats it as opaque; it is compared together
 * with the namespace of the file that published it.
 */
struct kvs_key {
	__u64 w[4];
};

/*
 * Page geometry: one page holds K and V of tokens_per_page tokens for
 * every layer and KV head.  page_bytes is computed by the arbiter:
 * 2 * n_layers * n_kv_heads * head_dim * tokens_per_page * sizeof(dtype).
 * Limits: every dimension 1..65536, page_bytes <= 1 GiB.
 */
struct kvs_geometry {
	__u32 n_layers;
	__u32 n_kv_heads;
	__u32 head_dim;
	__u32 tokens_per_page;
	__u32 dtype;		/* enum kvs_dtype */
	__u32 pad;		/* must be 0 */
	__u64 page_bytes;	/* out; must be 0 on input */
};

/*
 * KVS_IOC_INFO: what this arbiter is.  No attachment needed.
 * flags: must be 0.
 * Errors: only the common ones.
 */
struct kvs_info {
	__u32 abi_version;	/* out: KVS_ABI_VERSION */
	__u32 flags;		/* in: must be 0 */
	__u64 features;		/* out: KVS_FEAT_* */
	__u64 max_pool_pages;	/* out: largest n_pages accepted */
	__u32 max_batch;	/* out: KVS_MAX_BATCH */
	__u32 max_pools;	/* out: pools that may exist at once */
	__u32 n_pools;		/* out: pools that exist now */
	__u32 pad;
	__u64 n_objects;	/* out: live arbiter objects (pools, files, tables) */
	__u64 reserved[4];	/* must be 0 */
};

#define KVS_FEAT_URING_CMD	(1ull << 0)	/* IORING_OP_URING_CMD accepted */
#define KVS_FEAT_MEM_FD		(1ull << 1)	/* pools may carry a memory fd */
#define KVS_FEAT_DAEMON		(1ull << 2)	/* served by kvshared, not the module */
#define KVS_FEAT_DEVICE_MEM	(1ull << 3)	/* KVS_POOL_DEVICE_MEM pools accepted */

/*
 * KVS_IOC_POOL_CREATE: create a pool.  The pool lives until it is
 * destroyed and its last attached file is closed; it is not attached to
 * the creating file.  The caller becomes the pool's owner (uid, gid).
 *
 * name:   1..KVS_NAME_MAX-1 bytes of [A-Za-z0-9._-], NUL-terminated, the
 *         rest of the buffer zero.  Names are scoped by owner: unique among
 *         the pools of the caller's uid, and another user's pool of the same
 *         name is another pool (nobody can squat a name someone else uses).
 * mode:   permission bits (0..0777) checked as for a file: attaching needs
 *         read and write for the caller's class, listing pages and stats
 *         need read.  CAP_SYS_ADMIN bypasses them.
 * mem_fd: -1, or an fd whose file the arbiter keeps and hands to every
 *         attacher (KVS_ATTACH_MEM_FD).  It must be a memfd (shmem, or
 *         hugetlbfs with MFD_HUGETLB) at least n_pages * page_bytes long,
 *         sealed with F_SEAL_SHRINK and F_SEAL_SEAL and without F_SEAL_WRITE
 *         or F_SEAL_FUTURE_WRITE: every attacher gets the same writable
 *         file, so no holder may shrink it (every other mapping would
 *         fault) or add a write seal (every later mmap would fail).
 *         With KVS_POOL_DEVICE_MEM the rules are those of device memory
 *         below instead.
 * max_pages_per_file: quota of pages (OWNED plus references) one file may
 *         hold; 0 means n_pages.
 *
 * Device memory (flags KVS_POOL_DEVICE_MEM, KVS_FEAT_DEVICE_MEM): mem_fd is
 * a device-memory export handle (a CUDA VMM allocation exported with
 * CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) that the arbiter keeps as an
 * opaque file and hands to attachers exactly as host memory; it never maps
 * it, reads it or learns its size.  What kind of file the driver makes is
 * the driver's business (with NVIDIA's it is not a memfd), so the arbiter
 * accepts it by exclusion: never a kvshare or io_uring file (a pool holding
 * a file that holds the pool is a reference cycle nothing frees), a socket
 * (a file in flight through it could hold the pool), a directory, or a
 * regular file other than a memfd (host memory goes through the host rules
 * above).  A memfd is accepted, for drivers (and the test stand-in) whose
 * handles are memfds, only sealed as host memory is and as long as the
 * pool: device memory cannot shrink, a memfd could.  mem_fd is required
 * (-1 is EINVAL).  Attachers learn the kind from ATTACH's pool_flags and
 * import the handle with the driver (libkv: kv_pool_open()); the size an
 * attacher may map is checked by the driver, at import and map.
 * Errors: EINVAL bad name, geometry, mode, n_pages (0 or > max_pool_pages)
 *         or quota > n_pages, or mem_fd is not a memfd (shmem or hugetlbfs),
 *         or (KVS_POOL_DEVICE_MEM) mem_fd is -1 or a file of a kind refused
 *         above;
 *         EPERM mem_fd lacks F_SEAL_SHRINK or F_SEAL_SEAL, or carries a
 *         write seal; ERANGE mem_fd is shorter than
 *         the pool; EEXIST the caller owns a pool of that name; ENOSPC
 *         max_pools reached; EDQUOT the caller's pools or pages in them would
 *         exceed a per-user limit (KVS_IOC_USER_LIMITS); EBADF mem_fd is not
 *         an open fd.
 */
/*
 * The seals pool memory must carry and must not carry (POOL_CREATE's
 * mem_fd), as fcntl(F_GET_SEALS) reports them.  The values are the kernel's
 * F_SEAL_* bits, spelled out so that this header needs no <linux/fcntl.h>.
 */
#define KVS_MEM_SEALS_REQUIRED	0x0003u	/* F_SEAL_SEAL | F_SEAL_SHRINK */
#define KVS_MEM_SEALS_FORBIDDEN	0x0018u	/* F_SEAL_WRITE | F_SEAL_FUTURE_WRITE */

struct kvs_pool_create {
	char name[KVS_NAME_MAX];
	__u64 n_pages;
	struct kvs_geometry geom;	/* page_bytes is written back */
	__u32 mode;
	__u32 flags;			/* KVS_POOL_* */
	__s32 mem_fd;
	__u32 max_pages_per_file;
	__u32 pool_id;			/* out */
	__u32 pad;
	__u64 reserved[4];
};

/*
 * Every file attached to the pool gets its own namespace from its uid,
 * whatever it asks for: tenants of one pool never hit each other's pages.
 */
#define KVS_POOL_NS_PER_UID	(1u << 0)
/* mem_fd is device memory (a CUDA VMM POSIX-fd handle): see POOL_CREATE. */
#define KVS_POOL_DEVICE_MEM	(1u << 1)
#define KVS_POOL_VALID		(KVS_POOL_NS_PER_UID | KVS_POOL_DEVICE_MEM)

/*
 * KVS_IOC_POOL_ATTACH: bind this file to a pool, by owner and name.  A
 * file is attached to at most one pool, for its whole life.
 * owner: the uid that must own the pool: the pool attached is the one
 *        named `name` among that uid's pools, so a pool another user
 *        created under the same name is never attached by mistake.  An
 *        older caller's struct, zero-extended, asks for root's pool.
 * ns:    the key namespace of every PUBLISH and LOOKUP through this file
 *        (the cache salt).  Must be 0 on a KVS_POOL_NS_PER_UID pool, whose
 *        namespace is the caller's uid.
 * flags: KVS_ATTACH_MEM_FD asks for a new O_CLOEXEC fd of the pool memory.
 * pool_flags: out, the pool's KVS_POOL_* flags: with KVS_POOL_DEVICE_MEM
 *        mem_fd is a device-memory handle to import with the driver, not
 *        a file to mmap (it was the must-be-zero pad of ABI 2's first
 *        form, so older callers pass 0 as an out field must be).
 * If the result cannot be written back, nothing is attached (and no fd is
 * installed).
 * Errors: EINVAL bad name, or ns != 0 on a KVS_POOL_NS_PER_UID pool;
 *         ENOENT owner has no pool of that name (or it is being
 *         destroyed); EACCES mode forbids; EBUSY file already attached;
 *         ENODATA MEM_FD asked but the pool has no memory fd; EMFILE no fd
 *         free (nothing is attached then).
 */
struct kvs_pool_attach {
	char name[KVS_NAME_MAX];
	__u64 ns;
	__u32 flags;			/* KVS_ATTACH_* */
	__s32 mem_fd;			/* out: -1 unless KVS_ATTACH_MEM_FD */
	__u32 pool_id;			/* out */
	__u32 max_pages_per_file;	/* out */
	__u64 n_pages;			/* out */
	struct kvs_geometry geom;	/* out */
	__u32 owner;			/* in: uid the pool must belong to */
	__u32 pool_flags;		/* out: the pool's KVS_POOL_* */
	__u64 reserved[3];
};

#define KVS_ATTACH_MEM_FD	(1u << 0)
#define KVS_ATTACH_VALID	(KVS_ATTACH_MEM_FD)

/*
 * KVS_IOC_POOL_DESTROY: remove a pool's name at once; its pages and memory
 * go when the last attached file is closed (as IPC_RMID does).
 * Errors: ENOENT no such pool (pool_id 0 included); EPERM caller is
 *         neither owner nor admin.
 */
struct kvs_pool_destroy {
	__u32 pool_id;
	__u32 flags;			/* must be 0 */
	__u64 reserved[2];
};

/*
 * KVS_IOC_ALLOC: take count FREE pages as OWNED by this file, evicting
 * CACHED pages (leaf first, least recently used first) when too few are
 * free.  All or nothing: a failed ALLOC evicts nothing.
 * pages: out, __u32[count] page indices.
 * keys:  with KVS_ALLOC_CLAIM, in, struct kvs_key[count]: page k is
 *        "in flight" under keys[k] in this file's namespace until it is
 *        published, put, or its file closed, or the arbiter's claim timeout
 *        passes (see "In-flight dedupe" below).  A key listed twice is
 *        claimed by its first page only.  Without the flag, must be 0.
 * Errors: EBADFD file not attached; EDQUOT the file's quota, or the
 *         per-user limit on pages or bytes held, would be exceeded (checked
 *         first); EEXIST (KVS_ALLOC_CLAIM) a key exists already in this
 *         namespace, published or in flight in a live claim: LOOKUP it;
 *         ENOSPC not enough free or evictable pages.
 */
struct kvs_alloc {
	__u32 count;
	__u32 flags;			/* KVS_ALLOC_* */
	__u64 pages;			/* __u32 *, out */
	__u64 keys;			/* const struct kvs_key *, with CLAIM */
	__u64 reserved[1];
};

#define KVS_ALLOC_CLAIM		(1u << 0)
#define KVS_ALLOC_VALID		(KVS_ALLOC_CLAIM)

/*
 * KVS_IOC_PUBLISH: make OWNED pages SHARED under their keys.  For each
 * entry, in order:
 *   page   an OWNED page of this file;
 *   parent KVS_NO_PAGE for the first page of a chain, KVS_PARENT_PREV for
 *          the page the previous entry resulted in, or a page this file
 *          holds a reference on (SHARED).  A page with children is never
 *          evicted before them.
 *   key    the page's chained key, in this file's namespace.
 * If the key already exists the entry is a duplicate: this file's page goes
 * back to FREE and the file takes a reference on the canonical page
 * instead.  Either way the file then holds one reference on `result`.
 * All or nothing: entries are validated before any is applied.
 * Errors: EBADFD not attached; ENOENT page not OWNED by this file, or
 *         parent not held; EINVAL page listed twice, PARENT_PREV in entry 0,
 *         or a reserved field set.
 */
struct kvs_publish_entry {
	__u32 page;
	__u32 parent;
	struct kvs_key key;
	__u32 result;			/* out: canonical page index */
	__u32 flags;			/* out: KVS_PUBLISHED_*; must be 0 in */
};

#define KVS_PUBLISHED_DUP	(1u << 0)

struct kvs_publish {
	__u32 count;
	__u32 flags;			/* must be 0 */
	__u64 entries;			/* struct kvs_publish_entry *, in/out */
	__u32 n_dup;			/* out: entries that were duplicates */
	__u32 pad;
	__u64 reserved[2];
};

/*
 * KVS_IOC_LOOKUP: find the longest run of keys, from the first, that exist
 * (SHARED or CACHED) in this file's namespace, and take one reference on
 * each page of the run atomically with respect to eviction.
 * keys:  in, struct kvs_key[count], the chain in order.
 * pages: out, __u32[count]; the first n_hit are written, the rest is
 *        left as it was.
 * flags: KVS_LOOKUP_WAIT also reports, in n_inflight, how many keys right
 *        after the run are in flight (claimed by another file's
 *        ALLOC with KVS_ALLOC_CLAIM and not yet published), and if there
 *        are any arms this file's wait on the first of them (below).
 *        KVS_LOOKUP_PEEK only counts: n_hit is the run's length, and
 *        nothing else changes.  No reference is taken (so no quota or
 *        limit applies), pages is neither read nor written (it may be
 *        0), a CACHED page keeps its place in the eviction order, the
 *        pool's lookups and hits counters stay as they were, and the
 *        file's wait stays armed or disarmed as it was.  It answers for
 *        the same files, namespaces and keys as LOOKUP, no more.  With
 *        KVS_LOOKUP_WAIT it is refused (EINVAL), as the parked io_uring
 *        form is.  An arbiter older than the flag refuses it (EINVAL):
 *        LOOKUP, then PUT the run, counts the same.
 * Errors: EBADFD not attached; EDQUOT the run would exceed the file's
 *         quota or a per-user limit (nothing is taken; a shorter chain may
 *         fit).  Through io_uring KVS_LOOKUP_WAIT parks (see there).
 *
 * In-flight dedupe.  A client that misses a run of keys and is going to
 * compute their pages claims them: ALLOC with KVS_ALLOC_CLAIM.  Another
 * file's LOOKUP with KVS_LOOKUP_WAIT then sees n_inflight > 0 instead of
 * a plain miss, and rather than compute the same pages it waits for the
 * claim of keys[n_hit] to end, then looks up keys[n_hit..] again: the
 * page was published (a hit) or abandoned (a miss: claim and compute it).
 * Nothing ever sleeps in the arbiter: the call returns at once, and the
 * wait is on readiness.  The module's file polls readable (EPOLLIN) at
 * all times except while the wait its latest LOOKUP armed is pending; it
 * turns readable the moment that claim ends: the page published (by its
 * owner, or the key by anyone), put, claimed under another key, or its
 * file closed however its process ended.  Every LOOKUP disarms the
 * previous wait; threads that share a file share its one wait.
 * On kvshared the connection's KVS_SOCK_WAIT_FD bell is that readiness
 * (the socket itself carries only replies).  A claim is reported in
 * flight only for the arbiter's claim timeout (module parameter
 * claim_timeout_ms, default 10 s; 0 turns the reporting off) after its
 * ALLOC: then it is a miss again, and a new
 * CLAIM of the key takes it over, so a stalled owner delays others by at
 * most that long; waiters are not woken by the expiry and bound their
 * wait with their own timeout.  Claims are OWNED pages, so they are
 * bounded by the file's quota and its user's limits; only files of the
 * same namespace see them.
 */
struct kvs_lookup {
	__u32 count;
	__u32 flags;			/* KVS_LOOKUP_* */
	__u64 keys;			/* const struct kvs_key * */
	__u64 pages;			/* __u32 *, out */
	__u32 n_hit;			/* out */
	__u32 n_inflight;		/* out: with KVS_LOOKUP_WAIT */
	__u64 reserved[2];
};

#define KVS_LOOKUP_WAIT		(1u << 0)
#define KVS_LOOKUP_PEEK		(1u << 1)	/* count the run, take nothing */
#define KVS_LOOKUP_VALID	(KVS_LOOKUP_WAIT | KVS_LOOKUP_PEEK)

/*
 * KVS_IOC_PUT: give back holdings.  For each page: an OWNED page of this
 * file goes FREE; a reference is dropped, and the last reference turns a
 * SHARED page CACHED.  A page may appear as often as the file holds it.
 * All or nothing.
 * Errors: EBADFD not attached; ENOENT a page this file does not hold (or
 *         holds fewer times than listed).
 */
struct kvs_put {
	__u32 count;
	__u32 flags;			/* must be 0 */
	__u64 pages;			/* const __u32 * */
	__u64 reserved[2];
};

/*
 * KVS_IOC_QUOTA: read, or with KVS_QUOTA_SET lower or raise, this file's
 * quota, up to the pool's max_pages_per_file.
 * Errors: EBADFD not attached; EINVAL max_pages above the pool's limit or
 *         below what the file holds now.
 */
struct kvs_quota {
	__u32 flags;			/* KVS_QUOTA_* */
	__u32 max_pages;		/* in with SET; out: the quota */
	__u32 held;			/* out: OWNED pages plus references */
	__u32 pad;
	__u64 reserved[2];
};

#define KVS_QUOTA_SET		(1u << 0)
#define KVS_QUOTA_VALID		(KVS_QUOTA_SET)

/*
 * KVS_IOC_POOL_STATS: counters of a pool.  pool_id 0 means the attached
 * pool.  With KVS_STATS_CHECK the arbiter also verifies the pool
 * invariants (free + owned + shared + cached = n_pages; each refcount
 * equals the references files hold; lists, index and child counts agree)
 * and fails with EUCLEAN if any is broken.  The check walks every page
 * under the pool lock, so only an admin may ask for it.
 * Errors: ENOENT no such pool; EACCES no read permission; EPERM CHECK
 *         asked by a caller who is not admin; EBADFD pool_id 0 and not
 *         attached; EUCLEAN invariant broken.
 */
struct kvs_pool_stats {
	__u32 pool_id;
	__u32 flags;			/* KVS_STATS_* */
	__u64 n_pages;
	__u64 n_free;
	__u64 n_owned;
	__u64 n_shared;
	__u64 n_cached;
	__u64 n_evictable;		/* CACHED with no child */
	__u64 n_refs;			/* sum of SHARED refcounts */
	__u64 n_held;			/* references + OWNED recorded in files */
	__u64 n_files;			/* attached files */
	__u64 allocs;			/* pages allocated */
	__u64 alloc_fails;		/* ALLOC calls failed for lack of pages */
	__u64 publishes;		/* entries published */
	__u64 dup_publishes;		/* of which duplicates */
	__u64 lookups;			/* keys asked */
	__u64 hits;			/* keys found */
	__u64 evictions;
	__u64 n_claimed;		/* OWNED pages in flight under a key */
	__u64 inflight_waits;		/* LOOKUPs that armed a wait */
	__u64 reserved[2];
};

#define KVS_STATS_CHECK		(1u << 0)
#define KVS_STATS_VALID		(KVS_STATS_CHECK)

/*
 * KVS_IOC_POOL_LIST: describe existing pools.  count is the capacity of
 * `pools` in, and the number of pools that exist out; min of the two are
 * written, in pool id order.  count 0 with pools 0 only counts; a count
 * above max_pools is treated as max_pools.
 */
struct kvs_pool_desc {
	char name[KVS_NAME_MAX];
	__u32 pool_id;
	__u32 mode;
	__u32 uid;
	__u32 gid;
	__u64 n_pages;
	struct kvs_geometry geom;
	__u32 flags;			/* KVS_POOL_* */
	__u32 n_files;
	__u32 max_pages_per_file;
	__u32 has_mem_fd;
	__u64 reserved[2];
};

struct kvs_pool_list {
	__u32 count;			/* in: capacity; out: pools existing */
	__u32 flags;			/* must be 0 */
	__u64 pools;			/* struct kvs_pool_desc *, out */
	__u64 reserved[2];
};

/*
 * KVS_IOC_PAGES: describe count pages of a pool from index start (for
 * tools).  count in: capacity (1..KVS_MAX_BATCH), out: entries written
 * (fewer at the end of the pool).  pool_id 0 means the attached pool.
 * Keys and namespaces (salts) are what keep tenants apart: they are given
 * to the pool's owner and to admins only, and are zero for everyone else.
 * The pool lock is dropped and retaken between chunks of pages, so a
 * large request never stalls the pool's users.
 * Errors: ENOENT no such pool; EACCES no read permission; EINVAL start
 *         >= n_pages, or count 0; E2BIG count > KVS_MAX_BATCH.
 */
struct kvs_page_desc {
	__u32 index;
	__u32 state;			/* enum kvs_page_state */
	__u32 refcount;
	__u32 parent;			/* KVS_NO_PAGE if none */
	__u32 n_children;
	__u32 pad;
	__u64 ns;
	struct kvs_key key;		/* zero unless SHARED or CACHED */
};

struct kvs_pages {
	__u32 pool_id;
	__u32 flags;			/* must be 0 */
	__u64 start;
	__u32 count;			/* in: capacity; out: written */
	__u32 pad;
	__u64 pages;			/* struct kvs_page_desc *, out */
	__u64 reserved[2];
};

/*
 * io_uring (KVS_FEAT_URING_CMD): IORING_OP_URING_CMD on /dev/kvshare, on a
 * ring set up with IORING_SETUP_SQE128.  sqe->cmd_op is the ioctl number
 * and the 80-byte sqe->cmd holds the command struct itself (zero-padded);
 * the arbiter copies it once before looking at it.  ALLOC, PUBLISH,
 * LOOKUP and PUT are carried; the arrays they point to are read and
 * written as for the ioctl, and cqe->res is the negative errno or:
 * LOOKUP n_hit (with KVS_LOOKUP_PEEK too), PUBLISH n_dup, ALLOC and PUT 0.
 * Commands complete before the submission returns, except a LOOKUP that
 * waits (below).  Holdings taken this way belong to the device file,
 * exactly as the ioctl's do.
 * Errors besides the command's own: EINVAL the ring lacks SQE128, a
 * sqe->uring_cmd_flags bit is set (IORING_URING_CMD_FIXED: no command
 * addresses a registered buffer), or a payload byte past the struct (as
 * long as cmd_op's size bits say) is set; EOPNOTSUPP a command io_uring
 * does not carry; EAGAIN never reaches the CQE (a contended pool is
 * retried from io_uring's worker).
 *
 * LOOKUP with KVS_LOOKUP_WAIT parks instead of asking for poll(): the
 * payload is struct kvs_uring_lookup (cmd_op still KVS_IOC_LOOKUP), on a
 * ring set up with IORING_SETUP_CQE32 as well.  If keys right after the
 * run are in flight the command takes the run's references and stays
 * parked until the claim on the first of them ends (published, put,
 * claimed under another key, its file closed, whichever way its process
 * ended, or the claim timed out), then looks up the rest again in the
 * submitter's task, and parks again while the next key is in flight,
 * until timeout_ms after submission.  The arbiter is never held while it
 * is parked.  It completes with
 *   cqe->res:       the hits of all its rounds (pages[0..res) written and
 *                   referenced), or -errno as for the ioctl when nothing
 *                   was taken (an error after hits completes with them);
 *   cqe->big_cqe[0] (res2): the keys in flight right after the hits when
 *                   the deadline passed (wait again, or compute them),
 *                   else 0: res < count then means compute keys[res..].
 * The struct's n_hit and n_inflight are not written back.  A file has
 * one parked LOOKUP at a time; its poll wait (ioctl LOOKUP) is separate.
 * 6.1 cannot cancel a uring_cmd, so a parked one ends by its deadline
 * at the latest, and within a tick when the thread that submitted it
 * (the main thread, if io_uring's worker or SQPOLL thread issued it) or
 * its process exits or execs: ring teardown never waits longer than
 * that.  Given up so, it completes with the hits of its earlier rounds
 * (res2 0), or ECANCELED when there were none.
 * Errors besides the LOOKUP's own: EINVAL no CQE32, pad or a payload
 * byte after the struct set, or cmd_op's size not that of struct
 * kvs_lookup; ERANGE timeout_ms 0 or above KVS_URING_WAIT_MAX_MS; EBUSY
 * the file has a LOOKUP parked already.
 */
#define KVS_URING_PAYLOAD_MAX	80
#define KVS_URING_WAIT_MAX_MS	30000

struct kvs_uring_lookup {
	struct kvs_lookup lookup;	/* flags has KVS_LOOKUP_WAIT */
	__u32 timeout_ms;		/* 1..KVS_URING_WAIT_MAX_MS */
	__u32 pad;			/* must be 0 */
};

/*
 * KVS_IOC_USER_LIMITS: one user's usage against the per-user limits (a
 * limit of 0 means none).  No attachment needed.
 * uid:   with KVS_USER_UID, the user to report (admin only, or the caller's
 *        own uid); else must be 0, and is set to the caller's uid.
 * Errors: EPERM another user's figures asked by a caller who is not admin.
 */
struct kvs_user_limits {
	__u32 uid;			/* in with KVS_USER_UID; out */
	__u32 flags;			/* KVS_USER_* */
	__u32 n_pools;			/* out: pools the user owns */
	__u32 max_pools;		/* out */
	__u64 pool_pages;		/* out: pages of the pools it owns */
	__u64 max_pool_pages;		/* out */
	__u64 held;			/* out: OWNED + references of its files, every pool */
	__u64 max_held;			/* out */
	__u64 held_bytes;		/* out: the same in bytes of pool memory */
	__u64 max_held_bytes;		/* out */
	__u64 reserved[4];		/* must be 0 */
};

#define KVS_USER_UID		(1u << 0)
#define KVS_USER_VALID		(KVS_USER_UID)

/*
 * The kvshared socket (a SOCK_STREAM unix socket, default
 * KVS_DAEMON_SOCKET).  Where the module is not loaded the daemon serves
 * the same commands, with the same structs and errnos; each connection is
 * one client, released when the connection closes.  Every message, either
 * way, is one struct kvs_msg, then the command struct as the ioctl would
 * pass it (_IOC_SIZE(cmd) bytes), then a data area holding the arrays the
 * struct points to.  In a request a "pointer" field holds the byte offset
 * of its array from the start of the message (so 0 is still NULL); an
 * array outside the data area is EFAULT.  The reply carries the updated
 * struct and, at out_off/out_len, the bytes of the data area the command
 * wrote, which the client copies back to the same offsets.
 *
 * A request's result, out_off and out_len must be 0 (EINVAL).  A reply
 * carries the command struct whenever the request did (len >= header +
 * _IOC_SIZE(cmd)): the updated struct on success, the request's own bytes
 * on failure, with nothing written back (out_len 0), as the ioctl copies
 * nothing back on failure.  A request too short to hold its struct gets a
 * bare header.  Clients frame replies by len.  A message the daemon cannot
 * frame closes the connection: bad magic, len below the header or above
 * KVS_MSG_MAX (or above the daemon's max_conn_buffer), or EOF inside a
 * message.
 *
 * File descriptors travel as SCM_RIGHTS with the message, sent with its
 * first byte (one sendmsg() per message does that): the daemon reads one
 * message at a time, so a descriptor is never taken for the wrong one.
 * Only POOL_CREATE takes one, and only one, named by mem_fd 0; -1 is none.
 * Descriptors sent with any other command, more than one, or with mem_fd
 * -1 are closed and the command fails with EINVAL; mem_fd 0 without a
 * descriptor, or mem_fd > 0, is EBADF (as an unopened fd is for the
 * ioctl), and so is an O_PATH descriptor.  A descriptor that is not a
 * regular file is EINVAL, unless the pool is KVS_POOL_DEVICE_MEM (then
 * POOL_CREATE's rules for device memory judge it).  A reply to ATTACH
 * with KVS_ATTACH_MEM_FD carries the memory fd, mem_fd then being 0.
 * Any other malformed message (unknown command, descriptors where none
 * belong) gets an error reply.  The daemon also bounds what each uid but
 * 0 costs it in memory (its max_user_memory and max_memory_total): a
 * command that would pass the uid's bound fails with EDQUOT, one that
 * would pass the total with ENOBUFS (POOL_CREATE for the pool's
 * bookkeeping, ALLOC, LOOKUP and PUBLISH for the table of pages held,
 * RING_SETUP), a message too large for the bound closes the connection,
 * and a connection past it is closed at once.  If the daemon goes away every holding of
 * the connection is gone with it: the client sees the connection closed
 * and must reconnect, attach and map again.
 */
#define KVS_DAEMON_SOCKET	"/run/kvshare/kvshared.sock"
#define KVS_MSG_MAGIC		0x3153564bu	/* "KVS1" */
/* A whole message, header included: a full-batch PAGES reply fits. */
#define KVS_MSG_MAX		(8u << 20)

struct kvs_msg {
	__u32 magic;			/* KVS_MSG_MAGIC */
	__u32 cmd;			/* ioctl number; echoed in the reply */
	__u32 len;			/* bytes in this message, header included */
	__s32 result;			/* reply: 0 or -errno; request: 0 */
	__u32 out_off;			/* reply: data written back, from ... */
	__u32 out_len;			/* ... this many bytes; request: 0 */
	__u64 seq;			/* the client's; echoed */
};

/*
 * The shared ring (socket only).  A connection may ask the daemon for one
 * ring: a memfd shared by the two, which carries the page commands (ALLOC,
 * PUBLISH, LOOKUP, PUT) without a system call while the daemon polls it.
 * The socket stays: it carries every other command, the descriptors, the
 * credentials (the ring's commands run with the connection's), the
 * wakeups, and the connection's life (closing it releases everything,
 * the ring included).  The ring belongs to its connection alone.
 *
 * KVS_SOCK_RING_SETUP: the daemon creates a memfd of area_off + size
 * bytes, sealed against shrinking and growing (F_SEAL_SHRINK, F_SEAL_GROW,
 * F_SEAL_SEAL), maps it, and sends it with the reply (SCM_RIGHTS, as
 * ATTACH's memory fd; the reply's struct then says fd 0), followed by the
 * ring's two doorbells (fds 1 and 2, below).  The ring's bytes count
 * against the daemon's buffer budget (max_buffer_total).
 *   size:     in: bytes of the message area, KVS_RING_MIN..max_conn_buffer
 *             (a multiple of 4096); out: the same.
 *   area_off: out (0 in): where the message area starts, after the
 *             control block (struct kvs_ring_ctl at offset 0).
 *   sq_bell:  out (0 in): 1, an eventfd the daemon watches (one file,
 *             shared with the daemon).
 *   cq_bell:  out (0 in): 2, one end of a unix stream socket pair the
 *             daemon writes; sending on it fails (EPIPE).
 * Errors: EINVAL flags, pad, reserved or out fields set, or size not a
 *         multiple of 4096; ERANGE size out of bounds; EBUSY the connection
 *         has a ring already; ENOBUFS the buffer budget is exhausted
 *         (rings may take half of it, one uid's rings an eighth);
 *         ENOMEM or EMFILE the daemon could not make it.
 *
 * One request at a time.  The client writes a request into the message
 * area exactly as it would send it on the socket (struct kvs_msg, the
 * command struct, the data area; pointers are offsets from the area's
 * start), then increments sq (release).  The daemon copies the request
 * out of the ring once (its len read once, and at most size bytes)
 * before it looks at it, runs it as it runs a socket request, writes the
 * reply in the area as the socket would send it, and stores sq's value
 * in cq (release): the reply is there when cq == sq.  Once it has copied
 * a request it stores its sq in taken: a client may spin while the daemon
 * works on its request, and sleep (below) when it is not being taken.
 * daemon_cpu says where the daemon last ran (polling, or woken by a
 * doorbell): a client on that same CPU only delays the daemon by
 * spinning, and had better sleep at once;
 * client_cpu says where the client posted from, and the daemon does not
 * keep polling for a client on its own CPU, which it would only keep from
 * running (both hints: nothing depends on them).  A client that
 * sleeps for request sq stores sq in enter (below).  A request that
 * cannot be framed (bad magic, len below the header or above size) closes
 * the connection, as on the socket; commands other than the four page
 * commands fail with EOPNOTSUPP.  Requests posted while one is pending
 * (sq - cq > 1) are the client's problem only: the daemon serves what it
 * copied.
 *
 * Wakeups.  While it polls, the daemon serves requests as they appear;
 * before it sleeps it sets KVS_RING_NEED_WAKEUP in flags, then looks at
 * sq once more (a full barrier between).  A client that finds the flag
 * set after posting (a full barrier between) rings the sq doorbell: it
 * writes a __u64 1 (8 bytes, as to any eventfd; fewer are EINVAL) to
 * sq_bell (non-blocking: a full count has woken the daemon already).  A
 * client that would rather sleep than spin stores sq in enter, then (a
 * full barrier between) looks at cq, and if its reply is not there
 * sleeps in poll() on cq_bell: after storing cq the daemon (a full
 * barrier between) sends a byte on cq_bell when enter equals it.  Counts
 * and bytes carry nothing: either side drains its bell when woken, and a
 * spurious wake only costs a look at the ring.  The doorbells are not
 * pipes: both ends of a pipe share a lock that a reader holds while it
 * copies into its buffer, so a client reading into memory that faults
 * without end (a file on its own FUSE mount) would stop the daemon's
 * next ring or close.  An eventfd and a unix socket copy outside the
 * locks the other side takes.  The daemon reads the sq eventfd with
 * RWF_NOWAIT, so the client, which shares its file status flags, cannot
 * make it block; the daemon's end of cq_bell is shut for reading, so the
 * client cannot send it bytes or descriptors.  (Until this change
 * sq_bell was a pipe taking bytes: a client that wrote single bytes must
 * now write 8.)
 * The doorbells replace the older KVS_SOCK_RING_ENTER, still served:
 * its reply comes once every request posted before it has been served.
 *   KVS_SOCK_RING_ENTER: flags, pad, reserved 0; cq out (0 in): the
 *   ring's cq when it replies.  Errors: ENXIO the connection has no ring.
 *
 * KVS_SOCK_WAIT_FD: the readiness of KVS_LOOKUP_WAIT on the socket (see
 * "In-flight dedupe"): a bell like cq_bell (one end of a unix stream
 * socket pair; the daemon sends a byte, sending on it fails with EPIPE),
 * sent with the reply (wait_fd 0 says so).  It turns readable when the claim this connection's
 * latest LOOKUP waits on ends (published, put, its owner gone), and at
 * once if no wait is pending when it is made; the client drains it
 * before it sleeps again.  One per connection.
 *   Errors: EINVAL flags or reserved or wait_fd set; EBUSY the connection
 *   has one already; EMFILE or ENOMEM the daemon could not make it.
 *
 * KVS_SOCK_REMOTE_TIER: turn a remote tier of kvshared's configuration
 * (a [remote NAME] section or --remote NAME:...; docs/remote.md) on or
 * off for the pool named pool of owner uid owner.  Only the pool's owner
 * (the connection's uid == the pool's uid) or an admin may; a pool's tier
 * set by a pool's remote_* keys is the configuration's and stays.
 *   pool, owner: in; the pool.
 *   tier: in, the tier's name (NUL-terminated); with KVS_REMOTE_TIER_OFF
 *         "" or the name of the pool's tier.
 *   ns:   in, the namespace its pages are stored under in Redis ("": the
 *         pool's name), 1..KVS_REMOTE_NS_MAX-1 of [A-Za-z0-9._-]; "" with
 *         KVS_REMOTE_TIER_OFF.
 *   pool_id: out (0 in).  Nothing of the tier's configuration comes back.
 * On: the tier's thread starts and connects in the background; the pool
 * serves without it until its Redis answers (kvshare_remote_up).  Off:
 * the thread stops; the pool's pages stay.  Destroying the pool turns
 * its tier off.
 * Errors: EINVAL flags, pad, reserved or pool_id set, a name without its
 *         NUL, a bad namespace; ENOENT no such pool, no such tier, or (off)
 *         no tier on the pool; EPERM neither the pool's owner nor an
 *         admin; EBUSY (on) the pool has a tier already, or (off) its tier
 *         is the configuration's; EOPNOTSUPP the pool has no host memory;
 *         EDQUOT the caller has KVS_REMOTE_TIER_UID_MAX run-time tiers on,
 *         ENOSPC kvshared has KVS_REMOTE_TIER_MAX; ENOMEM.
 *
 * The socket-only commands are matched by their whole number (size bits
 * included), and take no descriptor.
 */
#define KVS_REMOTE_NS_MAX	64	/* ns buffer, NUL included */
#define KVS_REMOTE_TIER_OFF	(1u << 0)
#define KVS_REMOTE_TIER_VALID	(KVS_REMOTE_TIER_OFF)
#define KVS_REMOTE_TIER_MAX	64	/* run-time tiers on at once */
#define KVS_REMOTE_TIER_UID_MAX	4	/* of them turned on by one non-admin uid */
#define KVS_RING_MIN		4096u
#define KVS_RING_NEED_WAKEUP	(1u << 0)

struct kvs_ring_ctl {
	__u32 sq;			/* client: requests posted */
	__u32 enter;			/* client: the sq it sleeps for in RING_ENTER */
	__u32 client_cpu;		/* client: the CPU it posted from, + 1 (0: unknown) */
	__u32 pad0[13];			/* the client's cache line */
	__u32 cq;			/* daemon: requests served */
	__u32 flags;			/* daemon: KVS_RING_* */
	__u32 taken;			/* daemon: the sq of the request it copied */
	__u32 daemon_cpu;		/* daemon: the CPU it last ran on, + 1 (0: unknown) */
	__u32 pad1[12];
};

struct kvs_ring_setup {
	__u32 size;			/* in/out: bytes of the message area */
	__u32 flags;			/* must be 0 */
	__s32 ring_fd;			/* out: 0, the descriptor sent with the reply */
	__u32 area_off;			/* out: the message area's offset */
	__s32 sq_bell;			/* out: 1, the sq doorbell (an eventfd) */
	__s32 cq_bell;			/* out: 2, the cq doorbell (a unix socket) */
	__u64 reserved;
};

struct kvs_ring_enter {
	__u32 flags;			/* must be 0 */
	__u32 cq;			/* out */
	__u64 reserved[2];
};

struct kvs_remote_tier {
	char pool[KVS_NAME_MAX];	/* in */
	char tier[KVS_NAME_MAX];	/* in */
	char ns[KVS_REMOTE_NS_MAX];	/* in; "": the pool's name */
	__u32 owner;			/* in: the pool's uid */
	__u32 flags;			/* KVS_REMOTE_TIER_* */
	__u32 pool_id;			/* out */
	__u32 pad;
	__u64 reserved[2];
};

struct kvs_wait_fd {
	__u32 flags;			/* must be 0 */
	__s32 wait_fd;			/* out: 0, the descriptor sent with the reply */
	__u64 reserved[2];
};

/*
 * KVS_IOC_CHAN_OPEN: open a pool's event channel, the feed of a remote
 * tier (docs/remote.md).  Only the pool's owner or an admin may open it,
 * and a pool has at most one.  The channel is a file (the module: an
 * anon-inode fd in fd, O_CLOEXEC; the daemon: a descriptor sent with the
 * reply) whose read(2) returns whole struct kvs_event records, oldest
 * first, as many as fit the buffer (EINVAL for a buffer smaller than one
 * record; EAGAIN when empty and O_NONBLOCK).  poll(2) says EPOLLIN while a
 * record is pending.  The channel is also a client of the pool, bound to
 * no namespace: KVS_IOC_PUT and KVS_IOC_PUBLISH issued on it give back
 * what its records hold (nothing else is accepted: ENOTTY).
 *
 * - KVS_EVENT_PUBLISHED: a file published key (in namespace ns) on page;
 *   the channel holds one reference on the page until it is PUT on the
 *   channel, so the page cannot be recycled before the tier copied it.
 * - KVS_EVENT_MISS: a LOOKUP stopped after its hits on a key nobody has
 *   (neither published nor in flight).  The channel claims that key and
 *   those after it (up to fetch_max, up to the first one present) on
 *   OWNED pages of its own, exactly as ALLOC with KVS_ALLOC_CLAIM does, so
 *   waiting LOOKUPs see them in flight.  One record per key: k of n in
 *   the miss, in chain order, each naming the uid whose LOOKUP missed
 *   (what a tier charges the fetch to).  The tier fills the pages and
 *   PUBLISHes them on the channel (the namespace is the claim's), or PUTs
 *   them: a key whose claim is PUT unfilled is not claimed again by a
 *   miss for 500 ms, so the LOOKUPs that PUT woke see nothing in flight
 *   and compute it.  The first record (k 0) names in parent the page of
 *   the LOOKUP's last hit, which the channel holds one reference on (PUT
 *   it on the channel, once the fetched pages are published with it as
 *   the first one's parent, as the compute would have); parent is
 *   KVS_NO_PAGE in the other records, and in the first when the LOOKUP
 *   had no hit or that reference would pass max_held (the fetched chain is
 *   then a root).  KVS_LOOKUP_PEEK makes no miss.
 * - KVS_EVENT_POOL_GONE: the pool was destroyed; always the last record.
 *
 * Bounds: the channel never blocks or fails a client's call.  A record
 * that finds the ring full is dropped (dropped_full); one whose reference
 * or claims would take the channel's holdings past the pool's
 * max_pages_per_file (max_held), or that finds no free page, is dropped
 * (dropped_held).  Closing the channel (its holder exiting, however)
 * releases every reference and claim it holds at once.  While open the
 * channel counts in its pool's statistics as one more file (n_files), its
 * holdings in n_held, n_refs, n_owned and n_claimed, and its claims in
 * allocs (alloc_fails when no page could be had).
 * Errors: ENOENT no such pool; EPERM not the owner nor admin; EBUSY the
 *         pool has a channel; EINVAL ring or fetch_max out of range.
 *
 * On kvshared's socket (socket mode) the reply carries the channel as its
 * descriptor (SCM_RIGHTS; fd says 0): one end of a SOCK_SEQPACKET socket
 * pair whose other end kvshared keeps.  Each read(2) (recv) returns one
 * message: either a batch of at most 64 whole records (4 KiB), or the
 * reply to a request sent on it, told apart by the first word (a reply's
 * is KVS_MSG_MAGIC, never a record type).  Read with a buffer of 4 KiB
 * or more (a smaller one truncates the message and loses its records),
 * and the largest reply expected.  poll(2) says POLLIN while a message is
 * waiting.  KVS_IOC_PUT, KVS_IOC_PUBLISH and KVS_IOC_CHAN_STATS are sent
 * on it framed exactly as on the socket (struct kvs_msg, the struct, the
 * data area), one request a message of at most 64 KiB (EMSGSIZE), and
 * answered in order; anything else gets ENOTTY, and a message that is no
 * request (no KVS_MSG_MAGIC) closes the channel.  Records leave the
 * channel's ring only as the socket takes them, so an unread channel
 * fills its ring and drops, as above.  Closing the descriptor (however
 * its holder ends) closes the channel.  The ring carries no CHAN_OPEN
 * (EOPNOTSUPP); in module mode there is no socket (open it on
 * /dev/kvshare).
 */
struct kvs_chan_open {
	__u32 pool_id;			/* in */
	__u32 flags;			/* must be 0 */
	__u32 ring;			/* in: records buffered, 1..KVS_CHAN_RING_MAX */
	__u32 fetch_max;		/* in: keys one miss claims, 0..KVS_CHAN_FETCH_MAX */
	__s32 fd;			/* out: the channel */
	__u32 max_held;			/* out: bound on references + claims */
	__u64 reserved[2];
};

#define KVS_CHAN_RING_MAX	65536
#define KVS_CHAN_FETCH_MAX	4096

enum kvs_event_type {
	KVS_EVENT_PUBLISHED	= 1,
	KVS_EVENT_MISS		= 2,
	KVS_EVENT_POOL_GONE	= 3,
};

struct kvs_event {
	__u32 type;			/* enum kvs_event_type */
	__u32 page;			/* PUBLISHED, MISS: held by the channel */
	__u32 k;			/* MISS: this key's position in the miss */
	__u32 n;			/* MISS: keys the miss claimed */
	__u64 ns;			/* the key's namespace */
	struct kvs_key key;
	__u32 parent;			/* PUBLISHED: the page's parent; MISS k 0: the
					 * last hit, held; else KVS_NO_PAGE */
	__u32 uid;			/* MISS: whose LOOKUP missed; else 0 */
	__u64 reserved;
};

/*
 * KVS_IOC_CHAN_STATS, on the channel only: its counters.
 */
struct kvs_chan_stats {
	__u32 flags;			/* must be 0 */
	__u32 pending;			/* out: records not yet read */
	__u64 published;		/* out: records queued, by type */
	__u64 missed;
	__u64 dropped_full;		/* out: records dropped, ring full */
	__u64 dropped_held;		/* out: dropped, max_held or no page */
	__u64 held;			/* out: references + claims held now */
	__u64 reserved[2];
};

#define KVS_IOC_MAGIC		0xB8

#define KVS_IOC_INFO		_IOWR(KVS_IOC_MAGIC, 0x00, struct kvs_info)
#define KVS_IOC_POOL_CREATE	_IOWR(KVS_IOC_MAGIC, 0x01, struct kvs_pool_create)
#define KVS_IOC_POOL_ATTACH	_IOWR(KVS_IOC_MAGIC, 0x02, struct kvs_pool_attach)
#define KVS_IOC_POOL_DESTROY	_IOWR(KVS_IOC_MAGIC, 0x03, struct kvs_pool_destroy)
#define KVS_IOC_POOL_LIST	_IOWR(KVS_IOC_MAGIC, 0x04, struct kvs_pool_list)
#define KVS_IOC_POOL_STATS	_IOWR(KVS_IOC_MAGIC, 0x05, struct kvs_pool_stats)
#define KVS_IOC_PAGES		_IOWR(KVS_IOC_MAGIC, 0x06, struct kvs_pages)
#define KVS_IOC_QUOTA		_IOWR(KVS_IOC_MAGIC, 0x07, struct kvs_quota)
#define KVS_IOC_USER_LIMITS	_IOWR(KVS_IOC_MAGIC, 0x08, struct kvs_user_limits)
#define KVS_IOC_ALLOC		_IOWR(KVS_IOC_MAGIC, 0x10, struct kvs_alloc)
#define KVS_IOC_PUBLISH		_IOWR(KVS_IOC_MAGIC, 0x11, struct kvs_publish)
#define KVS_IOC_LOOKUP		_IOWR(KVS_IOC_MAGIC, 0x12, struct kvs_lookup)
#define KVS_IOC_PUT		_IOWR(KVS_IOC_MAGIC, 0x13, struct kvs_put)
#define KVS_IOC_CHAN_OPEN	_IOWR(KVS_IOC_MAGIC, 0x20, struct kvs_chan_open)
#define KVS_IOC_CHAN_STATS	_IOWR(KVS_IOC_MAGIC, 0x21, struct kvs_chan_stats)

/* Socket only: never an ioctl of the module. */
#define KVS_SOCK_RING_SETUP	_IOWR(KVS_IOC_MAGIC, 0x40, struct kvs_ring_setup)
#define KVS_SOCK_RING_ENTER	_IOWR(KVS_IOC_MAGIC, 0x41, struct kvs_ring_enter)
#define KVS_SOCK_WAIT_FD	_IOWR(KVS_IOC_MAGIC, 0x42, struct kvs_wait_fd)
#define KVS_SOCK_REMOTE_TIER	_IOWR(KVS_IOC_MAGIC, 0x43, struct kvs_remote_tier)

#endif /* _UAPI_LINUX_KVSHARE_H */
