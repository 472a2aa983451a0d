// SPDX-License-Identifier: GPL-2.0
/*
 * Run-time tiers remembered across restarts (state.h).  The file:
 *
 *	kvshared-remote-tiers 1
 *	OWNER POOL TIER NAMESPACE BY ADMIN
 *	...
 *
 * uids in decimal, names of [A-Za-z0-9._-], ADMIN 0 or 1; one space
 * between fields, a newline after each line.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "../log.h"
#include "config.h"
#include "state.h"

#define FILE_NAME	"remote-tiers"
#define TMP_NAME	".remote-tiers.tmp"
#define MAGIC		"kvshared-remote-tiers 1"
#define FILE_MAX	(64u << 10)	/* a full table is under 50 KiB */

static char *state_dir;
static struct kvsd_rstate_entry table[KVSD_RSTATE_MAX];
static unsigned int n_entries;
static uint64_t next_stamp;

static bool name_ok(const char *s, size_t max)
{
	size_t len = strlen(s);

	return len && len < max &&
	       strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
			 "0123456789._-") == len;
}

/* A uid in decimal, no sign, no leading zero but "0". */
static bool uid_ok(const char *s, uint32_t *out)
{
	unsigned long long v = 0;
	size_t i, len = strlen(s);

	if (!len || len > 10 || strspn(s, "0123456789") != len || (s[0] == '0' && len > 1))
		return false;
	for (i = 0; i < len; i++)
		v = v * 10 + (unsigned int)(s[i] - '0');
	if (v >= UINT32_MAX)	/* (uid_t)-1 is no uid */
		return false;
	*out = (uint32_t)v;
	return true;
}

/* One entry line into @e; NULL, or what is wrong with it. */
static const char *parse_line(char *line, struct kvsd_rstate_entry *e)
{
	char *f[6], *tok, *save = NULL;
	unsigned int n = 0;

	if (strlen(line) > 4 * KVS_NAME_MAX)
		return "too long";
	if (strstr(line, "  ") || line[0] == ' ')
		return "not one space between fields";
	for (tok = strtok_r(line, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
		if (n == 6)
			return "not 6 fields";
		f[n++] = tok;
	}
	if (n != 6)
		return "not 6 fields";
	memset(e, 0, sizeof(*e));
	if (!uid_ok(f[0], &e->owner) || !uid_ok(f[4], &e->by))
		return "a uid is not a number below 4294967295";
	if (!name_ok(f[1], sizeof(e->pool)) || !name_ok(f[2], sizeof(e->tier)))
		return "a pool or tier name is not 1..63 of [A-Za-z0-9._-]";
	if (!kvsd_remote_ns_valid(f[3]))
		return "the namespace is not 1..63 of [A-Za-z0-9._-]";
	if (strcmp(f[5], "0") && strcmp(f[5], "1"))
		return "admin is not 0 or 1";
	strcpy(e->pool, f[1]);
	strcpy(e->tier, f[2]);
	strcpy(e->ns, f[3]);
	e->admin = f[5][0] == '1';
	return NULL;
}

static struct kvsd_rstate_entry *find(uint32_t owner, const char *pool)
{
	unsigned int i;

	for (i = 0; i < n_entries; i++)
		if (table[i].owner == owner && !strcmp(table[i].pool, pool))
			return &table[i];
	return NULL;
}

/* The lines of @buf (NUL-terminated) into the table; bad ones logged. */
static void parse(char *buf, const char *path)
{
	char *line = buf, *nl;
	unsigned int no = 1, bad = 0;
	struct kvsd_rstate_entry e;
	const char *why;

	nl = strchr(line, '\n');
	if (!nl || (size_t)(nl - line) != strlen(MAGIC) || strncmp(line, MAGIC, nl - line)) {
		kvsd_log("remote tiers state %s: not a state file of this kvshared "
			 "(first line); ignored", path);
		return;
	}
	for (line = nl + 1; *line; line = nl + 1) {
		no++;
		nl = strchr(line, '\n');
		if (!nl) {
			kvsd_log("remote tiers state %s:%u: no newline at the end; ignored",
				 path, no);
			break;
		}
		*nl = '\0';
		why = parse_line(line, &e);
		if (!why && find(e.owner, e.pool))
			why = "the pool's second entry";
		if (!why && n_entries == KVSD_RSTATE_MAX)
			why = "more entries than kvshared keeps";
		if (why) {
			if (bad++ < 8)
				kvsd_log("remote tiers state %s:%u: %s; line ignored", path,
					 no, why);
			continue;
		}
		e.stamp = next_stamp++;
		table[n_entries++] = e;
	}
	kvsd_log("remote tiers state %s: %u run-time tier%s remembered%s", path, n_entries,
		 n_entries == 1 ? "" : "s", bad ? ", bad lines ignored" : "");
}

/*
 * The file, if any: read only if it is a regular file of ours that
 * nobody else may read or write, and not larger than FILE_MAX.
 */
static void load(void)
{
	char path[PATH_MAX], *buf;
	struct stat st;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", state_dir, FILE_NAME);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		if (errno != ENOENT)
			kvsd_log("remote tiers state %s: %s; ignored", path,
				 strerror(errno));
		return;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & 077) || st.st_size > FILE_MAX) {
		kvsd_log("remote tiers state %s: not a regular file of uid %u with mode "
			 "0600 and at most %u bytes; ignored (and replaced at the next "
			 "change)", path, (unsigned int)geteuid(), FILE_MAX);
		close(fd);
		return;
	}
	buf = malloc(FILE_MAX + 1);
	n = buf ? read(fd, buf, FILE_MAX + 1) : -1;
	close(fd);
	if (n < 0 || n > FILE_MAX || memchr(buf, '\0', n)) {
		kvsd_log("remote tiers state %s: %s; ignored", path,
			 n < 0 ? strerror(errno) : "not text of at most 64 KiB");
		free(buf);
		return;
	}
	buf[n] = '\0';
	parse(buf, path);
	free(buf);
}

