/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A pool's remote tier as configured: the remote_* keys of a [pool]
 * section or --pool spec (daemon/kvshared.conf.example lists them).
 * Parsed next to config.c, which hands every remote_* key here.  The
 * password comes from a file that must be a regular file owned by
 * kvshared's uid and readable by nobody else; it never comes from the
 * command line, and it is never logged.
 */
#ifndef _KVSHARED_REMOTE_CONFIG_H
#define _KVSHARED_REMOTE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "page.h"

#define KVSD_REMOTE_MAX_NODES	16	/* configured seeds */

enum kvsd_remote_write {
	KVSD_REMOTE_WRITE_NONE,		/* never write; fetch only */
	KVSD_REMOTE_WRITE_PUBLISH,	/* write behind every new PUBLISH */
};

struct kvsd_remote_cfg {
	char *nodes[KVSD_REMOTE_MAX_NODES];	/* "HOST:PORT" */
	unsigned int n_nodes;
	bool cluster;
	char *user;			/* ACL user, NULL: default */
	char *password_file;
	char *password;			/* read from password_file */
	bool tls;
	char *tls_ca, *tls_cert, *tls_key;
	char *mac_key_file, *mac_key_file_old;
	struct kvsd_rmac *mac;		/* their keys (mac.h); NULL: none */
	char ns[KVSD_RNS_MAX];		/* remote_namespace; default: the pool's name */
	enum kvsd_remote_write write;
	bool fetch;			/* LOOKUP misses go on to the tier */
	uint32_t timeout_ms;		/* one fetch or write batch, at most */
	uint32_t queue;			/* pages waiting to be written, at most */
	uint32_t fetch_max;		/* pages of one fetch, at most */
	uint32_t ttl_s;			/* EX of every page; 0: none (maxmemory LRU) */
	uint32_t seen;			/* bit per key given */
};

/*
 * One remote_* key of pool @pool (allocating *rc on the first).  0 or
 * -EINVAL after printing "kvshared: WHERE: ...".
 */
int kvsd_remote_cfg_set(struct kvsd_remote_cfg **rc, const char *where,
			const char *key, const char *val);
/*
 * One key of a named tier ([remote NAME], --remote NAME:...): a remote_*
 * key without its prefix, "nodes" for remote; no namespace.
 */
int kvsd_remote_tier_set(struct kvsd_remote_cfg **rc, const char *where,
			 const char *key, const char *val);
/* remote_namespace's rule: 1..KVSD_RNS_MAX-1 of [A-Za-z0-9._-]. */
bool kvsd_remote_ns_valid(const char *ns);
/*
 * After the pool's last key: what is required, the password file.  @pool
 * NULL: a named tier, whose pool is checked when it is turned on.
 */
int kvsd_remote_cfg_finish(struct kvsd_remote_cfg *rc, const char *where,
			   const char *pool, bool host_memory);
void kvsd_remote_cfg_free(struct kvsd_remote_cfg *rc);
/*
 * Read rc's MAC key files again (SIGHUP): 0, nothing to do or done;
 * -errno after logging why, the keys in use staying.  @what names the
 * pool or tier in the log.
 */
int kvsd_remote_cfg_reload(struct kvsd_remote_cfg *rc, const char *what);

#endif /* _KVSHARED_REMOTE_CONFIG_H */
