// SPDX-License-Identifier: MIT
/*
 * Chained SHA-256 block keys; see <kvshare/blockhash.h> for the encoding.
 * Integers are hashed little-endian with fixed widths, so the keys are the
 * same on every host of one byte order and never depend on struct layout.
 */
#include <endian.h>
#include <errno.h>
#include <string.h>
#include <openssl/evp.h>

#include <kvshare/blockhash.h>

static const char kv_tag_root[] = "kvshare.root.v1";
static const char kv_tag_block[] = "kvshare.block.v1";

static int kv_update_u64(EVP_MD_CTX *ctx, uint64_t v)
{
	v = htole64(v);
	return EVP_DigestUpdate(ctx, &v, sizeof(v));
}

/* A length-prefixed byte string. */
static int kv_update_bytes(EVP_MD_CTX *ctx, const void *p, size_t len)
{
	return kv_update_u64(ctx, len) && (!len || EVP_DigestUpdate(ctx, p, len));
}

static int kv_final(EVP_MD_CTX *ctx, struct kvs_key *key)
{
	unsigned char md[32];
	unsigned int n = 0;
	int i;

	if (!EVP_DigestFinal_ex(ctx, md, &n) || n != sizeof(md))
		return 0;
	for (i = 0; i < 4; i++) {
		uint64_t w;

		memcpy(&w, md + 8 * i, sizeof(w));
		key->w[i] = le64toh(w);
	}
	return 1;
}

int kv_hasher_init(struct kv_block_hasher *h, const void *salt, size_t salt_len,
		   uint32_t tokens_per_page)
{
	EVP_MD_CTX *ctx;
	int ok;

	if (!tokens_per_page || (!salt && salt_len))
		return -EINVAL;
	ctx = EVP_MD_CTX_new();
	if (!ctx)
		return -ENOMEM;
	ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) &&
	     kv_update_bytes(ctx, kv_tag_root, sizeof(kv_tag_root)) &&
	     kv_update_u64(ctx, salt != NULL) &&
	     kv_update_bytes(ctx, salt, salt_len) &&
	     kv_final(ctx, &h->root);
	EVP_MD_CTX_free(ctx);
	h->tokens_per_page = tokens_per_page;
	return ok ? 0 : -EIO;
}

static int kv_hash_page(EVP_MD_CTX *ctx, const struct kvs_key *parent,
			const uint32_t *tokens, uint32_t n,
			const struct kv_extra *extra, size_t n_extra,
			struct kvs_key *key)
{
	uint32_t le[64];
	uint64_t pw[4];
	size_t i, done;

	for (i = 0; i < 4; i++)
		pw[i] = htole64(parent->w[i]);
	if (!EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) ||
	    !kv_update_bytes(ctx, kv_tag_block, sizeof(kv_tag_block)) ||
	    !EVP_DigestUpdate(ctx, pw, sizeof(pw)) ||
	    !kv_update_u64(ctx, n))
		return 0;
	for (done = 0; done < n; done += i) {
		for (i = 0; i < 64 && done + i < n; i++)
			le[i] = htole32(tokens[done + i]);
		if (!EVP_DigestUpdate(ctx, le, i * sizeof(le[0])))
			return 0;
	}
	if (!kv_update_u64(ctx, n_extra))
		return 0;
	for (i = 0; i < n_extra; i++)
		if (!kv_update_bytes(ctx, extra[i].data, extra[i].len))
			return 0;
	return kv_final(ctx, key);
}

long kv_hash_chain(const struct kv_block_hasher *h, const struct kvs_key *parent,
		   const uint32_t *tokens, size_t n_tokens,
		   const struct kv_extra *extra, size_t n_extra,
		   struct kvs_key *keys)
{
	size_t n_pages = n_tokens / h->tokens_per_page, i;
	EVP_MD_CTX *ctx;

	if (!n_pages)
		return 0;
	ctx = EVP_MD_CTX_new();
	if (!ctx)
		return -ENOMEM;
	for (i = 0; i < n_pages; i++) {
		if (!kv_hash_page(ctx, i ? &keys[i - 1] : parent ? parent : &h->root,
				  tokens + i * h->tokens_per_page, h->tokens_per_page,
				  extra, n_extra, &keys[i])) {
			EVP_MD_CTX_free(ctx);
			return -EIO;
		}
	}
	EVP_MD_CTX_free(ctx);
	return n_pages;
}
