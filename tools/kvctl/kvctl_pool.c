// SPDX-License-Identifier: GPL-2.0
/*
 * kvctl pool create|list|show|destroy, and the name -> id resolution the
 * other commands share.
 */
#include "kvctl.h"
#include "kvctl_json.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kvshare/kv_layout.h>

#define GIB		(1ull << 30)
#define DIM_MAX		65536
#define NAME_CHARS	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"

static void pool_usage(void)
{
	fputs("usage: kvctl pool create NAME --pages N --layers L --kv-heads H\n"
	      "                         --head-dim D --tokens-per-page T\n"
	      "                         --dtype f16|bf16|f32|fp8\n"
	      "                         [--mode 0660] [--quota N] [--ns-per-uid]\n"
	      "                         [--memory | --mem-fd FD]\n"
	      "       kvctl pool list [--json]\n"
	      "       kvctl pool show NAME [--owner UID|USER] [--json]\n"
	      "       kvctl pool destroy NAME [--owner UID|USER]\n"
	      "       kvctl pool remote NAME --tier T [--namespace NS] [--off]\n"
	      "                         [--owner UID|USER]\n\n"
	      "create   make a pool, owned by you; its page size follows from the\n"
	      "         geometry.  --mode: octal permission bits (default 0660);\n"
	      "         --quota: pages one open file may hold (default: all);\n"
	      "         --ns-per-uid: every attacher's key namespace is its uid.\n"
	      "         --memory: back it with host memory (a memfd of the pool's\n"
	      "         size, sealed so that no holder can shrink or grow it);\n"
	      "         --mem-fd FD: with memory another program prepared, open\n"
	      "         here as FD: a memfd sealed with F_SEAL_SHRINK, at least as\n"
	      "         long as the pool.\n"
	      "list     one line per pool, with its owner (UID).\n"
	      "show     a pool's descriptor and counters.\n"
	      "destroy  remove a pool's name; it goes when its last user closes.\n"
	      "remote   (kvshared) turn remote tier T of kvshared's configuration\n"
	      "         on for the pool, its pages stored under namespace NS\n"
	      "         (default: the pool's name); --off turns it off.  Only the\n"
	      "         pool's owner or an admin may.\n"
	      "NAME is the pool of that name owned by --owner, else by\n"
	      "$KVSHARE_POOL_OWNER, else by you, else by the default owner (see\n"
	      "'kvctl --help').  Counts take k, M, G suffixes (64k = 65536).\n", stdout);
}

/*
 * A pool command's options and its pool NAME, in *@name: 0, -1 after
 * --help (the usage printed), or KVCTL_USAGE after saying what is wrong.
 */
static int pool_args(const char *cmd, int argc, char **argv, struct kvctl_opt *o,
		     char **name)
{
	int n_pos, ret = kvctl_parse(cmd, argc, argv, o, name, 1, &n_pos);

	if (ret < 0)
		pool_usage();
	else if (!ret && !n_pos)
		return kvctl_usage_err(cmd, "missing pool NAME");
	return ret;
}

/*
 * All pool descriptors.  The list can grow between the counting call and
 * the fetching call, so fetch until everything fit.
 */
static int list_pools(struct kvctl *k, const char *cmd,
		      struct kvs_pool_desc **out, uint32_t *n_out)
{
	struct kvs_pool_list req;
	struct kvs_pool_desc *d = NULL;
	uint32_t cap = 0;
	int err;

	if (kvctl_open(k))
		return KVCTL_FAIL;
	for (;;) {
		memset(&req, 0, sizeof(req));
		req.count = cap;
		req.pools = (uintptr_t)d;
		err = kvctl_ioctl(k, KVS_IOC_POOL_LIST, &req);
		if (err) {
			free(d);
			return kvctl_ioc_err(cmd, err, NULL);
		}
		if (req.count <= cap && (d || !req.count))
			break;
		free(d);
		cap = req.count + 4;
		d = calloc(cap, sizeof(*d));
		if (!d)
			return kvctl_err("%s: out of memory", cmd);
	}
	*out = d;
	*n_out = req.count;
	return KVCTL_OK;
}

