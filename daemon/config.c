// SPDX-License-Identifier: GPL-2.0
/*
 * kvshared's command line and config file.
 *
 * The file is INI-like: "[daemon]", "[pool NAME]" and "[remote NAME]"
 * sections of "key = value" lines, '#' or ';' starting a comment line.
 * --pool takes the same keys as a pool section ("NAME:pages=N,..."),
 * --remote those of a remote section (remote/config.c).  Flags
 * win over the file.  Everything is checked here, against the same limits
 * the arbiter applies, so that a bad pool is reported with its file and
 * line before the daemon starts rather than as a bare errno later.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stddef.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvshare/kv_layout.h>

#include "kvshared.h"
#include "remote/config.h"

#define KVSD_DIM_MAX		65536
#define KVSD_PAGE_BYTES_MAX	(1ull << 30)
#define KVSD_LINE_MAX		4096

static void usage(FILE *f)
{
	fputs("usage: kvshared [OPTIONS]\n"
	      "\n"
	      "The kvshare daemon: owns the memory of its pools, creates them in\n"
	      "/dev/kvshare when the module is loaded, and otherwise serves the\n"
	      "arbiter itself on a unix socket.  Runs in the foreground.\n"
	      "\n"
	      "  --config FILE        read FILE (see kvshared.conf.example)\n"
	      "  --socket PATH        arbiter socket (default " KVS_DAEMON_SOCKET ")\n"
	      "  --metrics SPEC       Prometheus endpoint: unix:/PATH or\n"
	      "                       127.0.0.1:PORT, [::1]:PORT, localhost:PORT\n"
	      "                       (loopback only; PORT 0 picks a free one)\n"
	      "  --pool NAME:KEY=VAL,...\n"
	      "                       a pool, with the keys of a [pool] section;\n"
	      "                       repeatable\n"
	      "  --remote NAME:nodes=HOST:PORT[+...],KEY=VAL,...\n"
	      "                       a named remote tier ([remote NAME] section): the\n"
	      "                       remote_* keys without 'remote_', no namespace;\n"
	      "                       a pool's owner turns it on (kvctl pool remote)\n"
	      "  --state-dir DIR      remember run-time remote tiers in DIR (a\n"
	      "                       directory of kvshared's uid, mode 0700;\n"
	      "                       default $STATE_DIRECTORY, else none)\n"
	      "  --max-pools N        pools that may exist at once (default 64;\n"
	      "                       socket mode only)\n"
	      "  --max-pool-pages N   largest pool a client may create (default\n"
	      "                       and limit 4194304; socket mode only)\n"
	      "  --mode MODE          auto (default): the module if DEVICE opens,\n"
	      "                       else the socket; module; socket\n"
	      "  --device PATH        the module's device (default /dev/kvshare)\n"
	      "  --verbose, -v        log every command\n"
	      "  --foreground         accepted; kvshared never daemonizes\n"
	      "  --help, -h           this text\n"
	      "\n"
	      "Socket mode: caps that keep one client from hurting the others\n"
	      "  --max-connections N          connections at once (default 1024)\n"
	      "  --max-connections-per-uid N  of one uid; uid 0 exempt (default 64)\n"
	      "  --max-conn-buffer BYTES      request plus reply buffered for one\n"
	      "                               connection (default and limit 8M)\n"
	      "  --max-buffer-total BYTES     for all connections (default 1G)\n"
	      "  --stall-timeout-ms MS        a client stalled mid-message or not\n"
	      "                               reading its reply is dropped (10000)\n"
	      "  --ring-poll-us US            poll the shared rings at most this long\n"
	      "                               after a request (default 500; 0: never)\n"
	      "  --max-user-memory BYTES      what one uid (not 0) may cost kvshared:\n"
	      "                               connections, buffers, rings, its pools'\n"
	      "                               bookkeeping (default 64M, 16M..256M)\n"
	      "  --max-memory-total BYTES     the same for all uids (default 1G)\n"
	      "Socket mode: per-user limits, as the module's parameters (0 = none)\n"
	      "  --max-user-pools N           pools one uid may own (default 8)\n"
	      "  --max-user-pool-pages N      pages of the pools one uid owns\n"
	      "                               (default 4194304)\n"
	      "  --max-user-held N            pages one uid's clients hold, all\n"
	      "                               pools (default 4194304)\n"
	      "  --max-user-held-bytes BYTES  the same in bytes (default 0)\n"
	      "\n"
	      "Pool keys: pages=N layers=L kv_heads=H head_dim=D\n"
	      "  [tokens_per_page=16] [dtype=f16|bf16|f32|fp8] [mode=0660]\n"
	      "  [quota=0] [ns_per_uid=no] [memory=host|hugetlb|cuda|none]\n"
	      "  [cuda_device=0] [uid=USER|UID] [gid=GROUP|GID]\n"
	      "  a remote tier (docs/remote.md): remote=HOST:PORT[+HOST:PORT...]\n"
	      "  [remote_cluster=no] [remote_user=U remote_password_file=F]\n"
	      "  [remote_tls=no remote_tls_ca=F remote_tls_cert=F remote_tls_key=F]\n"
	      "  [remote_namespace=POOL] [remote_write=publish|none] [remote_fetch=yes]\n"
	      "  [remote_timeout_ms=200] [remote_queue=4096] [remote_fetch_max=256]\n"
	      "  [remote_ttl_s=0] [remote_mac_key_file=F [remote_mac_key_file_old=F]]\n"
	      "\n"
	      "Exit status: 0 after SIGTERM/SIGINT, 1 on a runtime failure,\n"
	      "2 on a usage or configuration error.\n", f);
}

/* Decimal or 0x hex, with an optional binary k/M/G suffix; nothing else. */
static int parse_num(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;
	int shift = 0;

	if (!isdigit((unsigned char)s[0]))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s)
		return errno == ERANGE ? -ERANGE : -EINVAL;
	if (*end) {
		switch (*end) {
		case 'k': case 'K':
			shift = 10;
			break;
		case 'm': case 'M':
			shift = 20;
			break;
		case 'g': case 'G':
			shift = 30;
			break;
		default:
			return -EINVAL;
		}
		if (end[1])
			return -EINVAL;
		if (v > (UINT64_MAX >> shift))
			return -ERANGE;
		v <<= shift;
	}
	if (v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

static int num_key(const char *where, const char *key, const char *val,
		   uint64_t min, uint64_t max, uint64_t *out)
{
	int ret = parse_num(val, min, max, out);

	if (ret == -ERANGE)
		kvsd_err(where, "%s: '%s' is out of range (%llu..%llu)", key, val,
			(unsigned long long)min, (unsigned long long)max);
	else if (ret)
		kvsd_err(where, "%s: '%s' is not a number", key, val);
	return ret;
}

static int u32_key(const char *where, const char *key, const char *val,
		   uint64_t min, uint64_t max, uint32_t *out)
{
	uint64_t v;

	if (num_key(where, key, val, min, max, &v))
		return -EINVAL;
	*out = v;
	return 0;
}

static int bool_key(const char *where, const char *key, const char *val, bool *out)
{
	if (!strcmp(val, "yes") || !strcmp(val, "true") || !strcmp(val, "1")) {
		*out = true;
		return 0;
	}
	if (!strcmp(val, "no") || !strcmp(val, "false") || !strcmp(val, "0")) {
		*out = false;
		return 0;
	}
	kvsd_err(where, "%s: '%s' is not yes or no", key, val);
	return -EINVAL;
}

/* The short name (<kvshare/kv_layout.h>'s table), "?" if unknown. */
const char *kvsd_dtype_name(uint32_t dtype)
{
	const struct kv_dtype_name *d = kv_dtype_by_id(dtype);

	return d ? d->name : "?";
}

static int dtype_key(const char *where, const char *key, const char *val,
		     uint32_t *out)
{
	const struct kv_dtype_name *d = kv_dtype_by_name(val);
	char choices[64];

	if (!d) {
		kvsd_err(where, "%s: unknown value '%s' (%s)", key, val,
			 kv_dtype_choices(choices, sizeof(choices), 0));
		return -EINVAL;
	}
	*out = d->dtype;
	return 0;
}

static const char *const mem_names[] = {
	[KVSD_MEM_HOST] = "host",
	[KVSD_MEM_HUGETLB] = "hugetlb",
	[KVSD_MEM_CUDA] = "cuda",
	[KVSD_MEM_NONE] = "none",
};

const char *kvsd_mem_name(enum kvsd_mem_kind kind)
{
	return mem_names[kind];
}

/*
 * kv_page_bytes() of <kvshare/kv_layout.h>; 0 for a geometry kvshared
 * refuses: a dimension of 0 or past KVSD_DIM_MAX, an unknown dtype, or a
 * page past KVSD_PAGE_BYTES_MAX.
 */
uint64_t kvsd_page_bytes(const struct kvs_geometry *g)
{
	if (g->n_layers > KVSD_DIM_MAX || g->n_kv_heads > KVSD_DIM_MAX ||
	    g->head_dim > KVSD_DIM_MAX || g->tokens_per_page > KVSD_DIM_MAX)
		return 0;
	return kv_page_bytes_max(g, KVSD_PAGE_BYTES_MAX);
}

static int id_key(const char *where, const char *key, const char *val,
		  bool group, int64_t *out)
{
	uint64_t v;

	if (isdigit((unsigned char)val[0])) {
		if (parse_num(val, 0, UINT32_MAX - 1, &v)) {
			kvsd_err(where, "%s: '%s' is not a valid id", key, val);
			return -EINVAL;
		}
		*out = v;
		return 0;
	}
	if (group) {
		struct group *gr = getgrnam(val);

		if (gr) {
			*out = gr->gr_gid;
			return 0;
		}
	} else {
		struct passwd *pw = getpwnam(val);

		if (pw) {
			*out = pw->pw_uid;
			return 0;
		}
	}
	kvsd_err(where, "%s: no such %s '%s'", key, group ? "group" : "user", val);
	return -EINVAL;
}

static int enum_key(const char *where, const char *key, const char *val,
		    const char *const *names, unsigned int n, uint32_t *out)
{
	unsigned int i;

	for (i = 0; i < n; i++) {
		if (names[i] && !strcmp(names[i], val)) {
			*out = i;
			return 0;
		}
	}
	kvsd_err(where, "%s: unknown value '%s'", key, val);
	return -EINVAL;
}

#define ENUM_KEY(where, key, val, names, out) \
	enum_key(where, key, val, names, ARRAY_SIZE(names), out)

/* Keys of a pool that are seen, to catch both repeats and omissions. */
enum {
	PK_PAGES, PK_LAYERS, PK_KV_HEADS, PK_HEAD_DIM, PK_TOKENS, PK_DTYPE,
	PK_MODE, PK_QUOTA, PK_NS_PER_UID, PK_MEMORY, PK_CUDA_DEVICE, PK_UID,
	PK_GID, PK_COUNT
};

static const char *const pool_keys[PK_COUNT] = {
	"pages", "layers", "kv_heads", "head_dim", "tokens_per_page", "dtype",
	"mode", "quota", "ns_per_uid", "memory", "cuda_device", "uid", "gid",
};

struct pool_parse {
	struct kvsd_pool_cfg *pc;
	bool seen[PK_COUNT];
};

static int pool_set_one(struct kvsd_pool_cfg *pc, int k, const char *where,
			const char *key, const char *val)
{
	uint32_t v;
	bool b;

	switch (k) {
	case PK_PAGES:
		return num_key(where, key, val, 1, KVS_MAX_POOL_PAGES, &pc->n_pages);
	case PK_LAYERS:
		return u32_key(where, key, val, 1, KVSD_DIM_MAX, &pc->geom.n_layers);
	case PK_KV_HEADS:
		return u32_key(where, key, val, 1, KVSD_DIM_MAX, &pc->geom.n_kv_heads);
	case PK_HEAD_DIM:
		return u32_key(where, key, val, 1, KVSD_DIM_MAX, &pc->geom.head_dim);
	case PK_TOKENS:
		return u32_key(where, key, val, 1, KVSD_DIM_MAX,
			       &pc->geom.tokens_per_page);
	case PK_DTYPE:
		return dtype_key(where, key, val, &pc->geom.dtype);
	case PK_MODE: {
		char *end;
		unsigned long m;

		errno = 0;
		m = strtoul(val, &end, 8);
		if (!isdigit((unsigned char)val[0]) || errno || *end || m > 0777) {
			kvsd_err(where, "%s: '%s' is not an octal mode (0..0777)", key, val);
			return -EINVAL;
		}
		pc->mode = m;
		return 0;
	}
	case PK_QUOTA:
		return u32_key(where, key, val, 0, KVS_MAX_POOL_PAGES, &pc->quota);
	case PK_NS_PER_UID:
		if (bool_key(where, key, val, &b))
			return -EINVAL;
		pc->flags = b ? KVS_POOL_NS_PER_UID : 0;
		return 0;
	case PK_MEMORY:
		if (ENUM_KEY(where, key, val, mem_names, &v))
			return -EINVAL;
		pc->mem = v;
		return 0;
	case PK_CUDA_DEVICE:
		if (u32_key(where, key, val, 0, 1023, &v))
			return -EINVAL;
		pc->cuda_device = v;
		return 0;
	case PK_UID:
		return id_key(where, key, val, false, &pc->uid);
	case PK_GID:
		return id_key(where, key, val, true, &pc->gid);
	}
	return -EINVAL;
}

static int pool_set(struct pool_parse *pp, const char *where, const char *key,
		    const char *val)
{
	int k;

	/* The remote tier's keys are remote/config.c's. */
	if (!strncmp(key, "remote", 6))
		return kvsd_remote_cfg_set(&pp->pc->remote, where, key, val);
	for (k = 0; k < PK_COUNT; k++)
		if (!strcmp(pool_keys[k], key))
			break;
	if (k == PK_COUNT) {
		kvsd_err(where, "unknown pool key '%s'", key);
		return -EINVAL;
	}
	if (pp->seen[k]) {
		kvsd_err(where, "pool key '%s' given twice", key);
		return -EINVAL;
	}
	pp->seen[k] = true;
	if (!*val) {
		kvsd_err(where, "pool key '%s' has no value", key);
		return -EINVAL;
	}
	return pool_set_one(pp->pc, k, where, key, val);
}

static bool name_valid(const char *name)
{
	size_t len = strlen(name);

	if (!len || len >= KVS_NAME_MAX)
		return false;
	return strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
			    "0123456789._-") == len;
}

