// SPDX-License-Identifier: GPL-2.0
/*
 * Routing of the remote tier's commands (cluster.h).  A plain
 * server list is a failover list: commands go to the first node that
 * answers.  A cluster is routed by slot, each node's share pipelined in
 * one go, all nodes at once; redirects are followed for up to
 * MAX_PASSES passes, all under the caller's deadline.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"

#define MAX_PASSES	4

typedef char c_host_t[sizeof(((struct kvsd_rnode *)0)->host)];
#define MAP_EVERY_MS	100	/* a stale map is asked for at most this often */

/* CRC16-CCITT (XMODEM), as Redis Cluster's keyHashSlot(), a byte at a time. */
static uint16_t crc16_table[256];

static void crc16_init(void)
{
	unsigned int i, b;
	uint16_t crc;

	for (i = 0; i < 256; i++) {
		crc = (uint16_t)(i << 8);
		for (b = 0; b < 8; b++)
			crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : crc << 1;
		crc16_table[i] = crc;
	}
}

uint16_t kvsd_rcl_slot(const char *key, size_t len)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	const unsigned char *p = (const unsigned char *)key;
	uint16_t crc = 0;
	size_t s, e, i;

	pthread_once(&once, crc16_init);
	/* A {hash tag}: only what is between the first { and the next }. */
	for (s = 0; s < len && p[s] != '{'; s++)
		;
	if (s < len) {
		for (e = s + 1; e < len && p[e] != '}'; e++)
			;
		if (e < len && e != s + 1) {
			p += s + 1;
			len = e - s - 1;
		}
	}
	for (i = 0; i < len; i++)
		crc = (uint16_t)(crc << 8) ^ crc16_table[(crc >> 8) ^ p[i]];
	return crc & (KVSD_RCL_SLOTS - 1);
}

int kvsd_rcl_init(struct kvsd_rcluster *c, bool cluster, const char *const *seeds,
		  unsigned int n_seeds, const struct kvsd_rauth *auth)
{
	unsigned int i;

	memset(c, 0, sizeof(*c));
	c->auth = *auth;
	c->cluster = cluster;
	if (!n_seeds || n_seeds > KVSD_RCL_MAX_NODES)
		return -EINVAL;
	for (i = 0; i < n_seeds; i++) {
		if (kvsd_rnode_parse(&c->nodes[i], seeds[i])) {
			snprintf(c->err, sizeof(c->err), "'%s' is not HOST:PORT", seeds[i]);
			return -EINVAL;
		}
	}
	c->n_seeds = c->n_nodes = n_seeds;
	for (i = 0; i < n_seeds; i++)
		c->nodes[i].readonly = cluster;
	memset(c->slot_node, -1, sizeof(c->slot_node));
	memset(c->slot_replica, -1, sizeof(c->slot_replica));
	c->map_stale = cluster;
	return 0;
}

void kvsd_rcl_close(struct kvsd_rcluster *c)
{
	unsigned int i;

	for (i = 0; i < c->n_nodes; i++)
		kvsd_rnode_close(&c->nodes[i]);
}

/*
 * An address Redis announced (CLUSTER SLOTS, MOVED, ASK): a numeric IPv4
 * or IPv6 address or "localhost" (all kvsd_rnode_connect() can reach),
 * and a TCP port.  Anything else is refused here, before it is stored
 * or logged.
 */
static bool addr_ok(const char *host, size_t hlen, long long port)
{
	size_t i;

	if (port < 1 || port > 65535 || !hlen || hlen >= sizeof(c_host_t))
		return false;
	if (hlen == 9 && !memcmp(host, "localhost", 9))
		return true;
	for (i = 0; i < hlen; i++)
		if (!strchr("0123456789abcdefABCDEF.:", host[i]) || !host[i])
			return false;
	return true;
}

static int node_find(struct kvsd_rcluster *c, const char *host, size_t hlen,
		     long long port)
{
	unsigned int i;

	if (!addr_ok(host, hlen, port))
		return -1;
	for (i = 0; i < c->n_nodes; i++)
		if (c->nodes[i].port == port && strlen(c->nodes[i].host) == hlen &&
		    !memcmp(c->nodes[i].host, host, hlen))
			return (int)i;
	if (c->n_nodes == KVSD_RCL_MAX_NODES)
		return -1;
	kvsd_rnode_init(&c->nodes[c->n_nodes], "", (int)port);
	c->nodes[c->n_nodes].readonly = c->cluster;
	memcpy(c->nodes[c->n_nodes].host, host, hlen);
	c->nodes[c->n_nodes].host[hlen] = '\0';
	return (int)c->n_nodes++;
}