/* The descriptor of pool @name owned by @uid, or NULL. */
static struct kvs_pool_desc *find_desc(struct kvs_pool_desc *d, uint32_t n,
				       const char *name, uint32_t uid)
{
	uint32_t i;

	/* The arbiter NUL-terminates, but do not trust it to. */
	for (i = 0; i < n; i++)
		if (d[i].uid == uid && !strncmp(d[i].name, name, KVS_NAME_MAX))
			return &d[i];
	return NULL;
}

/* Which uids to look for NAME under: 1 or 2 of them, in order. */
static int find_owners(struct kvctl *k, const char *cmd, const char *owner,
		       uint32_t *want, int *n_want)
{
	const char *env = getenv("KVSHARE_POOL_OWNER");

	*n_want = 1;
	if (owner)
		return kvctl_uid_arg(cmd, "--owner", owner, &want[0]);
	if (env && *env) {
		if (kv_arbiter_default_owner(k->arb, &want[0]))
			return kvctl_err("%s: $KVSHARE_POOL_OWNER '%s' is neither a "
					 "uid nor a known user", cmd, env);
		return 0;
	}
	want[0] = geteuid();
	if (kv_arbiter_default_owner(k->arb, &want[1]))
		return kvctl_err("%s: no default owner", cmd);
	if (want[1] != want[0])
		*n_want = 2;
	return 0;
}

/* No such pool: say whose pools were searched, and whose have the name. */
static int find_err(const char *name, const uint32_t *want, int n_want,
		    const struct kvs_pool_desc *d, uint32_t n)
{
	char others[96] = "";
	size_t len = 0;
	uint32_t i;

	for (i = 0; i < n && len < sizeof(others) - 24; i++)
		if (!strncmp(d[i].name, name, KVS_NAME_MAX))
			len += snprintf(others + len, sizeof(others) - len, "%s%u",
					len ? ", " : "; uid ", d[i].uid);
	if (len)
		snprintf(others + len, sizeof(others) - len, " has one (--owner)");
	if (n_want == 2)
		return kvctl_err("no pool named '%s' owned by uid %u (you) or uid %u "
				 "(the default owner)%s", name, want[0], want[1],
				 others);
	return kvctl_err("no pool named '%s' owned by uid %u%s", name, want[0],
			 others);
}

/*
 * Names are scoped by owner.  NAME means the pool of that name owned by
 * @owner (--owner), else by $KVSHARE_POOL_OWNER, else by the caller, else
 * by libkv's default owner (the daemon's uid, or root): your own pool
 * first, then the one that clients attach by default.  kvctl only looks
 * and destroys (which the arbiter allows the owner and admins alone), so
 * preferring your own pool never hands you someone else's.
 */
int kvctl_pool_find(struct kvctl *k, const char *cmd, const char *name,
		    const char *owner, struct kvs_pool_desc *out)
{
	struct kvs_pool_desc *d, *found = NULL;
	uint32_t n, want[2];
	int ret, n_want, i;

	if (strlen(name) >= KVS_NAME_MAX)
		return kvctl_err("no pool named '%s'", name);
	ret = list_pools(k, cmd, &d, &n);
	if (ret)
		return ret;
	ret = find_owners(k, cmd, owner, want, &n_want);
	for (i = 0; !ret && !found && i < n_want; i++)
		found = find_desc(d, n, name, want[i]);
	if (found) {
		*out = *found;
		out->name[KVS_NAME_MAX - 1] = '\0';
	} else if (!ret) {
		ret = find_err(name, want, n_want, d, n);
	}
	free(d);
	return ret;
}

