// SPDX-License-Identifier: GPL-2.0
/*
 * The per-uid ledger of what kvshared spends on its clients (user.h).
 * A ledger lives while its uid has a connection; its charges are given
 * back as the connection's things go, so that a ledger put for the last
 * time holds nothing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "kvshared.h"
#include "user.h"

#define USER_BUCKETS	256

struct kvsd_user {
	struct kvsd_user *next;		/* in its bucket */
	uint32_t uid;
	bool admin;			/* uid 0: counted, never refused */
	unsigned int refs;
	uint64_t bytes[KVSD_CHARGE_NKINDS];
	uint64_t total;			/* the sum of bytes[] */
	uint64_t pool_bytes;		/* the core's bookkeeping of its pools */
};

const char *const kvsd_charge_names[KVSD_CHARGE_NKINDS] = {
	[KVSD_CHARGE_CONN] = "connections",
	[KVSD_CHARGE_BUF] = "buffers",
	[KVSD_CHARGE_RING] = "rings",
	[KVSD_CHARGE_HELD] = "held-pages",
	[KVSD_CHARGE_FETCH] = "remote-fetches",
};

static struct {
	struct kvsd *d;
	struct kvsd_user *buckets[USER_BUCKETS];
	uint64_t charged;		/* all non-admin ledgers together */
	uint64_t pool_bytes;		/* the core's, of all non-admin pools */
} users;

void kvsd_users_init(struct kvsd *d)
{
	users.d = d;
}

void kvsd_users_stop(void)
{
	struct kvsd_user *u, *next;
	unsigned int i;

	for (i = 0; i < USER_BUCKETS; i++) {
		for (u = users.buckets[i]; u; u = next) {
			next = u->next;
			kvsd_log("uid %u: ledger left at exit with %u references and "
				 "%llu bytes charged (a bug)", u->uid, u->refs,
				 (unsigned long long)u->total);
			free(u);
		}
		users.buckets[i] = NULL;
	}
}

static struct kvsd_user *user_find(uint32_t uid)
{
	struct kvsd_user *u;

	for (u = users.buckets[uid % USER_BUCKETS]; u; u = u->next)
		if (u->uid == uid)
			return u;
	return NULL;
}

/*
 * What the core's bookkeeping of the pools of unprivileged uids costs,
 * in all and for each ledger: from the pool list, which shows a pool
 * until the core has freed it (a destroyed pool lives until its last
 * file closes).  0 or -errno (the figures stay as they were).
 */
static int pools_recount(void)
{
	struct kvs_pool_desc *descs = NULL;
	struct kvsd_user *u;
	uint32_t i, n = 0;
	int ret = kvsd_pool_list(users.d, &descs, &n);

	if (ret)
		return ret;
	for (i = 0; i < USER_BUCKETS; i++)
		for (u = users.buckets[i]; u; u = u->next)
			u->pool_bytes = 0;
	users.pool_bytes = 0;
	for (i = 0; i < n; i++) {
		uint64_t bytes = kvs_pool_meta_bytes(descs[i].n_pages);

		if (!descs[i].uid)
			continue;
		users.pool_bytes += bytes;
		u = user_find(descs[i].uid);
		if (u)
			u->pool_bytes += bytes;
	}
	free(descs);
	return 0;
}

struct kvsd_user *kvsd_user_get(uint32_t uid, bool admin)
{
	struct kvsd_user **b = &users.buckets[uid % USER_BUCKETS], *u;

	for (u = *b; u; u = u->next) {
		if (u->uid == uid) {
			u->refs++;
			return u;
		}
	}
	u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->uid = uid;
	u->admin = admin;
	u->refs = 1;
	u->next = *b;
	*b = u;
	/* Its pools may have outlived its last connection. */
	if (!admin)
		pools_recount();
	return u;
}

void kvsd_user_put(struct kvsd_user *u)
{
	struct kvsd_user **p;

	if (--u->refs)
		return;
	for (p = &users.buckets[u->uid % USER_BUCKETS]; *p != u; p = &(*p)->next)
		;
	*p = u->next;
	if (u->total)
		kvsd_log("uid %u: ledger freed with %llu bytes charged (a bug)",
			 u->uid, (unsigned long long)u->total);
	free(u);
}