/* A new pool entry with the defaults; NULL after reporting the error. */
static struct kvsd_pool_cfg *pool_new(struct kvsd_config *cfg, const char *where,
				      const char *name)
{
	struct kvsd_pool_cfg *pc;
	unsigned int i;

	if (!name_valid(name)) {
		kvsd_err(where, "bad pool name '%s' (1..%d of [A-Za-z0-9._-])", name,
			KVS_NAME_MAX - 1);
		return NULL;
	}
	for (i = 0; i < cfg->n_pools; i++) {
		if (!strcmp(cfg->pools[i].name, name)) {
			kvsd_err(where, "pool '%s' is already defined at %s", name,
				cfg->pools[i].where);
			return NULL;
		}
	}
	pc = realloc(cfg->pools, (cfg->n_pools + 1) * sizeof(*pc));
	if (!pc) {
		kvsd_err(where, "out of memory");
		return NULL;
	}
	cfg->pools = pc;
	pc = &cfg->pools[cfg->n_pools++];
	memset(pc, 0, sizeof(*pc));
	snprintf(pc->name, sizeof(pc->name), "%s", name);
	snprintf(pc->where, sizeof(pc->where), "%s", where);
	pc->geom.tokens_per_page = 16;
	pc->geom.dtype = KVS_DTYPE_F16;
	pc->mode = 0660;
	pc->mem = KVSD_MEM_HOST;
	pc->uid = -1;
	pc->gid = -1;
	return pc;
}

