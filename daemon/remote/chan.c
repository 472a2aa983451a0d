// SPDX-License-Identifier: GPL-2.0
/*
 * The tier's feed (tier.h): its pool's event channel (KVS_IOC_CHAN_OPEN,
 * <linux/kvshare.h>), reached one of two ways, chosen once when the tier
 * starts, as libkv's client picks its transport:
 *
 *   core    socket mode: kvshared hosts the arbiter core, so the channel
 *           is the core's own (core/core_chan.c), its wake rings an
 *           eventfd on the loop, and PUT and PUBLISH are core calls on
 *           the channel's client;
 *   dev     module mode: the channel is a file of /dev/kvshare, read(2)
 *           for records, polled by the loop, ioctl(2) for PUT and PUBLISH.
 *
 * Either way the tier sees the same records and makes the same calls.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>

#include "core.h"
#include "tier.h"

/* ---- core: the arbiter in this process ------------------------------------ */

/* Under the pool's lock, once per record: one eventfd write per wakeup. */
static void core_wake(void *arg)
{
	struct tier *t = arg;
	uint64_t one = 1;

	if (atomic_exchange(&t->chan_rung, true))
		return;
	if (write(t->cw.fd, &one, sizeof(one)) < 0) {
		/* EAGAIN: a full count, the loop is woken already. */
	}
}

static int core_open(struct tier *t, struct kvs_chan_open *req)
{
	/* The tier acts as the pool's owner, as an admin: nothing is charged. */
	struct kvs_cred cred = { .uid = t->owner, .gid = t->owner, .admin = 1 };
	int ret;

	t->cw.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (t->cw.fd < 0)
		return -errno;
	ret = kvs_chan_open(req, &cred, core_wake, t, &t->chan);
	if (ret) {
		close(t->cw.fd);
		t->cw.fd = -1;
	}
	return ret;
}

static int core_read(struct tier *t, struct kvs_event *ev, uint32_t max)
{
	uint64_t v;

	/* Cleared before the ring is read: a record after this rings again. */
	if (atomic_exchange(&t->chan_rung, false) &&
	    read(t->cw.fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		return -errno;
	return kvs_chan_read(t->chan, ev, max);
}

static int core_cmd(struct tier *t, unsigned int cmd, void *arg)
{
	struct kvs_cred cred = { .uid = t->owner, .gid = t->owner, .admin = 1 };
	struct kvs_call call = {
		.cred = &cred,
		.copy_in = kvsd_self_copy_in,
		.copy_out = kvsd_self_copy_out,
	};

	return kvs_cmd(kvs_chan_client(t->chan), cmd, arg, &call);
}

static void core_close(struct tier *t)
{
	if (t->chan)
		kvs_chan_close(t->chan);	/* every reference and claim goes back */
	t->chan = NULL;
	if (t->cw.fd >= 0)
		close(t->cw.fd);
	t->cw.fd = -1;
}

const struct tier_chan_ops kvsd_tier_chan_core = {
	.name	= "core",
	.open	= core_open,
	.read	= core_read,
	.cmd	= core_cmd,
	.close	= core_close,
};

/* ---- dev: the module's channel file --------------------------------------- */

static int dev_open(struct tier *t, struct kvs_chan_open *req)
{
	int fl;

	if (ioctl(t->dev_fd, KVS_IOC_CHAN_OPEN, req))
		return -errno;
	t->cw.fd = req->fd;
	/* The loop never blocks on it: read until EAGAIN. */
	fl = fcntl(t->cw.fd, F_GETFL);
	if (fl < 0 || fcntl(t->cw.fd, F_SETFL, fl | O_NONBLOCK)) {
		close(t->cw.fd);
		t->cw.fd = -1;
		return -errno;
	}
	return 0;
}

static int dev_read(struct tier *t, struct kvs_event *ev, uint32_t max)
{
	ssize_t n = read(t->cw.fd, ev, (size_t)max * sizeof(*ev));

	if (n < 0)
		return errno == EAGAIN ? 0 : -errno;
	if (n % sizeof(*ev))
		return -EPROTO;
	return n / sizeof(*ev);
}

static int dev_cmd(struct tier *t, unsigned int cmd, void *arg)
{
	return ioctl(t->cw.fd, cmd, arg) ? -errno : 0;
}

static void dev_close(struct tier *t)
{
	if (t->cw.fd >= 0)
		close(t->cw.fd);	/* ->release gives everything back */
	t->cw.fd = -1;
}

const struct tier_chan_ops kvsd_tier_chan_dev = {
	.name	= "dev",
	.open	= dev_open,
	.read	= dev_read,
	.cmd	= dev_cmd,
	.close	= dev_close,
};
