// SPDX-License-Identifier: GPL-2.0
/*
 * fuse_fd_test: a client's FUSE descriptor must not freeze kvshared (run in
 * the VM guest as root; TAP).  A task that closes a descriptor of a file on
 * a FUSE mount waits, unkillably, for the server's answer to FLUSH, and a
 * hostile server never answers (hostile_fuse.h): kvshared must close what a
 * client sends on closer threads, never on its event loop, at most
 * KVSD_CLOSE_PER_UID of them for one uid.
 *
 * The attacker (uid 65534) opens the hostile file and sends it to a
 * socket-mode kvshared with POOL_CREATE, with an ordinary request, eight
 * at once in one message, and then more than its closers take at once
 * (the rest wait in its close queue, and are answered all the same);
 * then it fills that queue, and kvshared must stop reading it.  A
 * victim (uid 65533) keeps calling meanwhile and must get every reply
 * within BOUND_MS; afterwards kvshared still serves, another uid still
 * creates a pool with its memfd, and the pools' invariants hold.  Then
 * SIGTERM with the closers still stuck: within BOUND_MS kvshared must shut
 * down, say how many descriptors it is still closing, and its main thread
 * exit; the kernel keeps the process until the connection is aborted
 * (fusectl), and then it exits 0.
 *
 * Run as fuse_drop_test (the same binary by another name), the attacker
 * sends its file where kvshared's recvmsg() has no room for it, the
 * second descriptor of a message, which the kernel then drops for
 * kvshared: holding its last reference, with dirty pages to write back
 * (laden()).  As fuse_drop_closed_test, it queues the file behind a
 * message that makes kvshared close the connection, and the kernel drops
 * it with the connection.  As fuse_drop_refused_test, it queues the file
 * on a connection kvshared refuses (its uid has max_connections_per_uid),
 * sent while kvshared is stopped, so that it is there at accept.  The
 * file's release must not run on kvshared's event loop.
 *
 * Nothing here may close a descriptor of the hostile file before the
 * connection is aborted: the test would hang, as the daemon would.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/kvshare.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "hostile_fuse.h"
#include "../send_fds.h"

#define NOBODY		65534		/* the attacker */
#define VICTIM		65533
#define BOUND_MS	5000		/* generous: TCG is slow */
#define PER_UID		8		/* KVSD_CLOSE_PER_UID (daemon/closer.h) */
#define MORE		(PER_UID - 3 + 1)	/* fills the closers, and one past */
#define MANY		8		/* descriptors in one message */
#define FULL_FDS	TEST_SEND_FDS_MAX	/* the most in one message */
#define QUEUE_UID	1024		/* KVSD_CLOSE_QUEUE_UID: no more reading */
#define FILLS		5		/* FULL_FDS messages filling it, with the rest */
#define UNREAD		3		/* then sent, never read */
#define POOL		"kvsf"
#define GEOM		"layers=2,kv_heads=2,head_dim=64,tokens_per_page=16,dtype=bf16"
#define NOT_RUN		1		/* a step after one that timed out */
#define FLOOD		1500		/* requests: replies enough to fill a socket */

static const char *kvshared_bin = "kvshared", *kvctl_bin = "kvctl";
static char dir[64], mnt[96], sock_path[96], log_path[96], out_path[96];
static struct hfuse fs;
static pid_t kvsd, victim, attacker;
static int victim_stop = -1, attacker_hold = -1;
static int n_test;
/* Run as fuse_fd_test, fuse_drop_test, fuse_drop_closed_test or ..._refused_test. */
static enum { CLOSERS, DROP_RECV, DROP_CLOSED, DROP_REFUSED } drop_mode;
/* DROP_REFUSED: the attacker asks (stop_req) for kvshared stopped, continued. */
static int stop_req[2] = { -1, -1 }, stop_ack[2] = { -1, -1 };

static bool failed;

static void report(bool ok, const char *fmt, ...)
{
	va_list ap;

	failed |= !ok;
	printf("%sok %d ", ok ? "" : "not ", ++n_test);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

/* @path's lines as TAP comments, each after @prefix. */
static void show(const char *path, const char *prefix)
{
	char line[512];
	FILE *f = fopen(path, "r");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		printf("# %s%s", prefix, line);
	fclose(f);
	fflush(stdout);
}

static long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

static void nap_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

static bool file_has(const char *path, const char *what)
{
	char line[512];
	bool found = false;
	FILE *f = fopen(path, "r");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, what);
	fclose(f);
	return found;
}

