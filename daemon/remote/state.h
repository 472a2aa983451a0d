/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Run-time tiers remembered across restarts (docs/remote.md): which named
 * tier, under which namespace, the owner of pool (uid, name) turned on.
 * Kept in memory and in STATE_DIR/remote-tiers, a file only kvshared
 * writes (0600 in a directory of its own that nobody else may write;
 * replaced by an atomic rename) and reads back at startup as hostile
 * input: every line is checked and a bad one skipped, logged.  A pool
 * matches an entry only by its owner's uid and its name, so another
 * uid's pool of that name never gets the tier.  Without a state
 * directory nothing is remembered.  The loop's only.
 */
#ifndef _KVSHARED_REMOTE_STATE_H
#define _KVSHARED_REMOTE_STATE_H

#include <stdbool.h>
#include <stdint.h>
#include <linux/kvshare.h>

#include "page.h"

#define KVSD_RSTATE_MAX		256	/* entries, pools gone included */
#define KVSD_RSTATE_UID_MAX	8	/* of them turned on by one non-admin uid */

struct kvsd_rstate_entry {
	uint32_t owner;			/* the pool's uid */
	char pool[KVS_NAME_MAX];
	char tier[KVS_NAME_MAX];	/* the [remote NAME] */
	char ns[KVSD_RNS_MAX];
	uint32_t by;			/* who turned it on ... */
	bool admin;			/* ... and whether as an admin */
	uint64_t stamp;			/* set order: the oldest goes first */
};

/*
 * Use @dir (NULL: remember nothing): it must be a directory of kvshared's
 * uid that nobody else may write; its file, if any, is loaded.  0, or
 * -errno after logging what is wrong.
 */
int kvsd_rstate_open(const char *dir);
void kvsd_rstate_close(void);

/* The entry of pool (@owner, @pool), NULL if none. */
const struct kvsd_rstate_entry *kvsd_rstate_find(uint32_t owner, const char *pool);
/*
 * Remember @e (replacing the pool's entry) and write the file.  Room is
 * made by forgetting the oldest entry, of e->by first where it has
 * KVSD_RSTATE_UID_MAX, whose pool @in_use() says has no tier now.
 */
void kvsd_rstate_set(const struct kvsd_rstate_entry *e,
		     bool (*in_use)(uint32_t owner, const char *pool));
/* Forget pool (@owner, @pool) and write the file, if it was remembered. */
void kvsd_rstate_clear(uint32_t owner, const char *pool);

#endif /* _KVSHARED_REMOTE_STATE_H */