/* After the last key: required keys present, limits the arbiter applies. */
static int pool_finish(struct pool_parse *pp)
{
	static const int required[] = { PK_PAGES, PK_LAYERS, PK_KV_HEADS, PK_HEAD_DIM };
	struct kvsd_pool_cfg *pc = pp->pc;
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(required); i++) {
		if (!pp->seen[required[i]]) {
			kvsd_err(pc->where, "pool '%s': missing key '%s'", pc->name,
				pool_keys[required[i]]);
			return -EINVAL;
		}
	}
	if (!kvsd_page_bytes(&pc->geom)) {
		kvsd_err(pc->where, "pool '%s': a page would exceed 1 GiB", pc->name);
		return -EINVAL;
	}
	if (pc->quota > pc->n_pages) {
		kvsd_err(pc->where, "pool '%s': quota %u is above pages %llu", pc->name,
			pc->quota, (unsigned long long)pc->n_pages);
		return -EINVAL;
	}
	if (pp->seen[PK_CUDA_DEVICE] && pc->mem != KVSD_MEM_CUDA) {
		kvsd_err(pc->where, "pool '%s': cuda_device needs memory=cuda", pc->name);
		return -EINVAL;
	}
	return kvsd_remote_cfg_finish(pc->remote, pc->where, pc->name,
				      pc->mem == KVSD_MEM_HOST ||
				      pc->mem == KVSD_MEM_HUGETLB);
}