static void note(struct kvsd_rcluster *c, const struct kvsd_rnode *n)
{
	snprintf(c->err, sizeof(c->err), "%s", n->err[0] ? n->err : "unknown error");
}

/* The first replica of a CLUSTER SLOTS entry, or -1. */
static int8_t slot_replica(struct kvsd_rcluster *c, const struct kvsd_reply *e)
{
	const struct kvsd_reply *r;
	int node;

	if (e->elements < 4)
		return -1;
	r = e->element[3];
	if (r->type != KVSD_REPLY_ARRAY || r->elements < 2 ||
	    r->element[0]->type != KVSD_REPLY_STRING ||
	    r->element[1]->type != KVSD_REPLY_INTEGER)
		return -1;
	node = node_find(c, r->element[0]->str, r->element[0]->len,
			 r->element[1]->integer);
	return (int8_t)node;
}

/* CLUSTER SLOTS from node i: [[start, end, [ip, port, ...], replicas...]...] */
static int map_from(struct kvsd_rcluster *c, unsigned int i, uint64_t deadline_ms)
{
	static const char *argv[] = { "CLUSTER", "SLOTS" };
	static const size_t lens[] = { 7, 5 };
	struct kvsd_rcmd cmd;
	struct kvsd_reply *r;
	unsigned int k, set = 0;
	char words[128];
	int ret;

	ret = kvsd_rnode_connect(&c->nodes[i], &c->auth, deadline_ms);
	if (ret)
		return ret;
	if (kvsd_rcmd_format(&cmd, 2, argv, lens))
		return -ENOMEM;
	ret = kvsd_rnode_exec(&c->nodes[i], &cmd, 1, 1u << 20, deadline_ms);
	r = cmd.reply;
	if (!ret && (!r || r->type != KVSD_REPLY_ARRAY)) {
		snprintf(c->err, sizeof(c->err), "%s:%d: CLUSTER SLOTS: %s",
			 c->nodes[i].host, c->nodes[i].port,
			 r && r->type == KVSD_REPLY_ERROR ?
			 kvsd_resp_escape(words, sizeof(words), r->str, r->len) :
			 "not a slot map");
		ret = -EPROTO;
	}
	for (k = 0; !ret && k < r->elements; k++) {
		struct kvsd_reply *e = r->element[k], *m;
		long long s, t;
		int node;

		if (e->type != KVSD_REPLY_ARRAY || e->elements < 3)
			continue;
		m = e->element[2];
		if (e->element[0]->type != KVSD_REPLY_INTEGER ||
		    e->element[1]->type != KVSD_REPLY_INTEGER ||
		    m->type != KVSD_REPLY_ARRAY || m->elements < 2 ||
		    m->element[0]->type != KVSD_REPLY_STRING ||
		    m->element[1]->type != KVSD_REPLY_INTEGER)
			continue;
		s = e->element[0]->integer;
		t = e->element[1]->integer;
		if (s < 0 || t >= KVSD_RCL_SLOTS || s > t)
			continue;
		/* An empty address is the node we asked (its port must be too). */
		if (!m->element[0]->len)
			node = m->element[1]->integer == c->nodes[i].port ? (int)i : -1;
		else
			node = node_find(c, m->element[0]->str, m->element[0]->len,
					 m->element[1]->integer);
		if (node < 0)
			continue;
		memset(c->slot_node + s, node, t - s + 1);
		memset(c->slot_replica + s, slot_replica(c, e), t - s + 1);
		set += t - s + 1;
	}
	kvsd_rcmd_free(&cmd);
	if (!ret && !set) {
		snprintf(c->err, sizeof(c->err), "%s:%d: CLUSTER SLOTS maps no slot",
			 c->nodes[i].host, c->nodes[i].port);
		ret = -EPROTO;
	}
	if (ret == -EACCES || (ret && c->nodes[i].err[0] && !c->err[0]))
		note(c, &c->nodes[i]);
	return ret;
}

/* Try every known node until one gives a map; the first error wins. */
static int map_load(struct kvsd_rcluster *c, uint64_t deadline_ms)
{
	unsigned int i;
	int ret = -ENOTCONN, r;

	c->err[0] = '\0';
	for (i = 0; i < c->n_nodes; i++) {
		r = map_from(c, i, deadline_ms);
		if (!r) {
			c->map_stale = false;
			c->map_loads++;
			return 0;
		}
		if (r == -EACCES)
			return r;
		if (c->nodes[i].err[0])
			note(c, &c->nodes[i]);
		ret = r;
	}
	return ret;
}

