/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The Redis nodes of one remote tier, and where each command goes: one
 * node (or several tried in turn) for a plain server, or a Redis Cluster
 * routed by key slot (CRC16 of the key or its {hash tag}, mod 16384)
 * from CLUSTER SLOTS, following MOVED and ASK, and reloading the map
 * after a redirect or a broken node (a failover).  Tier thread only.
 */
#ifndef _KVSHARED_REMOTE_CLUSTER_H
#define _KVSHARED_REMOTE_CLUSTER_H

#include "conn.h"

#define KVSD_RCL_MAX_NODES	64
#define KVSD_RCL_SLOTS		16384

struct kvsd_rcluster {
	struct kvsd_rauth auth;
	bool cluster;			/* Redis Cluster: route by slot */
	unsigned int n_seeds;		/* nodes[0..n_seeds): as configured */
	unsigned int n_nodes;
	struct kvsd_rnode nodes[KVSD_RCL_MAX_NODES];
	int8_t slot_node[KVSD_RCL_SLOTS]; /* -1: unknown */
	int8_t slot_replica[KVSD_RCL_SLOTS]; /* a replica for reads, -1: none */
	bool map_stale;
	uint64_t map_loaded_ms;		/* when a map was last asked for */
	unsigned int redirects;		/* MOVED/ASK followed (metrics) */
	unsigned int replica_reads;	/* reads sent to a replica (metrics) */
	unsigned int map_loads;
	unsigned int answered;		/* replies of the last kvsd_rcl_exec() */
	char err[300];			/* the last error, for the log */
};

uint16_t kvsd_rcl_slot(const char *key, size_t len);

/* Seeds are "HOST:PORT" strings; -EINVAL names the bad one in err. */
int kvsd_rcl_init(struct kvsd_rcluster *c, bool cluster, const char *const *seeds,
		  unsigned int n_seeds, const struct kvsd_rauth *auth);
void kvsd_rcl_close(struct kvsd_rcluster *c);

/*
 * Connect to some node and, for a cluster, load the slot map: the
 * startup check.  0, -EACCES (AUTH refused: c->err says so) or another
 * -errno.
 */
int kvsd_rcl_probe(struct kvsd_rcluster *c, uint64_t deadline_ms);

/*
 * Run cmds (keyed commands: c->slot set by the caller; c->read for reads,
 * which go to a replica of the slot when its master cannot be reached)
 * and fill their replies; a command whose node cannot be reached before the deadline
 * gets no reply (NULL).  Returns the number of commands without a
 * reply; c->err says why.
 */
/*
 * After kvsd_rcl_exec(): did Redis answer?  True when any node replied,
 * an error reply included, or is still connected.  A cluster that refuses
 * writes while a master is down (CLUSTERDOWN), or whose only node for a
 * command's slot is dead, still answers the rest: it is not down.
 */
bool kvsd_rcl_reachable(const struct kvsd_rcluster *c);

unsigned int kvsd_rcl_exec(struct kvsd_rcluster *c, struct kvsd_rcmd *cmds,
			   unsigned int count, size_t max_reply, uint64_t deadline_ms);

#endif /* _KVSHARED_REMOTE_CLUSTER_H */
