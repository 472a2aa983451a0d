// SPDX-License-Identifier: GPL-2.0
/*
 * /dev/kvshare as a bench target: one fd for control, and a fresh fd per
 * pool for data, because a file attaches to one pool for its whole life.
 */
#include "kvbench.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/ioctl.h>

struct ioctl_target {
	const char *device;
	int ctl;
	int data;			/* -1 when closed */
};

static int do_ioctl(int fd, unsigned int cmd, void *arg)
{
	return ioctl(fd, cmd, arg) ? -errno : 0;
}

static int ioctl_ctl(struct bench_target *t, unsigned int cmd, void *arg)
{
	struct ioctl_target *it = t->priv;

	return do_ioctl(it->ctl, cmd, arg);
}

static int ioctl_open(struct bench_target *t)
{
	struct ioctl_target *it = t->priv;

	it->data = open(it->device, O_RDWR | O_CLOEXEC);
	return it->data < 0 ? -errno : 0;
}

static int ioctl_data(struct bench_target *t, unsigned int cmd, void *arg)
{
	struct ioctl_target *it = t->priv;

	return do_ioctl(it->data, cmd, arg);
}

/* Closing the file is what releases its holdings: the thing under test. */
static void ioctl_close(struct bench_target *t)
{
	struct ioctl_target *it = t->priv;

	if (it->data >= 0)
		close(it->data);
	it->data = -1;
}

static void ioctl_fini(struct bench_target *t)
{
	struct ioctl_target *it = t->priv;

	ioctl_close(t);
	close(it->ctl);
	free(it);
	t->priv = NULL;
}

int target_ioctl_init(struct bench_target *t, const char *device)
{
	struct ioctl_target *it;

	it = calloc(1, sizeof(*it));
	if (!it)
		return -ENOMEM;
	it->device = device;
	it->data = -1;
	it->ctl = open(device, O_RDWR | O_CLOEXEC);
	if (it->ctl < 0) {
		int err = -errno;

		free(it);
		return err;
	}
	*t = (struct bench_target) {
		.name = "ioctl", .ctl = ioctl_ctl, .open = ioctl_open,
		.data = ioctl_data, .close = ioctl_close, .fini = ioctl_fini,
		.priv = it,
	};
	return 0;
}
