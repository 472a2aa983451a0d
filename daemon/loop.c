// SPDX-License-Identifier: GPL-2.0
/*
 * kvshared's event loop (loop.h): one thread, one epoll set.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <time.h>

#include "log.h"
#include "loop.h"

static int epfd = -1;
static bool (*poller)(void);

/*
 * The batch being dispatched, from the next event on: a watch deleted by
 * a handler (a connection's handler deletes its ring's doorbell too) gets
 * none of the events left, which may point at memory freed with it.
 */
static struct epoll_event *batch;
static int batch_next, batch_n;

void kvsd_loop_set_poller(bool (*fn)(void))
{
	poller = fn;
}


int kvsd_loop_init(void)
{
	epfd = epoll_create1(EPOLL_CLOEXEC);
	return epfd < 0 ? -errno : 0;
}

void kvsd_loop_fini(void)
{
	if (epfd >= 0)
		close(epfd);
	epfd = -1;
}

int kvsd_watch_add(struct kvsd_watch *w, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = w };

	return epoll_ctl(epfd, EPOLL_CTL_ADD, w->fd, &ev) ? -errno : 0;
}

int kvsd_watch_mod(struct kvsd_watch *w, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = w };

	return epoll_ctl(epfd, EPOLL_CTL_MOD, w->fd, &ev) ? -errno : 0;
}

void kvsd_watch_del(struct kvsd_watch *w)
{
	int i;

	epoll_ctl(epfd, EPOLL_CTL_DEL, w->fd, NULL);
	for (i = batch_next; i < batch_n; i++)
		if (batch[i].data.ptr == w)
			batch[i].data.ptr = NULL;
}

int kvsd_loop_run(bool (*stop)(void *arg), void (*tick)(void *arg), void *arg,
		  unsigned int tick_ms)
{
	struct epoll_event evs[64];
	uint64_t last_tick = kvsd_now_ms();
	int i, n;

	while (!stop(arg)) {
		/* A poller with work in sight only looks at epoll, never sleeps. */
		n = epoll_wait(epfd, evs, 64, poller && poller() ? 0 : (int)tick_ms);
		if (n < 0 && errno != EINTR) {
			int ret = -errno;

			kvsd_log("epoll_wait: %s", strerror(errno));
			return ret;
		}
		batch = evs;
		batch_n = n;
		for (i = 0; i < n; i++) {
			struct kvsd_watch *w = evs[i].data.ptr;

			batch_next = i + 1;
			if (w)		/* else deleted by an earlier handler */
				w->fn(w, evs[i].events);
		}
		batch_n = 0;
		/* Timers are coarse: once a tick, however busy the loop is. */
		if (kvsd_now_ms() - last_tick >= tick_ms) {
			last_tick = kvsd_now_ms();
			tick(arg);
		}
	}
	return 0;
}
