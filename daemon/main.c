// SPDX-License-Identifier: GPL-2.0
/*
 * kvshared: arguments, setup, running the event loop and an orderly
 * shutdown.
 *
 * One thread runs everything from one epoll set (loop.c): the arbiter
 * socket, the metrics endpoint and a signalfd for SIGTERM/SIGINT, so that
 * shutdown is ordinary code (close every client, which releases its
 * holdings, then the pools, then the core) rather than work in a signal
 * handler.  The top of the daemon: it calls the others, nothing calls it.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>

#include "closer.h"
#include "core.h"
#include "kvshared.h"
#include "remote/ctl.h"
#include "remote/remote.h"
#include "server.h"
#include "user.h"

#define TICK_MS		1000

/* ---- signals --------------------------------------------------------------- */

/* Set from the signalfd, in the loop itself: no handler, no volatile. */
static int stop_signal;
static struct kvsd_watch sig_watch = { .fd = -1 };
/* What SIGHUP rereads: the remote tiers' MAC keys. */
static const struct kvsd_config *hup_cfg;

static void on_signal(struct kvsd_watch *w, uint32_t events)
{
	struct signalfd_siginfo si;

	(void)events;
	while (read(w->fd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGHUP) {
			kvsd_log("SIGHUP: rereading the remote tiers' MAC key files "
				 "(the rest of the configuration needs a restart)");
			kvsd_remote_reload(hup_cfg);
			continue;
		}
		stop_signal = si.ssi_signo;
	}
}

static int signals_setup(void)
{
	sigset_t set;

	/* A client that goes away mid-reply must not kill the daemon. */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &set, NULL))
		return -errno;
	sig_watch.fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sig_watch.fd < 0)
		return -errno;
	sig_watch.fn = on_signal;
	return kvsd_watch_add(&sig_watch, EPOLLIN);
}

/* ---- where the arbiter is ---------------------------------------------------- */

static int open_module(struct kvsd *d)
{
	struct kvs_info info;

	memset(&info, 0, sizeof(info));
	if (ioctl(d->dev_fd, KVS_IOC_INFO, &info)) {
		kvsd_log("%s: KVS_IOC_INFO: %s (not a kvshare device?)", d->cfg->device,
			 strerror(errno));
		return -ENODEV;
	}
	if (info.abi_version != KVS_ABI_VERSION) {
		kvsd_log("%s: ABI version %u, kvshared speaks %u", d->cfg->device,
			 info.abi_version, KVS_ABI_VERSION);
		return -EPROTO;
	}
	d->mode = KVSD_MODE_MODULE;
	kvsd_log("module mode: %s (max %u pools of %llu pages); clients use the "
		 "device directly, no arbiter socket", d->cfg->device, info.max_pools,
		 (unsigned long long)info.max_pool_pages);
	/* The module enforces its own parameters on every opener. */
	if (d->cfg->user_keys_given)
		kvsd_log("module mode: the per-user limits are the module's "
			 "parameters (/sys/module/kvshare/parameters/max_user_*); "
			 "kvshared's max_user_* settings do not apply");
	return 0;
}

static int open_core(struct kvsd *d)
{
	struct kvs_limits limits = {
		.max_pools = d->cfg->max_pools,
		.max_pool_pages = d->cfg->max_pool_pages,
		.features = KVS_FEAT_MEM_FD | KVS_FEAT_DAEMON | KVS_FEAT_DEVICE_MEM,
		.max_user_pools = d->cfg->max_user_pools,
		.max_user_pool_pages = d->cfg->max_user_pool_pages,
		.max_user_held = d->cfg->max_user_held,
		.max_user_held_bytes = d->cfg->max_user_held_bytes,
	};
	int ret = kvs_core_init(&limits);

	if (ret) {
		kvsd_log("arbiter core: %s", strerror(-ret));
		return ret;
	}
	d->self = kvs_client_new();
	if (!d->self) {
		kvs_core_exit();
		return -ENOMEM;
	}
	d->mode = KVSD_MODE_SOCKET;
	kvsd_log("socket mode: the arbiter runs in kvshared (max %u pools of "
		 "%llu pages)", limits.max_pools,
		 (unsigned long long)limits.max_pool_pages);
	kvsd_log("per-user limits (0: none): max_user_pools %u, "
		 "max_user_pool_pages %llu, max_user_held %llu, "
		 "max_user_held_bytes %llu", limits.max_user_pools,
		 (unsigned long long)limits.max_user_pool_pages,
		 (unsigned long long)limits.max_user_held,
		 (unsigned long long)limits.max_user_held_bytes);
	return 0;
}

