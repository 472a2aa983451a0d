/* SPDX-License-Identifier: GPL-2.0 */
/*
 * KVS_SOCK_REMOTE_TIER: turning a named remote tier on or off for a pool
 * at run time (<linux/kvshare.h>, docs/remote.md).  Called by server.c.
 */
#ifndef _KVSHARED_REMOTE_CTL_H
#define _KVSHARED_REMOTE_CTL_H

#include <stdbool.h>
#include <stdint.h>
#include <linux/kvshare.h>

struct kvsd;

/* The request of a client of @uid (@admin: uid 0).  0 or -errno. */
int kvsd_remote_tier_cmd(struct kvsd *d, uint32_t uid, bool admin,
			 struct kvs_remote_tier *rt);
/* Pool @pool_id was destroyed: its tier, if any, goes off. */
void kvsd_remote_pool_gone(uint32_t pool_id);

#endif /* _KVSHARED_REMOTE_CTL_H */
