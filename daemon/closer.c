// SPDX-License-Identifier: GPL-2.0
/*
 * The closers (closer.h).  The slots are few and scanned under one mutex;
 * the loop only ever holds it for such a scan, never across a close().
 * Each descriptor gets a thread of its own, so that one stuck on a
 * hostile file holds up no other user's; the slots bound the threads.
 * Where no thread can be had, the descriptor waits for the one standing
 * closer, behind whatever that is closing.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "closer.h"

#define CLOSER_STACK	(256u << 10)	/* close() needs little; ASan more */

enum slot_state { SLOT_FREE, SLOT_HELD, SLOT_QUEUED, SLOT_CLOSING };

static struct {
	pthread_mutex_t lock;
	pthread_cond_t work;
	struct {
		enum slot_state state;
		uint32_t uid;
		int fd;
	} slot[KVSD_CLOSE_SLOTS];
	unsigned int queued;
} cl = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.work = PTHREAD_COND_INITIALIZER,
};

static void *closer_main(void *arg)
{
	unsigned int i;
	int fd;

	(void)arg;
	pthread_mutex_lock(&cl.lock);
	for (;;) {
		while (!cl.queued)
			pthread_cond_wait(&cl.work, &cl.lock);
		for (i = 0; cl.slot[i].state != SLOT_QUEUED; i++)
			;
		cl.slot[i].state = SLOT_CLOSING;
		cl.queued--;
		fd = cl.slot[i].fd;
		pthread_mutex_unlock(&cl.lock);
		close(fd);		/* may wait on a file system forever */
		pthread_mutex_lock(&cl.lock);
		cl.slot[i].state = SLOT_FREE;
	}
	return NULL;
}

static void *closer_one(void *arg)
{
	int i = (int)(intptr_t)arg;

	close(cl.slot[i].fd);	/* the slot is ours: SLOT_CLOSING */
	kvsd_closer_unreserve(i);
	return NULL;
}

int kvsd_closer_start(void)
{
	pthread_t t;
	int ret;

	/*
	 * Detached: nothing waits for a closer at exit, though the kernel
	 * keeps the process until the last of them returns (main.c).
	 */
	ret = pthread_create(&t, NULL, closer_main, NULL);
	if (ret)
		return -ret;
	pthread_detach(t);
	return 0;
}

int kvsd_closer_reserve(uint32_t uid)
{
	unsigned int i, mine = 0;
	int free_slot = -EAGAIN;

	pthread_mutex_lock(&cl.lock);
	for (i = 0; i < KVSD_CLOSE_SLOTS; i++) {
		if (cl.slot[i].state == SLOT_FREE) {
			if (free_slot < 0)
				free_slot = (int)i;
		} else if (cl.slot[i].uid == uid) {
			mine++;
		}
	}
	if (mine >= KVSD_CLOSE_PER_UID)
		free_slot = -EAGAIN;
	if (free_slot >= 0) {
		cl.slot[free_slot].state = SLOT_HELD;
		cl.slot[free_slot].uid = uid;
		cl.slot[free_slot].fd = -1;
	}
	pthread_mutex_unlock(&cl.lock);
	return free_slot;
}

void kvsd_closer_unreserve(int slot)
{
	pthread_mutex_lock(&cl.lock);
	cl.slot[slot].state = SLOT_FREE;
	pthread_mutex_unlock(&cl.lock);
}

/* A detached thread with a small stack to close slot @i's descriptor. */
static int closer_spawn(int i)
{
	pthread_attr_t attr;
	pthread_t t;
	int ret;

	if (pthread_attr_init(&attr))
		return -ENOMEM;
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, CLOSER_STACK);
	ret = pthread_create(&t, &attr, closer_one, (void *)(intptr_t)i);
	pthread_attr_destroy(&attr);
	return ret ? -ret : 0;
}

void kvsd_closer_close(int slot, int fd)
{
	/*
	 * F_GET_SEALS answers only for shmem and hugetlbfs files and calls
	 * into no file system: what it accepts has no ->flush to wait on.
	 */
	if (fcntl(fd, F_GET_SEALS) >= 0) {
		close(fd);
		kvsd_closer_unreserve(slot);
		return;
	}
	pthread_mutex_lock(&cl.lock);
	cl.slot[slot].fd = fd;
	cl.slot[slot].state = SLOT_CLOSING;
	pthread_mutex_unlock(&cl.lock);
	if (!closer_spawn(slot))
		return;
	pthread_mutex_lock(&cl.lock);
	cl.slot[slot].state = SLOT_QUEUED;
	cl.queued++;
	pthread_cond_signal(&cl.work);
	pthread_mutex_unlock(&cl.lock);
}

unsigned int kvsd_closer_busy(void)
{
	unsigned int i, n = 0;

	pthread_mutex_lock(&cl.lock);
	for (i = 0; i < KVSD_CLOSE_SLOTS; i++)
		n += cl.slot[i].state != SLOT_FREE;
	pthread_mutex_unlock(&cl.lock);
	return n;
}
