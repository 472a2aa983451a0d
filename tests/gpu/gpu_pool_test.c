// SPDX-License-Identifier: GPL-2.0
/*
 * GPU pools end to end: kvshared creates a memory=cuda pool with
 * KVS_POOL_DEVICE_MEM, clients import and map it with libkv, pages written
 * by one process are read by another bit-exact, every failure of import
 * and map leaves nothing behind, and a mapping outlives its daemon.
 *
 * Fixture gpu: kvshared in socket mode (the handle travels by SCM_RIGHTS).
 * Fixture gpu_mod: kvshared in module mode, where kvshare.ko carries the
 * handle as an opaque file; it needs /dev/kvshare, so it runs in the VM
 * (the dynamic build of tests/gpu/gpu-guest.mk) and skips elsewhere.
 *
 * Under `make test` the CUDA driver is the stand-in (tests/gpu/cudastub,
 * found first through LD_LIBRARY_PATH by the generated wrapper
 * build/tests/gpu_pool_test): contents are checked with cuMemcpyHtoD and
 * cuMemcpyDtoH, which the real driver has too, so tools/gpu/gpu-checks.sh
 * runs this same binary against the real driver.  The cases that inject
 * failures or count the driver's live objects need the stand-in and skip
 * on a real driver.
 *
 * No process that uses CUDA forks: every client is a child of the test,
 * which never touches the driver itself (CUDA state is not usable in a
 * child of a process that initialised it).
 */
#include <dlfcn.h>
#include <grp.h>
#include <stdint.h>
#include <sys/mman.h>
#include <cuda.h>

#include "../daemon/kvd_test.h"
#include "../open_fds.h"
#include "kselftest_harness.h"
#include <kvshare/arbiter.h>

#define GPOOL		"g"
#define GPAGES		16
#define GPAGE_BYTES	4096u	/* 2 * 2 layers * 2 heads * 16 dims * 16 tokens * 2 bytes */
#define GPOOL_SPEC	GPOOL ":pages=16,layers=2,kv_heads=2,head_dim=16," \
			"tokens_per_page=16,dtype=f16,mode=0666,memory=cuda"
#define NPUB		4

/* ---- the driver, as the test's clients use it ---- */

static struct {
	CUresult (*retain)(CUcontext *, CUdevice);
	CUresult (*set_current)(CUcontext);
	CUresult (*htod)(CUdeviceptr, const void *, size_t);
	CUresult (*dtoh)(void *, CUdeviceptr, size_t);
	void (*counts)(int *, int *, int *, int *);	/* stand-in only */
} drv;

/* In a client: load what libkv loaded, and make the primary context current. */
static int drv_load(int dev)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	CUcontext ctx;

	if (!lib)
		return -1;
	drv.retain = (__typeof__(drv.retain))dlsym(lib, "cuDevicePrimaryCtxRetain");
	drv.set_current = (__typeof__(drv.set_current))dlsym(lib, "cuCtxSetCurrent");
	drv.htod = (__typeof__(drv.htod))dlsym(lib, "cuMemcpyHtoD_v2");
	drv.dtoh = (__typeof__(drv.dtoh))dlsym(lib, "cuMemcpyDtoH_v2");
	drv.counts = (__typeof__(drv.counts))dlsym(lib, "kvs_cudastub_counts");
	if (!drv.retain || !drv.set_current || !drv.htod || !drv.dtoh)
		return -1;
	if (drv.retain(&ctx, dev) || drv.set_current(ctx))
		return -1;
	return 0;
}

/* Live driver objects of this process (stand-in): 0 when none. */
static int drv_live(void)
{
	int a = 0, h = 0, r = 0, m = 0;

	if (!drv.counts)
		return 0;
	drv.counts(&a, &h, &r, &m);
	return a + h + r + m;
}

/* Whether any mapping of this process is a stand-in allocation. */
static int maps_hold_standin(void)
{
	char line[512];
	FILE *f = fopen("/proc/self/maps", "re");
	int found = 0;

	if (!f)
		return 1;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "kvshare-cudastub"))
			found = 1;
	fclose(f);
	return found;
}

static void fill(uint8_t *buf, size_t n, uint64_t seed)
{
	size_t i;

	for (i = 0; i < n; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		buf[i] = seed >> 56;
	}
}

static void key_of(struct kvs_key *k, int i)
{
	memset(k, 0, sizeof(*k));
	k->w[0] = 0x6770750000000000ull + i;
	k->w[3] = ~(uint64_t)i;
}

