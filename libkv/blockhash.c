// SPDX-License-Identifier: MIT
/*
 * Chained block keys; see <kvshare/blockhash.h> for the encoding and for
 * when each hash function is right.
 *
 * Speed matters here (a 50k-token prompt is 3125 pages of 16 tokens), so a
 * page's bytes are laid out once per chain in one buffer: the constant
 * head (tag) and tail (extras) are written once, and each page only copies
 * its parent key and tokens in before one hash call.  For SHA-256 the tag
 * is absorbed once into a prefix state that every page starts from by a
 * struct copy; OpenSSL's EVP layer costs ~40 ns a page more (method
 * dispatch, no way to clone a context without a provider round trip), a
 * quarter of the whole, so the low-level SHA256_* calls are used where the
 * library still has them and EVP where it does not.
 */
#define OPENSSL_SUPPRESS_DEPRECATED	/* SHA256_*: see above */
#include <endian.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <xxhash.h>

#include <kvshare/blockhash.h>

#if defined(OPENSSL_NO_DEPRECATED_3_0) || defined(KV_SHA256_EVP)
#define KV_USE_EVP	1
#else
#define KV_USE_EVP	0
#endif

static const char kv_tag_root[] = "kvshare.root.v1";
static const char kv_tag_block[] = "kvshare.block.v1";

/* Offsets in a page message: u64 taglen, tag, parent, u64 n, tokens, tail. */
#define KV_OFF_PARENT	(8 + sizeof(kv_tag_block))
#define KV_OFF_N	(KV_OFF_PARENT + sizeof(struct kvs_key))
#define KV_OFF_TOKENS	(KV_OFF_N + 8)
#define KV_MSG_STACK	1024

/* A message under construction: bytes appended at @len. */
struct kv_msg {
	unsigned char *buf;
	size_t len;
};

static void kv_put_u64(struct kv_msg *m, uint64_t v)
{
	v = htole64(v);
	memcpy(m->buf + m->len, &v, sizeof(v));
	m->len += sizeof(v);
}

/* A length-prefixed byte string. */
static void kv_put_bytes(struct kv_msg *m, const void *p, size_t len)
{
	kv_put_u64(m, len);
	if (len)
		memcpy(m->buf + m->len, p, len);
	m->len += len;
}

static void kv_put_key(unsigned char *dst, const struct kvs_key *key)
{
	uint64_t w[4];
	int i;

	for (i = 0; i < 4; i++)
		w[i] = htole64(key->w[i]);
	memcpy(dst, w, sizeof(w));
}

static void kv_put_tokens(unsigned char *dst, const uint32_t *tokens, uint32_t n)
{
#if __BYTE_ORDER == __LITTLE_ENDIAN
	memcpy(dst, tokens, (size_t)n * sizeof(*tokens));
#else
	uint32_t i, le;

	for (i = 0; i < n; i++) {
		le = htole32(tokens[i]);
		memcpy(dst + 4 * (size_t)i, &le, sizeof(le));
	}
#endif
}

static void kv_key_from_sha(struct kvs_key *key, const unsigned char md[32])
{
	int i;

	for (i = 0; i < 4; i++) {
		uint64_t w;

		memcpy(&w, md + 8 * i, sizeof(w));
		key->w[i] = le64toh(w);
	}
}

static void kv_key_from_xxh(struct kvs_key *key, const void *p, size_t len)
{
	XXH128_hash_t h = XXH3_128bits(p, len);

	key->w[0] = h.low64;
	key->w[1] = h.high64;
	key->w[2] = 0;
	key->w[3] = 0;
}

/*
 * SHA-256 of messages that share their first @prefix bytes: the prefix is
 * absorbed once (kv_sha_init), each message costs the rest only.
 */
struct kv_sha {
#if KV_USE_EVP
	EVP_MD *md;
	EVP_MD_CTX *ctx;
#else
	SHA256_CTX pre;
#endif
	size_t prefix;
};

#if KV_USE_EVP
static int kv_sha_init(struct kv_sha *s, const void *head, size_t prefix)
{
	(void)head;
	s->prefix = 0;
	s->md = EVP_MD_fetch(NULL, "SHA256", NULL);
	s->ctx = EVP_MD_CTX_new();
	(void)prefix;
	return s->md && s->ctx;
}

static int kv_sha(struct kv_sha *s, const unsigned char *msg, size_t len,
		  struct kvs_key *key)
{
	unsigned char md[32];
	unsigned int n = 0;

	if (!EVP_DigestInit_ex2(s->ctx, s->md, NULL) ||
	    !EVP_DigestUpdate(s->ctx, msg, len) ||
	    !EVP_DigestFinal_ex(s->ctx, md, &n) || n != sizeof(md))
		return 0;
	kv_key_from_sha(key, md);
	return 1;
}

static void kv_sha_fini(struct kv_sha *s)
{
	EVP_MD_CTX_free(s->ctx);
	EVP_MD_free(s->md);
}
#else
static int kv_sha_init(struct kv_sha *s, const void *head, size_t prefix)
{
	s->prefix = prefix;
	return SHA256_Init(&s->pre) && SHA256_Update(&s->pre, head, prefix);
}

static int kv_sha(struct kv_sha *s, const unsigned char *msg, size_t len,
		  struct kvs_key *key)
{
	SHA256_CTX c = s->pre;
	unsigned char md[32];

	if (!SHA256_Update(&c, msg + s->prefix, len - s->prefix) ||
	    !SHA256_Final(md, &c))
		return 0;
	kv_key_from_sha(key, md);
	return 1;
}

static void kv_sha_fini(struct kv_sha *s)
{
	(void)s;
}
#endif