/* auto: the module when its device opens; absent means the socket. */
static int choose_mode(struct kvsd *d)
{
	const struct kvsd_config *cfg = d->cfg;

	if (cfg->mode == KVSD_MODE_OPT_SOCKET)
		return open_core(d);
	d->dev_fd = open(cfg->device, O_RDWR | O_CLOEXEC);
	if (d->dev_fd >= 0)
		return open_module(d);
	if (cfg->mode == KVSD_MODE_AUTO &&
	    (errno == ENOENT || errno == ENODEV || errno == ENXIO))
		return open_core(d);
	kvsd_log("%s: %s%s", cfg->device, strerror(errno),
		 cfg->mode == KVSD_MODE_AUTO ?
		 " (use --mode socket to serve the socket anyway)" : "");
	return -errno;
}

static void close_arbiter(struct kvsd *d)
{
	kvsd_pools_destroy(d);
	if (d->mode == KVSD_MODE_SOCKET) {
		if (d->self)
			kvs_client_free(d->self);
		d->self = NULL;
		kvs_core_exit();
	}
	if (d->dev_fd >= 0)
		close(d->dev_fd);
	d->dev_fd = -1;
}

/* ---- main ------------------------------------------------------------------------ */

static bool should_stop(void *arg)
{
	(void)arg;
	return stop_signal != 0;
}

/* Once a tick (a second at most): the modules' timers. */
static void tick(void *arg)
{
	(void)arg;
	kvsd_server_tick();
	kvsd_metrics_tick();
	kvsd_log_tick();
}

static int run(struct kvsd *d)
{
	unsigned int tick_ms;
	int ret;

	ret = choose_mode(d);
	if (ret) {
		close_arbiter(d);
		return 1;
	}
	ret = kvsd_pools_create(d);
	if (ret)
		goto out;
	ret = kvsd_remote_start(d);
	if (!ret)
		ret = kvsd_remote_state_start(d);
	if (ret)
		goto out;
	if (d->mode == KVSD_MODE_SOCKET) {
		ret = kvsd_server_start(d, d->cfg->socket);
		if (ret)
			goto out;
	}
	if (d->cfg->metrics) {
		ret = kvsd_metrics_start(d, d->cfg->metrics);
		if (ret)
			goto out;
	}
	kvsd_log("ready");
	/* Stalled clients are dropped within a quarter of the timeout. */
	tick_ms = d->cfg->stall_timeout_ms / 4;
	if (tick_ms > TICK_MS)
		tick_ms = TICK_MS;
	ret = kvsd_loop_run(should_stop, tick, NULL, tick_ms);
	if (stop_signal)
		kvsd_log("%s received: shutting down", strsignal(stop_signal));
out:
	kvsd_metrics_stop();
	kvsd_server_stop();
	kvsd_remote_stop();
	kvsd_users_stop();	/* after every holder of a ledger */
	kvsd_remote_state_stop();
	close_arbiter(d);
	/* Paths and specs were checked with the configuration: all runtime. */
	if (ret)
		return 1;
	return stop_signal ? 0 : 1;
}

/*
 * The end.  A closer (closer.h) still in close() waits on a client's file
 * system, past even SIGKILL (a FUSE flush waits for its answer): nothing
 * here waits for it, but the kernel keeps the process, a zombie, until
 * that close() returns.  Say so, and leave by _exit(), since an exit()
 * handler may wait on every thread (LeakSanitizer stops them all to scan
 * them, and a thread in such a close() never stops).
 */
static int finish(int status)
{
	unsigned int busy = kvsd_closer_busy(), queued = kvsd_closer_queued();

	if (!busy && !queued)
		return status;
	kvsd_log("%u client descriptor%s still being closed, %u more queued: the "
		 "process ends when %s file system answers, or its connection is "
		 "aborted (FUSE: /sys/fs/fuse/connections/*/abort)", busy,
		 busy == 1 ? " is" : "s are", queued, busy == 1 ? "its" : "their");
	_exit(status);
}

/*
 * As many descriptors as the hard limit allows: a client's descriptors
 * that recvmsg() cannot install for want of a free one are released by
 * the kernel on the event loop's thread (server.c says what is needed).
 */
static void nofile_raise(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur == rl.rlim_max)
		return;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl))
		kvsd_log("setrlimit(RLIMIT_NOFILE): %s", strerror(errno));
}

int main(int argc, char **argv)
{
	struct kvsd d = { .dev_fd = -1 };
	int ret;

	ret = kvsd_config_load(argc, argv, &d.cfg);
	if (ret) {
		kvsd_config_free(d.cfg);
		return ret == 1 ? 0 : ret;
	}
	kvsd_verbose = d.cfg->verbose;
	hup_cfg = d.cfg;
	nofile_raise();
	ret = kvsd_loop_init();
	if (!ret)
		ret = signals_setup();
	if (ret) {
		kvsd_log("setup: %s", strerror(-ret));
		kvsd_loop_fini();
		kvsd_config_free(d.cfg);
		return 1;
	}
	kvsd_log("starting (pid %d, uid %u, %u pools configured)", getpid(),
		 getuid(), d.cfg->n_pools);
	ret = run(&d);
	close(sig_watch.fd);
	kvsd_loop_fini();
	kvsd_config_free(d.cfg);
	if (!ret)
		kvsd_log("stopped");
	return finish(ret);
}
