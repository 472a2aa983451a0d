// SPDX-License-Identifier: GPL-2.0
/*
 * The close queues (closer.h).  One mutex guards them all; the loop holds
 * it only to count or to push, never across a close().  A queue is a
 * stack: the order descriptors are closed in does not matter, and a
 * closer stuck on one file must not hold the others behind it.
 *
 * A closer thread serves one queue until it is empty, then takes another
 * that has work and fewer than KVSD_CLOSE_PER_UID closers, and ends when
 * there is none.  The standing closer, started first, waits for work
 * instead of ending, and takes only queues no closer serves: descriptors
 * pushed when no thread could be created still get closed.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "closer.h"

#define CLOSER_STACK	(256u << 10)	/* close() needs little; ASan more */

struct kvsd_closeq {
	struct kvsd_closeq *next;
	uint32_t uid;
	unsigned int refs;
	unsigned int threads;		/* closers serving it */
	unsigned int reserved;		/* places promised, not yet used */
	unsigned int n, cap;		/* descriptors queued; room in fds */
	int *fds;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t work;		/* for the standing closer */
	struct kvsd_closeq *queues;
	unsigned int threads;		/* closer threads, the standing one too */
	unsigned int closing;		/* descriptors in close() now */
	unsigned int queued;		/* in all queues */
} cl = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.work = PTHREAD_COND_INITIALIZER,
};

/* Under cl.lock: free @q once nothing refers to it or waits in it. */
static void closeq_maybe_free(struct kvsd_closeq *q)
{
	struct kvsd_closeq **p;

	if (q->refs || q->threads || q->reserved || q->n)
		return;
	for (p = &cl.queues; *p != q; p = &(*p)->next)
		;
	*p = q->next;
	free(q->fds);
	free(q);
}

/*
 * Under cl.lock: a queue with work and room for one more closer.  The
 * standing closer takes only a queue no closer serves: it is the fallback
 * for those, and must not become one uid's ninth.
 */
static struct kvsd_closeq *closeq_adopt(bool standing)
{
	struct kvsd_closeq *q;

	for (q = cl.queues; q; q = q->next) {
		if (q->n && q->threads < (standing ? 1 : KVSD_CLOSE_PER_UID)) {
			q->threads++;
			return q;
		}
	}
	return NULL;
}

/* @arg: the queue the thread was created for; NULL for the standing one. */
static void *closer_main(void *arg)
{
	struct kvsd_closeq *q = arg;
	bool standing = !q;
	int fd;

	pthread_mutex_lock(&cl.lock);
	for (;;) {
		if (!q)
			q = closeq_adopt(standing);
		if (!q) {
			if (!standing)
				break;
			pthread_cond_wait(&cl.work, &cl.lock);
			continue;
		}
		while (q->n) {
			fd = q->fds[--q->n];
			cl.queued--;
			cl.closing++;
			pthread_mutex_unlock(&cl.lock);
			close(fd);	/* may wait on a file system forever */
			pthread_mutex_lock(&cl.lock);
			cl.closing--;
		}
		q->threads--;
		closeq_maybe_free(q);
		q = NULL;
	}
	cl.threads--;
	pthread_mutex_unlock(&cl.lock);
	return NULL;
}

/* A detached closer thread with a small stack, serving @q (NULL: standing). */
static int closer_spawn(struct kvsd_closeq *q)
{
	pthread_attr_t attr;
	pthread_t t;
	int ret;

	if (pthread_attr_init(&attr))
		return -ENOMEM;
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, CLOSER_STACK);
	ret = pthread_create(&t, &attr, closer_main, q);
	pthread_attr_destroy(&attr);
	return ret ? -ret : 0;
}

int kvsd_closer_start(void)
{
	int ret;

	/*
	 * Detached: nothing waits for a closer at exit, though the kernel
	 * keeps the process until the last of them returns (main.c).
	 */
	pthread_mutex_lock(&cl.lock);
	cl.threads++;
	pthread_mutex_unlock(&cl.lock);
	ret = closer_spawn(NULL);
	if (ret) {
		pthread_mutex_lock(&cl.lock);
		cl.threads--;
		pthread_mutex_unlock(&cl.lock);
	}
	return ret;
}