/* Become @uid (gid @uid, no supplementary groups), or exit 127. */
static void become(uid_t uid)
{
	if (setgroups(0, NULL) || setgid(uid) || setuid(uid)) {
		perror("fuse_fd_test: dropping privileges");
		_exit(127);
	}
}

static int reap_within(pid_t pid, long ms);

/*
 * @argv as @uid, its output in out_path: its exit status, or -1 (killed
 * if it has not ended within 4 * BOUND_MS: a daemon that hangs).
 */
static int run_as(uid_t uid, const char *const *argv)
{
	pid_t pid = fork();
	int st, fd;

	if (pid < 0)
		return -1;
	if (!pid) {
		fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(127);
		if (uid)
			become(uid);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	st = reap_within(pid, 4 * BOUND_MS);
	if (st < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return -1;
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- a raw client of the kvshared socket ---------------------------------- */

static int sock_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	if (s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof(sa))) {
		close(s);
		return -1;
	}
	return s;
}

/* @len bytes from @s within @ms: 0, or -ETIMEDOUT / -EIO. */
static int read_full(int s, void *buf, size_t len, int ms)
{
	struct pollfd p = { .fd = s, .events = POLLIN };
	size_t got = 0;
	ssize_t n;

	while (got < len) {
		if (poll(&p, 1, ms) != 1)
			return -ETIMEDOUT;
		n = read(s, (char *)buf + got, len - got);
		if (n <= 0)
			return -EIO;
		got += n;
	}
	return 0;
}

struct msg {
	struct kvs_msg h;
	char arg[256];
};

/* Command @cmd with its struct @arg in @m, ready to send. */
static size_t msg_fill(struct msg *m, unsigned int cmd, const void *arg, size_t size)
{
	memset(m, 0, sizeof(*m));
	m->h.magic = KVS_MSG_MAGIC;
	m->h.cmd = cmd;
	m->h.len = sizeof(m->h) + size;
	memcpy(m->arg, arg, size);
	return m->h.len;
}

/* @len bytes of @buf in one sendmsg(), with the @n_fds descriptors @fds. */
static int send_fds(int s, const void *buf, size_t len, const int *fds, int n_fds)
{
	return test_send_fds(s, buf, len, fds, n_fds, MSG_DONTWAIT) == (ssize_t)len ? 0 : -EIO;
}

/*
 * The next reply on @s: its result (0 or -errno), -ETIMEDOUT if it has
 * not come within BOUND_MS, or -EIO.  Its struct is not read back.
 */
static int reply(int s)
{
	struct msg rep;
	int ret;

	ret = read_full(s, &rep.h, sizeof(rep.h), BOUND_MS);
	if (ret)
		return ret;
	if (rep.h.magic != KVS_MSG_MAGIC || rep.h.len < sizeof(rep.h) ||
	    rep.h.len > sizeof(rep))
		return -EIO;
	ret = read_full(s, rep.arg, rep.h.len - sizeof(rep.h), BOUND_MS);
	return ret ? ret : rep.h.result;
}

/* Command @cmd in one message with @n_fds copies of @fd: reply(). */
static int call(int s, unsigned int cmd, const void *arg, size_t size, int fd, int n_fds)
{
	int i, fds[FULL_FDS];
	struct msg m;
	size_t len = msg_fill(&m, cmd, arg, size);

	for (i = 0; i < n_fds; i++)
		fds[i] = fd;
	return send_fds(s, &m, len, fds, n_fds) ?: reply(s);
}

static int info(int s, int fd, int n_fds)
{
	struct kvs_info in;

	memset(&in, 0, sizeof(in));
	return call(s, KVS_IOC_INFO, &in, sizeof(in), fd, n_fds);
}

static int pool_create(int s, int fd)
{
	struct kvs_pool_create pc;

	memset(&pc, 0, sizeof(pc));
	snprintf(pc.name, sizeof(pc.name), "evil");
	pc.n_pages = 16;
	pc.geom.n_layers = 2;
	pc.geom.n_kv_heads = 2;
	pc.geom.head_dim = 64;
	pc.geom.tokens_per_page = 16;
	pc.geom.dtype = KVS_DTYPE_BF16;
	pc.mode = 0600;
	pc.mem_fd = 0;
	return call(s, KVS_IOC_POOL_CREATE, &pc, sizeof(pc), fd, 1);
}

/* ---- the victim ------------------------------------------------------------ */

/*
 * uid VICTIM: INFO after INFO until @stop is readable, each answered within
 * BOUND_MS; a byte on @ready after the first.  Exit status 0 if all were.
 */
static int victim_main(int ready, int stop)
{
	struct pollfd p = { .fd = stop, .events = POLLIN };
	struct timespec t0;
	unsigned int n = 0;
	long ms, slowest = 0;
	int s, ret;

	become(VICTIM);
	s = sock_connect();
	if (s < 0) {
		printf("# victim: connect: %s\n", strerror(errno));
		return 1;
	}
	while (poll(&p, 1, 0) == 0) {
		clock_gettime(CLOCK_MONOTONIC, &t0);
		ret = info(s, -1, 0);
		ms = ms_since(&t0);
		if (ret) {
			printf("# victim: reply %u: %s after %ld ms\n", n + 1,
			       strerror(-ret), ms);
			return 1;
		}
		if (!n++ && write(ready, "r", 1) != 1)
			return 1;
		if (ms > slowest)
			slowest = ms;
		nap_ms(20);
	}
	printf("# victim: %u replies, the slowest in %ld ms\n", n, slowest);
	return 0;
}

/* ---- the attacker ---------------------------------------------------------- */

struct attack {
	int open_err;		/* opening the hostile file: 0 or errno */
	int create;		/* POOL_CREATE with it */
	int info;		/* INFO with it */
	int many;		/* INFO with MANY copies */
	int more[MORE];		/* INFO with it, up to the closers' cap and past */
	int create_capped;	/* POOL_CREATE with it, its closers all stuck */
	int fill[FILLS];	/* INFO with FULL_FDS of /dev/null */
	int unread;		/* UNREAD more sent: 0 or -errno */
	int laden;		/* INFO with it, its last reference, pages dirty */
};

/* Run @r unless an earlier step timed out. */
#define STEP(res, expr) ((res) = timed_out ? NOT_RUN : (expr), \
			 timed_out |= (res) == -ETIMEDOUT)

