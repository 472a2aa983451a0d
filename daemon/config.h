/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvshared configuration: the command line and the INI-like config file
 * (daemon/kvshared.conf.example documents the keys).  Every error names
 * where it is ("FILE:LINE: ..." or "--pool SPEC: ...") and makes the
 * daemon exit with status 2.
 */
#ifndef _KVSHARED_CONFIG_H
#define _KVSHARED_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <linux/kvshare.h>

struct kvsd_remote_cfg;

#define KVSD_EXIT_USAGE		2
#define KVSD_DEFAULT_DEVICE	"/dev/" KVS_DEVICE_NAME
#define KVSD_DEFAULT_MAX_POOLS	64
#define KVSD_DEFAULT_MAX_CONNECTIONS	1024
#define KVSD_DEFAULT_MAX_CONNECTIONS_PER_UID	64
#define KVSD_DEFAULT_MAX_CONN_BUFFER	KVS_MSG_MAX
#define KVSD_DEFAULT_MAX_BUFFER_TOTAL	(1ull << 30)
#define KVSD_DEFAULT_STALL_TIMEOUT_MS	10000
#define KVSD_DEFAULT_RING_POLL_US	500
/* What one unprivileged uid, and all of them, may cost kvshared (user.h). */
#define KVSD_DEFAULT_MAX_USER_MEMORY	(64ull << 20)
#define KVSD_MAX_USER_MEMORY		(256ull << 20)	/* the largest allowed */
#define KVSD_DEFAULT_MAX_MEMORY_TOTAL	(1ull << 30)
/* The module parameters' defaults, which the same keys here default to. */
#define KVSD_DEFAULT_MAX_USER_POOLS	8
#define KVSD_DEFAULT_MAX_USER_POOL_PAGES 4194304ull
#define KVSD_DEFAULT_MAX_USER_HELD	4194304ull
#define KVSD_DEFAULT_MAX_USER_HELD_BYTES 0ull

enum kvsd_mem_kind {
	KVSD_MEM_HOST,			/* memfd */
	KVSD_MEM_HUGETLB,		/* memfd with MFD_HUGETLB */
	KVSD_MEM_CUDA,			/* CUDA VMM, POSIX fd export */
	KVSD_MEM_NONE,			/* a pool without memory */
};

enum kvsd_mode_opt {
	KVSD_MODE_AUTO,			/* module if the device opens, else socket */
	KVSD_MODE_OPT_MODULE,
	KVSD_MODE_OPT_SOCKET,
};

/* One [pool NAME] section or --pool flag. */
struct kvsd_pool_cfg {
	char name[KVS_NAME_MAX];
	char where[128];		/* "FILE:LINE" or "--pool NAME", for messages */
	uint64_t n_pages;
	struct kvs_geometry geom;	/* page_bytes stays 0 (the ABI's "out") */
	uint32_t mode;
	uint32_t quota;			/* max_pages_per_file; 0: n_pages */
	uint32_t flags;			/* KVS_POOL_* */
	enum kvsd_mem_kind mem;
	int cuda_device;
	int64_t uid, gid;		/* owner; -1: the daemon's */
	struct kvsd_remote_cfg *remote;	/* remote_* keys; NULL: no remote tier */
};

/* A named remote tier ([remote NAME], --remote): pools turn it on at run time. */
struct kvsd_tier_cfg {
	char name[KVS_NAME_MAX];
	char where[128];
	struct kvsd_remote_cfg *rc;
};

struct kvsd_config {
	char *config_file;
	char *socket;
	char *metrics;			/* NULL: no metrics */
	char *device;
	char *state_dir;		/* run-time tiers remembered here; NULL: none */
	uint32_t max_pools;
	uint64_t max_pool_pages;
	/* The socket's caps (socket mode), against one client hurting others. */
	uint32_t max_connections;	/* connections at once */
	uint32_t max_connections_per_uid; /* of one uid (uid 0 exempt) */
	uint64_t max_conn_buffer;	/* bytes buffered for one connection */
	uint64_t max_buffer_total;	/* bytes buffered for all of them */
	uint32_t stall_timeout_ms;	/* mid-message or unread reply: dropped */
	uint32_t ring_poll_us;		/* rings polled after a request, at most (0: never) */
	uint64_t max_user_memory;	/* bytes one uid (not 0) may cost kvshared */
	uint64_t max_memory_total;	/* the same for all of them together */
	/* Per-user limits of the core (socket mode; 0 = none). */
	uint32_t max_user_pools;
	uint64_t max_user_pool_pages;
	uint64_t max_user_held;
	uint64_t max_user_held_bytes;
	uint32_t user_keys_given;	/* bit per max_user_* key given */
	enum kvsd_mode_opt mode;
	bool verbose;
	struct kvsd_pool_cfg *pools;
	unsigned int n_pools;
	struct kvsd_tier_cfg *tiers;
	unsigned int n_tiers;
};

/*
 * Parse argv, then the config file it names; flags win over the file.
 * Returns 0, 1 when --help was printed, or KVSD_EXIT_USAGE after printing
 * the error.  *cfg is allocated in every case; free it with
 * kvsd_config_free().
 */
int kvsd_config_load(int argc, char **argv, struct kvsd_config **cfg);
void kvsd_config_free(struct kvsd_config *cfg);

/*
 * A --metrics TCP spec as an address: loopback only (-EPERM for another),
 * -EINVAL if it is not HOST:PORT.
 */
int kvsd_metrics_addr(const char *spec, struct sockaddr_storage *ss,
		      socklen_t *len);
/* Bytes of one page of @geom (the arbiter's formula), 0 if invalid. */
uint64_t kvsd_page_bytes(const struct kvs_geometry *geom);
const char *kvsd_mem_name(enum kvsd_mem_kind kind);
const char *kvsd_dtype_name(uint32_t dtype);

#endif /* _KVSHARED_CONFIG_H */