/* A new named tier; NULL after reporting the error. */
static struct kvsd_tier_cfg *tier_new(struct kvsd_config *cfg, const char *where,
				      const char *name)
{
	struct kvsd_tier_cfg *tc;
	unsigned int i;

	if (!name_valid(name)) {
		kvsd_err(where, "bad remote tier name '%s' (1..%d of [A-Za-z0-9._-])",
			name, KVS_NAME_MAX - 1);
		return NULL;
	}
	for (i = 0; i < cfg->n_tiers; i++) {
		if (!strcmp(cfg->tiers[i].name, name)) {
			kvsd_err(where, "remote tier '%s' is already defined at %s",
				name, cfg->tiers[i].where);
			return NULL;
		}
	}
	tc = realloc(cfg->tiers, (cfg->n_tiers + 1) * sizeof(*tc));
	if (!tc) {
		kvsd_err(where, "out of memory");
		return NULL;
	}
	cfg->tiers = tc;
	tc = &cfg->tiers[cfg->n_tiers++];
	memset(tc, 0, sizeof(*tc));
	snprintf(tc->name, sizeof(tc->name), "%s", name);
	snprintf(tc->where, sizeof(tc->where), "%s", where);
	return tc;
}

static int tier_finish(struct kvsd_tier_cfg *tc)
{
	if (!tc->rc) {
		kvsd_err(tc->where, "remote tier '%s' has no keys", tc->name);
		return -EINVAL;
	}
	return kvsd_remote_cfg_finish(tc->rc, tc->where, NULL, false);
}

/* --remote NAME:key=val,key=val */
static int tier_flag(struct kvsd_config *cfg, const char *arg)
{
	char where[128], *copy, *colon, *item, *save;
	struct kvsd_tier_cfg *tc;
	int ret = 0;

	snprintf(where, sizeof(where), "--remote %.100s", arg);
	copy = strdup(arg);
	if (!copy)
		return -ENOMEM;
	colon = strchr(copy, ':');
	if (colon)
		*colon = '\0';
	tc = tier_new(cfg, where, copy);
	if (!tc) {
		ret = -EINVAL;
		goto out;
	}
	snprintf(tc->where, sizeof(tc->where), "--remote %s", copy);
	for (item = colon ? strtok_r(colon + 1, ",", &save) : NULL; item;
	     item = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(item, '=');

		if (!eq) {
			kvsd_err(tc->where, "'%s' is not KEY=VALUE", item);
			ret = -EINVAL;
			goto out;
		}
		*eq = '\0';
		ret = kvsd_remote_tier_set(&tc->rc, tc->where, item, eq + 1);
		if (ret)
			goto out;
	}
	ret = tier_finish(tc);
out:
	free(copy);
	return ret;
}

/* --pool NAME:key=val,key=val */
static int pool_flag(struct kvsd_config *cfg, const char *arg)
{
	struct pool_parse pp = { 0 };
	char where[128], *copy, *colon, *item, *save;
	int ret = 0;

	snprintf(where, sizeof(where), "--pool %.100s", arg);
	copy = strdup(arg);
	if (!copy)
		return -ENOMEM;
	colon = strchr(copy, ':');
	if (colon)
		*colon = '\0';
	pp.pc = pool_new(cfg, where, copy);
	if (!pp.pc) {
		ret = -EINVAL;
		goto out;
	}
	snprintf(pp.pc->where, sizeof(pp.pc->where), "--pool %s", copy);
	for (item = colon ? strtok_r(colon + 1, ",", &save) : NULL; item;
	     item = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(item, '=');

		if (!eq) {
			kvsd_err(pp.pc->where, "'%s' is not KEY=VALUE", item);
			ret = -EINVAL;
			goto out;
		}
		*eq = '\0';
		ret = pool_set(&pp, pp.pc->where, item, eq + 1);
		if (ret)
			goto out;
	}
	ret = pool_finish(&pp);
out:
	free(copy);
	return ret;
}

