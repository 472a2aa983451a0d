// SPDX-License-Identifier: GPL-2.0
/*
 * A pool's event channel: the feed a remote tier reads (KVS_IOC_CHAN_OPEN
 * in <linux/kvshare.h>), designed as the kernel's own event files are
 * (fanotify, userfaultfd, io_uring's CQ): a bounded FIFO owned by one
 * file, drained in batches, cleaned up when that file goes.
 *
 * The arbiter (core_arbiter.c) queues the records, with pool->lock held:
 * a full ring or a channel at its holding bound drops the record and
 * counts it, so a slow reader never blocks nor fails a client's call.
 * What the records hold lives in the channel's own client, whose quota is
 * the pool's max_pages_per_file: that is the bound, and closing the
 * channel releases it all through kvs_client_free().
 *
 * With no channel open, the arbiter pays one pointer test per command.
 */
#include "core_internal.h"

/* The next free slot, zeroed, or NULL if the ring is full. */
struct kvs_event *kvs_chan_push(struct kvs_chan *ch, u32 type)
{
	struct kvs_event *ev;

	lockdep_assert_held(&ch->pool->lock);
	if (!kvs_chan_room(ch))
		return NULL;
	ev = &ch->ring[(ch->head + ch->len) % ch->size];
	ch->len++;
	memset(ev, 0, sizeof(*ev));
	ev->type = type;
	if (ch->wake)
		ch->wake(ch->wake_arg);
	return ev;
}

/*
 * The pool was destroyed: the channel queues nothing more, and its
 * reader gets one POOL_GONE record after the ones queued (it needs no
 * slot, so a full ring cannot lose it).
 */
void kvs_chan_pool_gone(struct kvs_pool *pool)
{
	struct kvs_chan *ch = pool->chan;

	lockdep_assert_held(&pool->lock);
	if (!ch || ch->gone)
		return;
	ch->gone = true;
	if (ch->wake)
		ch->wake(ch->wake_arg);
}

/* The negative memory (KVS_CHAN_NEG_MS in core_internal.h): a key's slot and tag. */
static struct kvs_chan_neg *kvs_chan_neg_slot(struct kvs_chan *ch, u64 ns,
					      const struct kvs_key *key, u64 *tag)
{
	u32 h = kvs_index_hash(ch->pool, ns, key);

	/* The slot and the tag from different bits: a collision is rarer. */
	*tag = (key->w[0] ^ key->w[2] ^ ns) | 1;
	return &ch->neg[h % KVS_CHAN_NEG_SLOTS];
}

void kvs_chan_neg_add(struct kvs_chan *ch, u64 ns, const struct kvs_key *key)
{
	struct kvs_chan_neg *s;
	u64 tag;

	lockdep_assert_held(&ch->pool->lock);
	if (!ch->neg)
		return;
	s = kvs_chan_neg_slot(ch, ns, key, &tag);
	s->tag = tag;
	s->until = kvs_now_ms() + KVS_CHAN_NEG_MS;
}

bool kvs_chan_neg_hit(struct kvs_chan *ch, u64 ns, const struct kvs_key *key)
{
	struct kvs_chan_neg *s;
	u64 tag;

	lockdep_assert_held(&ch->pool->lock);
	if (!ch->neg)
		return false;
	s = kvs_chan_neg_slot(ch, ns, key, &tag);
	return s->tag == tag && (s32)(s->until - kvs_now_ms()) > 0;
}

static void kvs_chan_free(struct kvs_chan *ch)
{
	if (ch->cl)
		kvs_client_free(ch->cl);
	kvfree(ch->ring);
	kvfree(ch->miss_pages);
	kvfree(ch->neg);
	kfree(ch);
	atomic64_dec(&kvs_objects);
}