/*
 * Its closers stuck, uid NOBODY's close queue fills: FILLS messages of
 * FULL_FDS descriptors each take it past QUEUE_UID, and kvshared must
 * then stop reading the connection, so that the UNREAD messages sent
 * after them stay in flight, not in kvshared's descriptor table.
 */
static void fill_queue(struct attack *a, int s)
{
	int i, nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
	bool timed_out = false;
	struct kvs_info in;
	struct msg m;
	size_t len;
	int fds[FULL_FDS];

	memset(&in, 0, sizeof(in));
	len = msg_fill(&m, KVS_IOC_INFO, &in, sizeof(in));
	for (i = 0; i < FULL_FDS; i++)
		fds[i] = nul;
	for (i = 0; i < FILLS; i++)
		STEP(a->fill[i], call(s, KVS_IOC_INFO, &in, sizeof(in), nul, FULL_FDS));
	a->unread = 0;
	for (i = 0; i < UNREAD && !a->unread; i++)
		a->unread = send_fds(s, &m, len, fds, FULL_FDS);
	close(nul);
}

static void attack_run(struct attack *a, int s, int fd)
{
	bool timed_out = false;
	int i;

	STEP(a->create, pool_create(s, fd));
	STEP(a->info, info(s, fd, 1));
	STEP(a->many, info(s, fd, MANY));
	for (i = 0; i < MORE; i++)
		STEP(a->more[i], info(s, fd, 1));
	STEP(a->create_capped, pool_create(s, fd));
	fill_queue(a, s);
}