/* The ABI's name rule, checked here so the error can say which rule. */
static int check_name(const char *cmd, const char *name)
{
	size_t len = strlen(name);

	if (len == 0 || len >= KVS_NAME_MAX)
		return kvctl_usage_err(cmd, "pool name must be 1..%d bytes",
				       KVS_NAME_MAX - 1);
	if (strspn(name, NAME_CHARS) != len)
		return kvctl_usage_err(cmd, "invalid pool name '%s': use only A-Z a-z 0-9 . _ -",
				       name);
	return 0;
}

enum {
	C_PAGES, C_LAYERS, C_HEADS, C_DIM, C_TOKENS, C_DTYPE, C_MODE, C_QUOTA,
	C_NSUID, C_MEMORY, C_MEMFD,
};

/* Fill the request from the options; every error names the option. */
static int create_args(struct kvctl_opt *o, struct kvs_pool_create *req,
		       uint64_t *bytes)
{
	static const char cmd[] = "pool create";
	const int dims[] = { C_LAYERS, C_HEADS, C_DIM, C_TOKENS };
	__u32 *dim_out[] = { &req->geom.n_layers, &req->geom.n_kv_heads,
			     &req->geom.head_dim, &req->geom.tokens_per_page };
	uint64_t v, page_bytes;
	unsigned int i;

	for (i = 0; i <= C_DTYPE; i++)
		if (!o[i].set)
			return kvctl_usage_err(cmd, "missing %s", o[i].name);
	if (kvctl_num(cmd, o[C_PAGES].name, o[C_PAGES].val, 1,
		      KVS_MAX_POOL_PAGES, &v))
		return KVCTL_USAGE;
	req->n_pages = v;
	for (i = 0; i < 4; i++) {
		if (kvctl_num(cmd, o[dims[i]].name, o[dims[i]].val, 1, DIM_MAX, &v))
			return KVCTL_USAGE;
		*dim_out[i] = v;
	}
	if (kvctl_dtype_parse(o[C_DTYPE].val, &req->geom.dtype)) {
		char choices[64];

		return kvctl_usage_err(cmd, "--dtype: unknown dtype '%s' (%s)",
				       o[C_DTYPE].val,
				       kv_dtype_choices(choices, sizeof(choices), 0));
	}
	page_bytes = kv_page_bytes_max(&req->geom, GIB);
	if (!page_bytes)
		return kvctl_usage_err(cmd, "a page would be larger than 1 GiB "
				       "(2 * layers * kv-heads * head-dim * "
				       "tokens-per-page * dtype size)");
	req->mode = 0660;
	if (o[C_MODE].set) {
		if (kvctl_octal(cmd, o[C_MODE].name, o[C_MODE].val, 0777, &v))
			return KVCTL_USAGE;
		req->mode = v;
	}
	if (o[C_QUOTA].set) {
		if (kvctl_num(cmd, o[C_QUOTA].name, o[C_QUOTA].val, 0,
			      req->n_pages, &v))
			return KVCTL_USAGE;
		req->max_pages_per_file = v;
	}
	if (o[C_NSUID].set)
		req->flags |= KVS_POOL_NS_PER_UID;
	req->mem_fd = -1;
	if (o[C_MEMORY].set && o[C_MEMFD].set)
		return kvctl_usage_err(cmd, "--memory and --mem-fd exclude each other");
	if (o[C_MEMFD].set) {
		if (kvctl_num(cmd, o[C_MEMFD].name, o[C_MEMFD].val, 0, INT32_MAX, &v))
			return KVCTL_USAGE;
		req->mem_fd = v;
	}
	*bytes = page_bytes * req->n_pages;	/* <= 1 GiB * 2^32: no wrap */
	return 0;
}

/* Host memory for a pool: libkv's sealed memfd of exactly its size. */
static int make_memory(const char *name, uint64_t bytes)
{
	char err[256];
	int fd = kv_pool_memfd(name, bytes, 0, err, sizeof(err));

	if (fd < 0)
		return kvctl_err("pool create: %s", err);
	return fd;
}

