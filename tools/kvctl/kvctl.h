/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvctl: command-line view of /dev/kvshare.  Shared declarations of the
 * dispatcher (kvctl.c), argument helpers (kvctl_args.c), pool commands
 * (kvctl_pool.c), page and stats commands (kvctl_pages.c), and the counters
 * both read (kvctl_stats.c).  Calls flow one way: pages -> pool -> stats.
 *
 * Exit status: 0 success, 1 a call or check failed, 2 bad usage.
 */
#ifndef _KVCTL_H
#define _KVCTL_H

#include <stdbool.h>
#include <stdint.h>
#include <linux/kvshare.h>

#include <kvshare/arbiter.h>

#define KVCTL_DEFAULT_DEVICE	"/dev/" KVS_DEVICE_NAME

#define KVCTL_OK		0
#define KVCTL_FAIL		1
#define KVCTL_USAGE		2

/* What every command gets: where the arbiter is, and a handle once open. */
struct kvctl {
	const char *device;		/* NULL: libkv's default */
	struct kv_arbiter *arb;		/* NULL until kvctl_open() */
};

/* A subcommand: name, handler, one-line summary for `kvctl --help`. */
struct kvctl_cmd {
	const char *name;
	int (*run)(struct kvctl *k, int argc, char **argv);
	const char *summary;
};

/*
 * Options of one command.  The parser fills val/set; everything not an
 * option is collected as a positional argument.
 */
struct kvctl_opt {
	const char *name;		/* "--pages" */
	bool has_arg;
	const char *val;
	bool set;
};

#define KVCTL_FLAG(n)	{ .name = (n) }
#define KVCTL_ARG(n)	{ .name = (n), .has_arg = true }
#define KVCTL_END	{ .name = NULL }

/* kvctl_args.c */
int kvctl_parse(const char *cmd, int argc, char **argv, struct kvctl_opt *opts,
		char **pos, int max_pos, int *n_pos);
struct kvctl_opt *kvctl_opt(struct kvctl_opt *opts, const char *name);
int kvctl_num(const char *cmd, const char *what, const char *s,
	      uint64_t min, uint64_t max, uint64_t *out);
int kvctl_octal(const char *cmd, const char *what, const char *s,
		uint64_t max, uint64_t *out);
int kvctl_usage_err(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int kvctl_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int kvctl_ioc_err(const char *cmd, int err, const char *msg);
int kvctl_open(struct kvctl *k);
int kvctl_ioctl(struct kvctl *k, unsigned long req, void *arg);
const char *kvctl_dtype_name(uint32_t dtype);
int kvctl_dtype_parse(const char *s, uint32_t *dtype);
const char *kvctl_state_name(uint32_t state);
int kvctl_state_parse(const char *s, uint32_t *state);

/* kvctl_pool.c */
int kvctl_pool_main(struct kvctl *k, int argc, char **argv);
/* @owner: the --owner argument, or NULL (see kvctl_pool_find's comment). */
int kvctl_pool_find(struct kvctl *k, const char *cmd, const char *name,
		    const char *owner, struct kvs_pool_desc *out);

/* kvctl_user.c */
int kvctl_user_main(struct kvctl *k, int argc, char **argv);
int kvctl_uid_arg(const char *cmd, const char *what, const char *s,
		  uint32_t *uid);
int kvctl_quota_err(struct kvctl *k, const char *cmd, uint64_t more_pages);

/* kvctl_stats.c: a pool's counters and the read-only views' errors */
struct kvctl_json;
/* Returns the ioctl's errno (0 on success), for callers that word it. */
int kvctl_stats_ioctl(struct kvctl *k, uint32_t pool_id, uint32_t flags,
		      struct kvs_pool_stats *st);
int kvctl_view_err(const char *cmd, const struct kvs_pool_desc *d, int err);
int kvctl_stats_get(struct kvctl *k, const char *cmd,
		    const struct kvs_pool_desc *d, uint32_t flags,
		    struct kvs_pool_stats *st);
void kvctl_stats_text(const struct kvs_pool_stats *st);
void kvctl_stats_json(struct kvctl_json *j, const struct kvs_pool_stats *st);

/* kvctl_pages.c: the `stats` and `pages` commands */
int kvctl_pages_main(struct kvctl *k, int argc, char **argv);
int kvctl_stats_main(struct kvctl *k, int argc, char **argv);

#endif /* _KVCTL_H */