/* Whether @extra more bytes of @what fit @u's limit and the total. */
static int user_room(const struct kvsd_user *u, uint64_t extra, const char *what,
		     char *why, size_t why_len)
{
	const struct kvsd_config *cfg = users.d->cfg;
	uint64_t mine = u->total + u->pool_bytes;
	uint64_t all = users.charged + users.pool_bytes;

	if (u->admin)
		return 0;
	if (mine + extra > cfg->max_user_memory) {
		snprintf(why, why_len, "uid %u would cost kvshared %llu bytes with "
			 "%llu more for %s, max_user_memory %llu", u->uid,
			 (unsigned long long)(mine + extra), (unsigned long long)extra,
			 what, (unsigned long long)cfg->max_user_memory);
		return -EDQUOT;
	}
	if (all + extra > cfg->max_memory_total) {
		snprintf(why, why_len, "all users would cost kvshared %llu bytes "
			 "with %llu more for %s of uid %u, max_memory_total %llu",
			 (unsigned long long)(all + extra), (unsigned long long)extra,
			 what, u->uid, (unsigned long long)cfg->max_memory_total);
		return -ENOBUFS;
	}
	return 0;
}

int kvsd_user_charge(struct kvsd_user *u, enum kvsd_charge kind, uint64_t bytes,
		     char *why, size_t why_len)
{
	int ret = user_room(u, bytes, kvsd_charge_names[kind], why, why_len);

	if (ret)
		return ret;
	u->bytes[kind] += bytes;
	u->total += bytes;
	if (!u->admin)
		users.charged += bytes;
	return 0;
}

void kvsd_user_uncharge(struct kvsd_user *u, enum kvsd_charge kind, uint64_t bytes)
{
	u->bytes[kind] -= bytes;
	u->total -= bytes;
	if (!u->admin)
		users.charged -= bytes;
}

uint64_t kvsd_user_room(const struct kvsd_user *u)
{
	const struct kvsd_config *cfg = users.d->cfg;
	uint64_t mine = u->total + u->pool_bytes;
	uint64_t all = users.charged + users.pool_bytes;
	uint64_t room_mine, room_all;

	if (u->admin)
		return UINT64_MAX;
	room_mine = mine < cfg->max_user_memory ? cfg->max_user_memory - mine : 0;
	room_all = all < cfg->max_memory_total ? cfg->max_memory_total - all : 0;
	return room_mine < room_all ? room_mine : room_all;
}

void kvsd_users_tick(void)
{
	pools_recount();
}

int kvsd_user_pool_room(struct kvsd_user *u, uint64_t n_pages, char *why,
			size_t why_len)
{
	int ret;

	if (u->admin)
		return 0;
	ret = pools_recount();
	if (ret) {
		snprintf(why, why_len, "reading what the pools cost: %s",
			 strerror(-ret));
		return ret;
	}
	return user_room(u, kvs_pool_meta_bytes(n_pages), "a pool's bookkeeping",
			 why, why_len);
}

void kvsd_user_pool_created(struct kvsd_user *u, uint64_t n_pages)
{
	uint64_t bytes = kvs_pool_meta_bytes(n_pages);

	if (u->admin)
		return;
	u->pool_bytes += bytes;
	users.pool_bytes += bytes;
}

void kvsd_user_refused(const struct kvsd_user *u, const char *what, const char *why)
{
	kvsd_log_limited(KVSD_LOG_USER_LIMIT, "uid %u: %s refused: %s", u->uid,
			 what, why);
}

void kvsd_users_for_each(void (*fn)(const struct kvsd_user_info *ui, void *arg),
			 void *arg)
{
	struct kvsd_user_info ui;
	struct kvsd_user *u;
	unsigned int i;

	for (i = 0; i < USER_BUCKETS; i++) {
		for (u = users.buckets[i]; u; u = u->next) {
			ui.uid = u->uid;
			memcpy(ui.bytes, u->bytes, sizeof(ui.bytes));
			ui.pools = u->pool_bytes;
			fn(&ui, arg);
		}
	}
}
