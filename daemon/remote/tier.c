// SPDX-License-Identifier: GPL-2.0
/*
 * The remote tier (remote.h), the loop's side: the records of the pool's
 * event channel (chan.c reaches it, in either mode), the jobs they make,
 * the finished jobs the thread hands back (thread.c), and starting and
 * stopping tiers.  Every arbiter call of the tier is a PUT or PUBLISH on
 * its channel, made here, on the event loop.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>

#include <xxhash.h>

#include "core.h"
#include "remote.h"
#include "tier.h"
#include "../user.h"

struct tier *kvsd_remote_tiers;
struct tier *kvsd_remote_stopping;

/* Module mode: kvshared's /dev/kvshare file and its path; socket mode: -1. */
static int tier_dev_fd = -1;
static const char *tier_device;

/* A command of one of the tier's clients: admin, as the pool's owner. */
static int tier_cmd(struct kvs_client *cl, uint32_t uid, unsigned int cmd,
		    void *arg, void **mem_out)
{
	struct kvs_cred cred = { .uid = uid, .gid = uid, .admin = 1 };
	struct kvs_call call = {
		.cred = &cred,
		.copy_in = kvsd_self_copy_in,
		.copy_out = kvsd_self_copy_out,
	};
	int ret;

	ret = kvs_cmd(cl, cmd, arg, &call);
	if (mem_out)
		*mem_out = call.mem_out;
	else if (call.mem_out)
		kvs_host_mem_put(call.mem_out);
	return ret;
}

/* PUT on the channel: references of its records, claims it will not fill. */
static int chan_put(struct tier *t, const uint32_t *pages, uint32_t n)
{
	struct kvs_put put = { .count = n, .pages = (uintptr_t)pages };
	int ret;

	if (!n)
		return 0;
	ret = t->chan_ops->cmd(t, KVS_IOC_PUT, &put);
	if (ret)
		kvsd_log("pool '%s': remote tier: PUT of %u pages failed: %s",
			 t->name, n, strerror(-ret));
	return ret;
}

static int attach(struct tier *t, struct kvs_client *cl, uint32_t uid, uint64_t ns,
		  uint32_t flags, struct kvs_pool_attach *at, void **mem)
{
	memset(at, 0, sizeof(*at));
	snprintf(at->name, sizeof(at->name), "%s", t->name);
	at->owner = t->owner;
	at->ns = ns;
	at->flags = flags;
	return tier_cmd(cl, uid, KVS_IOC_POOL_ATTACH, at, mem);
}

/*
 * A client namespace of the pool (the core's: a uid on an ns_per_uid
 * pool), and the names of its pages in Redis.
 */
static struct tns *ns_get(struct tier *t, uint64_t ns)
{
	struct tns *s;

	for (s = t->nss; s; s = s->next)
		if (s->ns == ns)
			return s;
	if (t->n_ns == MAX_NS)
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->t = t;
	s->ns = ns;
	kvsd_rpage_id_init(&s->id, t->ns, t->owner, ns, &t->geom, t->rc->mac);
	s->next = t->nss;
	t->nss = s;
	t->n_ns++;
	return s;
}

static struct tier *tier_of(uint32_t pool_id)
{
	struct tier *t;

	for (t = kvsd_remote_tiers; t; t = t->next)
		if (t->pool_id == pool_id)
			return t;
	return NULL;
}

static struct job *job_new(uint32_t n, bool fetch)
{
	struct job *j = calloc(1, sizeof(*j) + n * (sizeof(struct kvs_key) + 4));

	if (!j)
		return NULL;
	j->n = n;
	j->fetch = fetch;
	j->parent = KVS_NO_PAGE;
	j->pages = (uint32_t *)(j->keys + n);
	return j;
}

/* A fetch's reference on the page its chain follows, given back. */
static void put_parent(struct tier *t, struct job *j)
{
	if (j->parent != KVS_NO_PAGE)
		chan_put(t, &j->parent, 1);
	j->parent = KVS_NO_PAGE;
}

