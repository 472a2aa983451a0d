// SPDX-License-Identifier: GPL-2.0
/*
 * The remote tier's thread (tier.h): it takes the jobs the loop
 * queued, fetches first (someone waits for them), talks to Redis through
 * cluster.c, copies pages between the pool and Redis, and hands
 * the jobs back through the tier's eventfd.  It makes no arbiter call.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tier.h"

static void set_up(struct tier *t, bool up)
{
	const char *err = t->rcl.err;

	if (atomic_exchange(&t->up, up) != up || (!up && strcmp(err, t->last_err)))
		kvsd_log("pool '%s': remote tier %s%s%s", t->name, up ? "up" : "down",
			 up ? "" : ": ", up ? "" : err);
	snprintf(t->last_err, sizeof(t->last_err), "%s", up ? "" : err);
	atomic_store_explicit(&t->st.redirects, t->rcl.redirects, memory_order_relaxed);
	atomic_store_explicit(&t->st.map_loads, t->rcl.map_loads, memory_order_relaxed);
	atomic_store_explicit(&t->st.replica_reads, t->rcl.replica_reads,
			      memory_order_relaxed);
}

static uint64_t now_us(void)
{
	return kvsd_now_ns() / 1000;
}

static void lat_count(struct tier *t, uint64_t us)
{
	unsigned int b;

	for (b = 0; b < N_LAT && us > lat_ms[b] * 1000ull; b++)
		;
	count(&t->st.lat[b], 1);
	count(&t->st.lat_sum_us, us);
}

/* What of a fetched value is not the page: its header, then its MAC if it has one. */
#define VALUE_SIDE	(KVSD_RPAGE_HDR + KVSD_RMAC_LEN)

/* A fetch job's GETs, their sinks and the values' headers and MACs, within a round. */
struct fetch_io {
	struct kvsd_rcmd *cmds;
	struct kvsd_rsink *sinks;
	uint8_t *hdrs;
	char *text;			/* the GETs' bytes, GET_MAX each */
};

/* "*2\r\n$3\r\nGET\r\n$<len>\r\n<key>\r\n" */
#define GET_HEAD	"*2\r\n$3\r\nGET\r\n$"
#define GET_MAX		(sizeof(GET_HEAD) + 8 + KVSD_RPAGE_KEY_MAX)

/* The head of a GET of a key of @klen bytes, without printf: a fetch makes hundreds. */
static int get_format(char *buf, size_t klen)
{
	char digits[8];
	int n = 0, len = sizeof(GET_HEAD) - 1;

	memcpy(buf, GET_HEAD, len);
	do {
		digits[n++] = (char)('0' + klen % 10);
		klen /= 10;
	} while (klen);
	while (n)
		buf[len++] = digits[--n];
	buf[len++] = '\r';
	buf[len++] = '\n';
	return len;
}

/*
 * The job's GETs, each value to be read straight into its claimed page
 * (its header beside it): the page is the job's until the loop publishes
 * or puts it, and only what passes fetch_check() is published, so bytes
 * that fail never reach a reader.
 */
static int fetch_prepare(struct tier *t, struct job *j, struct fetch_io *io)
{
	size_t page_bytes = t->geom.page_bytes;
	char key[KVSD_RPAGE_KEY_MAX];
	unsigned int i;

	count(&t->st.fetches, 1);
	count(&t->st.fetch_pages, j->n);
	for (i = 0; i < j->n; i++) {
		char *buf = io->text + (size_t)i * GET_MAX;
		size_t klen;
		int len;

		klen = kvsd_rpage_key(key, &j->tns->id, &j->keys[i]);
		len = get_format(buf, klen);
		memcpy(buf + len, key, klen);
		memcpy(buf + len + klen, "\r\n", 2);
		memset(&io->cmds[i], 0, sizeof(io->cmds[i]));
		io->cmds[i].buf = buf;
		io->cmds[i].len = len + (int)klen + 2;
		io->cmds[i].node = -1;
		if (t->rc->cluster)
			io->cmds[i].slot = kvsd_rcl_slot(key, klen);
		io->cmds[i].read = true;
		io->sinks[i].head = io->hdrs + (size_t)i * VALUE_SIDE;
		io->sinks[i].head_len = KVSD_RPAGE_HDR;
		io->sinks[i].body = t->mem + (size_t)j->pages[i] * page_bytes;
		io->sinks[i].body_len = page_bytes;
		/* A value may come with a MAC, keyed tier or not (page.h). */
		io->sinks[i].tail = io->hdrs + (size_t)i * VALUE_SIDE + KVSD_RPAGE_HDR;
		io->sinks[i].tail_len = KVSD_RMAC_LEN;
		/* Read ahead on the length this tier stores (resp.h). */
		io->sinks[i].expect = kvsd_rpage_value_len(&j->tns->id);
		io->cmds[i].sink = &io->sinks[i];
	}
	return 0;
}

