/* SPDX-License-Identifier: GPL-2.0 */
/*
 * kvshared's listening unix sockets: the arbiter socket (accept.c) and the
 * metrics socket (metrics.c).  Calls only the log.
 */
#ifndef _KVSHARED_LISTEN_H
#define _KVSHARED_LISTEN_H

#include <sys/types.h>

/*
 * A listening unix socket at @path with permissions @mode.  A socket file
 * nobody answers on is stale and replaced; a live one, or a path that is
 * not a socket, is an error (logged).  *ino identifies our file for
 * kvsd_unix_unlink().  Returns the fd or -errno.
 */
int kvsd_unix_listen(const char *path, mode_t mode, ino_t *ino);
/* Remove @path if it is still the socket we created. */
void kvsd_unix_unlink(const char *path, ino_t ino);

#endif /* _KVSHARED_LISTEN_H */
