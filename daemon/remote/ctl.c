// SPDX-License-Identifier: GPL-2.0
/*
 * KVS_SOCK_REMOTE_TIER (<linux/kvshare.h>): a pool's owner turns a named
 * tier of the configuration ([remote NAME], --remote) on or off for the
 * pool.  The caller names the tier; its nodes, credentials and TLS files
 * stay the configuration's and never come back in a reply.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../config.h"
#include "../kvshared.h"
#include "../log.h"
#include "remote.h"
#include "config.h"
#include "ctl.h"

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
	return ret;
}

void kvsd_remote_pool_gone(uint32_t pool_id)
{
	kvsd_remote_tier_off(pool_id);
}