/* The replies in chain order: j->n_ok is the valid run. */
static void fetch_check(struct tier *t, struct job *j, const struct fetch_io *io,
			uint64_t t0_us)
{
	unsigned int i;

	for (i = 0; i < j->n; i++) {
		const struct kvsd_reply *r = io->cmds[i].reply;
		enum kvsd_rpage_bad bad;

		if (!r || r->type == KVSD_REPLY_ERROR) {
			j->failed = true;
			count(&t->st.error_fetches, 1);
			break;
		}
		if (r->type == KVSD_REPLY_NIL) {
			count(&t->st.miss_pages, 1);
			break;
		}
		if (r->type != KVSD_REPLY_STRING)
			bad = KVSD_RPAGE_BAD_FORMAT;
		else if (!r->sunk)	/* not a value's length: discarded */
			bad = KVSD_RPAGE_BAD_SIZE;
		else
			bad = kvsd_rpage_check_parts(io->sinks[i].head, io->sinks[i].body,
						     r->len == KVSD_RPAGE_HDR + t->geom.page_bytes ?
						     NULL : io->sinks[i].tail, r->len,
						     &j->tns->id, &j->keys[i]);
		if (bad) {
			count(&t->st.dropped[bad], 1);
			break;
		}
		count(&t->st.bytes_in, r->len);
		j->n_ok++;
	}
	count(&t->st.hit_pages, j->n_ok);
	lat_count(t, now_us() - t0_us);
}

/*
 * Every fetch job of @list in one pipeline per node, so that fetches of
 * different clients are in flight together rather than one after the
 * other; under the earliest job's deadline, so that no waiter waits past
 * its own.
 */
static void do_fetches(struct tier *t, struct job *list)
{
	uint64_t t0 = now_us(), deadline = UINT64_MAX;
	unsigned int n = 0, at = 0, i;
	struct fetch_io all = { 0 }, io;
	struct job *j;

	for (j = list; j; j = j->next) {
		n += j->n;
		if (j->t0_ms + t->rc->timeout_ms < deadline)
			deadline = j->t0_ms + t->rc->timeout_ms;
	}
	all.cmds = calloc(n, sizeof(*all.cmds));
	all.sinks = calloc(n, sizeof(*all.sinks));
	all.hdrs = malloc((size_t)n * VALUE_SIDE);
	all.text = malloc((size_t)n * GET_MAX);
	for (j = list; j; j = j->next) {
		io.cmds = all.cmds + at;
		io.sinks = all.sinks + at;
		io.hdrs = all.hdrs + (size_t)at * VALUE_SIDE;
		io.text = all.text + (size_t)at * GET_MAX;
		if (!all.cmds || !all.sinks || !all.hdrs || !all.text ||
		    fetch_prepare(t, j, &io))
			goto fail;
		at += j->n;
	}
	kvsd_rcl_exec(&t->rcl, all.cmds, n, kvsd_rpage_value_max(&list->tns->id) + 64,
		      deadline);
	set_up(t, kvsd_rcl_reachable(&t->rcl));
	for (at = 0, j = list; j; at += j->n, j = j->next) {
		io.cmds = all.cmds + at;
		io.sinks = all.sinks + at;
		io.hdrs = all.hdrs + (size_t)at * VALUE_SIDE;
		fetch_check(t, j, &io, t0);
	}
	goto out;
fail:
	for (j = list; j; j = j->next)
		j->failed = true;
out:
	for (i = 0; all.cmds && i < n; i++)
		kvsd_reply_free(all.cmds[i].reply);	/* their bytes are all.text's */
	free(all.text);
	free(all.cmds);
	free(all.sinks);
	free(all.hdrs);
}

