/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvshared's log: one line per event on stderr, "kvshared: ...".
 *
 * Lines that any local user can cause at will (a connection accepted,
 * closed or refused) go through kvsd_log_limited(): at most
 * KVSD_LOG_BURST lines of one kind per KVSD_LOG_WINDOW_MS, the rest
 * counted and reported as one "N ... suppressed" line once the window has
 * passed, so that a flood of connections cannot fill the disk.
 *
 * The bottom of the daemon: it calls nothing else of kvshared.
 */
#ifndef _KVSHARED_LOG_H
#define _KVSHARED_LOG_H

#include <stdbool.h>

#define KVSD_LOG_BURST		20
#define KVSD_LOG_WINDOW_MS	5000

/* The kinds of rate-limited lines; each has its own budget. */
enum kvsd_log_kind {
	KVSD_LOG_CONNECT,		/* a client connected */
	KVSD_LOG_CLOSE,			/* a client disconnected or was dropped */
	KVSD_LOG_REFUSED,		/* a connection over a cap */
	KVSD_LOG_REMOTE_TIER,		/* a KVS_SOCK_REMOTE_TIER request */
	KVSD_LOG_USER_LIMIT,		/* a request past a uid's memory limit */
	KVSD_LOG_NKINDS,
};

void kvsd_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same, only with --verbose. */
void kvsd_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same, within the budget of @kind. */
void kvsd_log_limited(enum kvsd_log_kind kind, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Say how many lines were suppressed, for every kind whose window passed. */
void kvsd_log_tick(void);
/*
 * An error at WHERE (a config line or option), "kvshared: WHERE: ...":
 * config.c and remote/config.c, before the daemon serves anyone, so it
 * is never limited.
 */
void kvsd_err(const char *where, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

extern bool kvsd_verbose;

#endif /* _KVSHARED_LOG_H */
