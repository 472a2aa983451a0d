// SPDX-License-Identifier: MIT
/*
 * A small thread pool for the C reference: the caller and n - 1 workers
 * take items from one atomic counter.  Workers spin briefly after a call
 * before they sleep, because an engine calls attention once per layer,
 * back to back, and a futex wake per layer would cost more than a short
 * decode takes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "attn_internal.h"

#define SPIN_ROUNDS	20000	/* ~tens of microseconds */

struct kv_attn_workers {
	unsigned int n;			/* threads, the caller included */
	pthread_t *tids;
	pthread_mutex_t call_lock;	/* one call at a time */
	pthread_mutex_t mu;
	pthread_cond_t start, done;
	atomic_uint_fast64_t gen;	/* bumped per call (and to stop) */
	atomic_uint running;		/* workers still in this call */
	atomic_uint next;		/* next item to take */
	bool stop;
	kv_work_fn fn;
	void *ctx;
	uint32_t n_items;
	void *scratch;
	size_t scratch_bytes;
};

struct worker_arg {
	struct kv_attn_workers *w;
	unsigned int index;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void take_items(struct kv_attn_workers *w, unsigned int thread)
{
	uint32_t i;

	while ((i = atomic_fetch_add(&w->next, 1)) < w->n_items)
		w->fn(w->ctx, i, thread);
}

static uint64_t wait_call(struct kv_attn_workers *w, uint64_t seen)
{
	uint64_t g = seen;
	int i;

	for (i = 0; i < SPIN_ROUNDS; i++) {
		g = atomic_load_explicit(&w->gen, memory_order_acquire);
		if (g != seen)
			return g;
		cpu_relax();
	}
	pthread_mutex_lock(&w->mu);
	while ((g = atomic_load(&w->gen)) == seen)
		pthread_cond_wait(&w->start, &w->mu);
	pthread_mutex_unlock(&w->mu);
	return g;
}

static void *worker_main(void *p)
{
	struct worker_arg *a = p;
	struct kv_attn_workers *w = a->w;
	unsigned int index = a->index;
	uint64_t seen = 0;

	free(a);
	for (;;) {
		seen = wait_call(w, seen);
		if (w->stop)
			return NULL;
		take_items(w, index);
		if (atomic_fetch_sub(&w->running, 1) == 1) {
			pthread_mutex_lock(&w->mu);
			pthread_cond_signal(&w->done);
			pthread_mutex_unlock(&w->mu);
		}
	}
}

static void stop_workers(struct kv_attn_workers *w, unsigned int started)
{
	unsigned int i;

	pthread_mutex_lock(&w->mu);
	w->stop = true;
	atomic_fetch_add_explicit(&w->gen, 1, memory_order_release);
	pthread_cond_broadcast(&w->start);
	pthread_mutex_unlock(&w->mu);
	for (i = 0; i < started; i++)
		pthread_join(w->tids[i], NULL);
}

struct kv_attn_workers *kv_attn_workers_create(unsigned int n_threads)
{
	struct kv_attn_workers *w;
	unsigned int i;

	if (n_threads < 1 || n_threads > 1024)
		return NULL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->n = n_threads;
	w->tids = calloc(n_threads, sizeof(*w->tids));
	if (!w->tids) {
		free(w);
		return NULL;
	}
	pthread_mutex_init(&w->call_lock, NULL);
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->start, NULL);
	pthread_cond_init(&w->done, NULL);
	for (i = 0; i + 1 < n_threads; i++) {
		struct worker_arg *a = malloc(sizeof(*a));

		if (a) {
			a->w = w;
			a->index = i + 1;
		}
		if (!a || pthread_create(&w->tids[i], NULL, worker_main, a)) {
			free(a);
			stop_workers(w, i);
			pthread_cond_destroy(&w->start);
			pthread_cond_destroy(&w->done);
			pthread_mutex_destroy(&w->mu);
			pthread_mutex_destroy(&w->call_lock);
			free(w->tids);
			free(w);
			return NULL;
		}
	}
	return w;
}

void kv_attn_workers_destroy(struct kv_attn_workers *w)
{
	if (!w)
		return;
	stop_workers(w, w->n - 1);
	pthread_cond_destroy(&w->start);
	pthread_cond_destroy(&w->done);
	pthread_mutex_destroy(&w->mu);
	pthread_mutex_destroy(&w->call_lock);
	free(w->scratch);
	free(w->tids);
	free(w);
}

unsigned int kv_attn_workers_count(const struct kv_attn_workers *w)
{
	return w ? w->n : 1;
}

void *kv_workers_begin(struct kv_attn_workers *w, size_t bytes)
{
	void *p;

	if (!bytes)
		bytes = 1;
	if (!w)
		return malloc(bytes);
	pthread_mutex_lock(&w->call_lock);
	/* Grow only: the same shapes come back every layer. */
	if (w->scratch_bytes < bytes) {
		p = malloc(bytes);
		if (!p) {
			pthread_mutex_unlock(&w->call_lock);
			return NULL;
		}
		free(w->scratch);
		w->scratch = p;
		w->scratch_bytes = bytes;
	}
	return w->scratch;
}

void kv_workers_end(struct kv_attn_workers *w, void *scratch)
{
	if (!w) {
		free(scratch);
		return;
	}
	pthread_mutex_unlock(&w->call_lock);
}

void kv_workers_run(struct kv_attn_workers *w, uint32_t n_items,
		    kv_work_fn fn, void *ctx)
{
	uint32_t i;
	int spin;

	if (!w || w->n == 1 || n_items == 1) {
		for (i = 0; i < n_items; i++)
			fn(ctx, i, 0);
		return;
	}
	w->fn = fn;
	w->ctx = ctx;
	w->n_items = n_items;
	atomic_store(&w->next, 0);
	atomic_store(&w->running, w->n - 1);
	pthread_mutex_lock(&w->mu);
	atomic_fetch_add_explicit(&w->gen, 1, memory_order_release);
	pthread_cond_broadcast(&w->start);
	pthread_mutex_unlock(&w->mu);

	take_items(w, 0);

	for (spin = 0; spin < SPIN_ROUNDS && atomic_load(&w->running); spin++)
		cpu_relax();
	if (atomic_load(&w->running)) {
		pthread_mutex_lock(&w->mu);
		while (atomic_load(&w->running))
			pthread_cond_wait(&w->done, &w->mu);
		pthread_mutex_unlock(&w->mu);
	}
}
