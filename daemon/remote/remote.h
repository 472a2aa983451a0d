/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The remote tier (docs/remote.md): pools configured with remote=... back
 * onto Redis, so that hosts share sealed prefix pages.  Socket mode and
 * module mode alike: the tier is fed by its pool's event channel
 * (KVS_IOC_CHAN_OPEN), the arbiter's own, whoever hosts the arbiter.
 *
 * The event loop never waits on Redis.  Each tier has one thread that
 * does all network I/O and copying; the loop hands it jobs and takes the
 * finished ones back through an eventfd, and every arbiter call of the
 * tier (PUT and PUBLISH on its channel) is made on the loop:
 *
 * - write behind PUBLISH: a page a client publishes for the first time
 *   comes as a PUBLISHED record holding a reference (so that it is not
 *   evicted while the thread copies it) and is queued; the thread writes
 *   it with a header (page.h), in pipelined batches, and the loop puts
 *   the reference back.  A full queue drops the page (counted).
 * - fetch on a LOOKUP miss: the arbiter claims the rest of the chain for
 *   the channel (up to remote_fetch_max pages), so LOOKUPs with
 *   KVS_LOOKUP_WAIT see those keys in flight and wait as for another
 *   process's compute, and sends MISS records.  The thread GETs the
 *   pages in one pipeline, checks each header and checksum, and copies
 *   them into the claimed pages; the loop publishes the valid run on the
 *   channel and puts the rest, which wakes the waiters.  A miss the tier
 *   will not fetch (Redis down, too many fetches out, the uid's ledger
 *   full, a key that just missed) is put back at once, and the arbiter
 *   does not claim those keys again for a while, so the waiters compute.
 */
#ifndef _KVSHARED_REMOTE_H
#define _KVSHARED_REMOTE_H

#include <stdbool.h>
#include <stdint.h>
#include <linux/kvshare.h>

struct kvsd;
struct kvsd_config;

/*
 * Start the tiers of the configured pools (after kvsd_pools_create()).
 * Each is probed: -EACCES when a Redis refuses the credentials (logged,
 * the daemon exits), other failures are logged and the tier retries by
 * itself.  0 or -errno.
 */
int kvsd_remote_start(struct kvsd *d);
/*
 * SIGHUP: read every tier's MAC key files again (mac.h), so that
 * keys rotate without a restart; a tier whose files are wrong keeps the
 * keys it has (logged).
 */
void kvsd_remote_reload(const struct kvsd_config *cfg);
/* Stops the threads and releases everything the tiers hold. */
void kvsd_remote_stop(void);

/* A tier to start on a pool (the configuration keeps rc). */
struct kvsd_tier_spec {
	const struct kvsd_remote_cfg *rc;
	const char *pool, *ns;
	const char *tier;		/* run time: the [remote NAME]; else NULL */
	uint32_t pool_id, owner;
	bool per_uid;
	uint32_t started_by;		/* run time: the caller's uid ... */
	bool started_admin;		/* ... and whether it is an admin */
};

/*
 * Run time (ctl.c): start a tier without waiting on Redis; its
 * thread connects in the background.  0 or -errno.
 */
int kvsd_remote_tier_on(const struct kvsd_tier_spec *sp);
/* Turn pool_id's tier off (its thread stops, then it is freed).  -ENOENT: none. */
int kvsd_remote_tier_off(uint32_t pool_id);
/*
 * pool_id's tier's name, NULL if none; "" for the tier of its pool's
 * remote_* keys (the configuration's, not turned on at run time).
 */
const char *kvsd_remote_tier_of(uint32_t pool_id);
/* Whether pool (@owner, @pool) has a tier now. */
bool kvsd_remote_pool_has_tier(uint32_t owner, const char *pool);
/* Run-time tiers on or stopping: all of them, and those @uid turned on. */
void kvsd_remote_tier_counts(uint32_t uid, unsigned int *all, unsigned int *of_uid);

/* Prometheus text of every tier (malloc'd, NULL if none). */
char *kvsd_remote_metrics(void);

#endif /* _KVSHARED_REMOTE_H */
