/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A private kvshared for one test: start it (fork/exec) on a socket in a
 * fresh temporary directory, wait until it is ready, kill or restart it,
 * stop it with SIGTERM and judge how it ended.
 *
 *   struct kvd d;
 *   kvd_init(&d);                       temporary directory, paths
 *   kvd_start(&d, args, why, len);      fork/exec, wait for "kvshared: ready"
 *   ... clients connect to d.sock ...
 *   kvd_stop(&d, why, len);             SIGTERM: 0 if it exited 0, removed
 *                                       its socket, and no log holds a
 *                                       sanitizer report
 *   kvd_fini(&d);                       kills it if still running, removes
 *                                       the directory (kept on failure)
 *
 * The daemon is $KVSHARED; else KVD_KVSHARED where the build names one
 * (the VM guest's /bin/kvshared_cuda); else "kvshared" next to the test
 * binary (a GPU bundle's bin/); else KVD_KVSHARED_REL, a path relative to
 * the test binary's directory (the build tree's san/kvshared, the ASan/UBSan
 * build).  No absolute build path is compiled in: a build moved elsewhere
 * still finds its daemon.  Each start
 * logs (stdout and stderr) to its own file, kvshared.N.log, so a restart
 * is judged on its own "ready" line and every run's log is checked.
 *
 * Nothing here asserts: callers turn the return values into test results
 * (in FIXTURE_TEARDOWN only with EXPECT_*, which does not jump).
 */
#ifndef KVD_TEST_H
#define KVD_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>

#ifndef KVD_KVSHARED_REL
#define KVD_KVSHARED_REL "../../san/kvshared"	/* from build/tests/<suite>/ */
#endif

#define KVD_READY_SECS	30
#define KVD_STOP_SECS	30
#define KVD_MAX_ARGS	32
#define KVD_MAX_RUNS	8

struct kvd {
	pid_t pid;			/* the running daemon, 0 if none */
	int runs;			/* starts so far: logs 0 .. runs-1 */
	int failed;			/* a check failed: keep the directory */
	char dir[88];
	char sock[108];			/* the arbiter socket */
	char metrics[108];		/* a unix socket for --metrics unix:... */
	char log[160];			/* the current run's log */
};

static inline double kvd_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline void kvd_sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static inline const char *kvd_binary(void)
{
	static char path[4096];
	const char *p = getenv("KVSHARED");
	char dir[4000], *slash;
	ssize_t n;

	if (p && *p)
		return p;
#ifdef KVD_KVSHARED
	return KVD_KVSHARED;
#endif
	if (path[0])
		return path;
	n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
	if (n <= 0)
		return KVD_KVSHARED_REL;	/* no /proc: relative to the cwd */
	dir[n] = '\0';
	slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	snprintf(path, sizeof(path), "%s/kvshared", dir);
	if (access(path, X_OK))
		snprintf(path, sizeof(path), "%s/%s", dir, KVD_KVSHARED_REL);
	return path;
}

static inline void kvd_log_path(const struct kvd *d, int run, char *buf, size_t len)
{
	snprintf(buf, len, "%s/kvshared.%d.log", d->dir, run);
}

/* 0, or -errno.  The directory is searchable by everyone (0755). */
static inline int kvd_init(struct kvd *d)
{
	const char *tmp = getenv("TMPDIR");

	memset(d, 0, sizeof(*d));
	if (!tmp || !*tmp || strlen(tmp) > 64)
		tmp = "/tmp";	/* socket paths must fit sun_path */
	snprintf(d->dir, sizeof(d->dir), "%s/kvd-%d.XXXXXX", tmp, (int)getpid());
	if (!mkdtemp(d->dir)) {
		d->dir[0] = '\0';
		return -errno;
	}
	chmod(d->dir, 0755);
	snprintf(d->sock, sizeof(d->sock), "%s/kvs.sock", d->dir);
	snprintf(d->metrics, sizeof(d->metrics), "%s/metrics.sock", d->dir);
	return 0;
}

/* The whole of @path (at most @cap - 1 bytes), NUL-terminated; length or -errno. */
static inline ssize_t kvd_read_file(const char *path, char *buf, size_t cap)
{
	size_t len = 0;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	while (len + 1 < cap && (n = read(fd, buf + len, cap - 1 - len)) > 0)
		len += n;
	close(fd);
	buf[len] = '\0';
	return len;
}

/* Does log @path contain @needle?  1, 0, or -errno. */
static inline int kvd_log_has(const char *path, const char *needle)
{
	size_t cap = 1 << 20;
	char *buf = malloc(cap);
	ssize_t n;
	int ret;

	if (!buf)
		return -ENOMEM;
	n = kvd_read_file(path, buf, cap);
	ret = n < 0 ? (int)n : !!strstr(buf, needle);
	free(buf);
	return ret;
}

/* Whether the current run's log has the line @line. */
static inline int kvd_logged(const struct kvd *d, const char *line)
{
	char want[256];

	snprintf(want, sizeof(want), "%s\n", line);
	return kvd_log_has(d->log, want) > 0;
}

/*
 * 0 if no log of any run holds a sanitizer report; else -1 with the
 * first offending log named in @why.
 */
static inline int kvd_logs_clean(const struct kvd *d, char *why, size_t len)
{
	static const char *const marks[] = {
		"ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
		"runtime error:", "UndefinedBehaviorSanitizer", "ThreadSanitizer",
	};
	char path[160];
	int run;
	size_t i;

	for (run = 0; run < d->runs; run++) {
		kvd_log_path(d, run, path, sizeof(path));
		for (i = 0; i < sizeof(marks) / sizeof(marks[0]); i++) {
			if (kvd_log_has(path, marks[i]) > 0) {
				snprintf(why, len, "%s in %s", marks[i], path);
				return -1;
			}
		}
	}
	return 0;
}

/*
 * Start the daemon: kvshared --socket SOCK --mode socket ARGS... (@args
 * NULL-terminated, may be NULL), and wait until its log says
 * "kvshared: ready".  0, or -1 with the reason in @why.
 */
static inline int kvd_start(struct kvd *d, const char *const *args, char *why, size_t len)
{
	const char *argv[KVD_MAX_ARGS + 8];
	double deadline;
	int n = 0, i, fd, st;
	pid_t pid;

	if (d->pid > 0 || d->runs >= KVD_MAX_RUNS) {
		snprintf(why, len, "already running, or too many restarts");
		return -1;
	}
	argv[n++] = kvd_binary();
	argv[n++] = "--socket";
	argv[n++] = d->sock;
	argv[n++] = "--mode";
	argv[n++] = "socket";
	for (i = 0; args && args[i] && i < KVD_MAX_ARGS; i++)
		argv[n++] = args[i];
	argv[n] = NULL;

	kvd_log_path(d, d->runs++, d->log, sizeof(d->log));
	fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0) {
		snprintf(why, len, "%s: %s", d->log, strerror(errno));
		return -1;
	}
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		snprintf(why, len, "fork: %s", strerror(errno));
		close(fd);
		return -1;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY);

		/* Stays in the test's process group: a timed-out test takes it along. */
		if (null >= 0)
			dup2(null, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		execv(argv[0], (char *const *)argv);
		dprintf(2, "kvd: exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(fd);
	d->pid = pid;

	deadline = kvd_now() + KVD_READY_SECS;
	for (;;) {
		if (kvd_logged(d, "kvshared: ready"))
			return 0;
		if (waitpid(pid, &st, WNOHANG) == pid) {
			d->pid = 0;
			d->failed = 1;
			snprintf(why, len, "%s exited (status 0x%x) before it was ready; see %s",
				 argv[0], st, d->log);
			return -1;
		}
		if (kvd_now() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			d->pid = 0;
			d->failed = 1;
			snprintf(why, len, "not ready after %d s; see %s", KVD_READY_SECS, d->log);
			return -1;
		}
		kvd_sleep_ms(5);
	}
}

/* kill -9 the daemon (a crash) and reap it.  0, or -errno. */
static inline int kvd_kill9(struct kvd *d)
{
	if (d->pid <= 0)
		return -ESRCH;
	if (kill(d->pid, SIGKILL))
		return -errno;
	waitpid(d->pid, NULL, 0);
	d->pid = 0;
	return 0;
}

/*
 * SIGTERM, and judge the exit: 0 if the daemon exited 0 within
 * KVD_STOP_SECS, removed its socket, and no run's log holds a sanitizer
 * report; else -1 with the reason in @why.  With no daemon running only
 * the logs are judged.
 */
static inline int kvd_stop(struct kvd *d, char *why, size_t len)
{
	double deadline;
	int st = 0;
	pid_t got;

	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		deadline = kvd_now() + KVD_STOP_SECS;
		while ((got = waitpid(d->pid, &st, WNOHANG)) == 0 && kvd_now() < deadline)
			kvd_sleep_ms(5);
		if (got != d->pid) {
			kill(d->pid, SIGKILL);
			waitpid(d->pid, NULL, 0);
			d->pid = 0;
			d->failed = 1;
			snprintf(why, len, "still running %d s after SIGTERM", KVD_STOP_SECS);
			return -1;
		}
		d->pid = 0;
		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			d->failed = 1;
			snprintf(why, len, "ended with status 0x%x after SIGTERM; see %s", st, d->log);
			return -1;
		}
		if (!access(d->sock, F_OK)) {
			d->failed = 1;
			snprintf(why, len, "left its socket %s behind", d->sock);
			return -1;
		}
	}
	if (kvd_logs_clean(d, why, len)) {
		d->failed = 1;
		return -1;
	}
	return 0;
}

