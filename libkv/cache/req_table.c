// SPDX-License-Identifier: MIT
/*
 * Request-to-token tables; see <kvshare/req_table.h>.  One allocation of
 * max_reqs x max_context slots, like SGLang's req_to_token tensor, so a
 * row is a plain array the attention code can read.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <kvshare/req_table.h>

struct kv_req_table {
	uint32_t max_reqs, max_context, tpp;
	uint32_t *slots;		/* [max_reqs][max_context] */
	uint32_t *len;			/* per row */
	bool *used;
	int *free_rows;			/* a stack; row 0 on top at start */
	uint32_t n_free;
};

int kv_req_table_create(uint32_t max_reqs, uint32_t max_context,
			uint32_t tokens_per_page, struct kv_req_table **out)
{
	struct kv_req_table *t;
	size_t n;
	uint32_t i;

	if (!max_reqs || !max_context || !tokens_per_page || max_reqs > INT32_MAX)
		return -EINVAL;
	if (__builtin_mul_overflow((size_t)max_reqs, (size_t)max_context, &n) ||
	    n > SIZE_MAX / sizeof(uint32_t))
		return -EOVERFLOW;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->max_reqs = max_reqs;
	t->max_context = max_context;
	t->tpp = tokens_per_page;
	t->slots = calloc(n, sizeof(*t->slots));
	t->len = calloc(max_reqs, sizeof(*t->len));
	t->used = calloc(max_reqs, sizeof(*t->used));
	t->free_rows = calloc(max_reqs, sizeof(*t->free_rows));
	if (!t->slots || !t->len || !t->used || !t->free_rows) {
		kv_req_table_destroy(t);
		return -ENOMEM;
	}
	for (i = 0; i < max_reqs; i++)
		t->free_rows[i] = (int)(max_reqs - 1 - i);
	t->n_free = max_reqs;
	*out = t;
	return 0;
}

void kv_req_table_destroy(struct kv_req_table *t)
{
	if (!t)
		return;
	free(t->slots);
	free(t->len);
	free(t->used);
	free(t->free_rows);
	free(t);
}

uint32_t kv_req_table_max_context(const struct kv_req_table *t)
{
	return t->max_context;
}

uint32_t kv_req_table_tokens_per_page(const struct kv_req_table *t)
{
	return t->tpp;
}

uint32_t kv_req_table_available(const struct kv_req_table *t)
{
	return t->n_free;
}

static bool kv_req_valid(const struct kv_req_table *t, int req)
{
	return req >= 0 && (uint32_t)req < t->max_reqs && t->used[req];
}

int kv_req_alloc(struct kv_req_table *t)
{
	int req;

	if (!t->n_free)
		return -ENOSPC;
	req = t->free_rows[--t->n_free];
	t->used[req] = true;
	t->len[req] = 0;
	return req;
}

int kv_req_free(struct kv_req_table *t, int req)
{
	if (!kv_req_valid(t, req))
		return -EINVAL;
	t->used[req] = false;
	t->free_rows[t->n_free++] = req;
	return 0;
}

uint32_t *kv_req_row(struct kv_req_table *t, int req)
{
	if (!kv_req_valid(t, req))
		return NULL;
	return t->slots + (size_t)req * t->max_context;
}

const uint32_t *kv_req_row_const(const struct kv_req_table *t, int req)
{
	if (!kv_req_valid(t, req))
		return NULL;
	return t->slots + (size_t)req * t->max_context;
}

uint32_t kv_req_len(const struct kv_req_table *t, int req)
{
	return kv_req_valid(t, req) ? t->len[req] : 0;
}

int kv_req_set_len(struct kv_req_table *t, int req, uint32_t len)
{
	if (!kv_req_valid(t, req))
		return -EINVAL;
	if (len > t->max_context)
		return -ERANGE;
	t->len[req] = len;
	return 0;
}

static int kv_req_range(const struct kv_req_table *t, int req, uint32_t pos,
			uint32_t n)
{
	if (!kv_req_valid(t, req))
		return -EINVAL;
	if (pos > t->max_context || n > t->max_context - pos)
		return -ERANGE;
	return 0;
}

int kv_req_write(struct kv_req_table *t, int req, uint32_t pos,
		 const uint32_t *slots, uint32_t n)
{
	int ret = kv_req_range(t, req, pos, n);

	if (ret)
		return ret;
	memcpy(kv_req_row(t, req) + pos, slots, (size_t)n * sizeof(*slots));
	return 0;
}

/* Slot numbers are uint32: page * tokens_per_page must fit. */
static bool kv_page_fits(const struct kv_req_table *t, uint32_t page)
{
	return page <= (UINT32_MAX - (t->tpp - 1)) / t->tpp;
}

