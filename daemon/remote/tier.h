/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The remote tier's insides, shared by its files: tier.c (the loop's
 * side: the pool's event channel's records, jobs, completions; start and
 * stop), chan.c (how the channel is reached: the core in this process or
 * the module's file), thread.c (the tier's thread: Redis I/O and page
 * copies) and metrics.c.  Shared between the loop and the
 * thread: the job lists, under the tier's mutex, the health flag and the
 * counters (atomics).  The pool memory is mapped once; the thread touches
 * only pages the tier's channel holds: references of PUBLISHED records
 * for writes, claimed (OWNED) pages of MISS records for fetches.
 */
#ifndef _KVSHARED_REMOTE_TIER_H
#define _KVSHARED_REMOTE_TIER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "../kvshared.h"
#include "cluster.h"
#include "config.h"
#include "page.h"

#define MAX_NS		64	/* client namespaces with a tier client, per pool */
#define MAX_FETCHES	32	/* fetches out at once, per tier */
#define MAX_UID_FETCHES	8	/* of them for one uid: a quarter */
#define NEG_SLOTS	4096	/* keys that just missed */
#define NEG_TTL_MS	500
#define WRITE_BATCH	512	/* pages of one write pipeline */
#define WRITE_POOL_SHARE 4	/* write-behind holds at most 1/4 of the pool's pages */
#define WRITE_BYTES	(16u << 20) /* bytes of one, unless one page is more */
#define FETCH_BYTES	(64u << 20) /* bytes of one fetch, unless one page is more */
#define PROBE_MS	500	/* a down tier is probed this often */
#define PROBE_START_MS	2000	/* the startup check's deadline */

static const unsigned int lat_ms[] __attribute__((unused)) = { 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000 };
#define N_LAT	(sizeof(lat_ms) / sizeof(lat_ms[0]))

struct tier_stats {
	atomic_ullong fetches, fetch_pages, hit_pages, miss_pages, error_fetches;
	atomic_ullong dropped[KVSD_RPAGE_N_BAD];
	atomic_ullong bytes_in, bytes_out;
	atomic_ullong written, write_errors;
	atomic_ullong write_dropped[3];	/* by enum write_drop */
	atomic_ullong write_pending;	/* queued, not yet written or failed */
	atomic_ullong skip_down, skip_busy, skip_claimed, skip_neg;
	atomic_ullong skip_user;	/* the uid's ledger had no room for a page */
	atomic_ullong lat[N_LAT + 1], lat_sum_us;
	atomic_ullong redirects, map_loads, replica_reads;
	atomic_ullong auth_refused;	/* probes a Redis refused the credentials */
};

/* Why a page was not queued for writing (kvshare_remote_write_dropped_total's reason). */
enum write_drop {
	WRITE_DROP_BUSY,	/* the queue's bound: Redis is slower than the publishes */
	WRITE_DROP_DOWN,	/* no Redis answers */
	WRITE_DROP_REFUSED,	/* the pool refused the tier a reference (quota, memory) */
};

struct tier;
struct kvsd_user;

/* One namespace of a pool: its pages' names in Redis. */
struct tns {
	struct tier *t;
	uint64_t ns;
	struct kvsd_rpage_id id;
	struct tns *next;
};

struct job {
	struct job *next;
	bool fetch;
	bool failed;			/* fetch: Redis did not answer */
	uint32_t uid;			/* fetch: whose LOOKUP missed */
	struct kvsd_user *user;		/* fetch: its ledger, charged @charged */
	uint64_t charged;
	struct tns *tns;
	uint32_t n, n_ok;
	uint64_t ns;			/* fetch: the claims' namespace */
	uint32_t parent;		/* fetch: the miss's last hit, held, or KVS_NO_PAGE */
	uint64_t t0_ms;
	uint32_t *pages;
	struct kvs_key keys[];
};

/*
 * The pool's event channel, as the tier reaches it (chan.c): chosen once
 * at start, the core's in socket mode, the module's file in module mode.
 * open() sets t->cw.fd, what the loop polls; read() returns the records
 * pending (0: none now) or -errno; cmd() runs KVS_IOC_PUT or
 * KVS_IOC_PUBLISH on the channel (pointers are plain addresses).
 */
struct tier_chan_ops {
	const char *name;
	int (*open)(struct tier *t, struct kvs_chan_open *req);
	int (*read)(struct tier *t, struct kvs_event *ev, uint32_t max);
	int (*cmd)(struct tier *t, unsigned int cmd, void *arg);
	void (*close)(struct tier *t);
};

extern const struct tier_chan_ops kvsd_tier_chan_core, kvsd_tier_chan_dev;

struct tier {
	struct tier *next;
	char name[KVS_NAME_MAX];
	char ns[KVSD_RNS_MAX];		/* the pool's namespace in Redis */
	const struct kvsd_remote_cfg *rc;
	char tier_name[KVS_NAME_MAX];	/* run time: the [remote NAME]; "": the pool's keys */
	uint32_t started_by;		/* run time: the uid that turned it on */
	bool started_admin;
	atomic_bool exited;		/* the thread has returned */
	uint32_t pool_id, owner;
	bool per_uid;
	struct kvs_geometry geom;
	uint8_t *mem;
	size_t mem_len;
	uint64_t n_pages;
	struct tns *nss;
	unsigned int n_ns;
	struct kvsd_rcluster rcl;	/* the thread's, once it runs */
	struct kvsd_rtls *tls;
	pthread_t th;
	bool th_started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct job *todo, **todo_tail, *done;
	bool stop;
	struct kvsd_watch w;		/* eventfd: jobs done */
	const struct tier_chan_ops *chan_ops;
	struct kvs_chan *chan;		/* core: the pool's channel */
	int dev_fd;			/* dev: kvshared's /dev/kvshare file */
	struct kvsd_watch cw;		/* the channel, or the eventfd its wake rings */
	atomic_bool chan_rung;		/* core: that eventfd rung, not yet read */
	struct job *miss;		/* loop: a miss's records, being gathered */
	uint32_t miss_have;
	atomic_bool up;
	uint32_t write_queued;		/* loop: pages in write jobs (a reference each) */
	uint32_t write_max;		/* loop: their bound, rc->queue or a share of the pool */
	uint32_t fetching;		/* loop: fetch jobs out */
	struct { uint32_t uid, n; } uid_fetching[MAX_FETCHES]; /* loop: by uid */
	struct { uint64_t h, until; } neg[NEG_SLOTS];
	char last_err[300];		/* thread: logged when it changes */
	struct tier_stats st;
};

/* Every tier, newest first (the loop's; the metrics read it there too). */
extern struct tier *kvsd_remote_tiers;
/* Tiers turned off whose thread has not returned yet (the loop's). */
extern struct tier *kvsd_remote_stopping;

static inline void count(atomic_ullong *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static inline unsigned long long get(atomic_ullong *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

/* thread.c: the tier's thread, until t->stop. */
void *kvsd_tier_main(void *arg);

#endif /* _KVSHARED_REMOTE_TIER_H */
