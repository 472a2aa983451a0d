/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Pools' event channels on the socket (chan.c): KVS_IOC_CHAN_OPEN's
 * channel, a SOCK_SEQPACKET end sent with the reply.
 */
#ifndef _KVSHARED_CHAN_H
#define _KVSHARED_CHAN_H

#include <stdint.h>
#include <linux/kvshare.h>

struct conn;
struct kvs_client;
struct kvs_cred;

/* KVS_IOC_CHAN_OPEN from @c: its end goes in c->out_fds, req->fd names it. */
int kvsd_chan_open(struct conn *c, struct kvs_chan_open *req);
/* Shutdown: every channel closed, what they held given back. */
void kvsd_chans_stop(void);

/* server.c: a PUT or PUBLISH on a channel, framed as on the socket (chan.c). */
uint32_t kvsd_chan_msg(struct kvs_client *cl, const struct kvs_cred *cred, uint8_t *buf);

#endif /* _KVSHARED_CHAN_H */
