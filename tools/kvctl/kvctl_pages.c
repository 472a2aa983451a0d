// SPDX-License-Identifier: GPL-2.0
/*
 * kvctl pages and kvctl stats: the read-only views of one pool, through
 * KVS_IOC_PAGES and KVS_IOC_POOL_STATS with the pool's id (so kvctl never
 * has to attach).
 */
#include "kvctl.h"
#include "kvctl_json.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Descriptors fetched per KVS_IOC_PAGES call: 64 KiB of buffer. */
#define PAGES_BATCH	1024
static void stats_usage(void)
{
	fputs("usage: kvctl stats NAME [--owner UID|USER] [--json] [--check]\n\n"
	      "Print every counter of a pool.  --check also has the arbiter verify\n"
	      "the pool invariants (free + owned + shared + cached = n_pages,\n"
	      "refcounts equal the references files hold, lists and index agree);\n"
	      "kvctl then exits 1 if they are broken.  The check walks every page\n"
	      "under the pool lock, so only an admin may ask for it.\n"
	      "NAME is looked up as 'kvctl --help' says (--owner first).\n", stdout);
}

static void stats_out(const struct kvs_pool_desc *d,
		      const struct kvs_pool_stats *st, bool json,
		      const char *check)
{
	struct kvctl_json j;

	if (!json) {
		kvctl_stats_text(st);
		if (check)
			printf("%-19s %s\n", "invariants", check);
		return;
	}
	kvctl_json_init(&j, stdout);
	kvctl_json_obj(&j, NULL);
	kvctl_json_str(&j, "pool", d->name);
	kvctl_json_u64(&j, "pool_id", d->pool_id);
	kvctl_stats_json(&j, st);
	if (check)
		kvctl_json_str(&j, "invariants", check);
	kvctl_json_end_obj(&j);
	kvctl_json_finish(&j);
}

int kvctl_stats_main(struct kvctl *k, int argc, char **argv)
{
	struct kvctl_opt o[] = { KVCTL_FLAG("--json"), KVCTL_FLAG("--check"),
				 KVCTL_ARG("--owner"), KVCTL_END };
	struct kvs_pool_stats st;
	struct kvs_pool_desc d;
	char *name;
	int n_pos, ret, err;

	ret = kvctl_parse("stats", argc, argv, o, &name, 1, &n_pos);
	if (ret < 0) {
		stats_usage();
		return KVCTL_OK;
	}
	if (ret)
		return ret;
	if (!n_pos)
		return kvctl_usage_err("stats", "missing pool NAME");
	ret = kvctl_pool_find(k, "stats", name, o[2].val, &d);
	if (ret)
		return ret;
	if (!o[1].set) {
		ret = kvctl_stats_get(k, "stats", &d, 0, &st);
		if (!ret)
			stats_out(&d, &st, o[0].set, NULL);
		return ret;
	}
	err = kvctl_stats_ioctl(k, d.pool_id, KVS_STATS_CHECK, &st);
	if (!err) {
		stats_out(&d, &st, o[0].set, "ok");
		return KVCTL_OK;
	}
	if (err == EPERM)
		return kvctl_ioc_err("stats", err, "--check: the invariant check "
				     "walks every page under the pool lock: admin only");
	if (err != EUCLEAN)
		return kvctl_view_err("stats", &d, err);
	/* A failed call copies nothing back: read the counters plainly. */
	if (!kvctl_stats_ioctl(k, d.pool_id, 0, &st))
		stats_out(&d, &st, o[0].set, "broken");
	return kvctl_view_err("stats", &d, err);
}

static void pages_usage(void)
{
	fputs("usage: kvctl pages NAME [--owner UID|USER] [--start I] [--count N]\n"
	      "                  [--state free|owned|shared|cached] [--json]\n\n"
	      "One line per page of pages I..I+N-1 (default: all): index, state,\n"
	      "refcount, parent page, number of children, key namespace and the\n"
	      "first 64-bit word of the key in hex (JSON carries the whole key).\n"
	      "Keys and namespaces are shown to the pool's owner and admins only\n"
	      "(\"-\" and 0 for everyone else).  --state shows only pages in that\n"
	      "state.  NAME is looked up as 'kvctl --help' says (--owner first).\n",
	      stdout);
}

static bool key_zero(const struct kvs_key *key)
{
	return !(key->w[0] | key->w[1] | key->w[2] | key->w[3]);
}

static void page_text(const struct kvs_page_desc *p)
{
	char parent[16] = "-";
	char key[20] = "-";

	if (p->parent != KVS_NO_PAGE)
		snprintf(parent, sizeof(parent), "%u", p->parent);
	if (!key_zero(&p->key))
		snprintf(key, sizeof(key), "%016" PRIx64, (uint64_t)p->key.w[0]);
	printf("%-8u %-6s %8u %8s %8u %20" PRIu64 " %s\n", p->index,
	       kvctl_state_name(p->state), p->refcount, parent, p->n_children,
	       (uint64_t)p->ns, key);
}