/* Slots of @n tokens from offset @off of @page on. */
static void kv_fill(uint32_t *row, uint32_t tpp, uint32_t page, uint32_t off,
		    uint32_t n)
{
	uint32_t base = page * tpp, i;

	for (i = 0; i < n; i++)
		row[i] = base + off + i;
}

int kv_req_write_pages(struct kv_req_table *t, int req, uint32_t pos,
		       const uint32_t *pages, uint32_t n_tokens)
{
	uint32_t *row, i, n;
	int ret = kv_req_range(t, req, pos, n_tokens);

	if (ret)
		return ret;
	if (pos % t->tpp)
		return -EINVAL;
	for (i = 0; i * t->tpp < n_tokens; i++)
		if (!kv_page_fits(t, pages[i]))
			return -ERANGE;
	row = kv_req_row(t, req) + pos;
	for (i = 0; i * t->tpp < n_tokens; i++) {
		n = n_tokens - i * t->tpp;
		kv_fill(row + i * t->tpp, t->tpp, pages[i], 0, n < t->tpp ? n : t->tpp);
	}
	return 0;
}

static uint32_t kv_div_up(uint32_t a, uint32_t b)
{
	return a / b + !!(a % b);
}

uint32_t kv_req_pages_needed(const struct kv_req_table *t, int req,
			     uint32_t new_len)
{
	uint32_t len = kv_req_len(t, req);

	if (new_len <= len)
		return 0;
	return kv_div_up(new_len, t->tpp) - kv_div_up(len, t->tpp);
}

int kv_req_extend(struct kv_req_table *t, int req, uint32_t new_len,
		  const uint32_t *new_pages)
{
	uint32_t len, off, n, *row;
	int ret;

	if (!kv_req_valid(t, req))
		return -EINVAL;
	len = t->len[req];
	if (new_len <= len)
		return 0;
	ret = kv_req_range(t, req, len, new_len - len);
	if (ret)
		return ret;
	row = kv_req_row(t, req);
	off = len % t->tpp;
	if (off) {
		/* The last page's free slots first. */
		n = t->tpp - off < new_len - len ? t->tpp - off : new_len - len;
		kv_fill(row + len, t->tpp, row[len - off] / t->tpp, off, n);
		len += n;
	}
	if (len < new_len) {
		ret = kv_req_write_pages(t, req, len, new_pages, new_len - len);
		if (ret)
			return ret;
	}
	t->len[req] = new_len;
	return 0;
}

uint32_t kv_req_page(const struct kv_req_table *t, int req, uint32_t i)
{
	return kv_req_row_const(t, req)[(size_t)i * t->tpp] / t->tpp;
}

long kv_req_table_pages(const struct kv_req_table *t, const int *reqs,
			uint32_t n, uint32_t *buf, size_t cap,
			struct kv_seq_pages *out)
{
	size_t used = 0;
	uint32_t i, j, np;

	for (i = 0; i < n; i++) {
		if (!kv_req_valid(t, reqs[i]))
			return -EINVAL;
		np = kv_div_up(t->len[reqs[i]], t->tpp);
		if (np > cap - used)
			return -ENOSPC;
		for (j = 0; j < np; j++)
			buf[used + j] = kv_req_page(t, reqs[i], j);
		out[i].pages = buf + used;
		out[i].n_pages = np;
		out[i].seq_len = t->len[reqs[i]];
		used += np;
	}
	return (long)used;
}

long kv_req_table_csr(const struct kv_req_table *t, const int *reqs, uint32_t n,
		      uint32_t *indptr, uint32_t *pages, size_t cap,
		      uint32_t *seq_lens)
{
	uint32_t i, j, np;
	size_t used = 0;

	indptr[0] = 0;
	for (i = 0; i < n; i++) {
		if (!kv_req_valid(t, reqs[i]))
			return -EINVAL;
		np = kv_div_up(t->len[reqs[i]], t->tpp);
		if (np > cap - used || used + np > UINT32_MAX)
			return -ENOSPC;
		for (j = 0; j < np; j++)
			pages[used + j] = kv_req_page(t, reqs[i], j);
		used += np;
		indptr[i + 1] = (uint32_t)used;
		seq_lens[i] = t->len[reqs[i]];
	}
	return (long)used;
}

int kv_req_check(const struct kv_req_table *t, int req)
{
	const uint32_t *row = kv_req_row_const(t, req);
	uint32_t p, off;

	if (!row)
		return -EINVAL;
	for (p = 0; p < t->len[req]; p++) {
		off = p % t->tpp;
		if (row[p] % t->tpp != off || row[p] - off != row[p - off])
			return -EUCLEAN;
	}
	return 0;
}
