/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvshared's arbiter socket (socket mode): connections, framing of
 * struct kvs_msg, SCM_RIGHTS, and dispatch to the core's kvs_cmd().
 * Served by server.c, sock_cmd.c, conn.c and accept.c (conn.h).
 */
#ifndef _KVSHARED_SERVER_H
#define _KVSHARED_SERVER_H

#include <stdint.h>
#include <sys/types.h>

struct kvsd;

/* Listen on @path; -EINVAL/-ENAMETOOLONG for a bad path (a usage error). */
int kvsd_server_start(struct kvsd *d, const char *path);
/* Closes every connection (releasing its holdings) and the socket. */
void kvsd_server_stop(void);
/* Once a second: re-arm accepting after running out of descriptors. */
void kvsd_server_tick(void);

/* What the metrics show of one connection. */
struct kvsd_conn_info {
	uint64_t id;
	pid_t pid;
	uint32_t uid;
	uint32_t pool_id;		/* 0: not attached */
	uint64_t held;
};

unsigned int kvsd_server_n_conns(void);
void kvsd_server_for_each(void (*fn)(const struct kvsd_conn_info *ci, void *arg),
			  void *arg);

#endif /* _KVSHARED_SERVER_H */
