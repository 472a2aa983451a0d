/* SPDX-License-Identifier: GPL-2.0 */
/*
 * User-space stand-ins for the kernel facilities the arbiter core uses.
 * Each keeps the kernel's meaning: a WARN is a bug and aborts, so the unit
 * tests and fuzzers notice it; refcount_t saturates instead of wrapping.
 */
#ifndef _KVS_HOST_USER_H
#define _KVS_HOST_USER_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <linux/types.h>

typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef __s32 s32;
typedef __s64 s64;

#ifndef EBADFD
#define EBADFD 77
#endif
#ifndef EUCLEAN
#define EUCLEAN 117
#endif

#define U32_MAX		((u32)~0U)
#define likely(x)	__builtin_expect(!!(x), 1)
#define unlikely(x)	__builtin_expect(!!(x), 0)
#define READ_ONCE(x)	__atomic_load_n(&(x), __ATOMIC_RELAXED)
#define WRITE_ONCE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
/* The kernel's acquire/release pair, as C11 atomics of the same order. */
#define smp_load_acquire(p)	__atomic_load_n((p), __ATOMIC_ACQUIRE)
/* Pairs with smp_load_acquire(): see the kernel's memory-barriers.txt. */
#define smp_store_release(p, v)	__atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define min(a, b)	((a) < (b) ? (a) : (b))
#define max(a, b)	((a) > (b) ? (a) : (b))
#define min_t(t, a, b)	((t)(a) < (t)(b) ? (t)(a) : (t)(b))
#define ARRAY_SIZE(a)	(sizeof(a) / sizeof((a)[0]))
#define BUILD_BUG_ON(c)	_Static_assert(!(c), #c)
#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

#define check_add_overflow(a, b, d)	__builtin_add_overflow(a, b, d)
#define check_mul_overflow(a, b, d)	__builtin_mul_overflow(a, b, d)
/* No speculation barrier is needed against our own process. */
#define array_index_nospec(index, size)	(index)

#define pr_warn(...)	fprintf(stderr, "kvshare: " __VA_ARGS__)
#define pr_info(...)	fprintf(stderr, "kvshare: " __VA_ARGS__)
#define WARN_ON_ONCE(c) ({						\
	bool __c = !!(c);						\
	if (unlikely(__c)) {						\
		fprintf(stderr, "WARNING: %s:%d: %s\n",			\
			__FILE__, __LINE__, #c);			\
		abort();						\
	}								\
	__c;								\
})
#define prefetch(p)		__builtin_prefetch(p)
#define cond_resched()		do { } while (0)

static inline void *memchr_inv(const void *p, int c, size_t n)
{
	const unsigned char *s = p;
	size_t i;

	for (i = 0; i < n; i++)
		if (s[i] != (unsigned char)c)
			return (void *)(s + i);
	return NULL;
}

/* Allocation: flags are accepted and ignored. */
#define GFP_KERNEL		0
#define GFP_KERNEL_ACCOUNT	0
static inline void *kzalloc(size_t n, int gfp) { (void)gfp; return calloc(1, n); }
static inline void kfree(const void *p) { free((void *)p); }
/*
 * Cache-line aligned, as vmalloc memory is, so that page structs stay
 * whole; big tables on huge pages, as a 1M-page pool is looked up at
 * random and would otherwise miss the TLB on every key.
 */
#define KVS_HUGE_SIZE	(2ul << 20)
static inline void *kvcalloc(size_t n, size_t size, int gfp)
{
	size_t bytes, align = 64;
	void *p;

	(void)gfp;
	if (check_mul_overflow(n, size, &bytes))
		return NULL;
	if (bytes >= KVS_HUGE_SIZE)
		align = KVS_HUGE_SIZE;
	bytes = (bytes + align - 1) & ~(align - 1);
	p = aligned_alloc(align, bytes ? bytes : align);
	if (!p)
		return NULL;
	if (align == KVS_HUGE_SIZE)
		madvise(p, bytes, MADV_HUGEPAGE);
	memset(p, 0, bytes);
	return p;
}
static inline void *kvmalloc_array(size_t n, size_t size, int gfp)
{
	size_t bytes;

	(void)gfp;
	if (check_mul_overflow(n, size, &bytes))
		return NULL;
	return malloc(bytes ? bytes : 1);
}
static inline void kvfree(const void *p) { free((void *)p); }

/*
 * A mutex is a pthread mutex.  With KVS_LOCKDEP (the sanitized and TSan
 * builds of the core, which the tests use) it also records its holder, so
 * that lockdep_assert_held() checks what the kernel's lockdep checks: that
 * the calling thread holds the lock.  The holder is written only by the
 * holder and read by anyone, hence the atomics; 0 is no thread
 * (pthread_self() is never 0 in glibc).  Without KVS_LOCKDEP, as in a
 * kernel without CONFIG_LOCKDEP, the assertion compiles to nothing.
 */
struct mutex {
	pthread_mutex_t m;
#ifdef KVS_LOCKDEP
	pthread_t owner;
#endif
};

#ifdef KVS_LOCKDEP
static inline void kvs_mutex_acquired(struct mutex *l)
{
	__atomic_store_n(&l->owner, pthread_self(), __ATOMIC_RELAXED);
}