/* Run @fn(@arg) in a child; its exit status (0: it passed). */
static int in_child(int (*fn)(void *), void *arg)
{
	pid_t pid;
	int st;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0)
		return -1;
	if (!pid)
		_exit(fn(arg));
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A failed check in a child: its line, as the exit status (never 0). */
#define CHECK(c) do {							\
	if (!(c)) {							\
		fprintf(stderr, "# %s:%d: %s failed (%s)\n", __func__,	\
			__LINE__, #c, kv_cuda_last_error());		\
		return __LINE__ % 250 + 1;				\
	}								\
} while (0)

struct share {
	const char *sock;		/* the arbiter: socket or /dev/kvshare */
	int module;			/* the module serves it, not kvshared */
	int a_to_b[2], b_to_a[2];	/* pipes: one byte each way */
};

static int wait_byte(int fd)
{
	char c;

	return read(fd, &c, 1) == 1 ? 0 : -1;
}

/* A: publish NPUB pages written through the driver, then read B's page. */
static int writer(void *p)
{
	struct share *s = p;
	struct kvs_publish_entry e[NPUB];
	uint8_t buf[GPAGE_BYTES], got[GPAGE_BYTES];
	uint32_t pages[NPUB], page;
	struct kvs_key key;
	struct kv_pool *pool;
	int i;

	CHECK(!kv_pool_open(s->sock, GPOOL, 0, 0, &pool));
	CHECK(kv_pool_is_device(pool));
	CHECK(kv_pool_info(pool)->pool_flags & KVS_POOL_DEVICE_MEM);
	CHECK(kv_arbiter_is_daemon(kv_pool_arbiter(pool)) == !s->module);
	CHECK(!drv_load(0));
	CHECK(!kv_alloc(kv_pool_arbiter(pool), NPUB, pages));
	for (i = 0; i < NPUB; i++) {
		fill(buf, sizeof(buf), 1000 + i);
		CHECK(!drv.htod((CUdeviceptr)(uintptr_t)kv_page_addr(pool, pages[i]),
				buf, sizeof(buf)));
		memset(&e[i], 0, sizeof(e[i]));
		e[i].page = pages[i];
		e[i].parent = i ? KVS_PARENT_PREV : KVS_NO_PAGE;
		key_of(&e[i].key, i);
	}
	CHECK(kv_publish(kv_pool_arbiter(pool), e, NPUB) == 0);
	CHECK(write(s->a_to_b[1], "p", 1) == 1);
	CHECK(!wait_byte(s->b_to_a[0]));
	/* B's page, written by B's process. */
	key_of(&key, 100);
	CHECK(kv_lookup(kv_pool_arbiter(pool), &key, 1, &page) == 1);
	fill(buf, sizeof(buf), 2000);
	CHECK(!drv.dtoh(got, (CUdeviceptr)(uintptr_t)kv_page_addr(pool, page), sizeof(got)));
	CHECK(!memcmp(buf, got, sizeof(buf)));
	kv_pool_close(pool);
	CHECK(drv_live() == 0);
	CHECK(!maps_hold_standin());
	return 0;
}

/* B: find A's pages, read them bit-exact, publish one of its own. */
static int reader(void *p)
{
	struct share *s = p;
	uint8_t buf[GPAGE_BYTES], got[GPAGE_BYTES];
	struct kvs_key keys[NPUB];
	struct kvs_publish_entry e;
	uint32_t pages[NPUB];
	struct kv_pool *pool;
	int i;

	CHECK(!wait_byte(s->a_to_b[0]));
	CHECK(!kv_pool_open(s->sock, GPOOL, 0, 0, &pool));
	CHECK(!drv_load(0));
	for (i = 0; i < NPUB; i++)
		key_of(&keys[i], i);
	CHECK(kv_lookup(kv_pool_arbiter(pool), keys, NPUB, pages) == NPUB);
	for (i = 0; i < NPUB; i++) {
		fill(buf, sizeof(buf), 1000 + i);
		CHECK(!drv.dtoh(got, (CUdeviceptr)(uintptr_t)kv_page_addr(pool, pages[i]),
				sizeof(got)));
		CHECK(!memcmp(buf, got, sizeof(buf)));
	}
	memset(&e, 0, sizeof(e));
	CHECK(!kv_alloc(kv_pool_arbiter(pool), 1, &e.page));
	fill(buf, sizeof(buf), 2000);
	CHECK(!drv.htod((CUdeviceptr)(uintptr_t)kv_page_addr(pool, e.page), buf, sizeof(buf)));
	e.parent = KVS_NO_PAGE;
	key_of(&e.key, 100);
	CHECK(kv_publish(kv_pool_arbiter(pool), &e, 1) == 0);
	CHECK(!kv_put(kv_pool_arbiter(pool), pages, NPUB));
	CHECK(write(s->b_to_a[1], "r", 1) == 1);
	kv_pool_close(pool);
	CHECK(drv_live() == 0);
	return 0;
}