/* Whether @fd is a memfd: its /proc link reads "/memfd:NAME (deleted)". */
static bool is_memfd(int fd, char *path, size_t size)
{
	char link[32];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, size - 1);
	if (n < 0)
		n = snprintf(path, size, "?");
	path[n] = '\0';
	return !strncmp(path, "/memfd:", 7);
}

/* CREATE refused the memory: say what is wrong with it (kvshare.h). */
static bool mem_err_msg(const struct kvs_pool_create *req, uint64_t bytes,
			int err, char *msg, size_t size)
{
	char path[128];
	struct stat st;
	int seals = fcntl(req->mem_fd, F_GET_SEALS);
	bool memfd = is_memfd(req->mem_fd, path, sizeof(path));

	if (err == EINVAL && (!memfd || seals < 0))
		snprintf(msg, size, "memory fd %d (%s) is not a memfd: pool memory "
			 "must come from memfd_create()", req->mem_fd, path);
	else if (err == EPERM && seals >= 0 && !(seals & F_SEAL_SHRINK))
		snprintf(msg, size, "memory fd %d is not sealed against shrinking: "
			 "add F_SEAL_SHRINK (fcntl F_ADD_SEALS), or any holder "
			 "could shrink it and make the others' mappings fault",
			 req->mem_fd);
	else if (err == EPERM && seals >= 0 && !(seals & F_SEAL_SEAL))
		snprintf(msg, size, "memory fd %d is open to more seals: add "
			 "F_SEAL_SEAL, or any holder could seal it against "
			 "writes and make every later mapping fail", req->mem_fd);
	else if (err == EPERM && seals >= 0 && (seals & KVS_MEM_SEALS_FORBIDDEN))
		snprintf(msg, size, "memory fd %d is sealed against writes "
			 "(F_SEAL_WRITE or F_SEAL_FUTURE_WRITE): a pool must be "
			 "writable", req->mem_fd);
	else if (err == ERANGE && !fstat(req->mem_fd, &st))
		snprintf(msg, size, "memory fd %d holds %" PRIu64 " bytes, less "
			 "than the pool's %" PRIu64 " (%" PRIu64 " pages)",
			 req->mem_fd, (uint64_t)st.st_size, bytes,
			 (uint64_t)req->n_pages);
	else if (err == EPERM || err == ERANGE)
		snprintf(msg, size, "the arbiter refused memory fd %d", req->mem_fd);
	else
		return false;
	return true;
}

static int create_err(struct kvctl *k, const struct kvs_pool_create *req,
		      uint64_t bytes, int err)
{
	struct kvs_info in;
	char cmd[KVS_NAME_MAX + 16];
	char msg[200];

	snprintf(cmd, sizeof(cmd), "pool create %s", req->name);
	if (req->mem_fd >= 0 && mem_err_msg(req, bytes, err, msg, sizeof(msg)))
		return kvctl_ioc_err(cmd, err, msg);
	switch (err) {
	case EEXIST:
		snprintf(msg, sizeof(msg), "you (uid %u) already own a pool named "
			 "'%s': name already exists", (unsigned int)geteuid(),
			 req->name);
		break;
	case ENOSPC:
		snprintf(msg, sizeof(msg), "the arbiter's limit on pools is reached");
		break;
	case EDQUOT:
		return kvctl_quota_err(k, cmd, req->n_pages);
	case EBADF:
		snprintf(msg, sizeof(msg), "--mem-fd %d is not an open file "
			 "descriptor", req->mem_fd);
		break;
	case EINVAL:
		memset(&in, 0, sizeof(in));
		if (!kvctl_ioctl(k, KVS_IOC_INFO, &in) &&
		    req->n_pages > in.max_pool_pages)
			snprintf(msg, sizeof(msg), "%" PRIu64 " pages is more than "
				 "this arbiter's max_pool_pages %" PRIu64,
				 (uint64_t)req->n_pages, (uint64_t)in.max_pool_pages);
		else
			snprintf(msg, sizeof(msg), "the arbiter rejected the name, "
				 "geometry, mode, page count or quota");
		break;
	default:
		return kvctl_ioc_err(cmd, err, NULL);
	}
	return kvctl_ioc_err(cmd, err, msg);
}

