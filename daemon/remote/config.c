// SPDX-License-Identifier: GPL-2.0
/*
 * The remote_* pool keys (config.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "../log.h"
#include "config.h"

#define PASSWORD_MAX	512

enum {
	RK_NODES, RK_CLUSTER, RK_USER, RK_PASSWORD_FILE, RK_TLS, RK_TLS_CA,
	RK_TLS_CERT, RK_TLS_KEY, RK_NAMESPACE, RK_WRITE, RK_FETCH, RK_TIMEOUT,
	RK_QUEUE, RK_FETCH_MAX, RK_TTL, RK_MAC_KEY, RK_MAC_KEY_OLD, RK_COUNT
};

static const char *const keys[RK_COUNT] = {
	"remote", "remote_cluster", "remote_user", "remote_password_file",
	"remote_tls", "remote_tls_ca", "remote_tls_cert", "remote_tls_key",
	"remote_namespace", "remote_write", "remote_fetch", "remote_timeout_ms",
	"remote_queue", "remote_fetch_max", "remote_ttl_s", "remote_mac_key_file",
	"remote_mac_key_file_old",
};

static int yes_no(const char *where, const char *key, const char *val, bool *out)
{
	if (!strcmp(val, "yes") || !strcmp(val, "true") || !strcmp(val, "1"))
		*out = true;
	else if (!strcmp(val, "no") || !strcmp(val, "false") || !strcmp(val, "0"))
		*out = false;
	else {
		kvsd_err(where, "%s: '%s' is not yes or no", key, val);
		return -EINVAL;
	}
	return 0;
}

static int number(const char *where, const char *key, const char *val,
		  uint32_t min, uint32_t max, uint32_t *out)
{
	unsigned long v;
	char *end;

	errno = 0;
	v = strtoul(val, &end, 10);
	if (!*val || *end || errno || v < min || v > max) {
		kvsd_err(where, "%s: '%s' is not a number in %u..%u", key, val, min, max);
		return -EINVAL;
	}
	*out = (uint32_t)v;
	return 0;
}

static int str(const char *where, const char *key, const char *val, char **out)
{
	*out = strdup(val);
	if (!*out) {
		kvsd_err(where, "%s: out of memory", key);
		return -ENOMEM;
	}
	return 0;
}

/* "HOST:PORT+HOST:PORT...": '+' because ',' separates --pool keys. */
static int nodes(struct kvsd_remote_cfg *rc, const char *where, const char *val)
{
	char *copy = strdup(val), *item, *save, *colon, *end;
	long port;
	int ret = 0;

	if (!copy)
		return -ENOMEM;
	for (item = strtok_r(copy, "+ ", &save); item; item = strtok_r(NULL, "+ ", &save)) {
		colon = strrchr(item, ':');
		port = colon ? strtol(colon + 1, &end, 10) : 0;
		if (!colon || colon == item || colon - item >= 64 || *end ||
		    port < 1 || port > 65535) {
			kvsd_err(where, "remote: '%s' is not HOST:PORT", item);
			ret = -EINVAL;
			break;
		}
		if (rc->n_nodes == KVSD_REMOTE_MAX_NODES) {
			kvsd_err(where, "remote: more than %d nodes", KVSD_REMOTE_MAX_NODES);
			ret = -EINVAL;
			break;
		}
		ret = str(where, "remote", item, &rc->nodes[rc->n_nodes]);
		if (ret)
			break;
		rc->n_nodes++;
	}
	free(copy);
	if (!ret && !rc->n_nodes) {
		kvsd_err(where, "remote: no node");
		ret = -EINVAL;
	}
	return ret;
}

static bool ns_valid(const char *s)
{
	size_t len = strlen(s);

	return len && len < KVSD_RNS_MAX &&
	       strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
			 "0123456789._-") == len;
}

static struct kvsd_remote_cfg *rc_new(void)
{
	struct kvsd_remote_cfg *rc = calloc(1, sizeof(*rc));

	if (!rc)
		return NULL;
	rc->write = KVSD_REMOTE_WRITE_PUBLISH;
	rc->fetch = true;
	rc->timeout_ms = 200;
	rc->queue = 4096;
	rc->fetch_max = 256;
	return rc;
}