int kvsd_rstate_open(const char *dir)
{
	struct stat st;

	if (!dir)
		return 0;
	if (dir[0] != '/' || strlen(dir) > PATH_MAX - 32) {
		kvsd_log("state_dir '%s': not an absolute path of at most %d bytes", dir,
			 PATH_MAX - 32);
		return -EINVAL;
	}
	if (lstat(dir, &st)) {
		kvsd_log("state_dir '%s': %s", dir, strerror(errno));
		return -errno;
	}
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022)) {
		kvsd_log("state_dir '%s': not a directory of kvshared's uid %u that only "
			 "it may write (mode %04o, uid %u; chmod 700)", dir,
			 (unsigned int)geteuid(), (unsigned int)(st.st_mode & 07777),
			 (unsigned int)st.st_uid);
		return -EPERM;
	}
	state_dir = strdup(dir);
	if (!state_dir)
		return -ENOMEM;
	load();
	return 0;
}

void kvsd_rstate_close(void)
{
	free(state_dir);
	state_dir = NULL;
	n_entries = 0;
}

/* The table into a new file, renamed over the old one. */
static void save(void)
{
	char path[PATH_MAX], tmp[PATH_MAX];
	unsigned int i;
	FILE *f;
	int fd, dfd, ok;

	snprintf(path, sizeof(path), "%s/%s", state_dir, FILE_NAME);
	snprintf(tmp, sizeof(tmp), "%s/%s", state_dir, TMP_NAME);
	unlink(tmp);	/* a crash's leftover; O_EXCL refuses anything there */
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f) {
		kvsd_log("remote tiers state %s: %s; not saved", tmp, strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	ok = fprintf(f, MAGIC "\n") > 0;
	for (i = 0; ok && i < n_entries; i++)
		ok = fprintf(f, "%u %s %s %s %u %d\n", table[i].owner, table[i].pool,
			     table[i].tier, table[i].ns, table[i].by, table[i].admin) > 0;
	ok = !fflush(f) && !fsync(fd) && ok;
	ok = !fclose(f) && ok;
	if (!ok || rename(tmp, path)) {
		kvsd_log("remote tiers state %s: %s; not saved", path, strerror(errno));
		unlink(tmp);
		return;
	}
	dfd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);	/* the rename itself */
		close(dfd);
	}
}

const struct kvsd_rstate_entry *kvsd_rstate_find(uint32_t owner, const char *pool)
{
	return state_dir ? find(owner, pool) : NULL;
}

static void drop(unsigned int i)
{
	table[i] = table[--n_entries];
}

/* The oldest entry not in use, of @by's (non-admin) only if @of_by; -1: none. */
static int oldest(bool (*in_use)(uint32_t, const char *), bool of_by, uint32_t by)
{
	unsigned int i;
	int best = -1;

	for (i = 0; i < n_entries; i++) {
		if (of_by && (table[i].admin || table[i].by != by))
			continue;
		if (in_use(table[i].owner, table[i].pool))
			continue;
		if (best < 0 || table[i].stamp < table[best].stamp)
			best = (int)i;
	}
	return best;
}

void kvsd_rstate_set(const struct kvsd_rstate_entry *e,
		     bool (*in_use)(uint32_t owner, const char *pool))
{
	struct kvsd_rstate_entry *old;
	unsigned int i, of_by = 0;
	int victim = -1;

	if (!state_dir)
		return;
	old = find(e->owner, e->pool);
	if (old) {
		*old = *e;
		old->stamp = next_stamp++;
		save();
		return;
	}
	for (i = 0; i < n_entries; i++)
		of_by += !table[i].admin && table[i].by == e->by;
	if (!e->admin && of_by >= KVSD_RSTATE_UID_MAX)
		victim = oldest(in_use, true, e->by);
	else if (n_entries == KVSD_RSTATE_MAX)
		victim = oldest(in_use, false, 0);
	if (victim >= 0) {
		kvsd_log("remote tiers state: forgetting tier '%s' of pool '%s' of uid %u "
			 "(the oldest remembered) to remember another",
			 table[victim].tier, table[victim].pool, table[victim].owner);
		drop(victim);
	}
	if (n_entries == KVSD_RSTATE_MAX ||
	    (!e->admin && of_by - (victim >= 0) >= KVSD_RSTATE_UID_MAX)) {
		/* Never: fewer tiers are on than entries are kept. */
		kvsd_log("remote tiers state: full; tier '%s' of pool '%s' of uid %u "
			 "not remembered", e->tier, e->pool, e->owner);
		return;
	}
	table[n_entries] = *e;
	table[n_entries++].stamp = next_stamp++;
	save();
}

void kvsd_rstate_clear(uint32_t owner, const char *pool)
{
	struct kvsd_rstate_entry *e = state_dir ? find(owner, pool) : NULL;

	if (!e)
		return;
	drop((unsigned int)(e - table));
	save();
}