/*
 * A descriptor that kvshared's recvmsg() has no room for (the second of a
 * message, where it gave room for one) is dropped by the kernel, and if
 * kvshared held its last reference, the file is released on kvshared's
 * own thread, as recvmsg() returns.  So is one
 * still queued on a connection that kvshared closes (@garbage: a message
 * it cannot frame comes first).  A FUSE file whose pages are dirty
 * (written through another open file: the mount caches writes) is
 * written back by its release, and the WRITE waits on the server.  For
 * the reference to be the last, our own close() (whose flush is answered)
 * must come before kvshared reads the message: FLOOD requests whose
 * replies we do not read yet keep it from reading on.  The last reply's
 * result: -EINVAL, or -EIO (closed) after @garbage.
 */
static int laden(int s, const char *path, bool garbage)
{
	static char flood[FLOOD * sizeof(struct msg)];
	struct kvs_info in = { .flags = 0 };
	static char page[4096];
	struct msg m, bad;
	size_t len = msg_fill(&m, KVS_IOC_INFO, &in, sizeof(in));
	int a, b, i, ret, fds[2];

	a = open(path, O_RDWR | O_CLOEXEC);
	b = open(path, O_RDWR | O_CLOEXEC);
	fds[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
	fds[1] = a;
	if (a < 0 || b < 0 || fds[0] < 0)
		return -errno;
	for (i = 0; i < FLOOD; i++)
		memcpy(flood + i * len, &m, len);
	ret = send_fds(s, flood, FLOOD * len, NULL, 0);
	bad = m;
	bad.h.magic = ~KVS_MSG_MAGIC;
	if (!ret && garbage)
		ret = send_fds(s, &bad, len, NULL, 0);
	if (!ret)
		ret = garbage ? send_fds(s, &m, len, &a, 1) : send_fds(s, &m, len, fds, 2);
	close(fds[0]);
	close(a);
	memset(page, 'x', sizeof(page));
	if (!ret && pwrite(b, page, sizeof(page), 0) != sizeof(page))
		ret = -errno;
	for (i = 0; !ret && i < FLOOD; i++)
		ret = reply(s);
	/* b stays open: closing it would write the pages back itself. */
	return ret ? ret : reply(s);
}

/*
 * laden() on a connection that kvshared refuses: uid NOBODY holds its two
 * (with @s), and the third, with the file queued on it, is connected and
 * sent while the parent holds kvshared stopped.  The result: -EIO, closed.
 */
static int laden_refused(int s, const char *path)
{
	struct kvs_info in = { .flags = 0 };
	static char page[4096];
	int a, b, s2, t, ret;
	struct msg m;
	size_t len = msg_fill(&m, KVS_IOC_INFO, &in, sizeof(in));
	char c;

	s2 = sock_connect();
	a = open(path, O_RDWR | O_CLOEXEC);
	b = open(path, O_RDWR | O_CLOEXEC);
	if (s2 < 0 || a < 0 || b < 0)
		return -errno;
	/* Both accepted: they answer. */
	ret = info(s, -1, 0) ?: info(s2, -1, 0);
	if (!ret && (write(stop_req[1], "s", 1) != 1 || read(stop_ack[0], &c, 1) != 1))
		ret = -EPIPE;
	t = ret ? -1 : sock_connect();
	if (!ret && t < 0)
		ret = -errno;
	if (!ret)
		ret = send_fds(t, &m, len, &a, 1);
	close(a);
	memset(page, 'x', sizeof(page));
	if (!ret && pwrite(b, page, sizeof(page), 0) != sizeof(page))
		ret = -errno;
	if (write(stop_req[1], "c", 1) != 1 && !ret)
		ret = -EPIPE;
	/* b stays open, and s2: closing them is not the point. */
	return ret ? ret : reply(t);
}

/*
 * uid NOBODY: open the hostile file, send it (attack_run(), or laden() as
 * fuse_drop_test), write the results to @res.  Keep the file open until
 * @hold reads EOF: our own close() would wait on the server too, until
 * the connection is aborted.
 */
static int attacker_main(int res, int hold)
{
	struct attack a = { .open_err = 0 };
	char path[PATH_MAX], c;
	int fd, s;

	become(NOBODY);
	snprintf(path, sizeof(path), "%s/" HFUSE_FILE, mnt);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	s = sock_connect();
	if (fd < 0 || s < 0)
		a.open_err = errno;
	else if (drop_mode == DROP_REFUSED)
		a.laden = laden_refused(s, path);
	else if (drop_mode)
		a.laden = laden(s, path, drop_mode == DROP_CLOSED);
	else
		attack_run(&a, s, fd);
	if (write(res, &a, sizeof(a)) != sizeof(a))
		return 1;
	while (read(hold, &c, 1) < 0 && errno == EINTR)
		;
	return 0;
}

/* ---- setup ----------------------------------------------------------------- */

/* fuse.ko from @path unless FUSE is there already (/dev/fuse). */
static int fuse_load(const char *path)
{
	int fd, ret = 0;

	if (!access("/dev/fuse", F_OK))
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (syscall(SYS_finit_module, fd, "", 0) && errno != EEXIST)
		ret = -errno;
	close(fd);
	/* devtmpfs makes the node as the misc device registers. */
	return ret ? ret : access("/dev/fuse", F_OK) ? -ENODEV : 0;
}

/* A child running @fn(@a, @b) after closing what it must not hold. */
static pid_t spawn(int (*fn)(int, int), int a, int b, int close_a, int close_b)
{
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (!pid) {
		close(close_a);
		close(close_b);
		close(fs.dev_fd);
		if (victim_stop >= 0)	/* the victim's, for the attacker */
			close(victim_stop);
		a = fn(a, b);
		fflush(stdout);
		_exit(a);
	}
	return pid;
}

static int kvshared_start(void)
{
	int fd, i;

	kvsd = fork();
	if (kvsd < 0)
		return -1;
	if (!kvsd) {
		fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(127);
		/* Two per uid: the victim's and kvctl's; the attacker's third is refused. */
		execlp(kvshared_bin, kvshared_bin, "--mode", "socket", "--socket",
		       sock_path, "--pool", POOL ":pages=64," GEOM ",mode=0666,memory=host",
		       "--max-connections-per-uid", drop_mode == DROP_REFUSED ? "2" : "64",
		       (char *)NULL);
		_exit(127);
	}
	for (i = 0; i < 300; i++) {
		if (file_has(log_path, "kvshared: ready"))
			return 0;
		if (waitpid(kvsd, NULL, WNOHANG) == kvsd) {
			kvsd = 0;
			return -1;
		}
		nap_ms(100);
	}
	return -1;
}

/* Wait up to @ms for @pid to end: its wait status, or -1. */
static int reap_within(pid_t pid, long ms)
{
	struct timespec t0;
	int st;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return st;
		nap_ms(50);
	} while (ms_since(&t0) < ms);
	return -1;
}

