// SPDX-License-Identifier: GPL-2.0
/*
 * kvctl: inspect and manage kvshare pools through /dev/kvshare ioctls.
 *
 * This file holds main(), the global options, the command table and the
 * `info` command.  kvctl never attaches to a pool: a file can attach only
 * once, and every read-only view (list, stats, pages) takes a pool id, so
 * names (scoped by owner: see kvctl_pool_find()) are resolved to ids
 * through KVS_IOC_POOL_LIST instead.
 */
#include "kvctl.h"
#include "kvctl_json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmd_info(struct kvctl *k, int argc, char **argv);
static int cmd_help(struct kvctl *k, int argc, char **argv);

static const struct kvctl_cmd commands[] = {
	{ "info", cmd_info, "arbiter ABI version, limits and features" },
	{ "pool", kvctl_pool_main, "create, list, show or destroy pools; their remote tier" },
	{ "pages", kvctl_pages_main, "list the pages of a pool with their state" },
	{ "stats", kvctl_stats_main, "a pool's counters; --check verifies invariants" },
	{ "user", kvctl_user_main, "a user's pools and pages against the per-user limits" },
	{ "help", cmd_help, "this text" },
	{ NULL, NULL, NULL }
};

static void usage(FILE *f)
{
	const struct kvctl_cmd *c;

	fputs("usage: kvctl [--device PATH] COMMAND [ARGS...]\n\n"
	      "Commands:\n", f);
	for (c = commands; c->name; c++)
		fprintf(f, "  %-8s %s\n", c->name, c->summary);
	fputs("\nSubcommands of pool: create, list, show, destroy, remote.\n"
	      "The arbiter is --device PATH (the module's device or the kvshared\n"
	      "socket), else $KVSHARE_DEVICE, else " KVCTL_DEFAULT_DEVICE " if it\n"
	      "exists, else the daemon's socket " KVS_DAEMON_SOCKET ".\n"
	      "Pool names are scoped by owner: NAME is the pool of that name owned\n"
	      "by --owner UID|USER, else by $KVSHARE_POOL_OWNER, else by you, else\n"
	      "by the owner libkv attaches by default (the daemon's uid on its\n"
	      "socket, root on the module).\n"
	      "Run 'kvctl COMMAND --help' for the options of a command.\n", f);
}

static int cmd_help(struct kvctl *k, int argc, char **argv)
{
	(void)k;
	(void)argc;
	(void)argv;
	usage(stdout);
	return KVCTL_OK;
}

static void info_usage(void)
{
	fputs("usage: kvctl info [--json]\n\n"
	      "Print what the arbiter behind the device is: ABI version, features,\n"
	      "limits, and how many pools and objects exist now.\n", stdout);
}

static void info_text(const struct kvs_info *in)
{
	printf("abi_version     %u\n", in->abi_version);
	printf("arbiter         %s\n",
	       in->features & KVS_FEAT_DAEMON ? "kvshared daemon" : "kvshare.ko");
	printf("features        0x%" PRIx64 "%s%s%s%s\n", (uint64_t)in->features,
	       in->features & KVS_FEAT_URING_CMD ? " uring_cmd" : "",
	       in->features & KVS_FEAT_MEM_FD ? " mem_fd" : "",
	       in->features & KVS_FEAT_DAEMON ? " daemon" : "",
	       in->features & KVS_FEAT_DEVICE_MEM ? " device_mem" : "");
	printf("max_pool_pages  %" PRIu64 "\n", (uint64_t)in->max_pool_pages);
	printf("max_batch       %u\n", in->max_batch);
	printf("max_pools       %u\n", in->max_pools);
	printf("n_pools         %u\n", in->n_pools);
	printf("n_objects       %" PRIu64 "\n", (uint64_t)in->n_objects);
}

static void info_json(const struct kvs_info *in)
{
	struct kvctl_json j;

	kvctl_json_init(&j, stdout);
	kvctl_json_obj(&j, NULL);
	kvctl_json_u64(&j, "abi_version", in->abi_version);
	kvctl_json_u64(&j, "features", in->features);
	kvctl_json_bool(&j, "uring_cmd", in->features & KVS_FEAT_URING_CMD);
	kvctl_json_bool(&j, "mem_fd", in->features & KVS_FEAT_MEM_FD);
	kvctl_json_bool(&j, "daemon", in->features & KVS_FEAT_DAEMON);
	kvctl_json_bool(&j, "device_mem", in->features & KVS_FEAT_DEVICE_MEM);
	kvctl_json_u64(&j, "max_pool_pages", in->max_pool_pages);
	kvctl_json_u64(&j, "max_batch", in->max_batch);
	kvctl_json_u64(&j, "max_pools", in->max_pools);
	kvctl_json_u64(&j, "n_pools", in->n_pools);
	kvctl_json_u64(&j, "n_objects", in->n_objects);
	kvctl_json_end_obj(&j);
	kvctl_json_finish(&j);
}

static int cmd_info(struct kvctl *k, int argc, char **argv)
{
	struct kvctl_opt opts[] = { KVCTL_FLAG("--json"), KVCTL_END };
	struct kvs_info in;
	int n_pos, ret, err;

	ret = kvctl_parse("info", argc, argv, opts, NULL, 0, &n_pos);
	if (ret < 0) {
		info_usage();
		return KVCTL_OK;
	}
	if (ret)
		return ret;
	if (kvctl_open(k))
		return KVCTL_FAIL;
	memset(&in, 0, sizeof(in));
	err = kvctl_ioctl(k, KVS_IOC_INFO, &in);
	if (err)
		return kvctl_ioc_err("info", err, NULL);
	if (opts[0].set)
		info_json(&in);
	else
		info_text(&in);
	return KVCTL_OK;
}

/*
 * Take --device PATH / --device=PATH out of argv wherever it appears
 * before "--", so that `kvctl pool list --device X` works as well as
 * `kvctl --device X pool list`.  Returns the new argc, or -1.
 */
static int take_device(int argc, char **argv, const char **device)
{
	int i, out = 1;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--")) {
			while (i < argc)
				argv[out++] = argv[i++];
			break;
		}
		if (!strncmp(a, "--device=", 9)) {
			*device = a + 9;
		} else if (!strcmp(a, "--device")) {
			if (i + 1 >= argc) {
				kvctl_err("option '--device' needs a path");
				return -1;
			}
			*device = argv[++i];
		} else {
			argv[out++] = argv[i];
		}
	}
	argv[out] = NULL;
	return out;
}

int main(int argc, char **argv)
{
	struct kvctl k = { 0 };
	const struct kvctl_cmd *c;
	const char *env = getenv("KVSHARE_DEVICE");
	int ret;

	k.device = env && *env ? env : NULL;
	argc = take_device(argc, argv, &k.device);
	if (argc < 0)
		return KVCTL_USAGE;
	if (argc < 2) {
		usage(stderr);
		return KVCTL_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
		return cmd_help(&k, 0, NULL);
	for (c = commands; c->name; c++)
		if (!strcmp(c->name, argv[1]))
			break;
	if (!c->name) {
		kvctl_err("unknown command '%s' (see 'kvctl --help')", argv[1]);
		return KVCTL_USAGE;
	}
	ret = c->run(&k, argc - 2, argv + 2);
	kv_arbiter_close(k.arb);
	if (fflush(stdout) || ferror(stdout)) {
		kvctl_err("error writing output");
		return KVCTL_FAIL;
	}
	return ret;
}