static inline void kvs_mutex_releasing(struct mutex *l)
{
	WARN_ON_ONCE(!pthread_equal(__atomic_load_n(&l->owner, __ATOMIC_RELAXED),
				    pthread_self()));
	__atomic_store_n(&l->owner, (pthread_t)0, __ATOMIC_RELAXED);
}

static inline bool kvs_mutex_held(const struct mutex *l)
{
	return pthread_equal(__atomic_load_n(&l->owner, __ATOMIC_RELAXED),
			     pthread_self());
}

#define lockdep_assert_held(l)	WARN_ON_ONCE(!kvs_mutex_held(l))
#else
static inline void kvs_mutex_acquired(struct mutex *l) { (void)l; }
static inline void kvs_mutex_releasing(struct mutex *l) { (void)l; }
#define lockdep_assert_held(l)	((void)(l))
#endif

static inline void mutex_init(struct mutex *l)
{
	pthread_mutex_init(&l->m, NULL);
#ifdef KVS_LOCKDEP
	l->owner = (pthread_t)0;
#endif
}

static inline void mutex_destroy(struct mutex *l) { pthread_mutex_destroy(&l->m); }

static inline void mutex_lock(struct mutex *l)
{
	pthread_mutex_lock(&l->m);
	kvs_mutex_acquired(l);
}

static inline void mutex_unlock(struct mutex *l)
{
	kvs_mutex_releasing(l);
	pthread_mutex_unlock(&l->m);
}

static inline int mutex_trylock(struct mutex *l)
{
	if (pthread_mutex_trylock(&l->m))
		return 0;
	kvs_mutex_acquired(l);
	return 1;
}

/*
 * rw_semaphore: a pthread rwlock.  down_read_trylock() answers 1 when it
 * got the lock, as the kernel's does.
 */
struct rw_semaphore {
	pthread_rwlock_t l;
};
static inline void init_rwsem(struct rw_semaphore *s) { pthread_rwlock_init(&s->l, NULL); }
static inline void down_read(struct rw_semaphore *s) { pthread_rwlock_rdlock(&s->l); }
static inline int down_read_trylock(struct rw_semaphore *s)
{
	return !pthread_rwlock_tryrdlock(&s->l);
}
static inline void up_read(struct rw_semaphore *s) { pthread_rwlock_unlock(&s->l); }
static inline void down_write(struct rw_semaphore *s) { pthread_rwlock_wrlock(&s->l); }
static inline void up_write(struct rw_semaphore *s) { pthread_rwlock_unlock(&s->l); }

/* refcount_t: saturating, like lib/refcount.c. */
typedef struct {
	int refs;
} refcount_t;
static inline void refcount_set(refcount_t *r, int n) { __atomic_store_n(&r->refs, n, __ATOMIC_RELAXED); }
static inline unsigned int refcount_read(const refcount_t *r)
{
	return __atomic_load_n(&r->refs, __ATOMIC_RELAXED);
}
static inline void refcount_inc(refcount_t *r)
{
	int old = __atomic_fetch_add(&r->refs, 1, __ATOMIC_RELAXED);

	WARN_ON_ONCE(old <= 0);
}
static inline bool refcount_dec_and_test(refcount_t *r)
{
	int old = __atomic_fetch_sub(&r->refs, 1, __ATOMIC_ACQ_REL);

	WARN_ON_ONCE(old <= 0);
	return old == 1;
}

typedef struct {
	s64 counter;
} atomic64_t;
static inline void atomic64_inc(atomic64_t *v) { __atomic_fetch_add(&v->counter, 1, __ATOMIC_RELAXED); }
static inline void atomic64_dec(atomic64_t *v) { __atomic_fetch_sub(&v->counter, 1, __ATOMIC_RELAXED); }
static inline s64 atomic64_read(const atomic64_t *v)
{
	return __atomic_load_n(&v->counter, __ATOMIC_RELAXED);
}
static inline void atomic64_sub(s64 n, atomic64_t *v)
{
	__atomic_fetch_sub(&v->counter, n, __ATOMIC_RELAXED);
}
/* As the kernel's: on failure *old is updated to the value found. */
static inline bool atomic64_try_cmpxchg(atomic64_t *v, s64 *old, s64 new)
{
	return __atomic_compare_exchange_n(&v->counter, old, new, false,
					   __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
}

/* The part of <linux/list.h> the core uses. */
struct list_head {
	struct list_head *next, *prev;
};
static inline void INIT_LIST_HEAD(struct list_head *h) { h->next = h->prev = h; }
static inline bool list_empty(const struct list_head *h) { return h->next == h; }
static inline void list_add_tail(struct list_head *n, struct list_head *h)
{
	n->prev = h->prev;
	n->next = h;
	h->prev->next = n;
	h->prev = n;
}
static inline void list_del_init(struct list_head *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	INIT_LIST_HEAD(n);
}
#define list_entry(ptr, type, member) container_of(ptr, type, member)
#define list_for_each_entry(pos, head, member)				\
	for (pos = list_entry((head)->next, __typeof__(*pos), member);	\
	     &pos->member != (head);					\
	     pos = list_entry(pos->member.next, __typeof__(*pos), member))

#endif /* _KVS_HOST_USER_H */