static void job_queue(struct tier *t, struct job *j)
{
	pthread_mutex_lock(&t->mu);
	*t->todo_tail = j;
	t->todo_tail = &j->next;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
}

/* The negative cache: a key of a namespace that missed a moment ago. */
static uint64_t neg_hash(const struct tns *s, const struct kvs_key *key)
{
	uint64_t buf[5] = { s->ns, key->w[0], key->w[1], key->w[2], key->w[3] };

	return XXH3_64bits(buf, sizeof(buf)) | 1;
}

static bool neg_hit(struct tier *t, const struct tns *s, const struct kvs_key *key)
{
	uint64_t h = neg_hash(s, key);

	return t->neg[h % NEG_SLOTS].h == h &&
	       t->neg[h % NEG_SLOTS].until > kvsd_now_ms();
}

static void neg_add(struct tier *t, const struct tns *s, const struct kvs_key *key)
{
	uint64_t h = neg_hash(s, key);

	t->neg[h % NEG_SLOTS].h = h;
	t->neg[h % NEG_SLOTS].until = kvsd_now_ms() + NEG_TTL_MS;
}

/*
 * PUBLISHED records @ev[0..n), of one namespace: a client published those
 * pages for the first time, and the channel holds a reference on each, so
 * that no page is reused under the thread's copy.  Queued for writing, or
 * given back at once.
 */
static void published(struct tier *t, const struct kvs_event *ev, uint32_t n)
{
	uint32_t i, m = n, room = t->write_max - t->write_queued;
	struct job *j = NULL;
	struct tns *s;

	/*
	 * Each queued page holds a reference until the thread has copied
	 * it, and a slow Redis makes them wait: past the bound the pages
	 * are dropped (counted), so that the pool's clients keep the rest.
	 */
	if (t->rc->write != KVSD_REMOTE_WRITE_PUBLISH) {
		m = 0;
	} else if (!atomic_load(&t->up)) {
		count(&t->st.write_dropped[WRITE_DROP_DOWN], m);
		m = 0;
	} else if (m > room) {
		count(&t->st.write_dropped[WRITE_DROP_BUSY], m - room);
		m = room;
	}
	s = m ? ns_get(t, ev[0].ns) : NULL;
	if (s)
		j = job_new(m, false);
	if (m && !j) {
		count(&t->st.write_dropped[WRITE_DROP_REFUSED], m);
		m = 0;
	}
	for (i = 0; i < m; i++) {
		j->keys[i] = ev[i].key;
		j->pages[i] = ev[i].page;
	}
	for (i = m; i < n; i++)
		chan_put(t, &ev[i].page, 1);
	if (!j)
		return;
	j->tns = s;
	t->write_queued += m;
	count(&t->st.write_pending, m);
	job_queue(t, j);
}

/*
 * Fetches out for @uid, changed by @delta; false (nothing changed) when
 * adding one would pass MAX_UID_FETCHES.  A client's misses make the
 * tier claim pages, which may evict cached ones: one user may not take
 * every fetch, and with them the pool, for itself.
 */
static bool uid_fetching(struct tier *t, uint32_t uid, int delta)
{
	unsigned int i, free_slot = MAX_FETCHES;

	for (i = 0; i < MAX_FETCHES; i++) {
		if (t->uid_fetching[i].n && t->uid_fetching[i].uid == uid)
			break;
		if (!t->uid_fetching[i].n && free_slot == MAX_FETCHES)
			free_slot = i;
	}
	if (i == MAX_FETCHES) {
		if (delta < 0 || free_slot == MAX_FETCHES)
			return false;
		i = free_slot;
		t->uid_fetching[i].uid = uid;
	}
	if (delta > 0 && t->uid_fetching[i].n >= MAX_UID_FETCHES)
		return false;
	t->uid_fetching[i].n += delta;
	return true;
}

