// SPDX-License-Identifier: GPL-2.0
/*
 * Per-user limits: what one uid may take from everyone else sharing the
 * arbiter (pools it owns, their pages, pages and bytes its files hold).
 */
#include "core_internal.h"

static struct kvs_limits kvs_user_lim;

int kvs_users_init(const struct kvs_limits *limits)
{
	if (limits->max_user_pools > KVS_MAX_POOLS)
		return -EINVAL;
	kvs_user_lim = *limits;
	return 0;
}

void kvs_users_exit(void)
{
}

int kvs_user_limits(struct kvs_user_limits *req, const struct kvs_cred *cred)
{
	if ((req->flags & ~KVS_USER_VALID) ||
	    memchr_inv(req->reserved, 0, sizeof(req->reserved)))
		return -EINVAL;
	if (!(req->flags & KVS_USER_UID)) {
		if (req->uid)
			return -EINVAL;
		req->uid = cred->uid;
	} else if (req->uid != cred->uid && !cred->admin) {
		return -EPERM;
	}
	req->n_pools = 0;
	req->pool_pages = 0;
	req->held = 0;
	req->held_bytes = 0;
	req->max_pools = kvs_user_lim.max_user_pools;
	req->max_pool_pages = kvs_user_lim.max_user_pool_pages;
	req->max_held = kvs_user_lim.max_user_held;
	req->max_held_bytes = kvs_user_lim.max_user_held_bytes;
	return 0;
}
