// SPDX-License-Identifier: GPL-2.0
/*
 * libkv's side of owner-scoped pool names, on the host: which owner
 * kv_arbiter_attach() and kv_pool_open() ask for, and the checks libkv
 * makes on pool memory before mapping it.
 *
 * A fake kvshared (a child that binds a socket as root, drops to uid 65534,
 * then listens, so that SO_PEERCRED says 65534) answers ATTACH by echoing
 * the request, which shows the owner libkv sent, and hands over a memory
 * fd chosen by the pool name: one a real arbiter would have refused at
 * CREATE.  Needs root (to run the fake daemon as another uid); skips
 * otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <kvshare/arbiter.h>
#include "kselftest_harness.h"

#define OTHER_UID	65534
#define N_PAGES		4
#define PAGE_BYTES	4096
#define POOL_BYTES	(N_PAGES * PAGE_BYTES)

/* Pool names the fake daemon knows, and the memory it hands out for each. */
enum { MEM_GOOD, MEM_UNSEALED, MEM_SHORT, MEM_FILE, MEM_COUNT };
static const char *const mem_names[MEM_COUNT] = {
	"good", "unsealed", "short", "file",
};

static int sealed_memfd(size_t bytes, int seals)
{
	int fd = memfd_create("kvs-owner-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0 || ftruncate(fd, bytes) ||
	    (seals && fcntl(fd, F_ADD_SEALS, seals))) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static int send_reply(int sock, const struct kvs_msg *req,
		      const struct kvs_pool_attach *at, int result, int fd)
{
	char buf[sizeof(struct kvs_msg) + sizeof(*at)];
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct kvs_msg hdr = *req;

	hdr.len = sizeof(buf);
	hdr.result = result;
	hdr.out_off = 0;
	hdr.out_len = 0;
	memcpy(buf, &hdr, sizeof(hdr));
	memcpy(buf + sizeof(hdr), at, sizeof(*at));
	if (fd >= 0) {
		struct cmsghdr *c;

		msg.msg_control = cbuf;
		msg.msg_controllen = sizeof(cbuf);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	return sendmsg(sock, &msg, MSG_NOSIGNAL) == (ssize_t)sizeof(buf) ? 0 : -1;
}

static int read_all(int sock, void *buf, size_t len)
{
	size_t got = 0;
	ssize_t n;

	while (got < len) {
		n = read(sock, (char *)buf + got, len - got);
		if (n <= 0)
			return -1;
		got += n;
	}
	return 0;
}

/*
 * One connection: ATTACH is echoed with a geometry filled in (so the
 * caller sees the owner it sent), and the memory named by the pool name
 * rides along; everything else is ENOTTY.
 */
static void serve(int sock, const int *mem)
{
	struct kvs_pool_attach at;
	char body[4096];
	struct kvs_msg hdr;
	size_t len;
	int i, fd;

	while (!read_all(sock, &hdr, sizeof(hdr))) {
		len = hdr.len - sizeof(hdr);
		if (hdr.len < sizeof(hdr) || len > sizeof(body) ||
		    read_all(sock, body, len))
			return;
		memset(&at, 0, sizeof(at));
		if (_IOC_NR(hdr.cmd) != _IOC_NR(KVS_IOC_POOL_ATTACH) ||
		    len < sizeof(at)) {
			if (send_reply(sock, &hdr, &at, -ENOTTY, -1))
				return;
			continue;
		}
		memcpy(&at, body, sizeof(at));
		at.n_pages = N_PAGES;
		at.geom.page_bytes = PAGE_BYTES;
		fd = -1;
		for (i = 0; i < MEM_COUNT; i++)
			if (!strcmp(at.name, mem_names[i]))
				fd = mem[i];
		if (!(at.flags & KVS_ATTACH_MEM_FD))
			fd = -1;
		at.mem_fd = fd >= 0 ? 0 : -1;
		if (send_reply(sock, &hdr, &at, 0, fd))
			return;
	}
}

FIXTURE(fake) {
	char dir[64];
	char sock[96];
	int mem[MEM_COUNT];
	pid_t server;
	int skip;
};

FIXTURE_SETUP(fake)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	char path[] = "/var/tmp/kvs-owner-file.XXXXXX";
	int ready[2], lsock, i;
	char c;

	self->server = -1;
	for (i = 0; i < MEM_COUNT; i++)
		self->mem[i] = -1;
	self->skip = geteuid() != 0;
	if (self->skip)
		return;
	unsetenv("KVSHARE_POOL_OWNER");
	self->mem[MEM_GOOD] = sealed_memfd(POOL_BYTES, F_SEAL_SHRINK | F_SEAL_SEAL);
	self->mem[MEM_UNSEALED] = sealed_memfd(POOL_BYTES, 0);
	self->mem[MEM_SHORT] = sealed_memfd(POOL_BYTES - PAGE_BYTES, F_SEAL_SHRINK | F_SEAL_SEAL);
	/* A file on disk: not a memfd (on tmpfs it could not be sealed either). */
	self->mem[MEM_FILE] = mkstemp(path);
	ASSERT_LE(0, self->mem[MEM_FILE]);
	unlink(path);
	ASSERT_EQ(0, ftruncate(self->mem[MEM_FILE], POOL_BYTES));
	for (i = 0; i < MEM_COUNT; i++)
		ASSERT_LE(0, self->mem[i]);

	strcpy(self->dir, "/tmp/kvs-owner-test.XXXXXX");
	ASSERT_NE(NULL, mkdtemp(self->dir));
	snprintf(self->sock, sizeof(self->sock), "%s/sock", self->dir);
	strcpy(addr.sun_path, self->sock);
	lsock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT_LE(0, lsock);
	ASSERT_EQ(0, bind(lsock, (struct sockaddr *)&addr, sizeof(addr)));
	ASSERT_EQ(0, pipe(ready));
	self->server = fork();
	ASSERT_LE(0, self->server);
	if (!self->server) {
		/* The listener's credentials are the ones SO_PEERCRED reports. */
		if (setgroups(0, NULL) || setgid(OTHER_UID) || setuid(OTHER_UID) ||
		    listen(lsock, 8))
			_exit(1);
		if (write(ready[1], "r", 1) != 1)
			_exit(1);
		for (;;) {
			int s = accept(lsock, NULL, NULL);

			if (s < 0)
				_exit(1);
			serve(s, self->mem);
			close(s);
		}
	}
	close(lsock);
	close(ready[1]);
	ASSERT_EQ(1, read(ready[0], &c, 1));
	close(ready[0]);
}

FIXTURE_TEARDOWN(fake)
{
	int i;

	if (self->server > 0) {
		kill(self->server, SIGKILL);
		waitpid(self->server, NULL, 0);
	}
	for (i = 0; i < MEM_COUNT; i++)
		if (self->mem[i] >= 0)
			close(self->mem[i]);
	if (!self->skip) {
		unlink(self->sock);
		rmdir(self->dir);
	}
	unsetenv("KVSHARE_POOL_OWNER");
}

/* On the socket the default owner is the daemon's uid, as the kernel says. */
TEST_F(fake, socket_default_is_daemon_uid)
{
	struct kvs_pool_attach info = { 0 };
	struct kv_arbiter *arb;
	uint32_t owner = 1;

	if (self->skip)
		SKIP(return, "needs root to run the fake daemon as uid %d", OTHER_UID);
	ASSERT_EQ(0, kv_arbiter_open(self->sock, 0, &arb));
	ASSERT_TRUE(kv_arbiter_is_daemon(arb));
	ASSERT_EQ(0, kv_arbiter_default_owner(arb, &owner));
	ASSERT_EQ(OTHER_UID, owner);
	info.owner = 7;		/* an input only through _owner(): ignored */
	ASSERT_EQ(0, kv_arbiter_attach(arb, "good", 0, &info));
	ASSERT_EQ(OTHER_UID, info.owner);
	ASSERT_STREQ("good", info.name);
	kv_arbiter_close(arb);
}

/* $KVSHARE_POOL_OWNER wins over the daemon's uid; an explicit owner over both. */
TEST_F(fake, env_and_explicit_owner)
{
	struct kvs_pool_attach info = { 0 };
	struct kv_arbiter *arb;

	if (self->skip)
		SKIP(return, "needs root to run the fake daemon as uid %d", OTHER_UID);
	ASSERT_EQ(0, setenv("KVSHARE_POOL_OWNER", "0", 1));
	ASSERT_EQ(0, kv_arbiter_open(self->sock, 0, &arb));
	ASSERT_EQ(0, kv_arbiter_attach(arb, "good", 0, &info));
	ASSERT_EQ(0, info.owner);
	ASSERT_EQ(0, kv_arbiter_attach_owner(arb, 4242, "good", 0, &info));
	ASSERT_EQ(4242, info.owner);

	/* An invalid value fails the attach before anything is sent. */
	ASSERT_EQ(0, setenv("KVSHARE_POOL_OWNER", "no-such-user-kvshare", 1));
	ASSERT_EQ(-EINVAL, kv_arbiter_attach(arb, "good", 0, &info));
	ASSERT_EQ(4242, info.owner);
	kv_arbiter_close(arb);
}

/* kv_pool_open maps good memory and refuses what the arbiter would. */
TEST_F(fake, pool_memory_checked_before_mapping)
{
	struct kv_pool *pool = NULL;
	int want_file;
	char *p;

	if (self->skip)
		SKIP(return, "needs root to run the fake daemon as uid %d", OTHER_UID);
	ASSERT_EQ(0, kv_pool_open(self->sock, "good", 0, 0, &pool));
	ASSERT_EQ(OTHER_UID, kv_pool_info(pool)->owner);
	p = kv_page_addr(pool, N_PAGES - 1);
	ASSERT_NE(NULL, p);
	p[PAGE_BYTES - 1] = 'k';	/* the last byte is there */
	kv_pool_close(pool);

	pool = NULL;
	ASSERT_EQ(-EPERM, kv_pool_open(self->sock, "unsealed", 0, 0, &pool));
	ASSERT_EQ(NULL, pool);
	ASSERT_EQ(-ERANGE, kv_pool_open(self->sock, "short", 0, 0, &pool));
	ASSERT_EQ(NULL, pool);
	/* Not a memfd: it cannot carry seals (tmpfs files carry F_SEAL_SEAL only). */
	want_file = fcntl(self->mem[MEM_FILE], F_GET_SEALS) < 0 ? -EINVAL : -EPERM;
	ASSERT_EQ(want_file, kv_pool_open(self->sock, "file", 0, 0, &pool));
	ASSERT_EQ(NULL, pool);
	/* No memory at all: the fake sends none for an unknown name. */
	ASSERT_NE(0, kv_pool_open(self->sock, "none", 0, 0, &pool));
	ASSERT_EQ(NULL, pool);

	/* And by explicit owner, the same path. */
	ASSERT_EQ(0, kv_pool_open_owner(self->sock, 99, "good", 0, 0, &pool));
	ASSERT_EQ(99, kv_pool_info(pool)->owner);
	kv_pool_close(pool);
}

/* Numbers and names resolve; anything else is -EINVAL, never a default. */
TEST(uid_parse)
{
	struct passwd *nobody = getpwnam("nobody");
	uint32_t uid = 12345;

	ASSERT_EQ(0, kv_uid_parse("0", &uid));
	ASSERT_EQ(0, uid);
	ASSERT_EQ(0, kv_uid_parse("1000", &uid));
	ASSERT_EQ(1000, uid);
	ASSERT_EQ(0, kv_uid_parse("4294967294", &uid));
	ASSERT_EQ(4294967294u, uid);
	ASSERT_EQ(0, kv_uid_parse("root", &uid));
	ASSERT_EQ(0, uid);
	if (nobody) {
		ASSERT_EQ(0, kv_uid_parse("nobody", &uid));
		ASSERT_EQ(nobody->pw_uid, uid);
	}
	uid = 12345;
	ASSERT_EQ(-EINVAL, kv_uid_parse("4294967295", &uid));	/* (uid_t)-1 */
	ASSERT_EQ(-EINVAL, kv_uid_parse("99999999999999999999", &uid));
	ASSERT_EQ(-EINVAL, kv_uid_parse("-1", &uid));
	ASSERT_EQ(-EINVAL, kv_uid_parse("12x", &uid));
	ASSERT_EQ(-EINVAL, kv_uid_parse(" 12", &uid));
	ASSERT_EQ(-EINVAL, kv_uid_parse("", &uid));
	ASSERT_EQ(-EINVAL, kv_uid_parse("no-such-user-kvshare", &uid));
	ASSERT_EQ(12345, uid);
}

/*
 * On the module (any non-socket file opens with the device transport;
 * /dev/null answers every ioctl ENOTTY) the default is root's pools,
 * unless $KVSHARE_POOL_OWNER says otherwise, by number or by name.
 */
TEST(module_default_owner)
{
	struct passwd *nobody = getpwnam("nobody");
	struct kv_arbiter *arb;
	uint32_t owner = 1;

	unsetenv("KVSHARE_POOL_OWNER");
	ASSERT_EQ(0, kv_arbiter_open("/dev/null", KV_ARBITER_NO_URING, &arb));
	ASSERT_FALSE(kv_arbiter_is_daemon(arb));
	ASSERT_EQ(0, kv_arbiter_default_owner(arb, &owner));
	ASSERT_EQ(0, owner);
	/* Empty is unset, as for $KVSHARE_ARBITER. */
	ASSERT_EQ(0, setenv("KVSHARE_POOL_OWNER", "", 1));
	ASSERT_EQ(0, kv_arbiter_default_owner(arb, &owner));
	ASSERT_EQ(0, owner);
	ASSERT_EQ(0, setenv("KVSHARE_POOL_OWNER", "1000", 1));
	ASSERT_EQ(0, kv_arbiter_default_owner(arb, &owner));
	ASSERT_EQ(1000, owner);
	if (nobody) {
		ASSERT_EQ(0, setenv("KVSHARE_POOL_OWNER", "nobody", 1));
		ASSERT_EQ(0, kv_arbiter_default_owner(arb, &owner));
		ASSERT_EQ(nobody->pw_uid, owner);
	}
	ASSERT_EQ(0, setenv("KVSHARE_POOL_OWNER", "1000x", 1));
	ASSERT_EQ(-EINVAL, kv_arbiter_default_owner(arb, &owner));
	/* /dev/null would say ENOTTY: EINVAL means nothing was sent. */
	ASSERT_EQ(-EINVAL, kv_arbiter_attach(arb, "p", 0, NULL));
	ASSERT_EQ(-EINVAL, kv_pool_open("/dev/null", "p", 0, KV_ARBITER_NO_URING,
					&(struct kv_pool *){ NULL }));
	unsetenv("KVSHARE_POOL_OWNER");
	ASSERT_EQ(-ENOTTY, kv_arbiter_attach(arb, "p", 0, NULL));
	kv_arbiter_close(arb);
}

TEST_HARNESS_MAIN