/* Which driver a client would get: 1 real, 0 stand-in, <0 none. */
static int probe_driver(void *arg)
{
	int r = kv_cuda_driver();

	(void)arg;
	return r < 0 ? 2 : r;
}

FIXTURE(gpu) {
	struct kvd d;
	char why[512];
	int driver;			/* 1 real, 0 stand-in */
};

FIXTURE_SETUP(gpu)
{
	const char *args[] = { "--pool", GPOOL_SPEC, "--max-pools", "16", NULL };

	self->driver = in_child(probe_driver, NULL);
	if (self->driver == 2)
		SKIP(return, "no CUDA driver (not even the stand-in: run through "
		     "build/tests/gpu_pool_test, which sets LD_LIBRARY_PATH)");
	ASSERT_EQ(0, kvd_init(&self->d));
	ASSERT_EQ(0, kvd_start(&self->d, args, self->why, sizeof(self->why))) {
		TH_LOG("%s", self->why);
	}
	ASSERT_EQ(1, kvd_log_has(self->d.log, "memory=cuda 2 MiB, owner")) {
		TH_LOG("the daemon did not create the GPU pool; see %s", self->d.log);
	}
}

FIXTURE_TEARDOWN(gpu)
{
	if (self->d.dir[0]) {
		EXPECT_EQ(0, kvd_stop(&self->d, self->why, sizeof(self->why))) {
			TH_LOG("%s", self->why);
		}
		kvd_fini(&self->d);
	}
}

/* Writer and reader, each in a process of its own, on arbiter @arb. */
static void share_pages(struct __test_metadata *_metadata, const char *arb, int module)
{
	struct share s = { .sock = arb, .module = module };
	pid_t a, b;
	int sa, sb;

	ASSERT_EQ(0, pipe(s.a_to_b));
	ASSERT_EQ(0, pipe(s.b_to_a));
	fflush(stdout);
	/* Each write end in one process only: the other sees its death as EOF. */
	a = fork();
	if (!a) {
		close(s.a_to_b[0]);
		close(s.b_to_a[1]);
		_exit(writer(&s));
	}
	close(s.a_to_b[1]);
	b = fork();
	if (!b) {
		close(s.b_to_a[0]);
		_exit(reader(&s));
	}
	close(s.b_to_a[1]);
	close(s.a_to_b[0]);
	close(s.b_to_a[0]);
	ASSERT_EQ(a, waitpid(a, &sa, 0));
	ASSERT_EQ(b, waitpid(b, &sb, 0));
	EXPECT_EQ(0, sa);
	EXPECT_EQ(0, sb);
}

/* Two processes share pages of one GPU pool through kvshared, bit-exact. */
TEST_F(gpu, two_processes_share_pages)
{
	if (_metadata->skip)		/* SKIP in the setup still runs the body */
		return;
	share_pages(_metadata, self->d.sock, 0);
}

struct inject {
	const char *sock;
	const char *fn;
	int want;			/* kv_pool_open's error */
};

/* One injected driver failure: nothing mapped, held or leaked; retry works. */
static int open_with_failure(void *p)
{
	struct inject *in = p;
	struct kv_pool *pool = NULL;
	char spec[128];
	int fds, ret;

	snprintf(spec, sizeof(spec), "%s:1:%d", in->fn, CUDA_ERROR_OUT_OF_MEMORY);
	setenv("KVS_CUDASTUB_FAIL", spec, 1);
	fds = test_open_fds();
	ret = kv_pool_open(in->sock, GPOOL, 0, 0, &pool);
	if (ret != in->want)
		fprintf(stderr, "# %s: kv_pool_open %d, want %d\n", in->fn, ret, in->want);
	CHECK(ret == in->want);
	CHECK(pool == NULL);
	CHECK(strstr(kv_cuda_last_error(), in->fn) != NULL);
	CHECK(test_open_fds() == fds);
	CHECK(!maps_hold_standin());
	CHECK(!drv_load(0));		/* the stand-in, for its counts */
	CHECK(drv.counts && drv_live() == 0);
	/* Only the first call failed: a second open maps, a close undoes it. */
	CHECK(!kv_pool_open(in->sock, GPOOL, 0, 0, &pool));
	CHECK(drv_live() == 4);		/* allocation, handle, reservation, mapping */
	CHECK(maps_hold_standin());
	kv_pool_close(pool);
	CHECK(drv_live() == 0);
	CHECK(!maps_hold_standin());
	return 0;
}