static int pool_create(struct kvctl *k, int argc, char **argv)
{
	struct kvctl_opt o[] = {
		[C_PAGES] = KVCTL_ARG("--pages"),
		[C_LAYERS] = KVCTL_ARG("--layers"),
		[C_HEADS] = KVCTL_ARG("--kv-heads"),
		[C_DIM] = KVCTL_ARG("--head-dim"),
		[C_TOKENS] = KVCTL_ARG("--tokens-per-page"),
		[C_DTYPE] = KVCTL_ARG("--dtype"),
		[C_MODE] = KVCTL_ARG("--mode"),
		[C_QUOTA] = KVCTL_ARG("--quota"),
		[C_NSUID] = KVCTL_FLAG("--ns-per-uid"),
		[C_MEMORY] = KVCTL_FLAG("--memory"),
		[C_MEMFD] = KVCTL_ARG("--mem-fd"),
		KVCTL_END
	};
	struct kvs_pool_create req;
	uint64_t bytes = 0;
	char *name;
	int ret, err, memfd = -1;

	ret = pool_args("pool create", argc, argv, o, &name);
	if (ret)
		return ret < 0 ? KVCTL_OK : ret;
	if (check_name("pool create", name))
		return KVCTL_USAGE;
	memset(&req, 0, sizeof(req));
	strcpy(req.name, name);		/* length checked above */
	if (create_args(o, &req, &bytes))
		return KVCTL_USAGE;
	if (kvctl_open(k))
		return KVCTL_FAIL;
	if (o[C_MEMORY].set) {
		memfd = make_memory(req.name, bytes);
		if (memfd < 0)
			return KVCTL_FAIL;
		req.mem_fd = memfd;
	}
	err = kvctl_ioctl(k, KVS_IOC_POOL_CREATE, &req);
	ret = err ? create_err(k, &req, bytes, err) : KVCTL_OK;
	if (memfd >= 0)
		close(memfd);		/* the pool keeps its own reference */
	if (!err)
		printf("pool '%s' created: id %u, %" PRIu64 " pages of %" PRIu64
		       " bytes%s\n", req.name, req.pool_id, (uint64_t)req.n_pages,
		       (uint64_t)req.geom.page_bytes,
		       req.mem_fd >= 0 ? ", with memory" : "");
	return ret;
}

static const char *flags_text(const struct kvs_pool_desc *d)
{
	/* Device memory (KVS_POOL_DEVICE_MEM) always has its handle. */
	if (d->flags & KVS_POOL_DEVICE_MEM)
		return d->flags & KVS_POOL_NS_PER_UID ? "ns-per-uid,device-mem" :
		       "device-mem";
	if (d->flags & KVS_POOL_NS_PER_UID)
		return d->has_mem_fd ? "ns-per-uid,mem-fd" : "ns-per-uid";
	return d->has_mem_fd ? "mem-fd" : "-";
}

