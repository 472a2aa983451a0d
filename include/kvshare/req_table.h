/* SPDX-License-Identifier: MIT */
/*
 * Request-to-token tables, SGLang's req_to_token: a fixed array of
 * [max_reqs][max_context] KV slots, one row per running request, where the
 * slot of token position p is  page * tokens_per_page + offset  in the
 * pool.  Rows are handed out and taken back like file descriptors.
 *
 * The attention kernels take a request as "page indices + sequence
 * length": kv_req_table_pages() derives those from the rows per request
 * (struct kv_seq_pages), kv_req_table_csr() for a whole batch in the CSR
 * form of struct kv_attn_batch.  Pages are always filled from their first slot on, so page i
 * of a row is row[i * tokens_per_page] / tokens_per_page.
 *
 * Not thread-safe: one scheduler thread owns a table.
 */
#ifndef KVSHARE_REQ_TABLE_H
#define KVSHARE_REQ_TABLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kv_req_table;

/* What the attention kernels read per request. */
struct kv_seq_pages {
	const uint32_t *pages;	/* ceil(seq_len / tokens_per_page) page indices */
	uint32_t n_pages;
	uint32_t seq_len;	/* tokens with KV in those pages */
};

/* 0 or -EINVAL (a zero argument) / -ENOMEM / -EOVERFLOW. */
int kv_req_table_create(uint32_t max_reqs, uint32_t max_context,
			uint32_t tokens_per_page, struct kv_req_table **out);
void kv_req_table_destroy(struct kv_req_table *t);

uint32_t kv_req_table_max_context(const struct kv_req_table *t);
uint32_t kv_req_table_tokens_per_page(const struct kv_req_table *t);
/* Rows free now. */
uint32_t kv_req_table_available(const struct kv_req_table *t);

/* A free row (its length 0), or -ENOSPC. */
int kv_req_alloc(struct kv_req_table *t);
/* Give a row back; -EINVAL if it is not in use. */
int kv_req_free(struct kv_req_table *t, int req);

/* The row's max_context slots, or NULL if @req is not in use. */
uint32_t *kv_req_row(struct kv_req_table *t, int req);
const uint32_t *kv_req_row_const(const struct kv_req_table *t, int req);

/* The row's length: tokens whose KV is (or is being) written. */
uint32_t kv_req_len(const struct kv_req_table *t, int req);
int kv_req_set_len(struct kv_req_table *t, int req, uint32_t len);

/* Slots [pos, pos + n) of a row. -EINVAL / -ERANGE. */
int kv_req_write(struct kv_req_table *t, int req, uint32_t pos,
		 const uint32_t *slots, uint32_t n);

/*
 * The slots of @n_tokens tokens from position @pos (a page boundary) on,
 * in pages @pages[0..ceil(n_tokens / tokens_per_page)).
 */
int kv_req_write_pages(struct kv_req_table *t, int req, uint32_t pos,
		       const uint32_t *pages, uint32_t n_tokens);

/*
 * Grow a row from its length to @new_len: the last page's free slots
 * first, then the pages in @new_pages, of which it needs exactly
 * kv_req_pages_needed(t, req, new_len).  Sets the length.
 */
uint32_t kv_req_pages_needed(const struct kv_req_table *t, int req,
			     uint32_t new_len);
int kv_req_extend(struct kv_req_table *t, int req, uint32_t new_len,
		  const uint32_t *new_pages);

/* Page i of a row (i < ceil(len / tokens_per_page)). */
uint32_t kv_req_page(const struct kv_req_table *t, int req, uint32_t i);

/*
 * Page tables of @n requests for the attention kernels: request i's pages
 * are written to @buf (capacity @cap pages) and described by out[i].
 * Returns the pages written in all, -ENOSPC if @cap is too small, -EINVAL
 * for a row not in use.
 */
long kv_req_table_pages(const struct kv_req_table *t, const int *reqs,
			uint32_t n, uint32_t *buf, size_t cap,
			struct kv_seq_pages *out);

/*
 * The same batch in CSR form, as struct kv_attn_batch (<kvshare/attn.h>)
 * takes it: request i's pages are pages[indptr[i] .. indptr[i + 1]) and its
 * length seq_lens[i]; @indptr has n + 1 entries, @pages room for @cap.
 * Returns the pages written, or -ENOSPC / -EINVAL as above.
 */
long kv_req_table_csr(const struct kv_req_table *t, const int *reqs, uint32_t n,
		      uint32_t *indptr, uint32_t *pages, size_t cap,
		      uint32_t *seq_lens);

/* Whether every page of the row is filled slot by slot (tests): 0 or -EUCLEAN. */
int kv_req_check(const struct kv_req_table *t, int req);

#ifdef __cplusplus
}
#endif

#endif /* KVSHARE_REQ_TABLE_H */