/* Kill a daemon left running; remove the directory unless a check failed. */
static inline void kvd_fini(struct kvd *d)
{
	char path[160];
	int run;

	if (d->pid > 0)
		kvd_kill9(d);
	if (!d->dir[0])
		return;
	if (d->failed) {
		fprintf(stderr, "# kvd: kept %s\n", d->dir);
		return;
	}
	for (run = 0; run < d->runs; run++) {
		kvd_log_path(d, run, path, sizeof(path));
		unlink(path);
	}
	unlink(d->sock);
	unlink(d->metrics);
	rmdir(d->dir);
	d->dir[0] = '\0';
}

/* A connected unix stream socket to @path, or -errno. */
static inline int kvd_connect(const char *path)
{
	struct sockaddr_un sa;
	int fd, err;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

/*
 * Wait until @fd is closed by the other side, reading (and dropping)
 * whatever comes first.  0 on EOF or reset, -ETIMEDOUT after @ms.
 */
static inline int kvd_wait_eof(int fd, int ms)
{
	double deadline = kvd_now() + ms / 1000.0;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char buf[4096];
	ssize_t n;

	for (;;) {
		int left = (int)((deadline - kvd_now()) * 1000);

		if (left <= 0)
			return -ETIMEDOUT;
		pfd.revents = 0;
		n = poll(&pfd, 1, left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			continue;
		n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return 0;
	}
}

/*
 * Make the daemon catch up with every connection closed so far (a client
 * closed, or a process that was killed and reaped), so that what they
 * held is released before the next request.
 *
 * A closed connection is ready (EOF) in the daemon's epoll set from the
 * moment its last descriptor went, so the daemon handles it in the
 * epoll_wait() batch that accepts a socket connected after that, or
 * earlier; the new socket is read only in a later batch.  Shut its
 * sending side and wait for the daemon to close it: by then, in its one
 * thread, the earlier connections are gone too.  0 or -errno.
 */
static inline int kvd_settle(const struct kvd *d)
{
	int fd = kvd_connect(d->sock), ret;

	if (fd < 0)
		return fd;
	ret = shutdown(fd, SHUT_WR) ? -errno : kvd_wait_eof(fd, 10000);
	close(fd);
	return ret;
}

/* In a child: on failure say where and exit with a status the parent checks. */
#define KVD_CHILD_EQ(expected, seen) do { \
	long long __e = (long long)(expected), __s = (long long)(seen); \
	if (__e != __s) { \
		fprintf(stderr, "# child %d: %s:%d: %s == %lld, expected %s == %lld\n", \
			(int)getpid(), __FILE__, __LINE__, #seen, __s, #expected, __e); \
		_exit(101); \
	} \
} while (0)

#define KVD_CHILD_TRUE(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "# child %d: %s:%d: check failed: %s\n", \
			(int)getpid(), __FILE__, __LINE__, #cond); \
		_exit(100); \
	} \
} while (0)

#endif /* KVD_TEST_H */