static void desc_json(struct kvctl_json *j, const char *key,
		      const struct kvs_pool_desc *d)
{
	char mode[8];

	snprintf(mode, sizeof(mode), "0%03o", d->mode & 07777);
	kvctl_json_obj(j, key);
	kvctl_json_str(j, "name", d->name);
	kvctl_json_u64(j, "pool_id", d->pool_id);
	kvctl_json_u64(j, "n_pages", d->n_pages);
	kvctl_json_obj(j, "geometry");
	kvctl_json_u64(j, "n_layers", d->geom.n_layers);
	kvctl_json_u64(j, "n_kv_heads", d->geom.n_kv_heads);
	kvctl_json_u64(j, "head_dim", d->geom.head_dim);
	kvctl_json_u64(j, "tokens_per_page", d->geom.tokens_per_page);
	kvctl_json_str(j, "dtype", kvctl_dtype_name(d->geom.dtype));
	kvctl_json_u64(j, "page_bytes", d->geom.page_bytes);
	kvctl_json_end_obj(j);
	kvctl_json_str(j, "mode", mode);
	kvctl_json_u64(j, "uid", d->uid);
	kvctl_json_u64(j, "gid", d->gid);
	kvctl_json_u64(j, "n_files", d->n_files);
	kvctl_json_u64(j, "max_pages_per_file", d->max_pages_per_file);
	kvctl_json_u64(j, "flags", d->flags);
	kvctl_json_bool(j, "ns_per_uid", d->flags & KVS_POOL_NS_PER_UID);
	kvctl_json_bool(j, "has_mem_fd", d->has_mem_fd);
	kvctl_json_bool(j, "device_mem", d->flags & KVS_POOL_DEVICE_MEM);
	kvctl_json_end_obj(j);
}

static void list_text(const struct kvs_pool_desc *d, uint32_t n)
{
	int w = 4;
	uint32_t i;

	for (i = 0; i < n; i++)
		if ((int)strnlen(d[i].name, KVS_NAME_MAX) > w)
			w = strnlen(d[i].name, KVS_NAME_MAX);
	printf("%-4s %-*s %9s %11s %-22s %-5s %5s %6s %6s %5s %9s %s\n",
	       "ID", w, "NAME", "PAGES", "PAGE_BYTES", "LAYERSxHEADSxDIMxTOK",
	       "DTYPE", "MODE", "UID", "GID", "FILES", "QUOTA", "FLAGS");
	for (i = 0; i < n; i++) {
		char geom[48];

		snprintf(geom, sizeof(geom), "%ux%ux%ux%u", d[i].geom.n_layers,
			 d[i].geom.n_kv_heads, d[i].geom.head_dim,
			 d[i].geom.tokens_per_page);
		printf("%-4u %-*.*s %9" PRIu64 " %11" PRIu64 " %-22s %-5s %04o"
		       " %6u %6u %5u %9u %s\n", d[i].pool_id, w, KVS_NAME_MAX,
		       d[i].name, (uint64_t)d[i].n_pages,
		       (uint64_t)d[i].geom.page_bytes, geom,
		       kvctl_dtype_name(d[i].geom.dtype), d[i].mode & 07777,
		       d[i].uid, d[i].gid, d[i].n_files, d[i].max_pages_per_file,
		       flags_text(&d[i]));
	}
}

static int pool_list(struct kvctl *k, int argc, char **argv)
{
	struct kvctl_opt o[] = { KVCTL_FLAG("--json"), KVCTL_END };
	struct kvs_pool_desc *d;
	struct kvctl_json j;
	uint32_t n, i;
	int n_pos, ret;

	ret = kvctl_parse("pool list", argc, argv, o, NULL, 0, &n_pos);
	if (ret < 0) {
		pool_usage();
		return KVCTL_OK;
	}
	if (ret)
		return ret;
	ret = list_pools(k, "pool list", &d, &n);
	if (ret)
		return ret;
	for (i = 0; i < n; i++)
		d[i].name[KVS_NAME_MAX - 1] = '\0';
	if (o[0].set) {
		kvctl_json_init(&j, stdout);
		kvctl_json_obj(&j, NULL);
		kvctl_json_arr(&j, "pools");
		for (i = 0; i < n; i++)
			desc_json(&j, NULL, &d[i]);
		kvctl_json_end_arr(&j);
		kvctl_json_end_obj(&j);
		kvctl_json_finish(&j);
	} else {
		list_text(d, n);
	}
	free(d);
	return KVCTL_OK;
}

