// SPDX-License-Identifier: GPL-2.0
/*
 * KVS_SOCK_REMOTE_TIER (<linux/kvshare.h>): a pool's owner turns a named
 * tier of the configuration ([remote NAME], --remote) on or off for the
 * pool.  The caller names the tier; its nodes, credentials and TLS files
 * stay the configuration's and never come back in a reply.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../config.h"
#include "../kvshared.h"
#include "../log.h"
#include "remote.h"
#include "config.h"
#include "ctl.h"
#include "state.h"

static bool has_nul(const char *s, size_t size)
{
	return memchr(s, '\0', size) != NULL;
}

static int check(const struct kvs_remote_tier *rt)
{
	if (rt->flags & ~KVS_REMOTE_TIER_VALID || rt->pool_id || rt->pad ||
	    rt->reserved[0] || rt->reserved[1])
		return -EINVAL;
	if (!has_nul(rt->pool, sizeof(rt->pool)) || !rt->pool[0] ||
	    !has_nul(rt->tier, sizeof(rt->tier)) ||
	    !has_nul(rt->ns, sizeof(rt->ns)))
		return -EINVAL;
	/* Names go into the log: the namespace's characters only. */
	if (rt->tier[0] && !kvsd_remote_ns_valid(rt->tier))
		return -EINVAL;
	if (rt->flags & KVS_REMOTE_TIER_OFF)
		return rt->ns[0] ? -EINVAL : 0;
	if (!rt->tier[0] || (rt->ns[0] && !kvsd_remote_ns_valid(rt->ns)))
		return -EINVAL;
	return 0;
}

/* The pool of that name and owner, into *out.  0 or -ENOENT. */
static int find_pool(struct kvsd *d, const char *name, uint32_t owner,
		     struct kvs_pool_desc *out)
{
	struct kvs_pool_desc *descs;
	uint32_t i, n;
	int ret;

	ret = kvsd_pool_list(d, &descs, &n);
	if (ret)
		return ret;
	ret = -ENOENT;
	for (i = 0; i < n; i++) {
		if (descs[i].uid == owner && !strcmp(descs[i].name, name)) {
			*out = descs[i];
			ret = 0;
			break;
		}
	}
	free(descs);
	return ret;
}

static const struct kvsd_tier_cfg *find_tier(const struct kvsd_config *cfg,
					     const char *name)
{
	unsigned int i;

	for (i = 0; i < cfg->n_tiers; i++)
		if (!strcmp(cfg->tiers[i].name, name))
			return &cfg->tiers[i];
	return NULL;
}

static int tier_off(const struct kvs_remote_tier *rt, uint32_t pool_id)
{
	const char *on = kvsd_remote_tier_of(pool_id);

	if (!on || (rt->tier[0] && strcmp(on, rt->tier)))
		return -ENOENT;
	if (!on[0])
		return -EBUSY;	/* the pool's remote_* keys: the configuration's */
	return kvsd_remote_tier_off(pool_id);
}

static int tier_on(struct kvsd *d, const struct kvs_remote_tier *rt,
		   const struct kvs_pool_desc *pd, uint32_t uid, bool admin)
{
	const struct kvsd_tier_cfg *tc = find_tier(d->cfg, rt->tier);
	struct kvsd_tier_spec spec = { 0 };
	unsigned int all, mine;

	if (!tc)
		return -ENOENT;
	if (kvsd_remote_tier_of(pd->pool_id))
		return -EBUSY;
	if (!pd->has_mem_fd || (pd->flags & KVS_POOL_DEVICE_MEM))
		return -EOPNOTSUPP;	/* the tier copies host memory */
	if (!rt->ns[0] && !kvsd_remote_ns_valid(pd->name))
		return -EINVAL;
	kvsd_remote_tier_counts(uid, &all, &mine);
	if (all >= KVS_REMOTE_TIER_MAX)
		return -ENOSPC;
	if (!admin && mine >= KVS_REMOTE_TIER_UID_MAX)
		return -EDQUOT;
	spec.rc = tc->rc;
	spec.pool = pd->name;
	spec.ns = rt->ns[0] ? rt->ns : pd->name;
	spec.tier = tc->name;
	spec.pool_id = pd->pool_id;
	spec.owner = pd->uid;
	spec.per_uid = pd->flags & KVS_POOL_NS_PER_UID;
	spec.started_by = uid;
	spec.started_admin = admin;
	return kvsd_remote_tier_on(&spec);
}