int kvsd_rcl_probe(struct kvsd_rcluster *c, uint64_t deadline_ms)
{
	unsigned int i;
	int ret = -ENOTCONN;

	if (c->cluster)
		return map_load(c, deadline_ms);
	for (i = 0; i < c->n_nodes; i++) {
		ret = kvsd_rnode_connect(&c->nodes[i], &c->auth, deadline_ms);
		if (!ret)
			return 0;
		note(c, &c->nodes[i]);
		if (ret == -EACCES)
			return ret;
	}
	return ret;
}

/* "MOVED 3999 127.0.0.1:6381": the node (added if new), or -1. */
static int redirect_node(struct kvsd_rcluster *c, const char *msg, size_t len,
			 uint16_t *slot)
{
	const char *sp = memchr(msg, ' ', len), *end = msg + len, *addr, *colon;
	long long s = 0, port = 0;
	const char *p;

	if (!sp)
		return -1;
	for (p = sp + 1; p < end && *p >= '0' && *p <= '9' && s < KVSD_RCL_SLOTS; p++)
		s = s * 10 + (*p - '0');
	if (p == sp + 1 || p == end || *p != ' ' || s >= KVSD_RCL_SLOTS)
		return -1;
	addr = p + 1;
	for (colon = NULL, p = addr; p < end; p++)
		if (*p == ':')
			colon = p;
	if (!colon || colon + 1 == end)
		return -1;
	for (p = colon + 1; p < end && *p >= '0' && *p <= '9' && port <= 65535; p++)
		port = port * 10 + (*p - '0');
	if (p != end)
		return -1;
	*slot = (uint16_t)s;
	return node_find(c, addr, colon - addr, port);
}

static bool is_err(const struct kvsd_reply *r, const char *prefix)
{
	return r && r->type == KVSD_REPLY_ERROR &&
	       !strncmp(r->str, prefix, strlen(prefix));
}

/* A redirect or a transient cluster error: the command goes again. */
static bool take_redirect(struct kvsd_rcluster *c, struct kvsd_rcmd *cmd)
{
	struct kvsd_reply *r = cmd->reply;
	uint16_t slot;
	int node;

	if (is_err(r, "MOVED ") || is_err(r, "ASK ")) {
		node = redirect_node(c, r->str, r->len, &slot);
		if (node < 0)
			return false;
		if (r->str[0] == 'M') {
			c->slot_node[slot] = (int8_t)node;
			c->map_stale = true;
			cmd->node = -1;
			cmd->asking = false;
		} else {
			cmd->node = (int8_t)node;
			cmd->asking = true;
		}
	} else if (is_err(r, "TRYAGAIN") || is_err(r, "CLUSTERDOWN") ||
		   is_err(r, "LOADING")) {
		c->map_stale = c->cluster;
	} else {
		return false;
	}
	c->redirects++;
	kvsd_reply_free(r);
	cmd->reply = NULL;
	return true;
}

static int target(const struct kvsd_rcluster *c, const struct kvsd_rcmd *cmd,
		  unsigned int plain)
{
	if (cmd->node >= 0)
		return cmd->node;
	return c->cluster ? c->slot_node[cmd->slot] : (int)plain;
}

static uint64_t half_left(uint64_t deadline_ms)
{
	uint64_t now = kvsd_now_ms();

	return now >= deadline_ms ? deadline_ms : now + (deadline_ms - now + 1) / 2;
}

/* A read whose node failed goes to the slot's replica in the next pass. */
static void failed_node(struct kvsd_rcluster *c, struct kvsd_rcmd *cmds, unsigned int k,
			unsigned int plain)
{
	int node = target(c, &cmds[k], plain), rep;

	if (!c->cluster || !cmds[k].read || cmds[k].reply)
		return;
	rep = c->slot_replica[cmds[k].slot];
	if (rep >= 0 && rep != node) {
		cmds[k].node = (int8_t)rep;
		cmds[k].asking = false;
		c->replica_reads++;
	}
}

static void to_replicas(struct kvsd_rcluster *c, struct kvsd_rcmd *cmds,
			unsigned int count, unsigned int i, unsigned int plain)
{
	unsigned int k;

	for (k = 0; k < count; k++)
		if (target(c, &cmds[k], plain) == (int)i)
			failed_node(c, cmds, k, plain);
}

/*
 * One pass: every node's share of the pending commands in one pipeline,
 * all nodes at once.  batch and idx have room for 2 * count (an ASKING
 * before each command at most), xs for every node.
 */