/* Each driver call of the import failing once, in a fresh client each. */
static void inject_each(struct __test_metadata *_metadata, const char *arb)
{
	static const char *const fns[] = {
		"cuMemImportFromShareableHandle",
		"cuMemGetAllocationPropertiesFromHandle",
		"cuDevicePrimaryCtxRetain",
		"cuMemGetAllocationGranularity",
		"cuMemAddressReserve",
		"cuMemMap",
		"cuMemSetAccess",
	};
	struct inject in = { .sock = arb, .want = -ENOMEM };
	size_t i;

	for (i = 0; i < ARRAY_SIZE(fns); i++) {
		in.fn = fns[i];
		EXPECT_EQ(0, in_child(open_with_failure, &in)) {
			TH_LOG("%s failing", fns[i]);
		}
	}
}

TEST_F(gpu, import_and_map_failures_leave_nothing)
{
	if (_metadata->skip)		/* SKIP in the setup still runs the body */
		return;
	if (self->driver != 0)
		SKIP(return, "failure injection needs the driver stand-in");
	inject_each(_metadata, self->d.sock);
}

static int open_without_device(void *p)
{
	struct kv_pool *pool = NULL;

	setenv("KVS_CUDASTUB_DEVICES", "0", 1);
	CHECK(kv_pool_open(p, GPOOL, 0, 0, &pool) == -ENODEV);
	CHECK(kv_cuda_driver() == -ENODEV);
	CHECK(strstr(kv_cuda_last_error(), "cuInit") != NULL);
	CHECK(!pool && !maps_hold_standin());
	return 0;
}

TEST_F(gpu, no_device_is_enodev)
{
	if (_metadata->skip)		/* SKIP in the setup still runs the body */
		return;
	if (self->driver != 0)
		SKIP(return, "needs the driver stand-in");
	EXPECT_EQ(0, in_child(open_without_device, self->d.sock));
}

struct death {
	const char *sock;
	int up[2], down[2];
};

/*
 * Fork @fn(@s) with a pipe each way between it and us: its pid, or -1.
 * Each pipe end stays in one process only, so that a side that died is
 * EOF to the other, not a hang.
 */
static pid_t death_child(struct death *s, int (*fn)(void *))
{
	pid_t pid;

	if (pipe(s->up))
		return -1;
	if (pipe(s->down)) {
		close(s->up[0]);
		close(s->up[1]);
		return -1;
	}
	fflush(stdout);
	pid = fork();
	if (!pid) {
		close(s->up[0]);
		close(s->down[1]);
		_exit(fn(s));
	}
	close(s->up[1]);
	close(s->down[0]);
	return pid;
}

/* Map, write, wait for the daemon to die; the mapping still reads back. */
static int outlive_daemon(void *p)
{
	struct death *s = p;
	uint8_t buf[GPAGE_BYTES], got[GPAGE_BYTES];
	struct kv_pool *pool;
	uint32_t page;
	CUdeviceptr at;

	CHECK(!kv_pool_open(s->sock, GPOOL, 0, 0, &pool));
	CHECK(!drv_load(0));
	CHECK(!kv_alloc(kv_pool_arbiter(pool), 1, &page));
	at = (CUdeviceptr)(uintptr_t)kv_page_addr(pool, page);
	fill(buf, sizeof(buf), 77);
	CHECK(!drv.htod(at, buf, sizeof(buf)));
	CHECK(write(s->up[1], "m", 1) == 1);
	CHECK(!wait_byte(s->down[0]));		/* the daemon is dead now */
	CHECK(!drv.dtoh(got, at, sizeof(got)));
	CHECK(!memcmp(buf, got, sizeof(buf)));
	CHECK(kv_alloc(kv_pool_arbiter(pool), 1, &page) == -ENOTCONN);
	CHECK(!drv.htod(at, buf, sizeof(buf)));	/* still writable, too */
	kv_pool_close(pool);
	CHECK(drv_live() == 0);
	CHECK(!maps_hold_standin());
	return 0;
}

