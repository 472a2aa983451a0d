// SPDX-License-Identifier: GPL-2.0
/*
 * kvbench: how long the kvshare arbiter takes per page.
 *
 *   kvbench arbiter  the arbiter core linked in, natively (no transport);
 *   kvbench ioctl    the same scenarios through /dev/kvshare, by ioctl
 *                    and by io_uring, next to the core in the same run,
 *                    with the ratios per row.  Run in the QEMU TCG guest
 *                    (make vmbench), where only the ratios mean anything.
 *   kvbench daemon   the same through kvshared (its shared ring, then its
 *                    socket alone), next to the core.
 */
#include "kvbench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_REPS		31
#define ARBITER_POOLS		"1k,64k,1M"
/* TCG is slow and the guest small: the 1M pool only when asked for. */
#define IOCTL_POOLS		"1k,64k"

struct opts {
	const char *pages;
	uint32_t reps;
	bool json;
	const char *device;
};

static void usage(FILE *f)
{
	fputs("usage: kvbench arbiter [--pages LIST] [--reps R] [--json]\n"
	      "       kvbench ioctl [--pages LIST] [--reps R] [--json] [--device PATH]\n"
	      "       kvbench daemon --device SOCKET [--pages LIST] [--reps R] [--json]\n"
	      "       kvbench chan [--pages LIST] [--reps R] [--json]\n\n"
	      "Median over R repetitions (default 31), in ns per page, of ALLOC,\n"
	      "PUBLISH, LOOKUP+PUT (one LOOKUP of a cached chain, one PUT of its\n"
	      "pages) and ALLOC with eviction (every page CACHED), for chains of\n"
	      "16, 256 and 4096 pages, in pools of each size in LIST (comma\n"
	      "separated, k and M suffixes; default " ARBITER_POOLS " for arbiter,\n"
	      IOCTL_POOLS " for ioctl and daemon).  Before LOOKUP+PUT the pool is filled with\n"
	      "cached chains, so lookups search a full index.\n\n"
	      "arbiter  the arbiter core linked into kvbench, called directly.\n"
	      "ioctl    the same through /dev/kvshare (or --device, $KVSHARE_DEVICE)\n"
	      "         by ioctl and by io_uring, beside the core in the same run,\n"
	      "         with their ratios.\n"
	      "daemon   the same through kvshared, beside the core: page commands on its\n"
	      "         shared ring (daemon), then everything on its socket (socket).\n"
	      "chan     the core beside the same core with the pool's event channel\n"
	      "         open (KVS_IOC_CHAN_OPEN), drained and PUT after each PUBLISH.\n", f);
}

/* --name VALUE or --name=VALUE: true, with the value in *out. */
static bool take_value(int argc, char **argv, int *i, const char *name,
		       const char **out)
{
	size_t len = strlen(name);

	if (strncmp(argv[*i], name, len))
		return false;
	if (argv[*i][len] == '=') {
		*out = argv[*i] + len + 1;
		return true;
	}
	if (argv[*i][len] || *i + 1 >= argc)
		return false;
	*out = argv[++*i];
	return true;
}

static int parse_opts(int argc, char **argv, struct opts *o, bool device_mode)
{
	const char *reps = NULL;
	int i;

	for (i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			o->json = true;
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			exit(0);
		} else if (!take_value(argc, argv, &i, "--pages", &o->pages) &&
			   !take_value(argc, argv, &i, "--reps", &reps) &&
			   !(device_mode &&
			     take_value(argc, argv, &i, "--device", &o->device))) {
			fprintf(stderr, "kvbench: %s: unknown option or missing value '%s' (see kvbench --help)\n",
				argv[1], argv[i]);
			return -1;
		}
	}
	if (reps && bench_parse_u32(reps, 1, 100000, &o->reps)) {
		fprintf(stderr, "kvbench: --reps: '%s' is not a count in 1..100000\n",
			reps);
		return -1;
	}
	return 0;
}

static int setup_results(struct bench_results *r, const struct opts *o)
{
	int n;

	bench_results_init(r);
	r->reps = o->reps;
	n = bench_parse_sizes(o->pages, r->pools, MAX_POOLS);
	if (n < 0) {
		fprintf(stderr, "kvbench: --pages: '%s' is not a list of up to %d "
			"pool sizes in 1..%u (k and M suffixes allowed)\n",
			o->pages, MAX_POOLS, KVS_MAX_POOL_PAGES);
		return -1;
	}
	r->n_pools = n;
	return 0;
}

/* Every pool size on one target; failures become notes. */
static int run_target(struct bench_target *t, struct bench_results *r,
		      int slot, uint64_t max_pages)
{
	int p, ret, failed = 0;

	for (p = 0; p < r->n_pools; p++) {
		if (r->pools[p] > max_pages) {
			r->note[p][slot] = "larger than the arbiter's max_pool_pages";
			continue;
		}
		ret = bench_pool(t, r, p, slot);
		if (ret) {
			r->note[p][slot] = strerror(-ret);
			failed = 1;
		}
	}
	return failed;
}

static int run_core(struct bench_results *r)
{
	struct bench_target t;
	int ret;

	ret = target_core_init(&t);
	if (ret) {
		fprintf(stderr, "kvbench: arbiter core init failed: %s\n",
			strerror(-ret));
		return 1;
	}
	ret = run_target(&t, r, SLOT_CORE, KVS_MAX_POOL_PAGES);
	t.fini(&t);
	return ret;
}

static const struct bench_view view_core = { "arbiter", 1, { SLOT_CORE } };
static const struct bench_view view_chan = { "chan", 2, { SLOT_CORE, SLOT_CHAN } };
static const struct bench_view view_ioctl = {
	"ioctl", 3, { SLOT_CORE, SLOT_IOCTL, SLOT_URING }
};
static const struct bench_view view_daemon = {
	"daemon", 3, { SLOT_CORE, SLOT_DAEMON, SLOT_SOCKET }
};

