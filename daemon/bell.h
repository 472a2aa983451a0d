/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Doorbells between kvshared and one client (<linux/kvshare.h>, "The
 * shared ring" and KVS_SOCK_WAIT_FD): a one-page pipe whose bytes carry
 * nothing but "look again".  Pipes rather than eventfds: the two ends are
 * two open files, so a client cannot make the daemon's end blocking, nor
 * read or write through it.
 */
#ifndef _KVSHARED_BELL_H
#define _KVSHARED_BELL_H

#include <stdbool.h>

/*
 * A pipe, both ends non-blocking and close-on-exec: the daemon keeps
 * @mine (the read end if @daemon_reads, else the write end) and sends
 * @theirs.  0 or -errno (EMFILE when out of descriptors).
 */
int kvsd_bell_new(bool daemon_reads, int *mine, int *theirs);
/* One byte; a full pipe, or a reader gone, already says what it would. */
void kvsd_bell_ring(int fd);
/* Empty the read end (a bounded number of reads: the pipe holds a page). */
void kvsd_bell_drain(int fd);

#endif /* _KVSHARED_BELL_H */