/*
 * SET key <header><page>[<MAC>] [EX ttl], the page sent straight from the
 * pool: the command's buffer holds what comes before it (the value's
 * header last) and, after that, what comes after it (the MAC, the rest).
 * The job keeps its reference until Redis has answered.  The checksum and
 * the MAC cover the page as it is now: should a client write to it before
 * it is sent, every host refuses the value (checksum or mac), none
 * serves it.
 */
static int set_cmd(struct tier *t, const struct tns *s, const struct kvs_key *key,
		   uint32_t page, struct kvsd_rcmd *c)
{
	size_t pb = t->geom.page_bytes, klen, vlen = kvsd_rpage_value_len(&s->id);
	size_t mac = vlen - KVSD_RPAGE_HDR - pb;
	char k[KVSD_RPAGE_KEY_MAX], ttl[16], head[KVSD_RPAGE_KEY_MAX + 64];
	const uint8_t *bytes = t->mem + (size_t)page * pb;
	int hlen, tlen;
	char *tail;

	klen = kvsd_rpage_key(k, &s->id, key);
	snprintf(ttl, sizeof(ttl), "%u", t->rc->ttl_s);
	hlen = snprintf(head, sizeof(head), "*%d\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$%zu\r\n",
			t->rc->ttl_s ? 5 : 3, klen, k, vlen);
	memset(c, 0, sizeof(*c));
	c->len = hlen + KVSD_RPAGE_HDR;
	c->buf = malloc(c->len + mac + 64);
	if (!c->buf)
		return -ENOMEM;
	memcpy(c->buf, head, hlen);
	tail = c->buf + c->len;
	if (kvsd_rpage_seal_parts((uint8_t *)c->buf + hlen, bytes, (uint8_t *)tail,
				  &s->id, key)) {
		free(c->buf);
		c->buf = NULL;
		return -EIO;
	}
	if (t->rc->ttl_s)
		tlen = sprintf(tail + mac, "\r\n$2\r\nEX\r\n$%zu\r\n%s\r\n", strlen(ttl), ttl);
	else
		tlen = sprintf(tail + mac, "\r\n");
	c->body = bytes;
	c->body_len = pb;
	c->tail = tail;
	c->tail_len = mac + tlen;
	c->node = -1;
	c->slot = kvsd_rcl_slot(k, klen);
	return 0;
}