TEST_F(gpu, mapping_outlives_the_daemon)
{
	struct death s = { .sock = self->d.sock };
	pid_t pid;
	int st;

	if (_metadata->skip)		/* SKIP in the setup still runs the body */
		return;

	pid = death_child(&s, outlive_daemon);
	ASSERT_LT(0, pid);
	ASSERT_EQ(0, wait_byte(s.up[0]));
	ASSERT_EQ(0, kvd_kill9(&self->d));
	ASSERT_EQ(1, write(s.down[1], "k", 1));
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_EQ(0, st);
}

/* ---- what the arbiter takes as device memory (socket mode) ---- */

static int create_dev(struct kv_arbiter *a, const char *name, int fd, __u32 flags)
{
	struct kvs_pool_create c;

	memset(&c, 0, sizeof(c));
	snprintf(c.name, sizeof(c.name), "%s", name);
	c.n_pages = GPAGES;
	c.geom.n_layers = 2;
	c.geom.n_kv_heads = 2;
	c.geom.head_dim = 16;
	c.geom.tokens_per_page = 16;
	c.geom.dtype = KVS_DTYPE_F16;
	c.mode = 0666;
	c.flags = flags;
	c.mem_fd = fd;
	return kv_arbiter_call(a, KVS_IOC_POOL_CREATE, &c);
}

static int sealed_memfd(size_t size, unsigned int seals)
{
	int fd = memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0 || ftruncate(fd, size) || (seals && fcntl(fd, F_ADD_SEALS, seals)))
		return -1;
	return fd;
}

static int import_foreign(void *p)
{
	struct kv_pool *pool = NULL;

	/* /dev/null is no handle of the driver: the import refuses it. */
	CHECK(kv_pool_open_owner(p, 0, "devnull", 0, 0, &pool) == -EINVAL);
	CHECK(strstr(kv_cuda_last_error(), "cuMemImportFromShareableHandle"));
	CHECK(!drv_load(0) && drv_live() == 0);
	return 0;
}

TEST_F(gpu, arbiter_takes_device_handles_by_exclusion)
{
	const size_t bytes = GPAGES * GPAGE_BYTES;
	const unsigned int seals = F_SEAL_SHRINK | F_SEAL_SEAL;
	struct kvs_pool_attach at;
	struct kvs_info info;
	struct kv_arbiter *a;
	int fd, sv[2];
	char tmpl[] = "/tmp/kvs-gpu-XXXXXX";

	if (_metadata->skip)		/* SKIP in the setup still runs the body */
		return;

	ASSERT_EQ(0, kv_arbiter_open(self->d.sock, 0, &a));
	memset(&info, 0, sizeof(info));
	ASSERT_EQ(0, kv_arbiter_call(a, KVS_IOC_INFO, &info));
	EXPECT_TRUE(info.features & KVS_FEAT_DEVICE_MEM);

	/* Device memory is what the pool is for. */
	EXPECT_EQ(-EINVAL, create_dev(a, "none", -1, KVS_POOL_DEVICE_MEM));
	/* A socket: a descriptor in flight through it could hold the arbiter. */
	ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	EXPECT_EQ(-EINVAL, create_dev(a, "sock", sv[0], KVS_POOL_DEVICE_MEM));
	close(sv[0]);
	close(sv[1]);
	/* A pipe: its release waits for a lock a client can hold forever. */
	ASSERT_EQ(0, pipe2(sv, O_CLOEXEC));
	EXPECT_EQ(-EINVAL, create_dev(a, "pipe", sv[0], KVS_POOL_DEVICE_MEM));
	EXPECT_EQ(-EINVAL, create_dev(a, "pipe", sv[1], KVS_POOL_DEVICE_MEM));
	close(sv[0]);
	close(sv[1]);
	fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	EXPECT_EQ(-EINVAL, create_dev(a, "dir", fd, KVS_POOL_DEVICE_MEM));
	close(fd);
	/* A regular file that is not a memfd goes the host way, or nowhere. */
	fd = mkstemp(tmpl);
	ASSERT_LE(0, fd);
	unlink(tmpl);
	ASSERT_EQ(0, ftruncate(fd, bytes));
	EXPECT_EQ(-EINVAL, create_dev(a, "file", fd, KVS_POOL_DEVICE_MEM));
	close(fd);
	/* A memfd (the stand-in's handles) takes the host rules. */
	fd = sealed_memfd(bytes, 0);
	EXPECT_EQ(-EPERM, create_dev(a, "unsealed", fd, KVS_POOL_DEVICE_MEM));
	close(fd);
	fd = sealed_memfd(bytes / 2, seals);
	EXPECT_EQ(-ERANGE, create_dev(a, "short", fd, KVS_POOL_DEVICE_MEM));
	close(fd);
	fd = sealed_memfd(bytes, seals);
	EXPECT_EQ(0, create_dev(a, "memfd", fd, KVS_POOL_DEVICE_MEM));
	close(fd);
	/* Anything else is the driver's business: a character device, say. */
	fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	EXPECT_EQ(0, create_dev(a, "devnull", fd, KVS_POOL_DEVICE_MEM));
	close(fd);
	/* The host rules still refuse it without the flag. */
	fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	EXPECT_EQ(-EINVAL, create_dev(a, "devnull-host", fd, 0));
	close(fd);
	kv_arbiter_close(a);

	/* Attachers learn the kind from pool_flags. */
	ASSERT_EQ(0, kv_arbiter_open(self->d.sock, 0, &a));
	memset(&at, 0, sizeof(at));
	at.flags = KVS_ATTACH_MEM_FD;
	ASSERT_EQ(0, kv_arbiter_attach_owner(a, 0, "devnull", 0, &at));
	EXPECT_EQ(KVS_POOL_DEVICE_MEM, at.pool_flags & KVS_POOL_DEVICE_MEM);
	EXPECT_LE(0, at.mem_fd);
	close(at.mem_fd);
	kv_arbiter_close(a);

	if (self->driver == 0)
		EXPECT_EQ(0, in_child(import_foreign, self->d.sock));
}

