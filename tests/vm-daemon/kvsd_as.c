// SPDX-License-Identifier: GPL-2.0
/*
 * kvsd_as UID GID[,GROUP...] PROG [ARG...]: run PROG as UID, with GID as
 * its group and the GROUPs as its supplementary groups (none if only GID
 * is given), for the guest's shell tests, which have no setuid applet
 * that takes any uid (busybox's need a passwd entry).  Must run as root.
 */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_GROUPS	16

static unsigned long id_arg(const char *s)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || (*end && *end != ',') || v > 0xfffffffeul) {
		fprintf(stderr, "kvsd_as: '%s' is not an id\n", s);
		exit(127);
	}
	return v;
}

int main(int argc, char **argv)
{
	gid_t groups[MAX_GROUPS];
	size_t n = 0;
	uid_t uid;
	gid_t gid;
	char *p;

	if (argc < 4) {
		fprintf(stderr, "usage: kvsd_as UID GID[,GROUP...] PROG [ARG...]\n");
		return 127;
	}
	uid = id_arg(argv[1]);
	gid = id_arg(argv[2]);
	for (p = strchr(argv[2], ','); p && n < MAX_GROUPS; p = strchr(p + 1, ','))
		groups[n++] = id_arg(p + 1);
	if (setgroups(n, groups) || setgid(gid) || setuid(uid)) {
		perror("kvsd_as: dropping privileges");
		return 127;
	}
	execvp(argv[3], argv + 3);
	fprintf(stderr, "kvsd_as: %s: %s\n", argv[3], strerror(errno));
	return 127;
}
