// SPDX-License-Identifier: MIT
/*
 * The radix tree pretty-printer: one line per node, indented by level, so
 * that a tree can be read in a test failure, a debugger or kvctl:
 *
 *   kv_radix: 4 tokens/page, 3 nodes, 5 pages (2 evictable, 3 protected)
 *   root
 *     #1 [0,8) 2 pages lock 1 t 3: 1 2 3 4 5 6 7 8 -> 10 11
 *       #4 [8,12) 1 page lock 1 t 3 held: 9 9 9 9 -> 12
 *       #2 [8,16) 2 pages lock 0 t 2: 7 7 7 7 7 7 7 7 -> 3 4
 *
 * [a,b) is the node's token range from the root; "t" its recency stamp.
 */
#include <errno.h>
#include <stdio.h>

#include <kvshare/radix.h>

#define KV_PRINT_PAGES	16	/* page indices shown per node */

struct kv_print {
	FILE *f;
	uint32_t tpp;
	unsigned int max_tokens;
};

static void kv_print_list(FILE *f, const uint32_t *v, size_t n, size_t max)
{
	size_t i;

	for (i = 0; i < n && i < max; i++)
		fprintf(f, " %u", v[i]);
	if (n > max)
		fprintf(f, " ...(%zu more)", n - max);
}

static int kv_print_node(void *arg, const struct kv_radix_node_info *ni)
{
	struct kv_print *p = arg;
	size_t nt = (size_t)ni->n_pages * p->tpp;

	fprintf(p->f, "%*s#%llu [%zu,%zu) %u page%s lock %u t %llu%s:",
		2 * ni->level, "", (unsigned long long)ni->id, ni->depth,
		ni->depth + nt, ni->n_pages, ni->n_pages == 1 ? "" : "s",
		ni->lock_ref, (unsigned long long)ni->last_access,
		ni->flags & KV_RADIX_HELD ? " held" : "");
	kv_print_list(p->f, ni->tokens, nt, p->max_tokens);
	fputs(" ->", p->f);
	kv_print_list(p->f, ni->pages, ni->n_pages, KV_PRINT_PAGES);
	return fputc('\n', p->f) == EOF ? -EIO : 0;
}

int kv_radix_print(const struct kv_radix *t, FILE *f, unsigned int max_tokens)
{
	struct kv_print p = {
		.f = f,
		.tpp = kv_radix_tokens_per_page(t),
		.max_tokens = max_tokens,
	};
	int ret;

	fprintf(f, "kv_radix: %u tokens/page, %zu nodes, %zu pages (%zu evictable, "
		"%zu protected)\nroot\n", p.tpp, kv_radix_node_count(t),
		kv_radix_total_pages(t), kv_radix_evictable_pages(t),
		kv_radix_protected_pages(t));
	ret = kv_radix_walk(t, kv_print_node, &p);
	if (!ret && fflush(f))
		ret = -errno;
	return ret;
}