/*
 * Charge the fetch of @j->n pages to @uid's ledger, cut to what it has
 * room for.  A value that is not a page's exact size is not read into its
 * page, and a hostile store may answer with other things, so the reader
 * may hold up to a page's size of each reply until the fetch ends
 * (resp.c): 64 MiB for a FETCH_BYTES fetch, 8 of them out per uid.
 * 0, or -EDQUOT / -ENOBUFS when not even one page fits (logged).
 */
static int fetch_charge(struct tier *t, struct job *j, uint32_t uid)
{
	uint64_t page_bytes = t->geom.page_bytes, room;
	char why[200];
	int ret;

	j->user = kvsd_user_get(uid, uid == 0);
	if (!j->user)
		return -ENOMEM;
	room = kvsd_user_room(j->user) / page_bytes;
	if (room && room < j->n)
		j->n = room;
	ret = kvsd_user_charge(j->user, KVSD_CHARGE_FETCH, j->n * page_bytes, why,
			       sizeof(why));
	if (ret) {
		kvsd_user_refused(j->user, "a remote fetch", why);
		kvsd_user_put(j->user);
		j->user = NULL;
		return ret;
	}
	j->charged = j->n * page_bytes;
	return 0;
}

/* A fetch has ended, however: its uid's ledger no longer pays for it. */
static void fetch_uncharge(struct job *j)
{
	if (!j->user)
		return;
	kvsd_user_uncharge(j->user, KVSD_CHARGE_FETCH, j->charged);
	kvsd_user_put(j->user);
	j->user = NULL;
}

/*
 * A miss's MISS records, gathered: its keys are claimed for the channel
 * (OWNED pages of its own), so the LOOKUPs that wait on them see them in
 * flight, as another process's compute.  Fetched, or given back at once,
 * which wakes those LOOKUPs to compute (the core does not claim those
 * keys again for a while).
 */
static void fetch_start(struct tier *t, struct job *j)
{
	uint32_t claimed = j->n;
	struct tns *s;

	if (!atomic_load(&t->up)) {
		count(&t->st.skip_down, 1);
		goto drop;
	}
	if (t->fetching >= MAX_FETCHES || !uid_fetching(t, j->uid, 1)) {
		count(&t->st.skip_busy, 1);
		goto drop;
	}
	s = ns_get(t, j->ns);
	if (!s)
		goto drop_uid;
	j->tns = s;
	if (fetch_charge(t, j, j->uid)) {
		count(&t->st.skip_user, 1);
		goto drop_uid;
	}
	if (neg_hit(t, s, &j->keys[0])) {
		count(&t->st.skip_neg, 1);
		goto drop_charge;
	}
	/* Cut to what the uid's ledger has room for: the rest go back. */
	chan_put(t, j->pages + j->n, claimed - j->n);
	j->t0_ms = kvsd_now_ms();
	t->fetching++;
	job_queue(t, j);
	return;
drop_charge:
	fetch_uncharge(j);
drop_uid:
	uid_fetching(t, j->uid, -1);
drop:
	chan_put(t, j->pages, claimed);
	put_parent(t, j);
	free(j);
}

/*
 * One MISS record: the k-th of a miss's n, in chain order, one after the
 * other; the first names the page the chain follows (held for us).
 */
static void missed(struct tier *t, const struct kvs_event *ev)
{
	struct job *j = t->miss;

	if (!ev->k) {
		if (j) {	/* never completed: cannot be, but hold nothing for it */
			chan_put(t, j->pages, t->miss_have);
			put_parent(t, j);
			free(j);
		}
		j = t->miss = ev->n ? job_new(ev->n, true) : NULL;
		t->miss_have = 0;
		if (j) {
			j->uid = ev->uid;
			j->ns = ev->ns;
			j->parent = ev->parent;
		} else if (ev->parent != KVS_NO_PAGE) {
			chan_put(t, &ev->parent, 1);
		}
	}
	if (!j || ev->k != t->miss_have || ev->n != j->n || ev->ns != j->ns) {
		chan_put(t, &ev->page, 1);	/* of no miss being gathered */
		return;
	}
	j->keys[ev->k] = ev->key;
	j->pages[ev->k] = ev->page;
	if (++t->miss_have < j->n)
		return;
	t->miss = NULL;
	fetch_start(t, j);
}

