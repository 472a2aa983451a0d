// SPDX-License-Identifier: GPL-2.0
/*
 * kvctl's reading of a pool's counters (KVS_IOC_POOL_STATS by pool id) and
 * the errors of the read-only views, shared by `kvctl stats`, `kvctl pages`
 * (kvctl_pages.c) and `kvctl pool show` (kvctl_pool.c).  It calls no
 * command: the commands call it.
 */
#include "kvctl.h"
#include "kvctl_json.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* Every counter of struct kvs_pool_stats, in ABI order. */
#define STAT(f)	{ #f, offsetof(struct kvs_pool_stats, f) }
static const struct {
	const char *name;
	size_t off;
} stat_fields[] = {
	STAT(n_pages), STAT(n_free), STAT(n_owned), STAT(n_shared),
	STAT(n_cached), STAT(n_evictable), STAT(n_refs), STAT(n_held),
	STAT(n_files), STAT(allocs), STAT(alloc_fails), STAT(publishes),
	STAT(dup_publishes), STAT(lookups), STAT(hits), STAT(evictions),
	STAT(n_claimed), STAT(inflight_waits),
};
#define N_STATS	(sizeof(stat_fields) / sizeof(stat_fields[0]))

static uint64_t stat_val(const struct kvs_pool_stats *st, size_t i)
{
	return *(const __u64 *)((const char *)st + stat_fields[i].off);
}

void kvctl_stats_text(const struct kvs_pool_stats *st)
{
	size_t i;

	for (i = 0; i < N_STATS; i++)
		printf("%-19s %" PRIu64 "\n", stat_fields[i].name, stat_val(st, i));
}

void kvctl_stats_json(struct kvctl_json *j, const struct kvs_pool_stats *st)
{
	size_t i;

	kvctl_json_obj(j, "stats");
	for (i = 0; i < N_STATS; i++)
		kvctl_json_u64(j, stat_fields[i].name, stat_val(st, i));
	kvctl_json_end_obj(j);
}

int kvctl_stats_ioctl(struct kvctl *k, uint32_t pool_id, uint32_t flags,
		      struct kvs_pool_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->pool_id = pool_id;
	st->flags = flags;
	return kvctl_ioctl(k, KVS_IOC_POOL_STATS, st);
}

/* Errors of the read-only views, worded for the pool at hand. */
int kvctl_view_err(const char *cmd, const struct kvs_pool_desc *d, int err)
{
	char msg[160];

	if (err == ENOENT)
		snprintf(msg, sizeof(msg), "no pool named '%s'", d->name);
	else if (err == EACCES)
		snprintf(msg, sizeof(msg), "no read permission on pool '%s' "
			 "(mode %04o, owner %u:%u)", d->name, d->mode & 07777,
			 d->uid, d->gid);
	else if (err == EUCLEAN)
		snprintf(msg, sizeof(msg), "pool '%s' invariants are broken",
			 d->name);
	else
		return kvctl_ioc_err(cmd, err, NULL);
	return kvctl_ioc_err(cmd, err, msg);
}

int kvctl_stats_get(struct kvctl *k, const char *cmd,
		    const struct kvs_pool_desc *d, uint32_t flags,
		    struct kvs_pool_stats *st)
{
	int err = kvctl_stats_ioctl(k, d->pool_id, flags, st);

	return err ? kvctl_view_err(cmd, d, err) : KVCTL_OK;
}