static int check_path(const char *where, const char *what, const char *path)
{
	size_t max = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;

	if (!*path) {
		kvsd_err(where, "empty %s path", what);
		return -EINVAL;
	}
	if (strlen(path) > max) {
		kvsd_err(where, "%s path '%s' is longer than %zu bytes", what, path, max);
		return -EINVAL;
	}
	return 0;
}

/*
 * "127.0.0.1:9100", "[::1]:9100", "localhost:9100": loopback only
 * (-EPERM for another address).  metrics.c listens with it; the
 * configuration checks specs with it.
 */
int kvsd_metrics_addr(const char *spec, struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	char host[64];
	const char *colon, *port_s;
	unsigned long port;
	char *end;

	if (spec[0] == '[') {
		const char *rb = strchr(spec, ']');

		if (!rb || rb[1] != ':' || (size_t)(rb - spec - 1) >= sizeof(host))
			return -EINVAL;
		memcpy(host, spec + 1, rb - spec - 1);
		host[rb - spec - 1] = '\0';
		port_s = rb + 2;
	} else {
		colon = strrchr(spec, ':');
		if (!colon || (size_t)(colon - spec) >= sizeof(host))
			return -EINVAL;
		memcpy(host, spec, colon - spec);
		host[colon - spec] = '\0';
		port_s = colon + 1;
	}
	errno = 0;
	port = strtoul(port_s, &end, 10);
	if (!*port_s || *end || errno || port > 65535)
		return -EINVAL;
	memset(ss, 0, sizeof(*ss));
	if (!strcmp(host, "localhost"))
		strcpy(host, "127.0.0.1");
	if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
		if ((ntohl(in4->sin_addr.s_addr) >> 24) != 127)
			return -EPERM;
		in4->sin_family = AF_INET;
		in4->sin_port = htons(port);
		*len = sizeof(*in4);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		if (!IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
			return -EPERM;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(port);
		*len = sizeof(*in6);
		return 0;
	}
	return -EINVAL;
}

static int check_metrics(const char *where, const char *spec)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int ret;

	if (!strncmp(spec, "unix:", 5))
		return check_path(where, "metrics socket", spec + 5);
	ret = kvsd_metrics_addr(spec, &ss, &len);
	if (ret == -EPERM)
		kvsd_err(where, "'%s': only loopback addresses are accepted", spec);
	else if (ret)
		kvsd_err(where, "'%s': want unix:/PATH, 127.0.0.1:PORT, [::1]:PORT "
			"or localhost:PORT", spec);
	return ret ? -EINVAL : 0;
}

/*
 * The numeric [daemon] keys, each also a flag (--max-pools for max_pools):
 * range and where the value goes.
 */
struct num_opt {
	const char *key;
	const char *flag;
	uint64_t min, max;
	size_t off;
	bool u64;
};

#define NUM_OPT(k, f, lo, hi, field) { k, f, lo, hi, \
	offsetof(struct kvsd_config, field), \
	sizeof(((struct kvsd_config *)0)->field) == 8 }

static const struct num_opt num_opts[] = {
	NUM_OPT("max_pools", "--max-pools", 1, 1024, max_pools),
	NUM_OPT("max_pool_pages", "--max-pool-pages", 1, KVS_MAX_POOL_PAGES,
		max_pool_pages),
	NUM_OPT("max_connections", "--max-connections", 1, 65536, max_connections),
	NUM_OPT("max_connections_per_uid", "--max-connections-per-uid", 1, 65536,
		max_connections_per_uid),
	NUM_OPT("max_conn_buffer", "--max-conn-buffer", 4096, KVS_MSG_MAX,
		max_conn_buffer),
	NUM_OPT("max_buffer_total", "--max-buffer-total", 1 << 20, 1ull << 40,
		max_buffer_total),
	NUM_OPT("stall_timeout_ms", "--stall-timeout-ms", 100, 3600000,
		stall_timeout_ms),
	NUM_OPT("ring_poll_us", "--ring-poll-us", 0, 1000000, ring_poll_us),
	NUM_OPT("max_user_memory", "--max-user-memory", 16 << 20,
		KVSD_MAX_USER_MEMORY, max_user_memory),
	NUM_OPT("max_memory_total", "--max-memory-total", 16 << 20, 1ull << 40,
		max_memory_total),
	/* The per-user limits: the module parameters' names; 0 = none. */
	NUM_OPT("max_user_pools", "--max-user-pools", 0, 1024, max_user_pools),
	NUM_OPT("max_user_pool_pages", "--max-user-pool-pages", 0, 1ull << 40,
		max_user_pool_pages),
	NUM_OPT("max_user_held", "--max-user-held", 0, 1ull << 40, max_user_held),
	NUM_OPT("max_user_held_bytes", "--max-user-held-bytes", 0, 1ull << 62,
		max_user_held_bytes),
};

#define FIRST_USER_OPT	10	/* num_opts[] from max_user_pools on */

static int num_opt_find(const char *key)
{
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(num_opts); i++)
		if (!strcmp(num_opts[i].key, key))
			return i;
	return -1;
}

/* Parse @val for num_opts[@i] into @cfg.  0 or -EINVAL (reported). */
static int num_opt_set(struct kvsd_config *cfg, unsigned int i, const char *where,
		       const char *key, const char *val)
{
	const struct num_opt *o = &num_opts[i];
	char *field = (char *)cfg + o->off;
	uint64_t v;

	if (num_key(where, key, val, o->min, o->max, &v))
		return -EINVAL;
	if (o->u64)
		memcpy(field, &v, sizeof(v));
	else
		*(uint32_t *)field = v;
	if (i >= FIRST_USER_OPT)
		cfg->user_keys_given |= 1u << (i - FIRST_USER_OPT);
	return 0;
}