/* The connection aborted first: only then may anyone's close() return. */
static void cleanup(void)
{
	pid_t *pids[] = { &kvsd, &victim, &attacker };
	unsigned int i;

	hfuse_abort(&fs);
	if (victim_stop >= 0)
		close(victim_stop);
	if (attacker_hold >= 0)
		close(attacker_hold);
	victim_stop = attacker_hold = -1;
	for (i = 0; i < 3; i++) {
		if (*pids[i] <= 0)
			continue;
		kill(*pids[i], SIGKILL);
		if (reap_within(*pids[i], BOUND_MS) < 0)
			printf("# pid %d did not end\n", *pids[i]);
		*pids[i] = 0;
	}
	unlink(sock_path);
	unlink(log_path);
	unlink(out_path);
	rmdir(mnt);
	rmdir(dir);
}

/* ---- the checks ------------------------------------------------------------- */

static void check_attack(const struct attack *a)
{
	bool more_ok = true;
	int i;

	report(!a->open_err, "uid %d opens a file on the FUSE mount (%s)", NOBODY,
	       a->open_err ? strerror(a->open_err) : "ok");
	report(a->create == -EINVAL, "POOL_CREATE with its descriptor: answered, EINVAL (%d)",
	       a->create);
	report(a->info == -EINVAL, "INFO with its descriptor: answered, EINVAL (%d)", a->info);
	report(a->many == -EINVAL, "INFO with %d descriptors in one message: answered, EINVAL (%d)",
	       MANY, a->many);
	for (i = 0; i < MORE; i++)
		more_ok &= a->more[i] == -EINVAL;
	report(more_ok, "%d more messages with it, past the %d closers one uid may hold: answered",
	       MORE, PER_UID);
	/* Its descriptors wait in its close queue: the request is answered. */
	report(a->create_capped == -EINVAL,
	       "POOL_CREATE with it while uid %d's %d closers are stuck: EINVAL (%d)",
	       NOBODY, PER_UID, a->create_capped);
}

