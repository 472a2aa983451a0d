// SPDX-License-Identifier: GPL-2.0
/*
 * Doorbells (bell.h).  Nothing here may block or raise a signal: the
 * daemon's one thread rings them with a pool lock held (the core's
 * waker), and a client may fill, close, reopen or change the flags of
 * its end at any time.
 *
 * Not pipes: both ends of a pipe share one mutex, which pipe_read() and
 * pipe_write() hold while they copy to or from user memory and which
 * close() takes too.  A client that reads its end into a page that never
 * arrives (a file on its own FUSE mount) would hold it for good, and the
 * daemon's next write, drain or close would stop its loop for everyone.
 * A unix socket copies the sender's bytes before it takes the receiver's
 * locks, and an eventfd copies outside its spinlock: a client's fault
 * only ever stops the client.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "bell.h"

static int bell_errno(void)
{
	return errno == ENFILE ? -EMFILE : -errno;
}

/*
 * The sq bell: an eventfd, one file for both.  A client cannot attach
 * descriptors to it, and its writes are whole 8-byte counts.
 */
static int bell_eventfd(int *mine, int *theirs)
{
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), dup;

	if (fd < 0)
		return bell_errno();
	dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dup < 0) {
		int ret = bell_errno();

		close(fd);
		return ret;
	}
	*mine = fd;
	*theirs = dup;
	return 0;
}

/*
 * A daemon-to-client bell: a connected pair of unix stream sockets.  Ours
 * is shut for reading before the client has its end, so nothing the
 * client sends (bytes, or descriptors whose last close would then run on
 * our loop) is ever queued to us: its sends fail with EPIPE.  The
 * smallest send buffer bounds the bytes a client that never reads makes
 * us keep; failing leaves the default.
 */
static int bell_socket(int *mine, int *theirs)
{
	int sv[2], small = 1, ret;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv))
		return bell_errno();
	if (shutdown(sv[0], SHUT_RD)) {
		ret = -errno;
		close(sv[0]);
		close(sv[1]);
		return ret;
	}
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	*mine = sv[0];
	*theirs = sv[1];
	return 0;
}

int kvsd_bell_new(bool daemon_reads, int *mine, int *theirs)
{
	return daemon_reads ? bell_eventfd(mine, theirs) : bell_socket(mine, theirs);
}

/*
 * Non-blocking per call, whatever the flags of the client's end; a full
 * buffer has woken the client already, and a closed or shut end
 * (EPIPE) has nobody to wake.
 */
void kvsd_bell_ring(int fd)
{
	static const char one = 1;
	ssize_t n;

	do {
		n = send(fd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	} while (n < 0 && errno == EINTR);
}

/*
 * One read empties the count.  RWF_NOWAIT, not the file's O_NONBLOCK:
 * the client shares the file and may clear it.  Without RWF_NOWAIT
 * (EOPNOTSUPP: kernels before 5.10; ENOSYS: before 4.6) the file's flag
 * is all there is.
 */
void kvsd_bell_drain(int fd)
{
	uint64_t count;
	struct iovec iov = { &count, sizeof(count) };
	ssize_t n;

	do {
		n = preadv2(fd, &iov, 1, -1, RWF_NOWAIT);
	} while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EOPNOTSUPP || errno == ENOSYS))
		n = read(fd, &count, sizeof(count));
}