/*
 * A fetch came back: publish the valid run on the channel, its first page
 * under the miss's last hit as the client's own compute would have, and
 * give the rest back, that hit's reference last.
 */
static void fetch_done(struct tier *t, struct job *j)
{
	struct tns *s = j->tns;
	struct kvs_publish_entry *e = NULL;
	struct kvs_publish pub = { 0 };
	uint32_t i, n_ok = j->n_ok;

	if (n_ok)
		e = calloc(n_ok, sizeof(*e));
	if (!e)
		n_ok = 0;
	for (i = 0; i < n_ok; i++) {
		e[i].page = j->pages[i];
		e[i].parent = i ? KVS_PARENT_PREV : j->parent;
		e[i].key = j->keys[i];
	}
	pub.count = n_ok;
	pub.entries = (uintptr_t)e;
	if (n_ok && t->chan_ops->cmd(t, KVS_IOC_PUBLISH, &pub)) {
		kvsd_log("pool '%s': remote tier: publishing %u fetched pages failed",
			 t->name, n_ok);
		n_ok = 0;
	}
	/* The references PUBLISH left us: the pages stay, CACHED. */
	for (i = 0; i < n_ok; i++)
		j->pages[i] = e[i].result;
	chan_put(t, j->pages, j->n);	/* references, then the unfilled claims */
	put_parent(t, j);
	/*
	 * A miss, or a failure (a dead master, CLUSTERDOWN): either way the
	 * chain is not asked again for a while, or every waiter woken by
	 * the failure would start the same failing fetch at once.
	 */
	if (n_ok < j->n)
		neg_add(t, s, &j->keys[n_ok]);
	free(e);
	t->fetching--;
	uid_fetching(t, j->uid, -1);
	fetch_uncharge(j);
}

/* The pool was destroyed: its tier goes off, as for a DESTROY on the socket. */
static void pool_gone(struct tier *t)
{
	kvsd_watch_del(&t->cw);		/* the last record */
	kvsd_log("pool '%s': destroyed; its remote tier goes off", t->name);
	for (struct tier *o = kvsd_remote_tiers; o; o = o->next)
		if (o == t) {
			kvsd_remote_tier_off(t->pool_id);
			break;
		}
}

#define CHAN_READ	256	/* records taken off the channel at a time */
#define CHAN_EVENT_MAX	4096	/* and at most this many a wakeup: the loop has others */

/* The channel has records: each is a job's, or given back at once. */
static void chan_event(struct kvsd_watch *w, uint32_t events)
{
	struct tier *t = (struct tier *)((char *)w - offsetof(struct tier, cw));
	struct kvs_event ev[CHAN_READ];
	uint32_t i, run, total = 0;
	int n;

	(void)events;
	do {
		n = t->chan_ops->read(t, ev, CHAN_READ);
		if (n < 0) {
			kvsd_log("pool '%s': remote tier: reading its event channel: %s; "
				 "no more writes or fetches", t->name, strerror(-n));
			kvsd_watch_del(&t->cw);
			return;
		}
		for (i = 0; i < (uint32_t)n; i = run) {
			run = i + 1;
			if (ev[i].type == KVS_EVENT_PUBLISHED) {
				while (run < (uint32_t)n && ev[run].type == KVS_EVENT_PUBLISHED &&
				       ev[run].ns == ev[i].ns)
					run++;
				published(t, ev + i, run - i);
			} else if (ev[i].type == KVS_EVENT_MISS) {
				missed(t, &ev[i]);
			} else if (ev[i].type == KVS_EVENT_POOL_GONE) {
				pool_gone(t);
				return;
			}
		}
		total += n;
	} while (n > 0 && total < CHAN_EVENT_MAX);	/* the module's reads are shorter */
}