int kvs_chan_open(struct kvs_chan_open *req, const struct kvs_cred *cred,
		  void (*wake)(void *arg), void *arg, struct kvs_chan **out)
{
	struct kvs_chan *ch;
	int ret;

	if (req->flags || req->fd || req->max_held ||
	    req->reserved[0] || req->reserved[1])
		return -EINVAL;
	if (!req->ring || req->ring > KVS_CHAN_RING_MAX ||
	    req->fetch_max > KVS_CHAN_FETCH_MAX)
		return -EINVAL;
	ch = kzalloc(sizeof(*ch), GFP_KERNEL_ACCOUNT);
	if (!ch)
		return -ENOMEM;
	atomic64_inc(&kvs_objects);
	ch->size = req->ring;
	ch->fetch_max = req->fetch_max;
	ch->wake = wake;
	ch->wake_arg = arg;
	ch->ring = kvcalloc(ch->size, sizeof(*ch->ring), GFP_KERNEL_ACCOUNT);
	if (ch->fetch_max) {
		ch->miss_pages = kvcalloc(ch->fetch_max, sizeof(u32),
					  GFP_KERNEL_ACCOUNT);
		ch->neg = kvcalloc(KVS_CHAN_NEG_SLOTS, sizeof(*ch->neg),
				   GFP_KERNEL_ACCOUNT);
	}
	ch->cl = kvs_client_new();
	ret = -ENOMEM;
	if (!ch->ring || (ch->fetch_max && (!ch->miss_pages || !ch->neg)) || !ch->cl)
		goto fail;
	ch->cl->is_chan = true;
	ret = kvs_pool_attach_chan(ch, req->pool_id, cred);
	if (ret)
		goto fail;
	req->max_held = ch->cl->quota;
	*out = ch;
	return 0;
fail:
	kvs_chan_free(ch);
	return ret;
}

void kvs_chan_close(struct kvs_chan *ch)
{
	struct kvs_pool *pool = ch->pool;

	/* No record after this; then the client gives back all it holds. */
	mutex_lock(&pool->lock);
	pool->chan = NULL;
	mutex_unlock(&pool->lock);
	kvs_chan_free(ch);
}

__u32 kvs_chan_read(struct kvs_chan *ch, struct kvs_event *out, __u32 max)
{
	u32 n, first;

	mutex_lock(&ch->pool->lock);
	n = min(ch->len, max);
	first = min(n, ch->size - ch->head);
	memcpy(out, &ch->ring[ch->head], first * sizeof(*out));
	memcpy(out + first, ch->ring, (n - first) * sizeof(*out));
	ch->head = (ch->head + n) % ch->size;
	ch->len -= n;
	if (n < max && !ch->len && ch->gone && !ch->gone_read) {
		memset(&out[n], 0, sizeof(out[n]));
		out[n].type = KVS_EVENT_POOL_GONE;
		out[n].page = KVS_NO_PAGE;
		ch->gone_read = true;
		n++;
	}
	mutex_unlock(&ch->pool->lock);
	return n;
}

int kvs_chan_ready(struct kvs_chan *ch)
{
	return READ_ONCE(ch->len) ||
	       (READ_ONCE(ch->gone) && !READ_ONCE(ch->gone_read));
}

int kvs_chan_stats(struct kvs_chan *ch, struct kvs_chan_stats *st)
{
	if (st->flags || memchr_inv(&st->pending, 0,
				    sizeof(*st) - offsetof(struct kvs_chan_stats, pending)))
		return -EINVAL;
	mutex_lock(&ch->pool->lock);
	st->pending = ch->len;
	st->published = ch->published;
	st->missed = ch->missed;
	st->dropped_full = ch->dropped_full;
	st->dropped_held = ch->dropped_held;
	st->held = ch->cl->held;
	mutex_unlock(&ch->pool->lock);
	return 0;
}

struct kvs_client *kvs_chan_client(struct kvs_chan *ch)
{
	return ch->cl;
}

/* What a channel may run as a client: giving back what its records hold. */
int kvs_chan_cmd_ok(unsigned int cmd)
{
	u32 size = kvs_cmd_size(cmd);

	return size && (_IOC_NR(cmd) == _IOC_NR(KVS_IOC_PUT) ||
			_IOC_NR(cmd) == _IOC_NR(KVS_IOC_PUBLISH));
}