/* Flags given on the command line, which the file must not override. */
struct flags_seen {
	bool socket, metrics, state_dir;
	uint32_t num;			/* bit i: num_opts[i] given as a flag */
};

static int set_str(char **dst, const char *val)
{
	char *s = strdup(val);

	if (!s)
		return -ENOMEM;
	free(*dst);
	*dst = s;
	return 0;
}

static int daemon_key(struct kvsd_config *cfg, const struct flags_seen *fs,
		      const char *where, const char *key, const char *val)
{
	int i;

	if (!*val) {
		kvsd_err(where, "'%s' has no value", key);
		return -EINVAL;
	}
	if (!strcmp(key, "socket")) {
		if (fs->socket)
			return 0;
		return check_path(where, "socket", val) ?: set_str(&cfg->socket, val);
	}
	if (!strcmp(key, "metrics")) {
		if (fs->metrics)
			return 0;
		return check_metrics(where, val) ?: set_str(&cfg->metrics, val);
	}
	if (!strcmp(key, "state_dir")) {
		if (fs->state_dir)
			return 0;
		return set_str(&cfg->state_dir, val);
	}
	i = num_opt_find(key);
	if (i >= 0) {
		struct kvsd_config scratch;

		/* Checked even where the flag wins, so the file stays valid. */
		if (fs->num & (1u << i)) {
			memset(&scratch, 0, sizeof(scratch));
			return num_opt_set(&scratch, i, where, key, val);
		}
		return num_opt_set(cfg, i, where, key, val);
	}
	kvsd_err(where, "unknown [daemon] key '%s'", key);
	return -EINVAL;
}

static char *trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

/* State of the file parser: which section we are in. */
struct file_parse {
	struct kvsd_config *cfg;
	const struct flags_seen *fs;
	bool in_daemon;
	bool daemon_seen;
	struct pool_parse pool;
	bool in_pool;
	struct kvsd_tier_cfg *tier;	/* in a [remote NAME] section */
	bool seen_socket, seen_metrics;
	uint32_t seen_num;		/* bit i: num_opts[i] */
};

static int file_section(struct file_parse *fp, const char *where, char *line)
{
	char *end = strchr(line, ']');
	char *body;
	int ret = 0;

	if (!end || trim(end + 1)[0]) {
		kvsd_err(where, "bad section header '%s'", line);
		return -EINVAL;
	}
	*end = '\0';
	body = trim(line + 1);
	if (fp->in_pool)
		ret = pool_finish(&fp->pool);
	else if (fp->tier)
		ret = tier_finish(fp->tier);
	fp->in_pool = false;
	fp->tier = NULL;
	fp->in_daemon = false;
	if (ret)
		return ret;
	if (!strcmp(body, "daemon")) {
		if (fp->daemon_seen) {
			kvsd_err(where, "second [daemon] section");
			return -EINVAL;
		}
		fp->daemon_seen = fp->in_daemon = true;
		return 0;
	}
	if (!strncmp(body, "pool", 4) && isspace((unsigned char)body[4])) {
		memset(&fp->pool, 0, sizeof(fp->pool));
		fp->pool.pc = pool_new(fp->cfg, where, trim(body + 5));
		if (!fp->pool.pc)
			return -EINVAL;
		fp->in_pool = true;
		return 0;
	}
	if (!strncmp(body, "remote", 6) && isspace((unsigned char)body[6])) {
		fp->tier = tier_new(fp->cfg, where, trim(body + 7));
		return fp->tier ? 0 : -EINVAL;
	}
	kvsd_err(where, "unknown section [%s] (want [daemon], [pool NAME] or "
		"[remote NAME])", body);
	return -EINVAL;
}

/* Has [daemon] key @key been seen before?  Marks it seen. */
static bool daemon_key_repeated(struct file_parse *fp, const char *key)
{
	bool *flag = !strcmp(key, "socket") ? &fp->seen_socket :
		     !strcmp(key, "metrics") ? &fp->seen_metrics : NULL;
	int i = num_opt_find(key);
	bool seen;

	if (flag) {
		seen = *flag;
		*flag = true;
		return seen;
	}
	if (i < 0)
		return false;
	seen = fp->seen_num & (1u << i);
	fp->seen_num |= 1u << i;
	return seen;
}

static int file_line(struct file_parse *fp, const char *where, char *line)
{
	char *eq, *key, *val;

	line = trim(line);
	if (!*line || *line == '#' || *line == ';')
		return 0;
	if (*line == '[')
		return file_section(fp, where, line);
	eq = strchr(line, '=');
	if (!eq) {
		kvsd_err(where, "expected KEY = VALUE, got '%s'", line);
		return -EINVAL;
	}
	*eq = '\0';
	key = trim(line);
	val = trim(eq + 1);
	if (fp->in_pool)
		return pool_set(&fp->pool, where, key, val);
	if (fp->tier)
		return kvsd_remote_tier_set(&fp->tier->rc, where, key, val);
	if (!fp->in_daemon) {
		kvsd_err(where, "'%s' outside a section", key);
		return -EINVAL;
	}
	if (daemon_key_repeated(fp, key)) {
		kvsd_err(where, "'%s' given twice", key);
		return -EINVAL;
	}
	return daemon_key(fp->cfg, fp->fs, where, key, val);
}