/* Hand finished jobs back to the loop. */
static void post_done(struct tier *t, struct job *list)
{
	uint64_t one = 1;
	struct job *last;

	if (!list)
		return;
	for (last = list; last->next; last = last->next)
		;
	pthread_mutex_lock(&t->mu);
	last->next = t->done;
	t->done = list;
	pthread_mutex_unlock(&t->mu);
	if (write(t->w.fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		kvsd_log("pool '%s': remote tier: eventfd: %s", t->name, strerror(errno));
}

/*
 * Write every page of the write jobs in @list, in batches of WRITE_BATCH
 * pages or WRITE_BYTES bytes, each page sent from the pool.  A job goes
 * back to the loop (its references dropped) once Redis has answered the
 * batch its last page was in, or the batch's deadline has passed: a slow
 * Redis holds at most the write queue's pages (remote_queue, a quarter
 * of the pool at most), for at most remote_timeout_ms a batch.
 */
static void do_writes(struct tier *t, struct job *list)
{
	size_t value = KVSD_RPAGE_HDR + t->geom.page_bytes;
	struct kvsd_rcmd *cmds = calloc(WRITE_BATCH, sizeof(*cmds));
	struct job *j = list, *done, **cut;
	uint32_t at = 0;

	while (j) {
		unsigned int n = 0, i;
		uint64_t deadline = kvsd_now_ms() + t->rc->timeout_ms;

		for (; j && n < WRITE_BATCH && (!n || (n + 1) * value <= WRITE_BYTES); ) {
			if (!cmds || set_cmd(t, j->tns, &j->keys[at], j->pages[at], &cmds[n])) {
				count(&t->st.write_errors, 1);
				atomic_fetch_sub(&t->st.write_pending, 1);
			} else {
				n++;
			}
			if (++at == j->n) {
				j = j->next;
				at = 0;
			}
		}
		/*
		 * Down only when no node answers: SETs refused (CLUSTERDOWN)
		 * or sent to a dead master must not stop the fetches, which
		 * the master's replica answers.
		 */
		if (n) {
			kvsd_rcl_exec(&t->rcl, cmds, n, 4096, deadline);
			set_up(t, kvsd_rcl_reachable(&t->rcl));
		}
		for (i = 0; i < n; i++) {
			struct kvsd_reply *r = cmds[i].reply;

			if (r && r->type == KVSD_REPLY_STATUS) {
				count(&t->st.written, 1);
				count(&t->st.bytes_out, value);
			} else {
				count(&t->st.write_errors, 1);	/* OOM, READONLY, down */
			}
			kvsd_rcmd_free(&cmds[i]);
		}
		/* Settled, written or not: what a drained tier shows. */
		atomic_fetch_sub(&t->st.write_pending, n);
		/* The jobs wholly sent and answered: from the list's head up to j. */
		done = list;
		for (cut = &list; *cut != j; cut = &(*cut)->next)
			;
		if (cut != &list) {
			list = j;
			*cut = NULL;
			post_done(t, done);
		}
	}
	post_done(t, list);
	free(cmds);
}

/* Wait for jobs; a tier that is down is probed every PROBE_MS meanwhile. */
static struct job *take_jobs(struct tier *t)
{
	struct job *list;

	pthread_mutex_lock(&t->mu);
	while (!t->todo && !t->stop) {
		struct timespec ts;

		if (atomic_load(&t->up)) {
			pthread_cond_wait(&t->cv, &t->mu);
			continue;
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += PROBE_MS * 1000000l;
		ts.tv_sec += ts.tv_nsec / 1000000000l;
		ts.tv_nsec %= 1000000000l;
		pthread_cond_timedwait(&t->cv, &t->mu, &ts);
		if (!t->todo && !t->stop) {
			pthread_mutex_unlock(&t->mu);
			int ret = kvsd_rcl_probe(&t->rcl, kvsd_now_ms() +
						 t->rc->timeout_ms);

			if (ret == -EACCES)
				count(&t->st.auth_refused, 1);
			set_up(t, !ret);
			pthread_mutex_lock(&t->mu);
		}
	}
	list = t->stop ? NULL : t->todo;
	if (list) {
		t->todo = NULL;
		t->todo_tail = &t->todo;
	}
	pthread_mutex_unlock(&t->mu);
	return list;
}

void *kvsd_tier_main(void *arg)
{
	struct tier *t = arg;
	struct job *list, *j, *next, *fetches, *writes, **ft, **wt;

	while ((list = take_jobs(t))) {
		fetches = writes = NULL;
		ft = &fetches;
		wt = &writes;
		for (j = list; j; j = next) {
			next = j->next;
			j->next = NULL;
			if (j->fetch) {
				*ft = j;
				ft = &j->next;
			} else {
				*wt = j;
				wt = &j->next;
			}
		}
		/*
		 * Fetches first: someone waits for them.  A fetch starts as
		 * soon as the thread has it: those that come meanwhile (other
		 * clients of the same burst) are all taken together by the
		 * next round, one pipeline for them all, right after this one.
		 */
		if (fetches)
			do_fetches(t, fetches);
		post_done(t, fetches);
		do_writes(t, writes);
	}
	/* A tier turned off at run time is freed by the loop once it sees this. */
	atomic_store(&t->exited, true);
	if (write(t->w.fd, &(uint64_t){ 1 }, sizeof(uint64_t)) < 0) {
		/* A full count: the loop is woken already. */
	}
	return NULL;
}