static void run_pass(struct kvsd_rcluster *c, struct kvsd_rcmd *cmds,
		     unsigned int count, unsigned int plain, size_t max_reply,
		     uint64_t deadline_ms, struct kvsd_rcmd *batch, unsigned int *idx,
		     struct kvsd_rexec *xs)
{
	static const char asking[] = "*1\r\n$6\r\nASKING\r\n";
	unsigned int i, k, j, n = 0, n_x = 0;

	for (i = 0; i < c->n_nodes; i++) {
		unsigned int first = n;

		for (k = 0; k < count; k++) {
			if (cmds[k].reply || target(c, &cmds[k], plain) != (int)i)
				continue;
			if (cmds[k].asking) {
				memset(&batch[n], 0, sizeof(batch[n]));
				batch[n].buf = (char *)asking;
				batch[n].len = sizeof(asking) - 1;
				idx[n++] = UINT32_MAX;
			}
			batch[n] = cmds[k];
			idx[n++] = k;
		}
		if (n == first)
			continue;
		/* Half the time left at most, so that a replica can still answer. */
		if (kvsd_rnode_connect(&c->nodes[i], &c->auth,
				       c->cluster ? half_left(deadline_ms) : deadline_ms)) {
			note(c, &c->nodes[i]);
			c->map_stale = c->cluster;
			to_replicas(c, cmds, count, i, plain);
			n = first;	/* unanswered: the next pass */
			continue;
		}
		kvsd_rexec_init(&xs[n_x++], &c->nodes[i], batch + first, n - first,
				max_reply);
	}
	kvsd_rexec_run(xs, n_x, deadline_ms);
	for (i = 0; i < n_x; i++) {
		if (xs[i].ret) {
			note(c, xs[i].n);
			c->map_stale = c->cluster;
		}
	}
	for (j = 0; j < n; j++) {	/* replies from a node that broke: none */
		if (idx[j] != UINT32_MAX && !batch[j].reply)
			failed_node(c, cmds, idx[j], plain);
	}
	for (j = 0; j < n; j++) {
		if (idx[j] == UINT32_MAX) {
			if (batch[j].reply)
				kvsd_reply_free(batch[j].reply);
			continue;
		}
		cmds[idx[j]].reply = batch[j].reply;
		if (cmds[idx[j]].reply) {
			c->answered++;
			take_redirect(c, &cmds[idx[j]]);
		}
	}
}

static unsigned int unanswered(const struct kvsd_rcmd *cmds, unsigned int count)
{
	unsigned int k, n = 0;

	for (k = 0; k < count; k++)
		n += !cmds[k].reply;
	return n;
}

bool kvsd_rcl_reachable(const struct kvsd_rcluster *c)
{
	unsigned int i;

	if (c->answered)
		return true;
	for (i = 0; i < c->n_nodes; i++)
		if (c->nodes[i].fd >= 0)
			return true;
	return false;
}

unsigned int kvsd_rcl_exec(struct kvsd_rcluster *c, struct kvsd_rcmd *cmds,
			   unsigned int count, size_t max_reply, uint64_t deadline_ms)
{
	struct kvsd_rcmd *batch = malloc(2 * count * sizeof(*batch));
	unsigned int *idx = malloc(2 * count * sizeof(*idx));
	struct kvsd_rexec *xs = malloc(KVSD_RCL_MAX_NODES * sizeof(*xs));
	unsigned int pass, plain = 0, left = count;

	c->answered = 0;
	if (!batch || !idx || !xs) {
		snprintf(c->err, sizeof(c->err), "out of memory");
		goto out;
	}
	for (pass = 0; pass < MAX_PASSES && left; pass++) {
		/*
		 * CLUSTER SLOTS costs the nodes more than a GET: while a node
		 * is down every call finds the map stale, so ask at most every
		 * MAP_EVERY_MS (MOVED updates its slot meanwhile).
		 */
		if (c->cluster && c->map_stale &&
		    kvsd_now_ms() - c->map_loaded_ms >= MAP_EVERY_MS) {
			c->map_loaded_ms = kvsd_now_ms();
			if (map_load(c, deadline_ms) && pass > 0)
				break;
		}
		if (!c->cluster) {
			/* The first node of the list that is up now. */
			for (plain = 0; plain < c->n_nodes; plain++)
				if (!kvsd_rnode_connect(&c->nodes[plain], &c->auth,
							deadline_ms))
					break;
			if (plain == c->n_nodes) {
				note(c, &c->nodes[0]);
				break;
			}
		}
		run_pass(c, cmds, count, plain, max_reply, deadline_ms, batch, idx, xs);
		left = unanswered(cmds, count);
		if (kvsd_now_ms() >= deadline_ms)
			break;
	}
out:
	free(batch);
	free(idx);
	free(xs);
	return unanswered(cmds, count);
}