static int config_file(struct kvsd_config *cfg, const struct flags_seen *fs)
{
	struct file_parse fp = { .cfg = cfg, .fs = fs };
	char line[KVSD_LINE_MAX + 2], where[512];
	unsigned int lineno = 0;
	int ret = 0;
	FILE *f;

	f = fopen(cfg->config_file, "re");
	if (!f) {
		kvsd_err(cfg->config_file, "%s", strerror(errno));
		return -EINVAL;
	}
	while (fgets(line, sizeof(line), f)) {
		size_t len = strlen(line);

		lineno++;
		snprintf(where, sizeof(where), "%s:%u", cfg->config_file, lineno);
		if (len == sizeof(line) - 1 && line[len - 1] != '\n') {
			kvsd_err(where, "line longer than %d bytes", KVSD_LINE_MAX);
			ret = -EINVAL;
			break;
		}
		ret = file_line(&fp, where, line);
		if (ret)
			break;
	}
	if (!ret && ferror(f)) {
		kvsd_err(cfg->config_file, "read error");
		ret = -EINVAL;
	}
	if (!ret && fp.in_pool)
		ret = pool_finish(&fp.pool);
	else if (!ret && fp.tier)
		ret = tier_finish(fp.tier);
	fclose(f);
	return ret;
}

static int mode_opt(const char *val, enum kvsd_mode_opt *out)
{
	if (!strcmp(val, "auto"))
		*out = KVSD_MODE_AUTO;
	else if (!strcmp(val, "module"))
		*out = KVSD_MODE_OPT_MODULE;
	else if (!strcmp(val, "socket"))
		*out = KVSD_MODE_OPT_SOCKET;
	else
		return -EINVAL;
	return 0;
}

enum {
	OPT_CONFIG = 256, OPT_SOCKET, OPT_METRICS, OPT_POOL, OPT_MODE,
	OPT_DEVICE, OPT_FOREGROUND, OPT_REMOTE, OPT_STATE_DIR,
	OPT_NUM = 512,			/* + index in num_opts[] */
};

static const struct option fixed_opts[] = {
	{ "config", required_argument, NULL, OPT_CONFIG },
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "metrics", required_argument, NULL, OPT_METRICS },
	{ "pool", required_argument, NULL, OPT_POOL },
	{ "remote", required_argument, NULL, OPT_REMOTE },
	{ "mode", required_argument, NULL, OPT_MODE },
	{ "device", required_argument, NULL, OPT_DEVICE },
	{ "state-dir", required_argument, NULL, OPT_STATE_DIR },
	{ "foreground", no_argument, NULL, OPT_FOREGROUND },
	{ "verbose", no_argument, NULL, 'v' },
	{ "help", no_argument, NULL, 'h' },
};

/* fixed_opts, then one flag per num_opts[] entry, then the terminator. */
static struct option long_opts[ARRAY_SIZE(fixed_opts) + ARRAY_SIZE(num_opts) + 1];

static void long_opts_init(void)
{
	unsigned int i, n = ARRAY_SIZE(fixed_opts);

	memcpy(long_opts, fixed_opts, sizeof(fixed_opts));
	for (i = 0; i < ARRAY_SIZE(num_opts); i++) {
		long_opts[n + i].name = num_opts[i].flag + 2;
		long_opts[n + i].has_arg = required_argument;
		long_opts[n + i].val = OPT_NUM + i;
	}
	memset(&long_opts[n + i], 0, sizeof(long_opts[0]));
}

/*
 * --pool flags are kept until the file is read, so that the file's pools
 * come first and a name defined in both is reported against the flag.
 */
static int parse_args(int argc, char **argv, struct kvsd_config *cfg,
		      struct flags_seen *fs, char ***pool_args, int *n_pool_args)
{
	int c;

	long_opts_init();
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hv", long_opts, NULL)) != -1) {
		int ret = 0;

		switch (c) {
		case 'h':
			usage(stdout);
			return 1;
		case 'v':
			cfg->verbose = true;
			break;
		case OPT_CONFIG:
			ret = set_str(&cfg->config_file, optarg);
			break;
		case OPT_SOCKET:
			fs->socket = true;
			if (check_path("--socket", "socket", optarg))
				return KVSD_EXIT_USAGE;
			ret = set_str(&cfg->socket, optarg);
			break;
		case OPT_METRICS:
			fs->metrics = true;
			if (check_metrics("--metrics", optarg))
				return KVSD_EXIT_USAGE;
			ret = set_str(&cfg->metrics, optarg);
			break;
		case OPT_POOL:
			(*pool_args)[(*n_pool_args)++] = optarg;
			break;
		case OPT_REMOTE:
			ret = tier_flag(cfg, optarg);
			if (ret == -EINVAL)
				return KVSD_EXIT_USAGE;
			break;
		case OPT_MODE:
			if (mode_opt(optarg, &cfg->mode)) {
				kvsd_err("--mode", "'%s' is not auto, module or socket", optarg);
				return KVSD_EXIT_USAGE;
			}
			break;
		case OPT_DEVICE:
			ret = set_str(&cfg->device, optarg);
			break;
		case OPT_STATE_DIR:
			fs->state_dir = true;
			ret = set_str(&cfg->state_dir, optarg);
			break;
		case OPT_FOREGROUND:
			break;
		case OPT_NUM ... OPT_NUM + ARRAY_SIZE(num_opts) - 1:
			fs->num |= 1u << (c - OPT_NUM);
			if (num_opt_set(cfg, c - OPT_NUM, num_opts[c - OPT_NUM].flag,
					"value", optarg))
				return KVSD_EXIT_USAGE;
			break;
		case ':':
			kvsd_err(argv[optind - 1], "option needs a value");
			return KVSD_EXIT_USAGE;
		default:
			kvsd_err(argv[optind - 1], "unknown option (see kvshared --help)");
			return KVSD_EXIT_USAGE;
		}
		if (ret) {
			kvsd_err("kvshared", "out of memory");
			return KVSD_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		kvsd_err(argv[optind], "unexpected argument (see kvshared --help)");
		return KVSD_EXIT_USAGE;
	}
	return 0;
}