int kvsd_remote_cfg_set(struct kvsd_remote_cfg **rcp, const char *where,
			const char *key, const char *val)
{
	struct kvsd_remote_cfg *rc;
	int k;

	for (k = 0; k < RK_COUNT; k++)
		if (!strcmp(keys[k], key))
			break;
	if (k == RK_COUNT) {
		kvsd_err(where, "unknown pool key '%s'", key);
		return -EINVAL;
	}
	if (!*rcp)
		*rcp = rc_new();
	rc = *rcp;
	if (!rc) {
		kvsd_err(where, "out of memory");
		return -ENOMEM;
	}
	if (rc->seen & (1u << k)) {
		kvsd_err(where, "pool key '%s' given twice", key);
		return -EINVAL;
	}
	rc->seen |= 1u << k;
	if (!*val) {
		kvsd_err(where, "pool key '%s' has no value", key);
		return -EINVAL;
	}
	switch (k) {
	case RK_NODES:
		return nodes(rc, where, val);
	case RK_CLUSTER:
		return yes_no(where, key, val, &rc->cluster);
	case RK_USER:
		return str(where, key, val, &rc->user);
	case RK_PASSWORD_FILE:
		return str(where, key, val, &rc->password_file);
	case RK_TLS:
		return yes_no(where, key, val, &rc->tls);
	case RK_TLS_CA:
		return str(where, key, val, &rc->tls_ca);
	case RK_TLS_CERT:
		return str(where, key, val, &rc->tls_cert);
	case RK_TLS_KEY:
		return str(where, key, val, &rc->tls_key);
	case RK_NAMESPACE:
		if (!ns_valid(val)) {
			kvsd_err(where, "remote_namespace '%s': 1..%d of [A-Za-z0-9._-]",
				 val, KVSD_RNS_MAX - 1);
			return -EINVAL;
		}
		snprintf(rc->ns, sizeof(rc->ns), "%s", val);
		return 0;
	case RK_WRITE:
		if (!strcmp(val, "publish"))
			rc->write = KVSD_REMOTE_WRITE_PUBLISH;
		else if (!strcmp(val, "none"))
			rc->write = KVSD_REMOTE_WRITE_NONE;
		else {
			kvsd_err(where, "remote_write: '%s' is not publish or none", val);
			return -EINVAL;
		}
		return 0;
	case RK_FETCH:
		return yes_no(where, key, val, &rc->fetch);
	case RK_TIMEOUT:
		return number(where, key, val, 1, 60000, &rc->timeout_ms);
	case RK_QUEUE:
		return number(where, key, val, 1, 1u << 20, &rc->queue);
	case RK_FETCH_MAX:
		return number(where, key, val, 1, 4096, &rc->fetch_max);
	case RK_TTL:
		return number(where, key, val, 0, 365 * 86400, &rc->ttl_s);
	case RK_MAC_KEY:
		return str(where, key, val, &rc->mac_key_file);
	case RK_MAC_KEY_OLD:
		return str(where, key, val, &rc->mac_key_file_old);
	}
	return -EINVAL;
}

/*
 * The password file: a regular file of our own uid that nobody else may
 * read or write (a secret others can read is no secret, one they can
 * write lets them choose whom we log in as).  One line; the newline is
 * not part of the password.
 */