/* How many descriptors @pid has open. */
static unsigned int fd_count(pid_t pid)
{
	unsigned int n = 0;
	char path[64];
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", pid);
	d = opendir(path);
	if (!d)
		return ~0u;
	while (readdir(d))
		n++;
	closedir(d);
	return n - 2;		/* . and .. */
}

/*
 * fill_queue(): once a request of another connection is answered,
 * kvshared is past reading the attacker's, and holds what it took: the
 * FUSE files (PER_UID in close, the rest queued), FILLS * FULL_FDS, the
 * connection, beyond the @base it had before; never the UNREAD ones.
 * kvshared's bound: a queue stops below QUEUE_UID + 2 * FULL_FDS.
 */
static void check_full(const struct attack *a, unsigned int base)
{
	unsigned int n, bound = base + QUEUE_UID + 2 * FULL_FDS + PER_UID + 4;
	bool fill_ok = true;
	int i, s, ret;

	for (i = 0; i < FILLS; i++)
		fill_ok &= a->fill[i] == -EINVAL;
	report(fill_ok, "%d messages of %d descriptors each, its closers stuck: answered, "
	       "EINVAL (%d .. %d)", FILLS, FULL_FDS, a->fill[0], a->fill[FILLS - 1]);
	s = sock_connect();
	ret = s >= 0 ? info(s, -1, 0) : -EIO;
	if (s >= 0)
		close(s);
	n = fd_count(kvsd);
	report(!a->unread && !ret && n <= bound,
	       "with %d queued for uid %d kvshared reads no more of it: %d more sent (%d), "
	       "kvshared holds %u descriptors, at most %u", QUEUE_UID, NOBODY, UNREAD,
	       a->unread, n, bound);
}

/*
 * Where the server left requests unanswered: the closers are asynchronous,
 * so give them BOUND_MS to reach the file system.
 */
static void check_waits(void)
{
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (atomic_load(&fs.thread_waits) < PER_UID && ms_since(&t0) < BOUND_MS)
		nap_ms(50);
	nap_ms(200);	/* and a little longer, for any that should not be */
	report(atomic_load(&fs.main_waits) == 0,
	       "kvshared's event loop never waited on the FUSE server (%u requests)",
	       atomic_load(&fs.main_waits));
	report(atomic_load(&fs.thread_waits) == PER_UID,
	       "%d closer threads wait on FLUSH, no more (%u)", PER_UID,
	       atomic_load(&fs.thread_waits));
}

/* laden(): the attacker's last reference, dropped by kvshared's recvmsg(). */
static void check_laden(const struct attack *a)
{
	int s, ret;

	report(!a->open_err, "uid %d opens a file on the FUSE mount (%s)", NOBODY,
	       a->open_err ? strerror(a->open_err) : "ok");
	if (drop_mode == DROP_REFUSED)
		report(a->laden == -EIO,
		       "the FUSE file, its last reference, pages dirty, queued on a "
		       "connection kvshared refuses: closed (%d)", a->laden);
	else if (drop_mode == DROP_CLOSED)
		report(a->laden == -EIO,
		       "the FUSE file, its last reference, pages dirty, queued behind "
		       "garbage: the connection is closed (%d)", a->laden);
	else
		report(a->laden == -EINVAL,
		       "INFO with /dev/null and the FUSE file, its last reference, "
		       "pages dirty: answered, EINVAL (%d)", a->laden);
	/* The loop answers the next request only once past the release. */
	s = sock_connect();
	ret = s >= 0 ? info(s, -1, 0) : -EIO;
	if (s >= 0)
		close(s);
	report(!ret && atomic_load(&fs.main_waits) == 0,
	       "kvshared answers next (%d), its event loop never waited on the "
	       "FUSE server (%u requests)", ret, atomic_load(&fs.main_waits));
}