static void report(const struct bench_results *r, const struct opts *o,
		   const struct bench_view *v, const char *title)
{
	if (o->json) {
		bench_report_json(r, v);
		return;
	}
	printf("# kvbench %s: median of %u repetitions\n", title, r->reps);
	if (v == &view_ioctl)
		printf("# under QEMU TCG absolute times are emulated: only the "
		       "ratios to the core are meaningful\n");
	bench_report_table(r, v);
}

static int cmd_arbiter(const struct opts *o)
{
	struct bench_results r;
	int ret;

	if (setup_results(&r, o))
		return 2;
	ret = run_core(&r);
	report(&r, o, &view_core, "arbiter: native arbiter core, no transport");
	return ret;
}

/* The core rows side by side with the same core with a channel open. */
static int cmd_chan(const struct opts *o)
{
	struct bench_results r;
	struct bench_target t;
	int ret;

	if (setup_results(&r, o))
		return 2;
	ret = run_core(&r);
	if (target_core_chan_init(&t)) {
		fprintf(stderr, "kvbench: arbiter core init failed\n");
		return 1;
	}
	ret |= run_target(&t, &r, SLOT_CHAN, KVS_MAX_POOL_PAGES);
	t.fini(&t);
	report(&r, o, &view_chan, "chan: native core, and with the pool's event channel "
	       "open (PUBLISH includes the tier's read and PUT of its records)");
	return ret;
}

static uint64_t device_max_pages(struct bench_target *t)
{
	struct kvs_info in = { 0 };

	if (t->ctl(t, KVS_IOC_INFO, &in))
		return KVS_MAX_POOL_PAGES;
	return in.max_pool_pages;
}

/* Run one transport into its slot; 1 if any pool failed. */
static int run_transport(struct bench_results *r, struct bench_target *t, int slot)
{
	int failed = run_target(t, r, slot, device_max_pages(t));

	t->fini(t);
	return failed;
}

static int cmd_ioctl(const struct opts *o)
{
	struct bench_results r;
	struct bench_target t;
	int ret, failed;

	if (setup_results(&r, o))
		return 2;
	failed = run_core(&r);
	ret = target_ioctl_init(&t, o->device);
	if (ret) {
		report(&r, o, &view_core, "ioctl: native arbiter core only");
		fprintf(o->json ? stderr : stdout, "# kvbench: %s: %s: no ioctl "
			"rows\n", o->device, strerror(-ret));
		/* No device is a fact of this machine, not a failure. */
		return ret == -ENOENT ? failed : 1;
	}
	failed |= run_transport(&r, &t, SLOT_IOCTL);
	/* The same rows once more with the page commands on io_uring. */
	ret = target_uring_init(&t, o->device);
	if (!ret)
		failed |= run_transport(&r, &t, SLOT_URING);
	else
		failed = 1;
	report(&r, o, &view_ioctl,
	       "ioctl: /dev/kvshare by ioctl and by io_uring vs the native core");
	return failed;
}

static int cmd_daemon(const struct opts *o)
{
	struct bench_results r;
	struct bench_target t;
	int ret, failed;

	if (!o->device) {
		fprintf(stderr, "kvbench: daemon: --device SOCKET is required\n");
		return 2;
	}
	if (setup_results(&r, o))
		return 2;
	ret = target_daemon_init(&t, o->device);
	if (ret) {
		fprintf(stderr, "kvbench: daemon: %s: %s\n", o->device, strerror(-ret));
		return 1;
	}
	failed = run_core(&r);
	failed |= run_transport(&r, &t, SLOT_DAEMON);
	/* The same rows with every command on the socket, as before the ring. */
	ret = target_socket_init(&t, o->device);
	if (ret) {
		fprintf(stderr, "kvbench: daemon: %s: %s\n", o->device, strerror(-ret));
		return 1;
	}
	failed |= run_transport(&r, &t, SLOT_SOCKET);
	report(&r, o, &view_daemon, "daemon: kvshared (shared ring; socket alone) vs the native core");
	return failed;
}

int bench_attn_main(int argc, char **argv);	/* bench_attn.c */
int bench_radix_main(int argc, char **argv);	/* bench_radix.c */

int main(int argc, char **argv)
{
	const char *env = getenv("KVSHARE_DEVICE");
	struct opts o = { .reps = DEFAULT_REPS };
	bool ioctl_mode, daemon_mode;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "attn"))
		return bench_attn_main(argc, argv);
	if (!strcmp(argv[1], "radix"))
		return bench_radix_main(argc, argv);
	ioctl_mode = !strcmp(argv[1], "ioctl");
	daemon_mode = !strcmp(argv[1], "daemon");
	if (!strcmp(argv[1], "chan")) {
		o.pages = ARBITER_POOLS;
		if (parse_opts(argc, argv, &o, false))
			return 2;
		return cmd_chan(&o);
	}
	if (!ioctl_mode && !daemon_mode && strcmp(argv[1], "arbiter")) {
		fprintf(stderr, "kvbench: unknown mode '%s' (arbiter, ioctl or daemon)\n",
			argv[1]);
		return 2;
	}
	if (ioctl_mode)
		o.device = env && *env ? env : "/dev/" KVS_DEVICE_NAME;
	o.pages = ioctl_mode || daemon_mode ? IOCTL_POOLS : ARBITER_POOLS;
	if (parse_opts(argc, argv, &o, ioctl_mode || daemon_mode))
		return 2;
	if (daemon_mode)
		return cmd_daemon(&o);
	return ioctl_mode ? cmd_ioctl(&o) : cmd_arbiter(&o);
}
