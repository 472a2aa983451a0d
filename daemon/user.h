/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What each uid costs kvshared (socket mode), so that one unprivileged
 * user's requests cannot grow the daemon past what the operator allowed
 * that user, whatever it sends or creates: max_user_memory bytes per uid
 * (uid 0 exempt, as from every per-user limit) and max_memory_total for
 * all of them together.  docs/threat-model.md gives the bound of each
 * resource.
 *
 * Charged here, as they are taken: each connection (its state, its first
 * KVSD_BUF_MIN bytes of buffer, its supplementary groups), its buffer
 * beyond that (a request as far as it has arrived, then its reply), its
 * shared ring, and the core's table of the pages it holds (at its
 * largest: it never shrinks), and each remote fetch its LOOKUPs start
 * (daemon/remote/tier.c: the bound of what the fetch's replies may hold,
 * a page's size per page, until the fetch ends).  The arbiter core's bookkeeping of the pools a uid
 * owns is the core's to free (a destroyed pool lives until its last file
 * closes): it is charged to the pool's creator at POOL_CREATE
 * (kvsd_user_pool_room()) and counted again from the pool list every
 * second, so that a freed pool stops counting.
 *
 * Past a limit the caller fails the request (EDQUOT for the uid's limit,
 * ENOBUFS for the total) with the reason kvsd_user_charge() wrote, and
 * kvsd_user_refused() logs it with the uid, rate-limited.
 *
 * Below the server's files (conn.h), above pools.c (kvsd_self_cmd()).
 */
#ifndef _KVSHARED_USER_H
#define _KVSHARED_USER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvsd;
struct kvsd_user;

enum kvsd_charge {
	KVSD_CHARGE_CONN,		/* connections: state, first buffer, groups */
	KVSD_CHARGE_BUF,		/* buffers beyond the first KVSD_BUF_MIN */
	KVSD_CHARGE_RING,		/* shared rings */
	KVSD_CHARGE_HELD,		/* the core's tables of the pages held */
	KVSD_CHARGE_FETCH,		/* remote fetches its misses started */
	KVSD_CHARGE_NKINDS,
};

/* The ledger's limits, from the configuration. */
void kvsd_users_init(struct kvsd *d);
/*
 * At exit, once every connection is closed and every remote fetch has
 * ended: each ledger still there was not given back (logged, a bug).
 */
void kvsd_users_stop(void);
/* @uid's ledger, referenced (one reference per connection); NULL: no memory. */
struct kvsd_user *kvsd_user_get(uint32_t uid, bool admin);
void kvsd_user_put(struct kvsd_user *u);

/*
 * Charge @bytes of @kind to @u: 0, -EDQUOT past max_user_memory, or
 * -ENOBUFS past max_memory_total, with @why saying which (one line).
 */
int kvsd_user_charge(struct kvsd_user *u, enum kvsd_charge kind, uint64_t bytes,
		     char *why, size_t why_len);
void kvsd_user_uncharge(struct kvsd_user *u, enum kvsd_charge kind, uint64_t bytes);
/* The bytes @u may still be charged within both limits (UINT64_MAX: uid 0). */
uint64_t kvsd_user_room(const struct kvsd_user *u);

/*
 * Whether @u may create a pool of @n_pages: the core's bookkeeping of the
 * pools @u owns already, and of this one, charged to it on top of what
 * it holds here, within both limits.  0, -EDQUOT or -ENOBUFS (@why set),
 * or another -errno if the core cannot say.
 */
int kvsd_user_pool_room(struct kvsd_user *u, uint64_t n_pages, char *why,
			size_t why_len);

/* @u created a pool of @n_pages (after kvsd_user_pool_room()). */
void kvsd_user_pool_created(struct kvsd_user *u, uint64_t n_pages);
/* Once a second: forget the bookkeeping of pools the core has freed. */
void kvsd_users_tick(void);

/* Log a refusal (@why from a charge) with the uid, rate-limited. */
void kvsd_user_refused(const struct kvsd_user *u, const char *what, const char *why);

/* What one uid is charged now (the metrics). */
struct kvsd_user_info {
	uint32_t uid;
	uint64_t bytes[KVSD_CHARGE_NKINDS];
	uint64_t pools;			/* its pools' bookkeeping */
};

extern const char *const kvsd_charge_names[KVSD_CHARGE_NKINDS];

void kvsd_users_for_each(void (*fn)(const struct kvsd_user_info *ui, void *arg),
			 void *arg);

#endif /* _KVSHARED_USER_H */
