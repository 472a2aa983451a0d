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
/*
 * Pool @pool_id was destroyed: its tier, if any, goes off.  A tier turned
 * on at run time stays remembered (state.h): the pool made again
 * under that owner and name gets it back.
 */
void kvsd_remote_pool_gone(uint32_t pool_id);
/* Pool @pool of @owner was created at run time: its remembered tier goes on. */
void kvsd_remote_pool_created(struct kvsd *d, uint32_t owner, const char *pool);
/*
 * After the configured pools and tiers: open the state directory
 * (state_dir) and turn the remembered tiers of existing pools on.  0, or
 * -errno (logged): kvshared does not start.
 */
int kvsd_remote_state_start(struct kvsd *d);
void kvsd_remote_state_stop(void);

#endif /* _KVSHARED_REMOTE_CTL_H */