int kvsd_remote_tier_cmd(struct kvsd *d, uint32_t uid, bool admin,
			 struct kvs_remote_tier *rt)
{
	struct kvs_pool_desc pd;
	int ret;

	ret = check(rt);
	if (ret)
		return ret;
	if (d->mode != KVSD_MODE_SOCKET)
		return -EOPNOTSUPP;
	ret = find_pool(d, rt->pool, rt->owner, &pd);
	if (ret)
		return ret;
	/* Before anything about tiers: others learn nothing of them. */
	if (!admin && uid != pd.uid)
		ret = -EPERM;
	else if (rt->flags & KVS_REMOTE_TIER_OFF)
		ret = tier_off(rt, pd.pool_id);
	else
		ret = tier_on(d, rt, &pd, uid, admin);
	/* The names were checked: [A-Za-z0-9._-] only. */
	kvsd_log_limited(KVSD_LOG_REMOTE_TIER,
			 "uid %u: remote tier '%s' %s for pool '%s' of uid %u: %s", uid,
			 rt->tier, rt->flags & KVS_REMOTE_TIER_OFF ? "off" : "on",
			 rt->pool, rt->owner, ret ? strerror(-ret) : "done");
	if (!ret)
		rt->pool_id = pd.pool_id;
	if (!ret && (rt->flags & KVS_REMOTE_TIER_OFF)) {
		kvsd_rstate_clear(pd.uid, pd.name);
	} else if (!ret) {
		struct kvsd_rstate_entry e = { .owner = pd.uid, .by = uid, .admin = admin };

		snprintf(e.pool, sizeof(e.pool), "%s", pd.name);
		snprintf(e.tier, sizeof(e.tier), "%s", rt->tier);
		snprintf(e.ns, sizeof(e.ns), "%s", rt->ns[0] ? rt->ns : pd.name);
		kvsd_rstate_set(&e, kvsd_remote_pool_has_tier);
	}
	return ret;
}

/*
 * Pool (@owner, @pool) exists (created at run time, or configured and
 * kvshared just started): the tier remembered for it, if any, goes on as
 * if the one who turned it on asked again, with every check of a request.
 */
static void restore(struct kvsd *d, uint32_t owner, const char *pool)
{
	const struct kvsd_rstate_entry *e = kvsd_rstate_find(owner, pool);
	struct kvs_remote_tier rt = { 0 };
	struct kvs_pool_desc pd;
	int ret;

	if (!e || d->mode != KVSD_MODE_SOCKET)
		return;
	snprintf(rt.pool, sizeof(rt.pool), "%s", e->pool);
	snprintf(rt.tier, sizeof(rt.tier), "%s", e->tier);
	snprintf(rt.ns, sizeof(rt.ns), "%s", e->ns);
	rt.owner = owner;
	ret = find_pool(d, pool, owner, &pd);
	if (!ret)
		ret = tier_on(d, &rt, &pd, e->by, e->admin);
	/* Names from the state file were checked on load: [A-Za-z0-9._-]. */
	kvsd_log("pool '%s' of uid %u: remembered remote tier '%s', namespace '%s': %s",
		 pool, owner, e->tier, e->ns, ret ? strerror(-ret) : "on again");
}

void kvsd_remote_pool_created(struct kvsd *d, uint32_t owner, const char *pool)
{
	restore(d, owner, pool);
}

int kvsd_remote_state_start(struct kvsd *d)
{
	struct kvs_pool_desc *descs;
	uint32_t i, n;
	int ret;

	if (!d->cfg->state_dir)
		return 0;
	if (d->mode != KVSD_MODE_SOCKET) {
		kvsd_log("state_dir: run-time remote tiers need socket mode; not used");
		return 0;
	}
	ret = kvsd_rstate_open(d->cfg->state_dir);
	if (ret)
		return ret;
	ret = kvsd_pool_list(d, &descs, &n);
	if (ret) {
		kvsd_log("remote tiers state: listing the pools: %s; none restored",
			 strerror(-ret));
		return 0;
	}
	for (i = 0; i < n; i++)
		restore(d, descs[i].uid, descs[i].name);
	free(descs);
	return 0;
}

void kvsd_remote_state_stop(void)
{
	kvsd_rstate_close();
}

void kvsd_remote_pool_gone(uint32_t pool_id)
{
	kvsd_remote_tier_off(pool_id);
}
