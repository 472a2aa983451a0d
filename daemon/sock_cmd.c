// SPDX-License-Identifier: GPL-2.0
/*
 * The socket-only commands (<linux/kvshare.h>, "The shared ring"):
 * RING_SETUP, RING_ENTER, WAIT_FD and REMOTE_TIER, and the socket's
 * KVS_IOC_CHAN_OPEN (chan.c).  As dma-heap's ioctl
 * does, one table names each command's handler, and the command struct
 * is copied in once and out once, sized by the command's number; the
 * handlers see only the kernel-side copy.
 */
#include <errno.h>
#include <string.h>

#include "bell.h"
#include "chan.h"
#include "conn.h"
#include "remote/ctl.h"
#include "ring.h"

/*
 * The core's waker (called with a pool lock held): the claim that this
 * connection's latest LOOKUP waits on has ended.
 */
void kvsd_conn_wake(void *arg)
{
	struct conn *c = arg;

	if (c->wait_bell >= 0)
		kvsd_bell_ring(c->wait_bell);
}

static int wait_fd_setup(struct conn *c, void *arg)
{
	struct kvs_wait_fd *wf = arg;
	int theirs, ret;

	if (wf->flags || wf->wait_fd || wf->reserved[0] || wf->reserved[1])
		return -EINVAL;
	if (c->wait_bell >= 0)
		return -EBUSY;
	ret = kvsd_bell_new(false, &c->wait_bell, &theirs);
	if (ret)
		return ret;
	/* Readable unless a wait is pending, as the module's file is. */
	if (!kvs_client_waiting(c->cl))
		kvsd_bell_ring(c->wait_bell);
	c->out_fds[c->n_out_fds++] = theirs;
	wf->wait_fd = 0;
	return 0;
}

/*
 * RING_SETUP: the ring comes out of the buffer budget, as a buffer does,
 * and ring.c keeps the rings' share of it.
 */
static int ring_setup(struct conn *c, void *arg)
{
	const struct kvsd_config *cfg = kvsd_srv.d->cfg;
	struct kvs_ring_setup *rs = arg;
	char why[192];
	int ret;

	ret = kvsd_ring_check(rs, cfg->max_conn_buffer);
	if (ret)
		return ret;
	if (c->ring)
		return -EBUSY;
	ret = kvsd_conn_ring_charge(c, rs->size, why, sizeof(why));
	if (ret)
		return ret;
	ret = kvsd_ring_new(c, c->cred.uid, c->cred.admin, cfg->max_buffer_total,
			    rs, c->out_fds + c->n_out_fds, &c->ring);
	if (ret) {
		kvsd_conn_ring_refund(c, rs->size);
		return ret;
	}
	c->n_out_fds += 3;
	kvsd_debug("client %llu: ring of %u bytes", (unsigned long long)c->id, rs->size);
	return 0;
}

/* RING_ENTER: unframeable garbage closes the connection once this returns. */
static int ring_enter(struct conn *c, void *arg)
{
	struct kvs_ring_enter *re = arg;
	int ret;

	if (re->flags || re->cq || re->reserved[0] || re->reserved[1])
		return -EINVAL;
	if (!c->ring)
		return -ENXIO;
	ret = kvsd_ring_enter(c->ring, re, c->doom_buf, sizeof(c->doom_buf));
	if (ret == -EPROTO)
		c->doom = c->doom_buf;
	return ret;
}

static int remote_tier(struct conn *c, void *arg)
{
	return kvsd_remote_tier_cmd(kvsd_srv.d, c->cred.uid, c->cred.admin, arg);
}

static int chan_open(struct conn *c, void *arg)
{
	return kvsd_chan_open(c, arg);
}

union sock_arg {
	struct kvs_ring_setup ring_setup;
	struct kvs_ring_enter ring_enter;
	struct kvs_wait_fd wait_fd;
	struct kvs_remote_tier remote_tier;
	struct kvs_chan_open chan_open;
};

static const struct sock_cmd {
	unsigned int cmd;
	int (*fn)(struct conn *c, void *arg);
} sock_cmds[] = {
	{ KVS_SOCK_RING_SETUP, ring_setup },
	{ KVS_SOCK_RING_ENTER, ring_enter },
	{ KVS_SOCK_WAIT_FD, wait_fd_setup },
	{ KVS_SOCK_REMOTE_TIER, remote_tier },
	{ KVS_IOC_CHAN_OPEN, chan_open },
};

/* Matched by the whole number, size bits included: no older struct exists. */
static const struct sock_cmd *sock_cmd_of(unsigned int cmd)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(sock_cmds); i++)
		if (sock_cmds[i].cmd == cmd)
			return &sock_cmds[i];
	return NULL;
}

bool kvsd_is_sock_cmd(unsigned int cmd)
{
	return sock_cmd_of(cmd);
}

int kvsd_sock_cmd(struct conn *c, const struct kvs_msg *h, uint8_t *ustruct)
{
	const struct sock_cmd *sc = sock_cmd_of(h->cmd);
	uint32_t size = _IOC_SIZE(h->cmd);
	union sock_arg arg;
	int ret;

	if (!sc || size > sizeof(arg))
		return -ENOTTY;
	if (h->result || h->out_off || h->out_len || h->len != KVSD_HDR + size)
		return -EINVAL;
	if (c->fds_trunc || c->n_fds)
		return -EINVAL;
	memcpy(&arg, ustruct, size);
	ret = sc->fn(c, &arg);
	if (!ret)
		memcpy(ustruct, &arg, size);
	return ret;
}
