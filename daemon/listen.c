// SPDX-License-Identifier: GPL-2.0
/*
 * Listening unix sockets (listen.h): the arbiter's and the metrics'.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "listen.h"
#include "log.h"

static void mkdir_parents(const char *path)
{
	char *dir = strdup(path), *p;

	if (!dir)
		return;
	for (p = dir + 1; (p = strchr(p, '/')); p++) {
		*p = '\0';
		mkdir(dir, 0755);	/* EEXIST is fine; bind reports the rest */
		*p = '/';
	}
	free(dir);
}

/* 0: the path is free now; < 0: logged. */
static int unix_stale(const char *path, const struct sockaddr_un *sa)
{
	struct stat st;
	int fd, ret;

	if (lstat(path, &st)) {
		if (errno == ENOENT)
			return 0;
		kvsd_log("%s: %s", path, strerror(errno));
		return -errno;
	}
	if (!S_ISSOCK(st.st_mode)) {
		kvsd_log("%s: exists and is not a socket", path);
		return -EEXIST;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	ret = connect(fd, (const struct sockaddr *)sa, sizeof(*sa));
	close(fd);
	if (!ret || errno == EAGAIN) {
		kvsd_log("%s: another server is listening there", path);
		return -EADDRINUSE;
	}
	if (errno != ECONNREFUSED && errno != ENOENT) {
		kvsd_log("%s: %s", path, strerror(errno));
		return -errno;
	}
	if (unlink(path) && errno != ENOENT) {
		kvsd_log("%s: removing the stale socket: %s", path, strerror(errno));
		return -errno;
	}
	kvsd_log("removed stale socket %s", path);
	return 0;
}

int kvsd_unix_listen(const char *path, mode_t mode, ino_t *ino)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, ret;

	if (!*path) {
		kvsd_log("empty socket path");
		return -EINVAL;
	}
	if (strlen(path) >= sizeof(sa.sun_path)) {
		kvsd_log("%s: socket path longer than %zu bytes", path,
			 sizeof(sa.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, path, strlen(path));
	mkdir_parents(path);
	ret = unix_stale(path, &sa);
	if (ret)
		return ret;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    chmod(path, mode) || listen(fd, SOMAXCONN) || stat(path, &st)) {
		ret = -errno;
		kvsd_log("%s: %s", path, strerror(errno));
		close(fd);
		return ret;
	}
	*ino = st.st_ino;
	return fd;
}

void kvsd_unix_unlink(const char *path, ino_t ino)
{
	struct stat st;

	/* Someone may have started another daemon on the path since. */
	if (!lstat(path, &st) && S_ISSOCK(st.st_mode) && st.st_ino == ino)
		unlink(path);
}
