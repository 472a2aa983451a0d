/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvshared's event loop: one level-triggered epoll set whose data is a
 * watch; fn runs with the events epoll reported.  A tick function runs
 * about once per tick_ms, however busy the loop is.
 *
 * Below everything but the log: the modules that own descriptors add
 * their watches here, and main.c runs the loop; the loop calls back only
 * through the watches and the tick it was given.
 */
#ifndef _KVSHARED_LOOP_H
#define _KVSHARED_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "clock.h"	/* kvsd_now_ms() */

struct kvsd_watch {
	int fd;
	void (*fn)(struct kvsd_watch *w, uint32_t events);
};

/* 0 or -errno. */
int kvsd_loop_init(void);
void kvsd_loop_fini(void);

int kvsd_watch_add(struct kvsd_watch *w, uint32_t events);
int kvsd_watch_mod(struct kvsd_watch *w, uint32_t events);
void kvsd_watch_del(struct kvsd_watch *w);

/*
 * Run until @stop returns true (checked after every batch of events):
 * 0, or -errno when epoll fails.
 */
int kvsd_loop_run(bool (*stop)(void *arg), void (*tick)(void *arg), void *arg,
		  unsigned int tick_ms);

/*
 * @fn runs before every epoll_wait; true means it has work in sight (it
 * polls shared memory), and epoll is then only looked at, not slept in.
 * NULL removes it.
 */
void kvsd_loop_set_poller(bool (*fn)(void));


#endif /* _KVSHARED_LOOP_H */
