/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Doorbells between kvshared and one client (<linux/kvshare.h>, "The
 * shared ring" and KVS_SOCK_WAIT_FD), whose rings carry nothing but
 * "look again".  Never pipes (bell.c says why): the sq bell, which the
 * client rings, is an eventfd; the cq bell and the wait bell, which the
 * daemon rings, are unix stream sockets the client can only read.
 */
#ifndef _KVSHARED_BELL_H
#define _KVSHARED_BELL_H

#include <stdbool.h>

/*
 * A bell, non-blocking and close-on-exec: the daemon keeps @mine and
 * sends @theirs.  @daemon_reads: an eventfd (two descriptors of one
 * file), else a socket pair whose end @mine is shut for reading.
 * 0 or -errno (EMFILE when out of descriptors).
 */
int kvsd_bell_new(bool daemon_reads, int *mine, int *theirs);
/* A socket bell: one byte; a full buffer, or a client gone, already says what it would. */
void kvsd_bell_ring(int fd);
/* An eventfd bell: its count, read and reset, never waiting. */
void kvsd_bell_drain(int fd);

#endif /* _KVSHARED_BELL_H */
