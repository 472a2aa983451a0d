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
	bool with_chan;			/* "core+chan": a channel on the pool */
	struct kvs_chan *chan;
	struct kvs_event *events;	/* CHAN_DRAIN records */
	__u32 *drained;
};

/* Records one drain reads: a tier's batch. */
#define CHAN_RING	4096
#define CHAN_DRAIN	4096

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

/*
 * What a tier does with its channel, minus the copy to Redis: read the
 * records and give back the references they hold.  A MISS record's claim
 * is given back the same way (the benchmark's keys are never remote).
 */
static int chan_drain(struct core_target *ct)
{
	struct kvs_put put = { .pages = (uintptr_t)ct->drained };
	__u32 n, k;

	while ((n = kvs_chan_read(ct->chan, ct->events, CHAN_DRAIN))) {
		for (k = put.count = 0; k < n; k++)
			if (ct->events[k].type != KVS_EVENT_POOL_GONE)
				ct->drained[put.count++] = ct->events[k].page;
		if (put.count) {
			int ret = core_cmd(ct, kvs_chan_client(ct->chan), KVS_IOC_PUT, &put);

			if (ret)
				return ret;
		}
	}
	return 0;
}

static int chan_open(struct core_target *ct, __u32 pool_id)
{
	struct kvs_chan_open req = { .pool_id = pool_id, .ring = CHAN_RING,
				     .fetch_max = 16 };

	return kvs_chan_open(&req, &ct->cred, NULL, NULL, &ct->chan);
}

static int core_data(struct bench_target *t, unsigned int cmd, void *arg)
{
	struct core_target *ct = t->priv;
	int ret = core_cmd(ct, ct->data, cmd, arg);

	if (ret || !ct->with_chan)
		return ret;
	if (cmd == KVS_IOC_POOL_ATTACH)
		return chan_open(ct, ((struct kvs_pool_attach *)arg)->pool_id);
	/* Published records hold references: the tier takes them at once. */
	if (cmd == KVS_IOC_PUBLISH)
		return chan_drain(ct);
	return 0;
}

static void core_close(struct bench_target *t)
{
	struct core_target *ct = t->priv;

	if (ct->chan)
		kvs_chan_close(ct->chan);
	ct->chan = NULL;
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
	free(ct->events);
	free(ct->drained);
	free(ct);
	t->priv = NULL;
}

static int core_init(struct bench_target *t, bool with_chan)
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
	ct->with_chan = with_chan;
	if (with_chan) {
		ct->events = calloc(CHAN_DRAIN, sizeof(*ct->events));
		ct->drained = calloc(CHAN_DRAIN, sizeof(*ct->drained));
		if (!ct->events || !ct->drained) {
			free(ct->events);
			free(ct->drained);
			free(ct);
			return -ENOMEM;
		}
	}
	ret = kvs_core_init(&limits);
	if (ret) {
		free(ct->events);
		free(ct->drained);
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
		free(ct->events);
		free(ct->drained);
		free(ct);
		return -ENOMEM;
	}
	*t = (struct bench_target) {
		.name = with_chan ? "core+chan" : "core", .ctl = core_ctl, .open = core_open,
		.data = core_data, .close = core_close, .fini = core_fini,
		.priv = ct,
	};
	return 0;
}

int target_core_init(struct bench_target *t)
{
	return core_init(t, false);
}

int target_core_chan_init(struct bench_target *t)
{
	return core_init(t, true);
}