static void check_still_serving(void)
{
	const char *const create[] = {
		kvctl_bin, "--device", sock_path, "pool", "create", "kvsf_v",
		"--pages", "16", "--layers", "2", "--kv-heads", "2", "--head-dim", "64",
		"--tokens-per-page", "16", "--dtype", "bf16", "--mode", "0600",
		"--memory", NULL
	};
	const char *const destroy[] = {
		kvctl_bin, "--device", sock_path, "pool", "destroy", "kvsf_v", NULL
	};
	const char *const stats[] = {
		kvctl_bin, "--device", sock_path, "stats", POOL, "--owner", "0",
		"--check", NULL
	};
	bool ok;

	ok = !run_as(VICTIM, create);
	if (!ok)
		show(out_path, "kvctl: ");
	ok = ok && !run_as(VICTIM, destroy);
	report(ok, "uid %d creates and destroys a pool with its memfd meanwhile", VICTIM);
	ok = !run_as(0, stats) && file_has(out_path, "n_pages");
	if (!ok)
		show(out_path, "kvctl: ");
	report(ok, "kvshared still serves, and its pool's invariants hold (stats --check)");
}

/*
 * Whether @pid's main thread has exited (a zombie, or gone), and how many
 * of its threads are left (counting a zombie main thread).
 */
static bool main_thread_exited(pid_t pid, unsigned int *threads)
{
	char path[64], line[128];
	bool zombie = false;
	FILE *f;

	*threads = 0;
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "r");
	if (!f)
		return true;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "State:", 6))
			zombie = strchr(line, 'Z');
		if (!strncmp(line, "Threads:", 8))
			*threads = strtoul(line + 8, NULL, 10);
	}
	fclose(f);
	return zombie;
}

/*
 * SIGTERM while the closers are stuck: the orderly shutdown must happen,
 * and the main thread exit, within BOUND_MS.  The process cannot be
 * reaped yet: a thread waiting on a FUSE flush is past even SIGKILL
 * until the connection is aborted.
 */
static void check_sigterm(void)
{
	unsigned int threads = 0;
	struct timespec t0;
	char lingers[96];
	bool stopped;

	snprintf(lingers, sizeof(lingers),
		 "kvshared: %d client descriptors are still being closed", PER_UID);
	kill(kvsd, SIGTERM);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		stopped = file_has(log_path, "kvshared: stopped") &&
			  (drop_mode || file_has(log_path, lingers)) &&
			  access(sock_path, F_OK) &&
			  main_thread_exited(kvsd, &threads);
		if (!stopped)
			nap_ms(50);
	} while (!stopped && ms_since(&t0) < BOUND_MS);
	report(stopped, "SIGTERM: kvshared shuts down%s, its main thread exits (in "
	       "%ld ms; %u threads left)", drop_mode ? "" :
	       ", with closers stuck, and says so", ms_since(&t0), threads);
}

static void check_abort(void)
{
	int st, ret = hfuse_abort(&fs);

	report(!ret, "the FUSE connection is aborted through fusectl (%s)",
	       ret ? strerror(-ret) : "ok");
	st = reap_within(kvsd, BOUND_MS);
	if (st >= 0)
		kvsd = 0;
	report(st >= 0 && WIFEXITED(st) && !WEXITSTATUS(st),
	       "then its closers end and kvshared exits 0 (wait status %d)", st);
}

static int setup(void)
{
	const char *ko = getenv("FUSE_KO") ? getenv("FUSE_KO") : "/bin/fuse.ko";
	char why[256] = "";
	int ret;

	snprintf(dir, sizeof(dir), "/tmp/kvsf.XXXXXX");
	if (!mkdtemp(dir) || chmod(dir, 0755))
		return -1;
	snprintf(mnt, sizeof(mnt), "%s/mnt", dir);
	snprintf(sock_path, sizeof(sock_path), "%s/sock", dir);
	snprintf(log_path, sizeof(log_path), "%s/log", dir);
	snprintf(out_path, sizeof(out_path), "%s/out", dir);
	ret = fuse_load(ko);
	if (ret)
		snprintf(why, sizeof(why), "no /dev/fuse, and loading %s: %s", ko,
			 strerror(-ret));
	if (!ret && mkdir(mnt, 0755))
		ret = -errno;
	if (!ret)
		ret = hfuse_mount(&fs, mnt, why, sizeof(why));
	report(!ret, "a FUSE file system served by this test is mounted (%s)",
	       ret ? why[0] ? why : strerror(-ret) : "ok");
	if (ret)
		return ret;
	ret = kvshared_start();
	if (ret)
		show(log_path, "");
	report(!ret, "kvshared serves its socket");
	return ret;
}

