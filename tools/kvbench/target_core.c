// SPDX-License-Identifier: GPL-2.0
/*
 * The arbiter core linked into kvbench (build/libkvcore.a): what the
 * commands cost with no transport at all.  Arrays travel by memcpy on
 * plain host pointers, the "pointer" in a request being (uintptr_t) of a
 * buffer in this process.
 */
#include "kvbench.h"
#include "core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Larger than any kvshare command struct. */
#define CMD_BUF		512

struct core_target {
	struct kvs_cred cred;
	struct kvs_call call;
	struct kvs_client *ctl;		/* never attached */
	struct kvs_client *data;
};

static int copy_in(struct kvs_call *call, void *dst, __u64 src, __u64 len)
{
	(void)call;
	memcpy(dst, (const void *)(uintptr_t)src, len);
	return 0;
}

static int copy_out(struct kvs_call *call, __u64 dst, const void *src, __u64 len)
{
	(void)call;
	memcpy((void *)(uintptr_t)dst, src, len);
	return 0;
}

/*
 * Like every host, hand the core a zero-extended copy of the struct of
 * the size it knows, and copy back what the caller passed.  The copies
 * cost what the module's copy_from_user/copy_to_user of the struct cost,
 * minus the user-access checks.
 */
static int core_cmd(struct core_target *ct, struct kvs_client *cl,
		    unsigned int cmd, void *arg)
{
	unsigned char buf[CMD_BUF] __attribute__((aligned(8)));
	__u32 size = kvs_cmd_size(cmd), ours = _IOC_SIZE(cmd);
	__u32 n = size < ours ? size : ours;
	int ret;

	if (!size || size > sizeof(buf))
		return -ENOTTY;
	memcpy(buf, arg, n);
	memset(buf + n, 0, size - n);
	ret = kvs_cmd(cl, cmd, buf, &ct->call);
	memcpy(arg, buf, n);
	return ret;
}

static int core_ctl(struct bench_target *t, unsigned int cmd, void *arg)
{
	struct core_target *ct = t->priv;

	return core_cmd(ct, ct->ctl, cmd, arg);
}

static int core_open(struct bench_target *t)
{
	struct core_target *ct = t->priv;

	ct->data = kvs_client_new();
	return ct->data ? 0 : -ENOMEM;
}

static int core_data(struct bench_target *t, unsigned int cmd, void *arg)
{
	struct core_target *ct = t->priv;

	return core_cmd(ct, ct->data, cmd, arg);
}

static void core_close(struct bench_target *t)
{
	struct core_target *ct = t->priv;

	if (ct->data)
		kvs_client_free(ct->data);
	ct->data = NULL;
}

static void core_fini(struct bench_target *t)
{
	struct core_target *ct = t->priv;

	core_close(t);
	kvs_client_free(ct->ctl);
	kvs_core_exit();
	free(ct);
	t->priv = NULL;
}

int target_core_init(struct bench_target *t)
{
	const struct kvs_limits limits = {
		.max_pools = 16,
		.max_pool_pages = KVS_MAX_POOL_PAGES,
	};
	struct core_target *ct;
	int ret;

	ct = calloc(1, sizeof(*ct));
	if (!ct)
		return -ENOMEM;
	ret = kvs_core_init(&limits);
	if (ret) {
		free(ct);
		return ret < 0 ? ret : -ret;
	}
	/* Admin: the benchmark is no test of pool modes. */
	ct->cred.uid = getuid();
	ct->cred.gid = getgid();
	ct->cred.admin = 1;
	ct->call.cred = &ct->cred;
	ct->call.copy_in = copy_in;
	ct->call.copy_out = copy_out;
	ct->ctl = kvs_client_new();
	if (!ct->ctl) {
		kvs_core_exit();
		free(ct);
		return -ENOMEM;
	}
	*t = (struct bench_target) {
		.name = "core", .ctl = core_ctl, .open = core_open,
		.data = core_data, .close = core_close, .fini = core_fini,
		.priv = ct,
	};
	return 0;
}
