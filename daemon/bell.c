// SPDX-License-Identifier: GPL-2.0
/*
 * Doorbells (bell.h).  Nothing here may block or raise a signal: the
 * daemon's one thread rings them with a pool lock held (the core's
 * waker), and a client may fill, close or reopen its end at any time.
 * SIGPIPE is ignored by main.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "bell.h"

#define BELL_BYTES	4096	/* the smallest pipe: one page */

int kvsd_bell_new(bool daemon_reads, int *mine, int *theirs)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC | O_NONBLOCK))
		return errno == ENFILE ? -EMFILE : -errno;
	/* Fewer bytes a client can make us keep; failing leaves the default. */
	fcntl(p[1], F_SETPIPE_SZ, BELL_BYTES);
	*mine = p[daemon_reads ? 0 : 1];
	*theirs = p[daemon_reads ? 1 : 0];
	return 0;
}

void kvsd_bell_ring(int fd)
{
	static const char one;
	ssize_t n;

	do {
		n = write(fd, &one, 1);
	} while (n < 0 && errno == EINTR);
}

void kvsd_bell_drain(int fd)
{
	char buf[256];
	int i;

	for (i = 0; i < BELL_BYTES / (int)sizeof(buf) + 1; i++)
		if (read(fd, buf, sizeof(buf)) < (ssize_t)sizeof(buf))
			return;
}