/* ---- module mode: kvshare.ko holds the pool and carries the handle ---- */

#define KVS_DEV		"/dev/kvshare"
#define MOD_GID		65532	/* the pool's group: members hold it */
#define MOD_MEMBER	65531
#define MOD_ATTACKER	65534
#define MOD_POOL_SPEC	GPOOL ":pages=16,layers=2,kv_heads=2,head_dim=16," \
			"tokens_per_page=16,dtype=f16,mode=0660,gid=65532,memory=cuda"

FIXTURE(gpu_mod) {
	struct kvd d;
	char why[512];
	int driver;			/* 1 real, 0 stand-in */
};

/* kvshared --mode module with the pool; 0, or -1 with the reason in @why. */
static int mod_start(struct kvd *d, char *why, size_t len)
{
	const char *args[] = { "--mode", "module", "--device", KVS_DEV,
			       "--pool", MOD_POOL_SPEC, NULL };

	return kvd_start(d, args, why, len);
}

FIXTURE_SETUP(gpu_mod)
{
	if (access(KVS_DEV, F_OK))
		SKIP(return, "no " KVS_DEV ": module mode runs in the VM (make vmtest)");
	/* gid= in module mode, and the member's and attacker's setuid(). */
	if (geteuid())
		SKIP(return, "module mode needs root");
	self->driver = in_child(probe_driver, NULL);
	if (self->driver == 2)
		SKIP(return, "no CUDA driver (not even the stand-in on LD_LIBRARY_PATH)");
	ASSERT_EQ(0, kvd_init(&self->d));
	ASSERT_EQ(0, mod_start(&self->d, self->why, sizeof(self->why))) {
		TH_LOG("%s", self->why);
	}
	/* The module holds it (created or, after a failed run, adopted). */
	ASSERT_EQ(1, kvd_log_has(self->d.log, "module mode: " KVS_DEV)) {
		TH_LOG("kvshared is not in module mode; see %s", self->d.log);
	}
	ASSERT_EQ(1, kvd_log_has(self->d.log, "owner 0:65532, mode 0660")) {
		TH_LOG("kvshared has no GPU pool in the module; see %s", self->d.log);
	}
}

/* SIGTERM: kvshared destroys its pool in the module. */
FIXTURE_TEARDOWN(gpu_mod)
{
	if (self->d.dir[0]) {
		EXPECT_EQ(0, kvd_stop(&self->d, self->why, sizeof(self->why))) {
			TH_LOG("%s", self->why);
		}
		kvd_fini(&self->d);
	}
}

/* Two processes share pages of a GPU pool the module holds, bit-exact. */
TEST_F(gpu_mod, two_processes_share_pages)
{
	if (_metadata->skip)		/* SKIP in the setup still runs the body */
		return;
	ASSERT_EQ(1, kvd_log_has(self->d.log, "memory=cuda 2 MiB, owner 0:65532")) {
		TH_LOG("the pool was not created by this run; see %s", self->d.log);
	}
	share_pages(_metadata, KVS_DEV, 1);
}

