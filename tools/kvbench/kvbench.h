/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvbench: timings of the kvshare arbiter.  The same scenarios run
 * against a "target": the arbiter core linked into this process
 * (target_core.c) or /dev/kvshare (target_ioctl.c), so that the two can
 * be compared row by row.
 */
#ifndef _KVBENCH_H
#define _KVBENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <linux/kvshare.h>

/*
 * One arbiter reached some way.  Every call returns 0 or -errno.
 * ctl:   a handle that never attaches (create, destroy, stats);
 * open:  a fresh data handle, to be attached with data(POOL_ATTACH);
 * data:  a command on the data handle;
 * close: drop the data handle and everything it holds.
 */
struct bench_target {
	const char *name;
	int (*ctl)(struct bench_target *t, unsigned int cmd, void *arg);
	int (*open)(struct bench_target *t);
	int (*data)(struct bench_target *t, unsigned int cmd, void *arg);
	void (*close)(struct bench_target *t);
	void (*fini)(struct bench_target *t);
	void *priv;
};

int target_core_init(struct bench_target *t);
/* The same with the pool's event channel open and drained after PUBLISH. */
int target_core_chan_init(struct bench_target *t);
/* -ENOENT when the device does not exist. */
int target_ioctl_init(struct bench_target *t, const char *device);
/* The same device through libkv, page commands by io_uring. */
int target_uring_init(struct bench_target *t, const char *device);
/* kvshared through libkv: the shared ring if it offers one, and its socket. */
int target_daemon_init(struct bench_target *t, const char *socket);
/* The same with the socket alone (KV_ARBITER_NO_URING). */
int target_socket_init(struct bench_target *t, const char *socket);

enum bench_op {
	OP_ALLOC,		/* ALLOC from free pages */
	OP_PUBLISH,		/* PUBLISH of OWNED pages under new keys */
	OP_LOOKUP_PUT,		/* LOOKUP of a cached chain, then PUT of it */
	OP_EVICT,		/* ALLOC when every page is CACHED */
	N_OPS
};

#define N_CHAINS	3	/* 16, 256 and 4096 pages */
#define MAX_CHAIN	4096
#define MAX_POOLS	8
#define N_SLOTS		6	/* core, ioctl, uring, daemon, socket, core+chan */
#define SLOT_CORE	0
#define SLOT_IOCTL	1
#define SLOT_URING	2
#define SLOT_DAEMON	3	/* kvshared, page commands on its shared ring */
#define SLOT_SOCKET	4	/* kvshared, everything on the socket */
#define SLOT_CHAN	5	/* the core with an event channel open */

extern const char *const bench_slot_names[N_SLOTS];

extern const uint32_t bench_chains[N_CHAINS];
extern const char *const bench_op_names[N_OPS];

/* Results: median ns per page, < 0 where not measured. */
struct bench_results {
	uint32_t reps;
	int n_pools;
	uint64_t pools[MAX_POOLS];
	double ns[MAX_POOLS][N_OPS][N_CHAINS][N_SLOTS];
	const char *note[MAX_POOLS][N_SLOTS];	/* why a pool was skipped */
};

/* bench_run.c: all scenarios on one pool size; 0 or -errno. */
int bench_pool(struct bench_target *t, struct bench_results *r, int pool,
	       int slot);

/* bench_util.c */
uint64_t bench_now_ns(void);
uint64_t bench_median(uint64_t *samples, uint32_t n);
uint64_t bench_mix64(uint64_t x);
void bench_key(struct kvs_key *key, uint64_t chain, uint32_t pos);
int bench_parse_sizes(const char *s, uint64_t *out, int max);
int bench_parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out);
void bench_results_init(struct bench_results *r);

/* bench_report.c */
/* The slots to show: SLOT_CORE first, then the transports beside it. */
struct bench_view {
	const char *mode;
	int n;
	int slots[N_SLOTS];
};

void bench_report_table(const struct bench_results *r, const struct bench_view *v);
void bench_report_json(const struct bench_results *r, const struct bench_view *v);

#endif /* _KVBENCH_H */
