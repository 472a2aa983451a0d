// SPDX-License-Identifier: GPL-2.0
/*
 * kvctl user: one user's usage against the per-user limits
 * (KVS_IOC_USER_LIMITS), and the explanation of EDQUOT that the other
 * commands print: which limit was hit, with the numbers.
 */
#include "kvctl.h"
#include "kvctl_json.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* A uid given as a number or a user name, as libkv reads $KVSHARE_POOL_OWNER. */
int kvctl_uid_arg(const char *cmd, const char *what, const char *s,
		  uint32_t *uid)
{
	if (!kv_uid_parse(s, uid))
		return 0;
	return kvctl_usage_err(cmd, "%s: '%s' is neither a uid nor a known user",
			       what, s);
}

/*
 * The caller's own figures, read after the refusal: the limit the call
 * ran into is the one at its maximum (or that @more_pages, the pages a
 * CREATE asked for, would pass).
 */
int kvctl_quota_err(struct kvctl *k, const char *cmd, uint64_t more_pages)
{
	struct kvs_user_limits u;
	char msg[200];

	memset(&u, 0, sizeof(u));
	if (kvctl_ioctl(k, KVS_IOC_USER_LIMITS, &u))
		snprintf(msg, sizeof(msg), "a per-user limit is reached");
	else if (u.max_pools && u.n_pools >= u.max_pools)
		snprintf(msg, sizeof(msg), "user %u owns %u of at most %u pools "
			 "(max_user_pools)", u.uid, u.n_pools, u.max_pools);
	else if (u.max_pool_pages && more_pages &&
		 u.pool_pages + more_pages > u.max_pool_pages)
		snprintf(msg, sizeof(msg), "user %u's pools have %" PRIu64
			 " pages; %" PRIu64 " more would pass the limit of %"
			 PRIu64 " (max_user_pool_pages)", u.uid,
			 (uint64_t)u.pool_pages, more_pages,
			 (uint64_t)u.max_pool_pages);
	else if (u.max_held && u.held >= u.max_held)
		snprintf(msg, sizeof(msg), "user %u holds %" PRIu64 " of at most %"
			 PRIu64 " pages (max_user_held)", u.uid,
			 (uint64_t)u.held, (uint64_t)u.max_held);
	else if (u.max_held_bytes && u.held_bytes >= u.max_held_bytes)
		snprintf(msg, sizeof(msg), "user %u holds %" PRIu64 " of at most %"
			 PRIu64 " bytes of pool memory (max_user_held_bytes)",
			 u.uid, (uint64_t)u.held_bytes, (uint64_t)u.max_held_bytes);
	else
		snprintf(msg, sizeof(msg), "user %u: a per-user limit is reached "
			 "(see 'kvctl user')", u.uid);
	return kvctl_ioc_err(cmd, EDQUOT, msg);
}

static void user_usage(void)
{
	fputs("usage: kvctl user [UID|NAME] [--json]\n\n"
	      "What one user owns and holds against the per-user limits: pools it\n"
	      "owns (max_user_pools), pages of those pools (max_user_pool_pages),\n"
	      "pages and bytes its files or connections hold in every pool\n"
	      "(max_user_held, max_user_held_bytes).  \"none\" is no limit.\n"
	      "Without UID, your own; another user's needs admin.  Limits apply\n"
	      "to users who are not admin.\n", stdout);
}

/* A limit of 0 is none. */
static void limit_text(const char *name, uint64_t v)
{
	if (v)
		printf("%-21s %" PRIu64 "\n", name, v);
	else
		printf("%-21s none\n", name);
}

static void user_text(const struct kvs_user_limits *u)
{
	printf("%-21s %u\n", "uid", u->uid);
	printf("%-21s %u\n", "n_pools", u->n_pools);
	limit_text("max_user_pools", u->max_pools);
	printf("%-21s %" PRIu64 "\n", "pool_pages", (uint64_t)u->pool_pages);
	limit_text("max_user_pool_pages", u->max_pool_pages);
	printf("%-21s %" PRIu64 "\n", "held", (uint64_t)u->held);
	limit_text("max_user_held", u->max_held);
	printf("%-21s %" PRIu64 "\n", "held_bytes", (uint64_t)u->held_bytes);
	limit_text("max_user_held_bytes", u->max_held_bytes);
}

static void limit_json(struct kvctl_json *j, const char *name, uint64_t v)
{
	if (v)
		kvctl_json_u64(j, name, v);
	else
		kvctl_json_null(j, name);
}

static void user_json(const struct kvs_user_limits *u)
{
	struct kvctl_json j;

	kvctl_json_init(&j, stdout);
	kvctl_json_obj(&j, NULL);
	kvctl_json_u64(&j, "uid", u->uid);
	kvctl_json_u64(&j, "n_pools", u->n_pools);
	limit_json(&j, "max_user_pools", u->max_pools);
	kvctl_json_u64(&j, "pool_pages", u->pool_pages);
	limit_json(&j, "max_user_pool_pages", u->max_pool_pages);
	kvctl_json_u64(&j, "held", u->held);
	limit_json(&j, "max_user_held", u->max_held);
	kvctl_json_u64(&j, "held_bytes", u->held_bytes);
	limit_json(&j, "max_user_held_bytes", u->max_held_bytes);
	kvctl_json_end_obj(&j);
	kvctl_json_finish(&j);
}

int kvctl_user_main(struct kvctl *k, int argc, char **argv)
{
	struct kvctl_opt o[] = { KVCTL_FLAG("--json"), KVCTL_END };
	struct kvs_user_limits u;
	char msg[160];
	char *who;
	int n_pos, ret, err;

	ret = kvctl_parse("user", argc, argv, o, &who, 1, &n_pos);
	if (ret < 0) {
		user_usage();
		return KVCTL_OK;
	}
	if (ret)
		return ret;
	memset(&u, 0, sizeof(u));
	if (n_pos) {
		if (kvctl_uid_arg("user", "UID", who, &u.uid))
			return KVCTL_USAGE;
		u.flags = KVS_USER_UID;
	}
	if (kvctl_open(k))
		return KVCTL_FAIL;
	err = kvctl_ioctl(k, KVS_IOC_USER_LIMITS, &u);
	if (err == EPERM) {
		snprintf(msg, sizeof(msg), "only an admin may see another user's "
			 "usage (uid %u)", u.uid);
		return kvctl_ioc_err("user", err, msg);
	}
	if (err == ENOTTY)
		return kvctl_ioc_err("user", err, "this arbiter has no per-user "
				     "limits (an older kvshare.ko or kvshared)");
	if (err)
		return kvctl_ioc_err("user", err, NULL);
	if (o[0].set)
		user_json(&u);
	else
		user_text(&u);
	return KVCTL_OK;
}