TEST_F(gpu_mod, import_and_map_failures_leave_nothing)
{
	if (_metadata->skip)		/* SKIP in the setup still runs the body */
		return;
	if (self->driver != 0)
		SKIP(return, "failure injection needs the driver stand-in");
	inject_each(_metadata, KVS_DEV);
}

/* A page published by one process, and the pattern written in it. */
#define MOD_KEY		200
#define MOD_SEED	300

/* Map, write and publish a page; while mapped, kvshared is killed. */
static int hold_through_death(void *p)
{
	struct death *s = p;
	uint8_t buf[GPAGE_BYTES], got[GPAGE_BYTES];
	struct kvs_publish_entry e;
	struct kv_pool *pool;
	uint32_t page;
	CUdeviceptr at;

	CHECK(!kv_pool_open(s->sock, GPOOL, 0, 0, &pool));
	CHECK(!drv_load(0));
	memset(&e, 0, sizeof(e));
	CHECK(!kv_alloc(kv_pool_arbiter(pool), 1, &e.page));
	at = (CUdeviceptr)(uintptr_t)kv_page_addr(pool, e.page);
	fill(buf, sizeof(buf), MOD_SEED);
	CHECK(!drv.htod(at, buf, sizeof(buf)));
	e.parent = KVS_NO_PAGE;
	key_of(&e.key, MOD_KEY);
	CHECK(kv_publish(kv_pool_arbiter(pool), &e, 1) == 0);
	CHECK(write(s->up[1], "m", 1) == 1);
	CHECK(!wait_byte(s->down[0]));		/* kvshared is dead now */
	CHECK(!drv.dtoh(got, at, sizeof(got)));
	CHECK(!memcmp(buf, got, sizeof(buf)));
	/* The module, not kvshared, serves the pool: the handle still works. */
	CHECK(!kv_arbiter_broken(kv_pool_arbiter(pool)));
	CHECK(!kv_alloc(kv_pool_arbiter(pool), 1, &page));
	CHECK(!kv_put(kv_pool_arbiter(pool), &page, 1));
	CHECK(write(s->up[1], "r", 1) == 1);
	CHECK(!wait_byte(s->down[0]));		/* a newcomer read the page */
	kv_pool_close(pool);
	CHECK(drv_live() == 0);
	CHECK(!maps_hold_standin());
	return 0;
}

/* A process that comes after kvshared died: the page, from the module's handle. */
static int read_published(void *arb)
{
	uint8_t buf[GPAGE_BYTES], got[GPAGE_BYTES];
	struct kv_pool *pool;
	struct kvs_key key;
	uint32_t page;

	CHECK(!kv_pool_open(arb, GPOOL, 0, 0, &pool));
	CHECK(!drv_load(0));
	key_of(&key, MOD_KEY);
	CHECK(kv_lookup(kv_pool_arbiter(pool), &key, 1, &page) == 1);
	fill(buf, sizeof(buf), MOD_SEED);
	CHECK(!drv.dtoh(got, (CUdeviceptr)(uintptr_t)kv_page_addr(pool, page), sizeof(got)));
	CHECK(!memcmp(buf, got, sizeof(buf)));
	CHECK(!kv_put(kv_pool_arbiter(pool), &page, 1));
	kv_pool_close(pool);
	CHECK(drv_live() == 0);
	return 0;
}

static int open_gone(void *arb)
{
	struct kv_pool *pool = NULL;

	CHECK(kv_pool_open(arb, GPOOL, 0, 0, &pool) == -ENOENT);
	CHECK(!pool && !maps_hold_standin());
	return 0;
}

/*
 * kvshared, which allocated the memory, dies (kill -9) while a client has
 * it mapped: the mapping stays, the module goes on serving the pool, a new
 * process imports the module's handle and reads what was published, and a
 * restarted kvshared adopts the pool and destroys it on SIGTERM.
 */