struct kvsd_closeq *kvsd_closeq_get(uint32_t uid)
{
	struct kvsd_closeq *q;

	pthread_mutex_lock(&cl.lock);
	for (q = cl.queues; q && q->uid != uid; q = q->next)
		;
	if (!q) {
		q = calloc(1, sizeof(*q));
		if (q) {
			q->uid = uid;
			q->next = cl.queues;
			cl.queues = q;
		}
	}
	if (q)
		q->refs++;
	pthread_mutex_unlock(&cl.lock);
	return q;
}

void kvsd_closeq_put(struct kvsd_closeq *q)
{
	pthread_mutex_lock(&cl.lock);
	q->refs--;
	closeq_maybe_free(q);
	pthread_mutex_unlock(&cl.lock);
}

int kvsd_closeq_reserve(struct kvsd_closeq *q, unsigned int n)
{
	unsigned int need, cap;
	int ret = 0, *p;

	pthread_mutex_lock(&cl.lock);
	need = q->n + q->reserved + n;
	if (need > q->cap) {
		cap = need > 2 * q->cap ? need : 2 * q->cap;
		p = realloc(q->fds, cap * sizeof(*p));
		if (p) {
			q->fds = p;
			q->cap = cap;
		} else {
			ret = -ENOMEM;
		}
	}
	if (!ret)
		q->reserved += n;
	pthread_mutex_unlock(&cl.lock);
	return ret;
}

void kvsd_closeq_unreserve(struct kvsd_closeq *q, unsigned int n)
{
	pthread_mutex_lock(&cl.lock);
	q->reserved -= n;
	closeq_maybe_free(q);
	pthread_mutex_unlock(&cl.lock);
}

/*
 * Under cl.lock: whether @q could use another closer thread.  A queue no
 * closer serves gets one even past KVSD_CLOSE_THREADS, so uids whose
 * closers are all stuck (eight uids could hold all of them) cannot stop
 * another uid's closes: at most one thread a uid beyond the cap.
 */
static bool closeq_wants_thread(const struct kvsd_closeq *q)
{
	return q->threads < q->n && q->threads < KVSD_CLOSE_PER_UID &&
	       (cl.threads < KVSD_CLOSE_THREADS || !q->threads);
}

void kvsd_closeq_close(struct kvsd_closeq *q, int fd)
{
	bool spawn;

	/*
	 * F_GET_SEALS answers only for shmem and hugetlbfs files and calls
	 * into no file system: what it accepts has no ->flush to wait on.
	 */
	if (fcntl(fd, F_GET_SEALS) >= 0) {
		close(fd);
		kvsd_closeq_unreserve(q, 1);
		return;
	}
	pthread_mutex_lock(&cl.lock);
	q->reserved--;
	q->fds[q->n++] = fd;
	cl.queued++;
	spawn = closeq_wants_thread(q);
	if (spawn) {
		q->threads++;
		cl.threads++;
	}
	pthread_cond_signal(&cl.work);
	pthread_mutex_unlock(&cl.lock);
	if (!spawn || !closer_spawn(q))
		return;
	/* No thread: the standing closer, or the next to finish, takes it. */
	pthread_mutex_lock(&cl.lock);
	q->threads--;
	cl.threads--;
	pthread_cond_signal(&cl.work);
	pthread_mutex_unlock(&cl.lock);
}

unsigned int kvsd_closeq_len(const struct kvsd_closeq *q)
{
	unsigned int n;

	pthread_mutex_lock(&cl.lock);
	n = q->n;
	pthread_mutex_unlock(&cl.lock);
	return n;
}

bool kvsd_closer_full(void)
{
	return kvsd_closer_queued() >= KVSD_CLOSE_QUEUE_MAX;
}

/* One of the closer's counts, read under its lock. */
static unsigned int closer_count(const unsigned int *count)
{
	unsigned int n;

	pthread_mutex_lock(&cl.lock);
	n = *count;
	pthread_mutex_unlock(&cl.lock);
	return n;
}

unsigned int kvsd_closer_busy(void)
{
	return closer_count(&cl.closing);
}

unsigned int kvsd_closer_queued(void)
{
	return closer_count(&cl.queued);
}