static void page_json(struct kvctl_json *j, const struct kvs_page_desc *p)
{
	char key[4 * 16 + 1];
	int i;

	kvctl_json_obj(j, NULL);
	kvctl_json_u64(j, "index", p->index);
	kvctl_json_str(j, "state", kvctl_state_name(p->state));
	kvctl_json_u64(j, "refcount", p->refcount);
	if (p->parent == KVS_NO_PAGE)
		kvctl_json_null(j, "parent");
	else
		kvctl_json_u64(j, "parent", p->parent);
	kvctl_json_u64(j, "n_children", p->n_children);
	kvctl_json_u64(j, "ns", p->ns);
	if (key_zero(&p->key)) {
		kvctl_json_null(j, "key");
	} else {
		for (i = 0; i < 4; i++)
			snprintf(key + 16 * i, 17, "%016" PRIx64,
				 (uint64_t)p->key.w[i]);
		kvctl_json_str(j, "key", key);
	}
	kvctl_json_end_obj(j);
}

struct pages_args {
	uint64_t start;
	uint64_t count;
	bool by_state;
	uint32_t state;
	bool json;
};

static int pages_args(struct kvctl_opt *o, const struct kvs_pool_desc *d,
		      struct pages_args *a)
{
	static const char cmd[] = "pages";

	a->start = 0;
	if (o[0].set && kvctl_num(cmd, "--start", o[0].val, 0, UINT32_MAX,
				  &a->start))
		return KVCTL_USAGE;
	if (a->start >= d->n_pages)
		return kvctl_usage_err(cmd, "--start %" PRIu64 " is beyond pool "
				       "'%s' (%" PRIu64 " pages)", a->start,
				       d->name, (uint64_t)d->n_pages);
	a->count = d->n_pages - a->start;
	if (o[1].set && kvctl_num(cmd, "--count", o[1].val, 1, UINT64_MAX,
				  &a->count))
		return KVCTL_USAGE;
	if (a->count > d->n_pages - a->start)
		a->count = d->n_pages - a->start;
	a->by_state = o[2].set;
	if (a->by_state && kvctl_state_parse(o[2].val, &a->state))
		return kvctl_usage_err(cmd, "--state: unknown state '%s' "
				       "(free, owned, shared or cached)", o[2].val);
	a->json = o[3].set;
	return 0;
}

/* Fetch and print the range in batches; the pool may shrink under us. */
static int pages_walk(struct kvctl *k, const struct kvs_pool_desc *d,
		      const struct pages_args *a, struct kvctl_json *j)
{
	struct kvs_page_desc *buf;
	struct kvs_pages req;
	uint64_t at = a->start, end = a->start + a->count;
	uint32_t i;
	int err = 0;

	buf = calloc(PAGES_BATCH, sizeof(*buf));
	if (!buf)
		return kvctl_err("pages: out of memory");
	while (at < end) {
		memset(&req, 0, sizeof(req));
		req.pool_id = d->pool_id;
		req.start = at;
		req.count = end - at < PAGES_BATCH ? end - at : PAGES_BATCH;
		req.pages = (uintptr_t)buf;
		err = kvctl_ioctl(k, KVS_IOC_PAGES, &req);
		if (err || !req.count)
			break;
		for (i = 0; i < req.count && i < PAGES_BATCH; i++) {
			if (a->by_state && buf[i].state != a->state)
				continue;
			if (j)
				page_json(j, &buf[i]);
			else
				page_text(&buf[i]);
		}
		at += req.count;
	}
	free(buf);
	return err ? kvctl_view_err("pages", d, err) : KVCTL_OK;
}

int kvctl_pages_main(struct kvctl *k, int argc, char **argv)
{
	struct kvctl_opt o[] = { KVCTL_ARG("--start"), KVCTL_ARG("--count"),
				 KVCTL_ARG("--state"), KVCTL_FLAG("--json"),
				 KVCTL_ARG("--owner"), KVCTL_END };
	struct kvs_pool_desc d;
	struct pages_args a;
	struct kvctl_json j;
	char *name;
	int n_pos, ret;

	ret = kvctl_parse("pages", argc, argv, o, &name, 1, &n_pos);
	if (ret < 0) {
		pages_usage();
		return KVCTL_OK;
	}
	if (ret)
		return ret;
	if (!n_pos)
		return kvctl_usage_err("pages", "missing pool NAME");
	ret = kvctl_pool_find(k, "pages", name, o[4].val, &d);
	if (ret)
		return ret;
	ret = pages_args(o, &d, &a);
	if (ret)
		return ret;
	if (!a.json) {
		printf("%-8s %-6s %8s %8s %8s %20s %s\n", "INDEX", "STATE",
		       "REFCOUNT", "PARENT", "CHILDREN", "NS", "KEY[0]");
		return pages_walk(k, &d, &a, NULL);
	}
	kvctl_json_init(&j, stdout);
	kvctl_json_obj(&j, NULL);
	kvctl_json_str(&j, "pool", d.name);
	kvctl_json_u64(&j, "pool_id", d.pool_id);
	kvctl_json_arr(&j, "pages");
	ret = pages_walk(k, &d, &a, &j);
	kvctl_json_end_arr(&j);
	kvctl_json_end_obj(&j);
	kvctl_json_finish(&j);
	return ret;
}