TEST_F(gpu_mod, pool_outlives_kvshared)
{
	struct death s = { .sock = KVS_DEV };
	pid_t pid;
	int st;

	if (_metadata->skip)		/* SKIP in the setup still runs the body */
		return;

	pid = death_child(&s, hold_through_death);
	ASSERT_LT(0, pid);
	ASSERT_EQ(0, wait_byte(s.up[0]));
	ASSERT_EQ(0, kvd_kill9(&self->d));
	ASSERT_EQ(1, write(s.down[1], "k", 1));
	ASSERT_EQ(0, wait_byte(s.up[0]));
	EXPECT_EQ(0, in_child(read_published, KVS_DEV));
	ASSERT_EQ(1, write(s.down[1], "d", 1));
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_EQ(0, st);

	ASSERT_EQ(0, mod_start(&self->d, self->why, sizeof(self->why))) {
		TH_LOG("%s", self->why);
	}
	EXPECT_EQ(1, kvd_log_has(self->d.log, "pool '" GPOOL "' adopted from the module"));
	ASSERT_EQ(0, kvd_stop(&self->d, self->why, sizeof(self->why))) {
		TH_LOG("%s", self->why);
	}
	EXPECT_EQ(0, in_child(open_gone, KVS_DEV));
}

struct as_user {
	uid_t uid;
	gid_t groups[2];
	int n_groups;
};

/* Become @u (gid = uid), holding its supplementary groups only. */
static int become(const struct as_user *u)
{
	return setgroups(u->n_groups, u->groups) || setgid(u->uid) || setuid(u->uid) ? -1 : 0;
}

/* A member (the pool's group) maps the pool and reads root's page. */
static int member_reads(void *p)
{
	CHECK(!become(p));
	return read_published(KVS_DEV);
}

/* An attacker (the device's group only): no attach, no handle, nothing mapped. */
static int attacker_refused(void *p)
{
	struct kvs_pool_attach at;
	struct kv_arbiter *a;
	struct kv_pool *pool = NULL;
	int fds;

	CHECK(!become(p));
	fds = test_open_fds();
	CHECK(kv_pool_open(KVS_DEV, GPOOL, 0, 0, &pool) == -EACCES);
	CHECK(!pool && !maps_hold_standin());
	CHECK(test_open_fds() == fds);
	/* The device itself admits it; ATTACH, asking for the handle, does not. */
	CHECK(!kv_arbiter_open(KVS_DEV, 0, &a));
	fds = test_open_fds();
	memset(&at, 0, sizeof(at));
	strcpy(at.name, GPOOL);
	at.owner = 0;
	at.flags = KVS_ATTACH_MEM_FD;
	CHECK(kv_arbiter_call(a, KVS_IOC_POOL_ATTACH, &at) == -EACCES);
	CHECK(test_open_fds() == fds);		/* no handle installed */
	kv_arbiter_close(a);
	return 0;
}

/* Publish MOD_KEY as root, then leave. */
static int publish_page(void *arb)
{
	uint8_t buf[GPAGE_BYTES];
	struct kvs_publish_entry e;
	struct kv_pool *pool;

	CHECK(!kv_pool_open(arb, GPOOL, 0, 0, &pool));
	CHECK(!drv_load(0));
	memset(&e, 0, sizeof(e));
	CHECK(!kv_alloc(kv_pool_arbiter(pool), 1, &e.page));
	fill(buf, sizeof(buf), MOD_SEED);
	CHECK(!drv.htod((CUdeviceptr)(uintptr_t)kv_page_addr(pool, e.page), buf, sizeof(buf)));
	e.parent = KVS_NO_PAGE;
	key_of(&e.key, MOD_KEY);
	CHECK(kv_publish(kv_pool_arbiter(pool), &e, 1) == 0);
	kv_pool_close(pool);
	return 0;
}

/*
 * The multi-user rules hold for device pools: the pool (mode 0660, group
 * MOD_GID) admits a member of its group, who reads root's page bit-exact,
 * and refuses a user who can open /dev/kvshare but is not in the group,
 * without handing it the memory's handle.
 */
TEST_F(gpu_mod, only_members_attach)
{
	struct as_user member = { MOD_MEMBER, { 0, MOD_GID }, 2 };
	struct as_user attacker = { MOD_ATTACKER, { 0 }, 1 };
	struct stat st;

	if (_metadata->skip)		/* SKIP in the setup still runs the body */
		return;
	/* Both may open the device, as its group (kvshare) may. */
	ASSERT_EQ(0, stat(KVS_DEV, &st));
	ASSERT_NE(0, st.st_gid) {
		TH_LOG(KVS_DEV " belongs to root's group: no user to test with");
	}
	member.groups[0] = st.st_gid;
	attacker.groups[0] = st.st_gid;
	ASSERT_EQ(0, in_child(publish_page, KVS_DEV));
	EXPECT_EQ(0, in_child(member_reads, &member));
	EXPECT_EQ(0, in_child(attacker_refused, &attacker));
}

TEST_HARNESS_MAIN