static int kv_digest(unsigned int algo, const unsigned char *msg, size_t len,
		     struct kvs_key *key)
{
	struct kv_sha s;
	int ok;

	if (algo == KV_HASH_XXH3) {
		kv_key_from_xxh(key, msg, len);
		return 1;
	}
	ok = kv_sha_init(&s, msg, 0) && kv_sha(&s, msg, len, key);
	kv_sha_fini(&s);
	return ok;
}

int kv_hasher_init_algo(struct kv_block_hasher *h, unsigned int algo,
			const void *salt, size_t salt_len,
			uint32_t tokens_per_page)
{
	unsigned char small[KV_MSG_STACK];
	struct kv_msg m = { small, 0 };
	size_t need = 8 + sizeof(kv_tag_root) + 16 + salt_len;
	int ok;

	if (!tokens_per_page || (!salt && salt_len) ||
	    (algo != KV_HASH_SHA256 && algo != KV_HASH_XXH3))
		return -EINVAL;
	if (need > sizeof(small)) {
		m.buf = malloc(need);
		if (!m.buf)
			return -ENOMEM;
	}
	kv_put_bytes(&m, kv_tag_root, sizeof(kv_tag_root));
	kv_put_u64(&m, salt != NULL);
	kv_put_bytes(&m, salt, salt_len);
	ok = kv_digest(algo, m.buf, m.len, &h->root);
	if (m.buf != small)
		free(m.buf);
	h->tokens_per_page = tokens_per_page;
	h->algo = algo;
	return ok ? 0 : -EIO;
}

int kv_hasher_init(struct kv_block_hasher *h, const void *salt, size_t salt_len,
		   uint32_t tokens_per_page)
{
	return kv_hasher_init_algo(h, KV_HASH_SHA256, salt, salt_len,
				   tokens_per_page);
}

/* Bytes of one page's message, or 0 on overflow. */
static size_t kv_msg_size(uint32_t tpp, const struct kv_extra *extra,
			  size_t n_extra)
{
	size_t len = KV_OFF_TOKENS + 4 * (size_t)tpp + 8, i;

	for (i = 0; i < n_extra; i++) {
		if (extra[i].len > SIZE_MAX / 2 - len - 8)
			return 0;
		len += 8 + extra[i].len;
	}
	return len;
}

/* Everything of a page's message but its parent key and tokens. */
static void kv_msg_frame(struct kv_msg *m, uint32_t tpp,
			 const struct kv_extra *extra, size_t n_extra)
{
	size_t i;

	kv_put_bytes(m, kv_tag_block, sizeof(kv_tag_block));
	m->len += sizeof(struct kvs_key);
	kv_put_u64(m, tpp);
	m->len += 4 * (size_t)tpp;
	kv_put_u64(m, n_extra);
	for (i = 0; i < n_extra; i++)
		kv_put_bytes(m, extra[i].data, extra[i].len);
}

static long kv_chain_sha(const struct kv_block_hasher *h, struct kv_msg *m,
			 const struct kvs_key *parent, const uint32_t *tokens,
			 size_t n_pages, struct kvs_key *keys)
{
	uint32_t tpp = h->tokens_per_page;
	struct kv_sha s;
	size_t i;

	if (!kv_sha_init(&s, m->buf, KV_OFF_PARENT)) {
		kv_sha_fini(&s);
		return -EIO;
	}
	for (i = 0; i < n_pages; i++) {
		kv_put_key(m->buf + KV_OFF_PARENT, i ? &keys[i - 1] : parent);
		kv_put_tokens(m->buf + KV_OFF_TOKENS, tokens + i * tpp, tpp);
		if (!kv_sha(&s, m->buf, m->len, &keys[i])) {
			kv_sha_fini(&s);
			return -EIO;
		}
	}
	kv_sha_fini(&s);
	return n_pages;
}

static long kv_chain_xxh(const struct kv_block_hasher *h, struct kv_msg *m,
			 const struct kvs_key *parent, const uint32_t *tokens,
			 size_t n_pages, struct kvs_key *keys)
{
	uint32_t tpp = h->tokens_per_page;
	size_t i;

	for (i = 0; i < n_pages; i++) {
		kv_put_key(m->buf + KV_OFF_PARENT, i ? &keys[i - 1] : parent);
		kv_put_tokens(m->buf + KV_OFF_TOKENS, tokens + i * tpp, tpp);
		kv_key_from_xxh(&keys[i], m->buf, m->len);
	}
	return n_pages;
}

long kv_hash_chain(const struct kv_block_hasher *h, const struct kvs_key *parent,
		   const uint32_t *tokens, size_t n_tokens,
		   const struct kv_extra *extra, size_t n_extra,
		   struct kvs_key *keys)
{
	size_t n_pages = n_tokens / h->tokens_per_page;
	unsigned char small[KV_MSG_STACK];
	struct kv_msg m = { small, 0 };
	size_t size;
	long ret;

	if (!n_pages)
		return 0;
	if (n_pages > LONG_MAX)
		return -EOVERFLOW;
	size = kv_msg_size(h->tokens_per_page, extra, n_extra);
	if (!size)
		return -EOVERFLOW;
	if (size > sizeof(small)) {
		m.buf = malloc(size);
		if (!m.buf)
			return -ENOMEM;
	}
	kv_msg_frame(&m, h->tokens_per_page, extra, n_extra);
	if (!parent)
		parent = &h->root;
	if (h->algo == KV_HASH_XXH3)
		ret = kv_chain_xxh(h, &m, parent, tokens, n_pages, keys);
	else
		ret = kv_chain_sha(h, &m, parent, tokens, n_pages, keys);
	if (m.buf != small)
		free(m.buf);
	return ret;
}
