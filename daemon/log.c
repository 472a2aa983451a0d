// SPDX-License-Identifier: GPL-2.0
/*
 * kvshared's log (log.h): stderr, one write per line, and a limiter for
 * the lines that clients can cause.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "clock.h"
#include "log.h"

bool kvsd_verbose;

/* One kind's window: lines logged in it, and lines dropped. */
struct limiter {
	const char *what;
	uint64_t start_ms;
	unsigned int logged;
	unsigned long long suppressed;
};

static struct limiter limiters[KVSD_LOG_NKINDS] = {
	[KVSD_LOG_CONNECT] = { .what = "connection" },
	[KVSD_LOG_CLOSE] = { .what = "disconnection" },
	[KVSD_LOG_REFUSED] = { .what = "refused-connection" },
	[KVSD_LOG_REMOTE_TIER] = { .what = "remote-tier request" },
	[KVSD_LOG_USER_LIMIT] = { .what = "user-memory refusal" },
};

static void vlog(const char *fmt, va_list ap)
{
	char line[1024];

	/* One write per line, so lines from a restarting daemon never mix. */
	vsnprintf(line, sizeof(line), fmt, ap);
	fprintf(stderr, "kvshared: %s\n", line);
}

void kvsd_log(const char *fmt, ...)
{
	va_list ap;
	int saved = errno;

	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
	errno = saved;
}

void kvsd_debug(const char *fmt, ...)
{
	va_list ap;
	int saved = errno;

	if (!kvsd_verbose)
		return;
	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
	errno = saved;
}

/* A new window if the old one has passed, reporting what it dropped. */
static void limiter_roll(struct limiter *l, uint64_t now)
{
	if (l->start_ms && now - l->start_ms < KVSD_LOG_WINDOW_MS)
		return;
	if (l->suppressed)
		kvsd_log("%llu %s messages suppressed", l->suppressed, l->what);
	l->start_ms = now;
	l->logged = 0;
	l->suppressed = 0;
}

void kvsd_log_limited(enum kvsd_log_kind kind, const char *fmt, ...)
{
	struct limiter *l = &limiters[kind];
	va_list ap;
	int saved = errno;

	limiter_roll(l, kvsd_now_ms());
	if (l->logged >= KVSD_LOG_BURST) {
		l->suppressed++;
		return;
	}
	l->logged++;
	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
	errno = saved;
}

void kvsd_log_tick(void)
{
	uint64_t now = kvsd_now_ms();
	unsigned int i;

	for (i = 0; i < KVSD_LOG_NKINDS; i++)
		if (limiters[i].suppressed)
			limiter_roll(&limiters[i], now);
}

void kvsd_err(const char *where, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "kvshared: %s: ", where);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}