static int read_password(struct kvsd_remote_cfg *rc, const char *where)
{
	char buf[PASSWORD_MAX + 2];
	struct stat st;
	ssize_t n;
	int fd;

	fd = open(rc->password_file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		kvsd_err(where, "remote_password_file '%s': %s", rc->password_file,
			 strerror(errno));
		return -EINVAL;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		kvsd_err(where, "remote_password_file '%s' is not a regular file",
			 rc->password_file);
		goto fail;
	}
	if (st.st_uid != geteuid()) {
		kvsd_err(where, "remote_password_file '%s' belongs to uid %u, not to "
			 "kvshared's uid %u", rc->password_file, (unsigned int)st.st_uid,
			 (unsigned int)geteuid());
		goto fail;
	}
	if (st.st_mode & 077) {
		kvsd_err(where, "remote_password_file '%s' has mode %04o: others may "
			 "read it; chmod 600 it", rc->password_file,
			 (unsigned int)(st.st_mode & 07777));
		goto fail;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	fd = -1;
	if (n < 0 || n > PASSWORD_MAX) {
		kvsd_err(where, "remote_password_file '%s': %s", rc->password_file,
			 n < 0 ? strerror(errno) : "longer than 512 bytes");
		goto fail;
	}
	buf[n] = '\0';
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		buf[--n] = '\0';
	if (!n || strpbrk(buf, "\r\n")) {
		kvsd_err(where, "remote_password_file '%s': %s", rc->password_file,
			 n ? "more than one line" : "empty");
		goto fail;
	}
	rc->password = strdup(buf);
	explicit_bzero(buf, sizeof(buf));
	return rc->password ? 0 : -ENOMEM;
fail:
	explicit_bzero(buf, sizeof(buf));
	if (fd >= 0)
		close(fd);
	return -EINVAL;
}

/* The MAC keys (mac.h): refused at startup like the password. */
static int read_mac_keys(struct kvsd_remote_cfg *rc, const char *where)
{
	char err[PATH_MAX + 128];
	int ret;

	ret = kvsd_rmac_new(&rc->mac, rc->mac_key_file, rc->mac_key_file_old, err,
			    sizeof(err));
	if (ret)
		kvsd_err(where, "remote MAC key %s", err);
	return ret;
}

int kvsd_remote_cfg_reload(struct kvsd_remote_cfg *rc, const char *what)
{
	char err[PATH_MAX + 128];
	int ret;

	if (!rc || !rc->mac)
		return 0;
	ret = kvsd_rmac_reload(rc->mac, err, sizeof(err));
	if (ret)
		kvsd_log("%s: remote tier: MAC keys not reloaded, those in use stay: %s",
			 what, err);
	else
		kvsd_log("%s: remote tier: MAC keys reloaded (%u accepted)", what,
			 rc->mac->keys->n);
	return ret;
}

/*
 * A key of a [remote NAME] section or --remote spec: a pool's remote_*
 * key without its prefix ("nodes" for remote).  The namespace is not
 * one: each pool that turns the tier on names its own.
 */
int kvsd_remote_tier_set(struct kvsd_remote_cfg **rc, const char *where,
			 const char *key, const char *val)
{
	char full[64];

	if (!strcmp(key, "namespace") || !strncmp(key, "remote", 6) ||
	    strlen(key) > 40) {
		kvsd_err(where, "unknown remote tier key '%s'%s", key,
			 !strcmp(key, "namespace") ?
			 " (each pool that turns the tier on names its own)" : "");
		return -EINVAL;
	}
	if (!strcmp(key, "nodes"))
		snprintf(full, sizeof(full), "remote");
	else
		snprintf(full, sizeof(full), "remote_%s", key);
	return kvsd_remote_cfg_set(rc, where, full, val);
}

bool kvsd_remote_ns_valid(const char *ns)
{
	return ns_valid(ns);
}

int kvsd_remote_cfg_finish(struct kvsd_remote_cfg *rc, const char *where,
			   const char *pool, bool host_memory)
{
	if (!rc)
		return 0;
	if (!(rc->seen & (1u << RK_NODES))) {
		if (pool)
			kvsd_err(where, "pool '%s': remote_* keys without "
				 "remote=HOST:PORT", pool);
		else
			kvsd_err(where, "remote tier without nodes=HOST:PORT");
		return -EINVAL;
	}
	if (!pool)
		goto checked;	/* a named tier: pool checks at turn-on */
	if (!host_memory) {
		kvsd_err(where, "pool '%s': a remote tier needs memory=host or hugetlb", pool);
		return -EINVAL;
	}
	if (rc->user && !rc->password_file) {
		kvsd_err(where, "pool '%s': remote_user needs remote_password_file", pool);
		return -EINVAL;
	}
	if ((rc->tls_ca || rc->tls_cert || rc->tls_key) && !rc->tls) {
		kvsd_err(where, "pool '%s': remote_tls_* keys need remote_tls=yes", pool);
		return -EINVAL;
	}
	if (rc->tls_key && !rc->tls_cert) {
		kvsd_err(where, "pool '%s': remote_tls_key needs remote_tls_cert", pool);
		return -EINVAL;
	}
	if (!rc->ns[0]) {
		if (!ns_valid(pool)) {
			kvsd_err(where, "pool '%s': set remote_namespace", pool);
			return -EINVAL;
		}
		snprintf(rc->ns, sizeof(rc->ns), "%s", pool);
	}
checked:
	if (rc->user && !rc->password_file) {
		kvsd_err(where, "remote_user needs remote_password_file");
		return -EINVAL;
	}
	if ((rc->tls_ca || rc->tls_cert || rc->tls_key) && !rc->tls) {
		kvsd_err(where, "remote_tls_* keys need remote_tls=yes");
		return -EINVAL;
	}
	if (rc->tls_key && !rc->tls_cert) {
		kvsd_err(where, "remote_tls_key needs remote_tls_cert");
		return -EINVAL;
	}
	if (rc->mac_key_file_old && !rc->mac_key_file) {
		kvsd_err(where, "remote_mac_key_file_old needs remote_mac_key_file");
		return -EINVAL;
	}
	if (rc->mac_key_file && read_mac_keys(rc, where))
		return -EINVAL;
	if (rc->password_file)
		return read_password(rc, where);
	return 0;
}

void kvsd_remote_cfg_free(struct kvsd_remote_cfg *rc)
{
	unsigned int i;

	if (!rc)
		return;
	for (i = 0; i < rc->n_nodes; i++)
		free(rc->nodes[i]);
	free(rc->user);
	free(rc->password_file);
	if (rc->password) {
		explicit_bzero(rc->password, strlen(rc->password));
		free(rc->password);
	}
	free(rc->tls_ca);
	free(rc->tls_cert);
	free(rc->tls_key);
	free(rc->mac_key_file);
	free(rc->mac_key_file_old);
	kvsd_rmac_free(rc->mac);
	free(rc);
}