static void tier_free(struct tier *t);

static void tier_done(struct kvsd_watch *w, uint32_t events)
{
	struct tier *t = (struct tier *)((char *)w - offsetof(struct tier, w));
	struct job *j, *next;
	uint64_t v;

	(void)events;
	if (read(w->fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		return;
	if (atomic_load(&t->exited)) {
		struct tier **pp;

		for (pp = &kvsd_remote_stopping; *pp && *pp != t; pp = &(*pp)->next)
			;
		if (*pp) {
			*pp = t->next;
			tier_free(t);	/* its clients' close releases its jobs */
			return;
		}
	}
	pthread_mutex_lock(&t->mu);
	j = t->done;
	t->done = NULL;
	pthread_mutex_unlock(&t->mu);
	for (; j; j = next) {
		next = j->next;
		if (j->fetch) {
			fetch_done(t, j);
		} else {
			chan_put(t, j->pages, j->n);
			t->write_queued -= j->n;
		}
		free(j);
	}
}

/* ---- start, stop ------------------------------------------------------------------- */

/* The module's pool memory, mapped through an attach of our own (dev_fd is never attached). */
static int tier_map_dev(struct tier *t, struct kvs_pool_attach *at)
{
	int fd = open(tier_device, O_RDWR | O_CLOEXEC), ret = 0;

	if (fd < 0)
		return -errno;
	memset(at, 0, sizeof(*at));
	snprintf(at->name, sizeof(at->name), "%s", t->name);
	at->owner = t->owner;
	at->flags = KVS_ATTACH_MEM_FD;
	if (ioctl(fd, KVS_IOC_POOL_ATTACH, at)) {
		ret = -errno;
		goto out;
	}
	t->mem_len = (size_t)at->n_pages * at->geom.page_bytes;
	t->mem = mmap(NULL, t->mem_len, PROT_READ | PROT_WRITE, MAP_SHARED, at->mem_fd, 0);
	if (t->mem == MAP_FAILED) {
		ret = -errno;
		t->mem = NULL;
	}
	close(at->mem_fd);
out:
	close(fd);	/* the mapping stays */
	return ret;
}

/* The pool's memory, mapped through an attach of our own. */
static int tier_map(struct tier *t)
{
	struct kvs_client *cl = kvs_client_new();
	struct kvs_pool_attach at;
	void *mem = NULL;
	int ret;

	if (!cl)
		return -ENOMEM;
	if (t->chan_ops == &kvsd_tier_chan_dev) {
		ret = tier_map_dev(t, &at);
	} else {
		ret = attach(t, cl, t->owner, 0, KVS_ATTACH_MEM_FD, &at, &mem);
		if (!ret) {
			t->mem_len = (size_t)at.n_pages * at.geom.page_bytes;
			t->mem = mmap(NULL, t->mem_len, PROT_READ | PROT_WRITE, MAP_SHARED,
				      kvs_host_mem_fd(mem), 0);
			if (t->mem == MAP_FAILED) {
				ret = -errno;
				t->mem = NULL;
			}
		}
	}
	if (!ret) {
		t->geom = at.geom;
		t->n_pages = at.n_pages;
		t->write_max = t->rc->queue;
		if (t->write_max > at.n_pages / WRITE_POOL_SHARE)
			t->write_max = at.n_pages / WRITE_POOL_SHARE ?: 1;
	}
	if (mem)
		kvs_host_mem_put(mem);
	kvs_client_free(cl);
	return ret;
}

static int tier_probe(struct tier *t)
{
	int ret = kvsd_rcl_probe(&t->rcl, kvsd_now_ms() + PROBE_START_MS);

	if (ret == -EACCES) {
		kvsd_log("pool '%s': remote tier: %s (check remote_user and "
			 "remote_password_file)", t->name, t->rcl.err);
		return ret;
	}
	atomic_store(&t->up, !ret);
	if (ret)
		kvsd_log("pool '%s': remote tier down at start: %s; retrying every "
			 "%d ms", t->name, t->rcl.err, PROBE_MS);
	else
		kvsd_log("pool '%s': remote tier up: %s%s%u node%s, namespace '%s', "
			 "write %s, fetch %s", t->name, t->rc->cluster ? "cluster of " : "",
			 t->rc->tls ? "TLS, " : "", t->rcl.n_nodes,
			 t->rcl.n_nodes == 1 ? "" : "s", t->ns,
			 t->rc->write == KVSD_REMOTE_WRITE_PUBLISH ? "behind publish" : "off",
			 t->rc->fetch ? "on lookup miss" : "off");
	snprintf(t->last_err, sizeof(t->last_err), "%s", ret ? t->rcl.err : "");
	return 0;
}

/*
 * The pool's event channel: what the tier writes and fetches.  A miss
 * claims at most what one fetch may take, and the ring holds a whole
 * pool's publish (so a burst is cut by the write queue's bound, counted,
 * not by the ring).  Polled on the loop from here on.
 */
static int tier_chan_open(struct tier *t)
{
	struct kvs_chan_open co = { .pool_id = t->pool_id };
	uint32_t per_fetch = FETCH_BYTES / t->geom.page_bytes ?: 1;
	int ret;

	co.fetch_max = t->rc->fetch ? t->rc->fetch_max : 0;
	if (co.fetch_max > per_fetch)
		co.fetch_max = per_fetch;
	if (co.fetch_max > KVS_CHAN_FETCH_MAX)
		co.fetch_max = KVS_CHAN_FETCH_MAX;
	co.ring = t->n_pages < KVS_CHAN_RING_MAX ? (uint32_t)t->n_pages : KVS_CHAN_RING_MAX;
	if (co.ring < co.fetch_max)
		co.ring = co.fetch_max;
	if (!co.ring)
		co.ring = 1;
	ret = t->chan_ops->open(t, &co);
	if (ret) {
		kvsd_log("pool '%s': remote tier: opening the pool's event channel: %s%s",
			 t->name, strerror(-ret), ret == -EBUSY ?
			 " (another holder has it)" : "");
		return ret;
	}
	ret = kvsd_watch_add(&t->cw, EPOLLIN) ? -errno : 0;
	if (ret)
		kvsd_log("pool '%s': remote tier: watching its event channel: %s",
			 t->name, strerror(-ret));
	return ret;
}

static void tier_free(struct tier *t)
{
	struct tns *s, *sn;
	struct job *j, *jn;

	if (t->th_started) {
		pthread_mutex_lock(&t->mu);
		t->stop = true;
		pthread_cond_signal(&t->cv);
		pthread_mutex_unlock(&t->mu);
		pthread_join(t->th, NULL);
	}
	/*
	 * Jobs never run or never collected: the channel's close releases
	 * their pages, and their uids' ledgers stop paying for them here.
	 */
	for (j = t->todo; j; j = jn) {
		jn = j->next;
		fetch_uncharge(j);
		free(j);
	}
	for (j = t->done; j; j = jn) {
		jn = j->next;
		fetch_uncharge(j);
		free(j);
	}
	for (s = t->nss; s; s = sn) {
		sn = s->next;
		free(s);
	}
	/* With the thread gone: every reference and claim the tier held goes back. */
	free(t->miss);
	if (t->cw.fd >= 0)
		kvsd_watch_del(&t->cw);
	if (t->chan_ops)
		t->chan_ops->close(t);
	if (t->w.fd >= 0) {
		kvsd_watch_del(&t->w);
		close(t->w.fd);
	}
	if (t->mem)
		munmap(t->mem, t->mem_len);
	kvsd_rcl_close(&t->rcl);
	kvsd_rtls_free(t->tls);
	pthread_mutex_destroy(&t->mu);
	pthread_cond_destroy(&t->cv);
	free(t);
}

/*
 * A tier for pool @pool_id.  @probe: check Redis before the thread runs
 * (at startup, up to PROBE_START_MS); otherwise the thread connects in
 * the background and the loop never waits.
 */
static int tier_start(const struct kvsd_tier_spec *sp, bool probe)
{
	const struct kvsd_remote_cfg *rc = sp->rc;
	struct kvsd_rauth auth = { 0 };
	struct tier *t = calloc(1, sizeof(*t));
	char err[200];
	int ret;

	if (!t)
		return -ENOMEM;
	snprintf(t->name, sizeof(t->name), "%s", sp->pool);
	snprintf(t->ns, sizeof(t->ns), "%s", sp->ns);
	snprintf(t->tier_name, sizeof(t->tier_name), "%s", sp->tier ? sp->tier : "");
	t->rc = rc;
	t->pool_id = sp->pool_id;
	t->owner = sp->owner;
	t->per_uid = sp->per_uid;
	t->started_by = sp->started_by;
	t->started_admin = sp->started_admin;
	t->todo_tail = &t->todo;
	t->w.fd = -1;
	t->w.fn = tier_done;
	t->cw.fd = -1;
	t->cw.fn = chan_event;
	t->chan_ops = tier_dev_fd >= 0 ? &kvsd_tier_chan_dev : &kvsd_tier_chan_core;
	t->dev_fd = tier_dev_fd;
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->cv, NULL);
	ret = tier_map(t);
	if (ret) {
		kvsd_log("pool '%s': remote tier: mapping the pool: %s", t->name,
			 strerror(-ret));
		goto fail;
	}
	ret = tier_chan_open(t);
	if (ret)
		goto fail;
	if (rc->tls) {
		t->tls = kvsd_rtls_new(rc->tls_ca, rc->tls_cert, rc->tls_key, err,
				       sizeof(err));
		if (!t->tls) {
			kvsd_log("pool '%s': remote tier: %s", t->name, err);
			ret = -EINVAL;
			goto fail;
		}
	}
	auth.user = rc->user;
	auth.password = rc->password;
	auth.tls = t->tls;
	ret = kvsd_rcl_init(&t->rcl, rc->cluster, (const char *const *)rc->nodes,
			    rc->n_nodes, &auth);
	if (!ret && probe)
		ret = tier_probe(t);
	if (ret)
		goto fail;
	if (!probe) {
		/* Down until the thread's first probe answers. */
		snprintf(t->last_err, sizeof(t->last_err), "connecting");
		kvsd_log("pool '%s': remote tier '%s' on, namespace '%s'; "
			 "connecting", t->name, t->tier_name, t->ns);
	}
	t->w.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (t->w.fd < 0 || kvsd_watch_add(&t->w, EPOLLIN)) {
		ret = -errno;
		goto fail;
	}
	ret = -pthread_create(&t->th, NULL, kvsd_tier_main, t);
	if (ret)
		goto fail;
	t->th_started = true;
	t->next = kvsd_remote_tiers;
	kvsd_remote_tiers = t;
	return 0;
fail:
	tier_free(t);
	return ret;
}

int kvsd_remote_tier_on(const struct kvsd_tier_spec *sp)
{
	return tier_start(sp, false);
}

/*
 * Unlink the tier and tell its thread to stop; the loop frees it when
 * the thread has returned (tier_done), so that no page its clients hold
 * goes back to the pool while the thread may still copy it.
 */
static void tier_stop(struct tier **pp)
{
	struct tier *t = *pp;

	*pp = t->next;
	pthread_mutex_lock(&t->mu);
	t->stop = true;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
	t->next = kvsd_remote_stopping;
	kvsd_remote_stopping = t;
	kvsd_log("pool '%s': remote tier%s%s off", t->name,
		 t->tier_name[0] ? " " : "", t->tier_name);
}

bool kvsd_remote_pool_has_tier(uint32_t owner, const char *pool)
{
	struct tier *t;

	for (t = kvsd_remote_tiers; t; t = t->next)
		if (t->owner == owner && !strcmp(t->name, pool))
			return true;
	return false;
}

const char *kvsd_remote_tier_of(uint32_t pool_id)
{
	struct tier *t = tier_of(pool_id);

	return t ? t->tier_name : NULL;
}

int kvsd_remote_tier_off(uint32_t pool_id)
{
	struct tier **pp;

	for (pp = &kvsd_remote_tiers; *pp; pp = &(*pp)->next) {
		if ((*pp)->pool_id == pool_id) {
			tier_stop(pp);
			return 0;
		}
	}
	return -ENOENT;
}

void kvsd_remote_tier_counts(uint32_t uid, unsigned int *all, unsigned int *of_uid)
{
	struct tier *lists[2] = { kvsd_remote_tiers, kvsd_remote_stopping };
	struct tier *t;
	int i;

	*all = *of_uid = 0;
	for (i = 0; i < 2; i++) {
		for (t = lists[i]; t; t = t->next) {
			if (!t->tier_name[0])
				continue;
			(*all)++;
			if (!t->started_admin && t->started_by == uid)
				(*of_uid)++;
		}
	}
}

int kvsd_remote_start(struct kvsd *d)
{
	const struct kvsd_config *cfg = d->cfg;
	struct kvsd_tier_spec spec = { 0 };
	const struct kvsd_pool *p;
	unsigned int i;
	int ret;

	/* Module mode: the channels are the module's files (chan.c). */
	if (d->mode == KVSD_MODE_MODULE) {
		tier_dev_fd = d->dev_fd;
		tier_device = cfg->device;
	}
	for (i = 0; i < cfg->n_pools; i++) {
		const struct kvsd_pool_cfg *pc = &cfg->pools[i];

		if (!pc->remote)
			continue;
		for (p = d->pools; p && strcmp(p->name, pc->name); p = p->next)
			;
		if (!p)
			continue;	/* not created: logged already */
		spec.rc = pc->remote;
		spec.pool = pc->name;
		spec.ns = pc->remote->ns;
		spec.pool_id = p->pool_id;
		spec.owner = pc->uid >= 0 ? (uint32_t)pc->uid : getuid();
		spec.per_uid = pc->flags & KVS_POOL_NS_PER_UID;
		ret = tier_start(&spec, true);
		if (ret == -EACCES)
			return ret;
		if (ret)
			kvsd_log("pool '%s': remote tier off: %s", pc->name, strerror(-ret));
	}
	return 0;
}

void kvsd_remote_reload(const struct kvsd_config *cfg)
{
	char what[KVS_NAME_MAX + 16];
	unsigned int i;

	for (i = 0; i < cfg->n_pools; i++) {
		snprintf(what, sizeof(what), "pool '%s'", cfg->pools[i].name);
		kvsd_remote_cfg_reload(cfg->pools[i].remote, what);
	}
	for (i = 0; i < cfg->n_tiers; i++) {
		snprintf(what, sizeof(what), "tier '%s'", cfg->tiers[i].name);
		kvsd_remote_cfg_reload(cfg->tiers[i].rc, what);
	}
}

void kvsd_remote_stop(void)
{
	struct tier *t, *next;

	for (t = kvsd_remote_tiers; t; t = next) {
		next = t->next;
		tier_free(t);
	}
	kvsd_remote_tiers = NULL;
	for (t = kvsd_remote_stopping; t; t = next) {
		next = t->next;
		tier_free(t);	/* joins a thread still finishing a batch */
	}
	kvsd_remote_stopping = NULL;
}