static void desc_text(const struct kvs_pool_desc *d)
{
	printf("name                %s\n", d->name);
	printf("pool_id             %u\n", d->pool_id);
	printf("n_pages             %" PRIu64 "\n", (uint64_t)d->n_pages);
	printf("page_bytes          %" PRIu64 "\n", (uint64_t)d->geom.page_bytes);
	printf("n_layers            %u\n", d->geom.n_layers);
	printf("n_kv_heads          %u\n", d->geom.n_kv_heads);
	printf("head_dim            %u\n", d->geom.head_dim);
	printf("tokens_per_page     %u\n", d->geom.tokens_per_page);
	printf("dtype               %s\n", kvctl_dtype_name(d->geom.dtype));
	printf("mode                %04o\n", d->mode & 07777);
	printf("uid                 %u\n", d->uid);
	printf("gid                 %u\n", d->gid);
	printf("n_files             %u\n", d->n_files);
	printf("max_pages_per_file  %u\n", d->max_pages_per_file);
	printf("flags               %s\n", flags_text(d));
}

static int pool_show(struct kvctl *k, int argc, char **argv)
{
	struct kvctl_opt o[] = { KVCTL_FLAG("--json"), KVCTL_ARG("--owner"),
				 KVCTL_END };
	struct kvs_pool_stats st;
	struct kvs_pool_desc d;
	struct kvctl_json j;
	char *name;
	int ret;

	ret = pool_args("pool show", argc, argv, o, &name);
	if (ret)
		return ret < 0 ? KVCTL_OK : ret;
	ret = kvctl_pool_find(k, "pool show", name, o[1].val, &d);
	if (!ret)
		ret = kvctl_stats_get(k, "pool show", &d, 0, &st);
	if (ret)
		return ret;
	if (o[0].set) {
		kvctl_json_init(&j, stdout);
		kvctl_json_obj(&j, NULL);
		desc_json(&j, "pool", &d);
		kvctl_stats_json(&j, &st);
		kvctl_json_end_obj(&j);
		kvctl_json_finish(&j);
	} else {
		desc_text(&d);
		kvctl_stats_text(&st);
	}
	return KVCTL_OK;
}

static int pool_destroy(struct kvctl *k, int argc, char **argv)
{
	struct kvctl_opt o[] = { KVCTL_ARG("--owner"), KVCTL_END };
	struct kvs_pool_destroy req;
	struct kvs_pool_desc d;
	char msg[160];
	char *name;
	int ret, err;

	ret = pool_args("pool destroy", argc, argv, o, &name);
	if (ret)
		return ret < 0 ? KVCTL_OK : ret;
	ret = kvctl_pool_find(k, "pool destroy", name, o[0].val, &d);
	if (ret)
		return ret;
	memset(&req, 0, sizeof(req));
	req.pool_id = d.pool_id;
	err = kvctl_ioctl(k, KVS_IOC_POOL_DESTROY, &req);
	if (!err) {
		printf("pool '%s' destroyed\n", d.name);
		return KVCTL_OK;
	}
	if (err == ENOENT)	/* destroyed by someone else since the listing */
		snprintf(msg, sizeof(msg), "no pool named '%s'", d.name);
	else if (err == EPERM)
		snprintf(msg, sizeof(msg), "only the owner (uid %u) or an admin "
			 "may destroy pool '%s'", d.uid, d.name);
	else
		return kvctl_ioc_err("pool destroy", err, NULL);
	return kvctl_ioc_err("pool destroy", err, msg);
}

