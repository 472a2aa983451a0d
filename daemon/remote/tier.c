// SPDX-License-Identifier: GPL-2.0
/*
 * The remote tier (remote.h), the loop's side: the hooks on a client's
 * PUBLISH and LOOKUP, the jobs they queue, the finished jobs the thread
 * hands back (thread.c), the tier's own arbiter clients, and
 * starting and stopping tiers.  Every arbiter call of the tier is made
 * here, on the event loop.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>

#include <xxhash.h>

#include "core.h"
#include "remote.h"
#include "tier.h"
#include "../user.h"

struct tier *kvsd_remote_tiers;
struct tier *kvsd_remote_stopping;

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

static int put_pages(struct tns *s, const uint32_t *pages, uint32_t n)
{
	struct kvs_put put = { .count = n, .pages = (uintptr_t)pages };
	int ret;

	if (!n)
		return 0;
	ret = tier_cmd(s->cl, s->t->owner, KVS_IOC_PUT, &put, NULL);
	if (ret)
		kvsd_log("pool '%s': remote tier: PUT of %u pages failed: %s",
			 s->t->name, n, strerror(-ret));
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

/* The tier's client of a client namespace, attached on first use. */
static struct tns *ns_get(struct tier *t, uint64_t ns, uint32_t uid)
{
	struct kvs_pool_attach at;
	struct tns *s;
	int ret;

	if (t->per_uid)
		ns = uid;	/* the core's namespace on such a pool */
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
	s->cl = kvs_client_new();
	ret = s->cl ? attach(t, s->cl, t->per_uid ? uid : t->owner,
			     t->per_uid ? 0 : ns, 0, &at, NULL) : -ENOMEM;
	if (ret) {
		kvsd_log("pool '%s': remote tier: attaching for namespace %llu: %s",
			 t->name, (unsigned long long)ns, strerror(-ret));
		if (s->cl)
			kvs_client_free(s->cl);
		free(s);
		return NULL;
	}
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

void kvsd_remote_published(uint32_t pool_id, uint64_t ns, uint32_t uid,
			   struct kvs_call *call, const struct kvs_publish *pub)
{
	struct tier *t = tier_of(pool_id);
	struct kvs_publish_entry *e;
	struct kvs_lookup lk;
	struct tns *s;
	struct job *j;
	uint32_t i, m = 0, room;

