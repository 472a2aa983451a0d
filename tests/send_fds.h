/* SPDX-License-Identifier: GPL-2.0 */
/*
 * One sendmsg() carrying descriptors (SCM_RIGHTS), for the suites that
 * speak kvshared's socket raw: the daemon suites on the host and the
 * guest's hostile-descriptor suites.
 *
 * System headers only, as tests/open_fds.h, so that a static guest test
 * includes it without libkv.
 */
#ifndef KVS_TESTS_SEND_FDS_H
#define KVS_TESTS_SEND_FDS_H

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define TEST_SEND_FDS_MAX	253	/* SCM_MAX_FD: the most one message carries */

/*
 * @len bytes of @buf on @sock in one sendmsg(@flags | MSG_NOSIGNAL), the
 * @nfds descriptors @fds (at most TEST_SEND_FDS_MAX) riding on them: the
 * bytes sent, or -errno.
 */
static inline ssize_t test_send_fds(int sock, const void *buf, size_t len, const int *fds,
				    int nfds, int flags)
{
	union {
		char b[CMSG_SPACE(TEST_SEND_FDS_MAX * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { (void *)buf, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (nfds < 0 || nfds > TEST_SEND_FDS_MAX)
		return -EINVAL;
	if (nfds) {
		struct cmsghdr *c;

		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.b;
		mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	n = sendmsg(sock, &mh, flags | MSG_NOSIGNAL);
	return n < 0 ? -errno : n;
}

#endif /* KVS_TESTS_SEND_FDS_H */