static int remote_err(const struct kvs_pool_desc *d, const char *tier, int off,
		      int err)
{
	char msg[200];

	if (err == EPERM)
		snprintf(msg, sizeof(msg), "only the owner (uid %u) or an admin "
			 "may turn pool '%s''s remote tier %s", d->uid, d->name,
			 off ? "off" : "on");
	else if (err == ENOENT && off)
		snprintf(msg, sizeof(msg), "pool '%s' has no remote tier%s%s",
			 d->name, tier ? " " : "", tier ? tier : "");
	else if (err == ENOENT)
		snprintf(msg, sizeof(msg), "kvshared has no remote tier '%s' "
			 "([remote NAME] or --remote)", tier);
	else if (err == EBUSY)
		snprintf(msg, sizeof(msg), off ? "pool '%s''s tier is set by "
			 "kvshared's configuration" : "pool '%s' has a remote tier "
			 "already (--off first)", d->name);
	else if (err == EOPNOTSUPP)
		snprintf(msg, sizeof(msg), "remote tiers need kvshared and a pool "
			 "with host memory");
	else if (err == EDQUOT || err == ENOSPC)
		snprintf(msg, sizeof(msg), "too many remote tiers turned on (%s)",
			 err == EDQUOT ? "yours" : "kvshared's");
	else if (err == EINVAL)
		snprintf(msg, sizeof(msg), "bad tier name or namespace (1..%d of "
			 "A-Z a-z 0-9 . _ -)", KVS_REMOTE_NS_MAX - 1);
	else
		return kvctl_ioc_err("pool remote", err, NULL);
	return kvctl_ioc_err("pool remote", err, msg);
}

static int pool_remote(struct kvctl *k, int argc, char **argv)
{
	struct kvctl_opt o[] = { KVCTL_ARG("--tier"), KVCTL_ARG("--namespace"),
				 KVCTL_FLAG("--off"), KVCTL_ARG("--owner"),
				 KVCTL_END };
	const char *tier, *ns;
	struct kvs_pool_desc d;
	char *name;
	int ret, off;

	ret = pool_args("pool remote", argc, argv, o, &name);
	if (ret)
		return ret < 0 ? KVCTL_OK : ret;
	tier = o[0].val;
	ns = o[1].val;
	off = o[2].set;
	if (!off && !tier)
		return kvctl_usage_err("pool remote", "missing --tier T");
	if (off && ns)
		return kvctl_usage_err("pool remote", "--namespace goes with turning on");
	if ((tier && strlen(tier) >= KVS_NAME_MAX) ||
	    (ns && strlen(ns) >= KVS_REMOTE_NS_MAX))
		return kvctl_usage_err("pool remote", "--tier is 1..%d and --namespace "
				       "1..%d bytes", KVS_NAME_MAX - 1,
				       KVS_REMOTE_NS_MAX - 1);
	ret = kvctl_pool_find(k, "pool remote", name, o[3].val, &d);
	if (ret)
		return ret;
	ret = -kv_arbiter_remote_tier(k->arb, d.uid, d.name, tier, ns, off, NULL);
	if (ret)
		return remote_err(&d, tier, off, ret);
	if (off)
		printf("pool '%s': remote tier off\n", d.name);
	else
		printf("pool '%s': remote tier '%s' on, namespace '%s'\n", d.name,
		       tier, ns ? ns : d.name);
	return KVCTL_OK;
}

static const struct kvctl_cmd pool_cmds[] = {
	{ "create", pool_create, NULL },
	{ "list", pool_list, NULL },
	{ "show", pool_show, NULL },
	{ "destroy", pool_destroy, NULL },
	{ "remote", pool_remote, NULL },
	{ NULL, NULL, NULL }
};

int kvctl_pool_main(struct kvctl *k, int argc, char **argv)
{
	const struct kvctl_cmd *c;

	if (argc < 1) {
		pool_usage();
		return KVCTL_USAGE;
	}
	if (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
		pool_usage();
		return KVCTL_OK;
	}
	for (c = pool_cmds; c->name; c++)
		if (!strcmp(c->name, argv[0]))
			return c->run(k, argc - 1, argv + 1);
	kvctl_err("pool: unknown subcommand '%s' (create, list, show, destroy, "
		  "remote)",
		  argv[0]);
	return KVCTL_USAGE;
}