	if (!t || t->rc->write != KVSD_REMOTE_WRITE_PUBLISH || !pub->count)
		return;
	e = malloc((size_t)pub->count * sizeof(*e));
	if (!e)
		return;
	if (call->copy_in(call, e, pub->entries, (uint64_t)pub->count * sizeof(*e)))
		goto out;
	for (i = 0; i < pub->count; i++)
		m += !(e[i].flags & KVS_PUBLISHED_DUP);
	/*
	 * Each queued page holds a reference until the thread has copied
	 * it, and a slow Redis makes them wait: past the bound the pages
	 * are dropped (counted), so that the pool's clients keep the rest.
	 */
	room = t->write_max - t->write_queued;
	if (!atomic_load(&t->up)) {
		count(&t->st.write_dropped[WRITE_DROP_DOWN], m);
		m = 0;
	} else if (m > room) {
		count(&t->st.write_dropped[WRITE_DROP_BUSY], m - room);
		m = room;
	}
	if (!m)
		goto out;
	s = ns_get(t, ns, uid);
	j = s ? job_new(m, false) : NULL;
	if (!j)
		goto out;
	for (i = 0, m = 0; i < pub->count && m < j->n; i++)
		if (!(e[i].flags & KVS_PUBLISHED_DUP))
			j->keys[m++] = e[i].key;
	/* A reference on each, so that no page is reused under the copy. */
	memset(&lk, 0, sizeof(lk));
	lk.count = j->n;
	lk.keys = (uintptr_t)j->keys;
	lk.pages = (uintptr_t)j->pages;
	if (tier_cmd(s->cl, t->owner, KVS_IOC_LOOKUP, &lk, NULL) || !lk.n_hit) {
		count(&t->st.write_dropped[WRITE_DROP_REFUSED], j->n);	/* EDQUOT */
		free(j);
		goto out;
	}
	j->n = lk.n_hit;
	j->tns = s;
	t->write_queued += j->n;
	count(&t->st.write_pending, j->n);
	job_queue(t, j);
out:
	free(e);
}

/* Claim what the client missed; the parent's reference first. */
static int fetch_claim(struct tier *t, struct tns *s, struct job *j,
		       const struct kvs_key *parent_key)
{
	struct kvs_alloc al = { 0 };
	struct kvs_lookup lk = { 0 };
	int ret;

	if (parent_key) {
		lk.count = 1;
		lk.keys = (uintptr_t)parent_key;
		lk.pages = (uintptr_t)&j->parent;
		if (tier_cmd(s->cl, t->owner, KVS_IOC_LOOKUP, &lk, NULL) || !lk.n_hit)
			j->parent = KVS_NO_PAGE;
	}
	al.count = j->n;
	al.flags = KVS_ALLOC_CLAIM;
	al.pages = (uintptr_t)j->pages;
	al.keys = (uintptr_t)j->keys;
	ret = tier_cmd(s->cl, t->owner, KVS_IOC_ALLOC, &al, NULL);
	if (ret && j->parent != KVS_NO_PAGE)
		put_pages(s, &j->parent, 1);
	return ret;
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

void kvsd_remote_lookup(struct kvs_client *cl, uint32_t pool_id, uint64_t ns,
			uint32_t uid, struct kvs_call *call, struct kvs_lookup *lk)
{
	struct tier *t = tier_of(pool_id);
	struct kvs_key parent_key;
	struct kvs_lookup again;
	struct tns *s;
	struct job *j;
	uint32_t m;

	if (!t || !t->rc->fetch || lk->n_hit >= lk->count || lk->n_inflight)
		return;
	if (!atomic_load(&t->up)) {
		count(&t->st.skip_down, 1);
		return;
	}
	if (t->fetching >= MAX_FETCHES || !uid_fetching(t, uid, 1)) {
		count(&t->st.skip_busy, 1);
		return;
	}
	m = lk->count - lk->n_hit;
	if (m > t->rc->fetch_max)
		m = t->rc->fetch_max;
	if ((uint64_t)m * t->geom.page_bytes > FETCH_BYTES)
		m = FETCH_BYTES / t->geom.page_bytes ?: 1;
	s = ns_get(t, ns, uid);
	j = s ? job_new(m, true) : NULL;
	if (!j) {
		uid_fetching(t, uid, -1);
		return;
	}
	j->tns = s;
	j->uid = uid;
	if (fetch_charge(t, j, uid)) {
		count(&t->st.skip_user, 1);
		goto drop;
	}
	m = j->n;
	if (call->copy_in(call, j->keys, lk->keys + (uint64_t)lk->n_hit * sizeof(struct kvs_key),
			  (uint64_t)m * sizeof(struct kvs_key)) ||
	    (lk->n_hit && call->copy_in(call, &parent_key, lk->keys +
					(uint64_t)(lk->n_hit - 1) * sizeof(parent_key),
					sizeof(parent_key))))
		goto drop;
	if (neg_hit(t, s, &j->keys[0])) {
		count(&t->st.skip_neg, 1);
		goto drop;
	}
	if (fetch_claim(t, s, j, lk->n_hit ? &parent_key : NULL)) {
		count(&t->st.skip_claimed, 1);
		goto drop;
	}
	j->t0_ms = kvsd_now_ms();
	t->fetching++;
	job_queue(t, j);
	if (!(lk->flags & KVS_LOOKUP_WAIT))
		return;
	/* The client sees the claimed keys in flight and waits for them. */
	again = *lk;
	again.keys += (uint64_t)lk->n_hit * sizeof(struct kvs_key);
	again.pages += (uint64_t)lk->n_hit * sizeof(uint32_t);
	again.count -= lk->n_hit;
	again.n_hit = again.n_inflight = 0;
	if (!kvs_cmd(cl, KVS_IOC_LOOKUP, &again, call)) {
		lk->n_hit += again.n_hit;
		lk->n_inflight = again.n_inflight;
	}
	return;
drop:
	fetch_uncharge(j);
	uid_fetching(t, uid, -1);
	free(j);
}

/* A fetch came back: publish the valid run, give the rest back. */
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
	if (n_ok && tier_cmd(s->cl, t->owner, KVS_IOC_PUBLISH, &pub, NULL)) {
		kvsd_log("pool '%s': remote tier: publishing %u fetched pages failed",
			 t->name, n_ok);
		n_ok = 0;
	}
	/* The references PUBLISH left us: the pages stay, CACHED. */
	for (i = 0; i < n_ok; i++)
		e[i].page = e[i].result;
	for (i = 0; i < n_ok; i++)
		j->pages[i] = e[i].page;
	put_pages(s, j->pages, j->n);	/* references, then the unfilled claims */
	if (j->parent != KVS_NO_PAGE)
		put_pages(s, &j->parent, 1);
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
			put_pages(j->tns, j->pages, j->n);
			t->write_queued -= j->n;
		}
		free(j);
	}
}

/* ---- start, stop ------------------------------------------------------------------- */

/* The pool's memory, mapped through an attach of our own. */
static int tier_map(struct tier *t)
{
	struct kvs_client *cl = kvs_client_new();
	struct kvs_pool_attach at;
	void *mem = NULL;
	int ret;

	if (!cl)
		return -ENOMEM;
	ret = attach(t, cl, t->owner, 0, KVS_ATTACH_MEM_FD, &at, &mem);
	if (!ret) {
		t->geom = at.geom;
		t->n_pages = at.n_pages;
		t->write_max = t->rc->queue;
		if (t->write_max > at.n_pages / WRITE_POOL_SHARE)
			t->write_max = at.n_pages / WRITE_POOL_SHARE ?: 1;
		t->mem_len = (size_t)at.n_pages * at.geom.page_bytes;
		t->mem = mmap(NULL, t->mem_len, PROT_READ | PROT_WRITE, MAP_SHARED,
			      kvs_host_mem_fd(mem), 0);
		if (t->mem == MAP_FAILED) {
			ret = -errno;
			t->mem = NULL;
		}
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
	 * Jobs never run or never collected: the clients' close releases
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
		kvs_client_free(s->cl);
		free(s);
	}
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
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->cv, NULL);
	ret = tier_map(t);
	if (ret) {
		kvsd_log("pool '%s': remote tier: mapping the pool: %s", t->name,
			 strerror(-ret));
		goto fail;
	}
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

	for (i = 0; i < cfg->n_pools; i++) {
		const struct kvsd_pool_cfg *pc = &cfg->pools[i];

		if (!pc->remote)
			continue;
		if (d->mode != KVSD_MODE_SOCKET) {
			kvsd_log("pool '%s': the remote tier needs socket mode (the "
				 "module's clients never pass through kvshared); off",
				 pc->name);
			continue;
		}
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