/* systemd's StateDirectory= (the first of its list), if the unit has one. */
static int state_dir_default(struct kvsd_config *cfg)
{
	const char *env = getenv("STATE_DIRECTORY");
	size_t len = env ? strcspn(env, ":") : 0;

	if (!len)
		return 0;
	cfg->state_dir = strndup(env, len);
	return cfg->state_dir ? 0 : -ENOMEM;
}

int kvsd_config_load(int argc, char **argv, struct kvsd_config **out)
{
	struct kvsd_config *cfg = calloc(1, sizeof(*cfg));
	struct flags_seen fs = { 0 };
	char **pool_args;
	int n_pool_args = 0, i, ret;

	*out = cfg;
	pool_args = calloc(argc + 1, sizeof(*pool_args));
	if (!cfg || !pool_args) {
		free(pool_args);
		fprintf(stderr, "kvshared: out of memory\n");
		return KVSD_EXIT_USAGE;
	}
	cfg->max_pools = KVSD_DEFAULT_MAX_POOLS;
	cfg->max_pool_pages = KVS_MAX_POOL_PAGES;
	cfg->max_connections = KVSD_DEFAULT_MAX_CONNECTIONS;
	cfg->max_connections_per_uid = KVSD_DEFAULT_MAX_CONNECTIONS_PER_UID;
	cfg->max_conn_buffer = KVSD_DEFAULT_MAX_CONN_BUFFER;
	cfg->max_buffer_total = KVSD_DEFAULT_MAX_BUFFER_TOTAL;
	cfg->stall_timeout_ms = KVSD_DEFAULT_STALL_TIMEOUT_MS;
	cfg->ring_poll_us = KVSD_DEFAULT_RING_POLL_US;
	cfg->max_user_memory = KVSD_DEFAULT_MAX_USER_MEMORY;
	cfg->max_memory_total = KVSD_DEFAULT_MAX_MEMORY_TOTAL;
	cfg->max_user_pools = KVSD_DEFAULT_MAX_USER_POOLS;
	cfg->max_user_pool_pages = KVSD_DEFAULT_MAX_USER_POOL_PAGES;
	cfg->max_user_held = KVSD_DEFAULT_MAX_USER_HELD;
	cfg->max_user_held_bytes = KVSD_DEFAULT_MAX_USER_HELD_BYTES;
	ret = parse_args(argc, argv, cfg, &fs, &pool_args, &n_pool_args);
	if (!ret && cfg->config_file && config_file(cfg, &fs))
		ret = KVSD_EXIT_USAGE;
	for (i = 0; !ret && i < n_pool_args; i++)
		if (pool_flag(cfg, pool_args[i]))
			ret = KVSD_EXIT_USAGE;
	free(pool_args);
	for (i = 0; !ret && i < (int)cfg->n_pools; i++) {
		const struct kvsd_pool_cfg *pc = &cfg->pools[i];

		if (pc->n_pages > cfg->max_pool_pages) {
			kvsd_err(pc->where, "pool '%s': %llu pages is above max_pool_pages %llu",
				pc->name, (unsigned long long)pc->n_pages,
				(unsigned long long)cfg->max_pool_pages);
			ret = KVSD_EXIT_USAGE;
		}
	}
	if (ret)
		return ret;
	if ((!cfg->socket && set_str(&cfg->socket, KVS_DAEMON_SOCKET)) ||
	    (!cfg->device && set_str(&cfg->device, KVSD_DEFAULT_DEVICE)) ||
	    (!cfg->state_dir && state_dir_default(cfg))) {
		fprintf(stderr, "kvshared: out of memory\n");
		return KVSD_EXIT_USAGE;
	}
	if (cfg->state_dir && cfg->state_dir[0] != '/') {
		kvsd_err("state_dir", "'%s' is not an absolute path", cfg->state_dir);
		return KVSD_EXIT_USAGE;
	}
	return 0;
}

void kvsd_config_free(struct kvsd_config *cfg)
{
	unsigned int i;

	if (!cfg)
		return;
	free(cfg->config_file);
	free(cfg->socket);
	free(cfg->metrics);
	free(cfg->device);
	free(cfg->state_dir);
	for (i = 0; i < cfg->n_pools; i++)
		kvsd_remote_cfg_free(cfg->pools[i].remote);
	free(cfg->pools);
	for (i = 0; i < cfg->n_tiers; i++)
		kvsd_remote_cfg_free(cfg->tiers[i].rc);
	free(cfg->tiers);
	free(cfg);
}