/*
 * DROP_REFUSED: stop kvshared when the attacker asks, tell it once it is
 * stopped, and continue it when the attacker has queued its connection.
 */
static void stop_kvshared(void)
{
	char c;
	int st;

	close(stop_req[1]);
	close(stop_ack[0]);
	if (read(stop_req[0], &c, 1) != 1)
		return;
	kill(kvsd, SIGSTOP);
	waitpid(kvsd, &st, WUNTRACED);
	if (write(stop_ack[1], "k", 1) != 1)
		printf("# could not tell the attacker\n");
	if (read(stop_req[0], &c, 1) != 1)
		printf("# the attacker did not ask to continue\n");
	kill(kvsd, SIGCONT);
}

int main(int argc, char **argv)
{
	int ready[2], stop[2], res[2], hold[2];
	unsigned int base;
	struct attack a;
	char c;
	int st;

	(void)argc;
	if (strstr(argv[0], "fuse_drop_test"))
		drop_mode = DROP_RECV;
	else if (strstr(argv[0], "fuse_drop_closed_test"))
		drop_mode = DROP_CLOSED;
	else if (strstr(argv[0], "fuse_drop_refused_test"))
		drop_mode = DROP_REFUSED;
	if (getenv("KVSHARED"))
		kvshared_bin = getenv("KVSHARED");
	if (getenv("KVCTL"))
		kvctl_bin = getenv("KVCTL");
	printf("TAP version 13\n1..%d\n", drop_mode ? 13 : 20);
	if (setup()) {
		cleanup();
		return 1;
	}
	atomic_store(&fs.watch_pid, kvsd);

	if (pipe2(ready, O_CLOEXEC) || pipe2(stop, O_CLOEXEC) || pipe2(res, O_CLOEXEC) ||
	    pipe2(hold, O_CLOEXEC))
		return 1;
	victim = spawn(victim_main, ready[1], stop[0], ready[0], stop[1]);
	victim_stop = stop[1];
	close(ready[1]);
	close(stop[0]);
	report(read(ready[0], &c, 1) == 1, "uid %d is served (INFO) before the attack",
	       VICTIM);

	base = fd_count(kvsd);
	/* Made after the victim's spawn, so that only the attacker holds them. */
	if (drop_mode == DROP_REFUSED &&
	    (pipe2(stop_req, O_CLOEXEC) || pipe2(stop_ack, O_CLOEXEC)))
		return 1;
	attacker = spawn(attacker_main, res[1], hold[0], res[0], hold[1]);
	attacker_hold = hold[1];
	close(res[1]);
	close(hold[0]);
	if (drop_mode == DROP_REFUSED)
		stop_kvshared();
	memset(&a, 0, sizeof(a));
	a.open_err = EIO;
	if (read(res[0], &a, sizeof(a)) != sizeof(a))
		printf("# the attacker reported nothing\n");
	if (drop_mode) {
		check_laden(&a);
	} else {
		check_attack(&a);
		check_waits();
		check_full(&a, base);
	}

	/* The victim calls on meanwhile, till kvctl has had its turns. */
	check_still_serving();
	close(victim_stop);
	victim_stop = -1;
	st = reap_within(victim, 2 * BOUND_MS);
	if (st >= 0)
		victim = 0;
	report(st >= 0 && WIFEXITED(st) && !WEXITSTATUS(st),
	       "uid %d got every reply within %d ms throughout", VICTIM, BOUND_MS);

	check_sigterm();
	check_abort();
	if (failed)
		show(log_path, "");

	close(attacker_hold);
	attacker_hold = -1;
	st = reap_within(attacker, BOUND_MS);
	if (st >= 0)
		attacker = 0;
	report(st >= 0, "the attacker's own close() returns once the connection is aborted");
	cleanup();
	return 0;
}
