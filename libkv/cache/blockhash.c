// SPDX-License-Identifier: MIT
/*
 * Chained block keys; see <kvshare/blockhash.h> for the encodings and for
 * when each hash function is right, docs/keys.md for why v2 is sound.
 *
 * Speed matters here (a 50k-token prompt is 3125 pages of 16 tokens).
 *
 * v1 and XXH3: a page's bytes are laid out once per chain in one buffer:
 * the constant head (tag) and tail (extras) are written once, and each page
 * only copies its parent key and tokens in before one hash call.  For
 * SHA-256 the tag is absorbed once into a prefix state that every page
 * starts from by a struct copy; OpenSSL's EVP layer costs ~40 ns a page
 * more (method dispatch, no way to clone a context without a provider round
 * trip), a quarter of the whole, so the low-level SHA256_* calls are used
 * where the library still has them and EVP where it does not.
 *
 * v2: one call of SHA-256's compression function per 16-token page, with
 * the parent key as chaining value.  EVP offers no raw compression with a
 * chosen chaining value; SHA256_Transform() does (it runs OpenSSL's
 * sha256_block_data_order on the public SHA256_CTX's h[], with SHA-NI where
 * the CPU has it, ~42 ns a block here), deprecated in 3.0 but exported.
 * Where libcrypto lacks it, a portable C compression gives the same keys.
 */
#define OPENSSL_SUPPRESS_DEPRECATED	/* SHA256_*: see above */
#include <byteswap.h>
#include <endian.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <xxhash.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include <kvshare/blockhash.h>

#if defined(OPENSSL_NO_DEPRECATED_3_0) || defined(KV_SHA256_EVP)
#define KV_USE_EVP	1
#else
#define KV_USE_EVP	0
#endif

static const char kv_tag_root[] = "kvshare.root.v1";
static const char kv_tag_block[] = "kvshare.block.v1";
static const char kv_tag_root2[] = "kvshare.root.v2";
static const char kv_tag_extras2[] = "kvshare.extras.v2";

/* A v2 block: 56 bytes of the page's record, then the trailer. */
#define KV2_PAYLOAD	56
#define KV2_OFF_INDEX	56	/* u32: block index within the page */
#define KV2_OFF_FLAGS	60
#define KV2_OFF_LAST	61	/* 1 on the page's last block */
#define KV2_OFF_VERSION	62	/* 2 */
#define KV2_OFF_ODD	63	/* 0x01: never a SHA-256 final block's */
#define KV2_WIDE	0x01	/* tokens are u32: one is >= 2^24 */
#define KV2_EXTRAS	0x02	/* the extras digest follows the tokens */
#define KV2_DIGEST	32

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

/*
 * Room in @m, on the stack (@stack bytes at m->buf), for a message of
 * @size bytes (0: its size overflowed): 0, or -errno.  A larger one is
 * allocated; the caller frees m->buf when it is not its stack's.
 */
static int kv_msg_room(struct kv_msg *m, size_t stack, size_t size)
{
	if (!size)
		return -EOVERFLOW;
	if (size <= stack)
		return 0;
	m->buf = malloc(size);
	return m->buf ? 0 : -ENOMEM;
}

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

#if KV_USE_EVP
/* FIPS 180-4 6.2.2: the same function as OpenSSL's, in portable C. */
static const uint32_t kv_sha256_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
	0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
	0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
	0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
	0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t kv_ror(uint32_t x, unsigned int n)
{
	return x >> n | x << (32 - n);
}

void kv_sha256_compress(uint32_t state[8], const unsigned char block[64])
{
	uint32_t w[64], v[8], t1, t2;
	int i;

	for (i = 0; i < 16; i++)
		w[i] = (uint32_t)block[4 * i] << 24 | (uint32_t)block[4 * i + 1] << 16 |
		       (uint32_t)block[4 * i + 2] << 8 | block[4 * i + 3];
	for (; i < 64; i++)
		w[i] = w[i - 16] + w[i - 7] +
		       (kv_ror(w[i - 15], 7) ^ kv_ror(w[i - 15], 18) ^ w[i - 15] >> 3) +
		       (kv_ror(w[i - 2], 17) ^ kv_ror(w[i - 2], 19) ^ w[i - 2] >> 10);
	memcpy(v, state, sizeof(v));
	for (i = 0; i < 64; i++) {
		t1 = v[7] + (kv_ror(v[4], 6) ^ kv_ror(v[4], 11) ^ kv_ror(v[4], 25)) +
		     ((v[4] & v[5]) ^ (~v[4] & v[6])) + kv_sha256_k[i] + w[i];
		t2 = (kv_ror(v[0], 2) ^ kv_ror(v[0], 13) ^ kv_ror(v[0], 22)) +
		     ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
		memmove(v + 1, v, 7 * sizeof(*v));
		v[4] += t1;
		v[0] = t1 + t2;
	}
	for (i = 0; i < 8; i++)
		state[i] += v[i];
}

/* A v2 chain's running state: h[] is the chaining value. */
struct kv2_ctx {
	uint32_t h[8];
};

static inline void kv2_compress(struct kv2_ctx *c, const unsigned char *block)
{
	kv_sha256_compress(c->h, block);
}

static inline uint32_t *kv2_h(struct kv2_ctx *c)
{
	return c->h;
}
#else
void kv_sha256_compress(uint32_t state[8], const unsigned char block[64])
{
	SHA256_CTX c;

	/* SHA256_Transform() reads and writes h[] only. */
	memcpy(c.h, state, sizeof(c.h));
	SHA256_Transform(&c, block);
	memcpy(state, c.h, sizeof(c.h));
}

/* The chain keeps its state where SHA256_Transform() wants it: no copies. */
struct kv2_ctx {
	SHA256_CTX c;
};

static inline void kv2_compress(struct kv2_ctx *c, const unsigned char *block)
{
	SHA256_Transform(&c->c, block);
}

static inline uint32_t *kv2_h(struct kv2_ctx *c)
{
	return c->c.h;
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

/* The algorithm a caller's choice means; 0 if unknown. */
static unsigned int kv_algo_resolve(unsigned int algo)
{
	switch (algo) {
	case KV_HASH_SHA256:
		return KV_HASH_SHA256_V2;
	case KV_HASH_XXH3:
	case KV_HASH_SHA256_V1:
	case KV_HASH_SHA256_V2:
		return algo;
	}
	return 0;
}

int kv_hasher_init_algo(struct kv_block_hasher *h, unsigned int algo,
			const void *salt, size_t salt_len,
			uint32_t tokens_per_page)
{
	unsigned char small[KV_MSG_STACK];
	struct kv_msg m = { small, 0 };
	size_t need;
	int ok;

	algo = kv_algo_resolve(algo);
	if (!tokens_per_page || (!salt && salt_len) || !algo ||
	    salt_len > SIZE_MAX / 2)
		return -EINVAL;
	need = 8 + sizeof(kv_tag_root2) + 24 + salt_len;
	if (need > sizeof(small)) {
		m.buf = malloc(need);
		if (!m.buf)
			return -ENOMEM;
	}
	if (algo == KV_HASH_SHA256_V2) {
		kv_put_bytes(&m, kv_tag_root2, sizeof(kv_tag_root2));
		kv_put_u64(&m, tokens_per_page);
	} else {
		kv_put_bytes(&m, kv_tag_root, sizeof(kv_tag_root));
	}
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

/* v1 and XXH3: the whole page message hashed per page. */
static long kv_chain_v1(const struct kv_block_hasher *h, const struct kvs_key *parent,
			const uint32_t *tokens, size_t n_pages,
			const struct kv_extra *extra, size_t n_extra,
			struct kvs_key *keys)
{
	unsigned char small[KV_MSG_STACK];
	struct kv_msg m = { small, 0 };
	size_t size;
	long ret;

	size = kv_msg_size(h->tokens_per_page, extra, n_extra);
	ret = kv_msg_room(&m, sizeof(small), size);
	if (ret)
		return ret;
	kv_msg_frame(&m, h->tokens_per_page, extra, n_extra);
	if (h->algo == KV_HASH_XXH3)
		ret = kv_chain_xxh(h, &m, parent, tokens, n_pages, keys);
	else
		ret = kv_chain_sha(h, &m, parent, tokens, n_pages, keys);
	if (m.buf != small)
		free(m.buf);
	return ret;
}

/* Compression calls of SHA-256 over @len bytes. */
static size_t kv_sha_blocks(size_t len)
{
	return (len + 9 + 63) / 64;
}

/* Bytes of the extras digest's message, or 0 on overflow. */
static size_t kv2_extras_size(const struct kv_extra *extra, size_t n_extra)
{
	size_t len = 8 + sizeof(kv_tag_extras2) + 8, i;

	for (i = 0; i < n_extra; i++) {
		if (extra[i].len > SIZE_MAX / 2 - len - 8)
			return 0;
		len += 8 + extra[i].len;
	}
	return len;
}

/* The 32-byte digest of a page's extras (v2), once per chain. */
static int kv2_extras_digest(const struct kv_extra *extra, size_t n_extra,
			     unsigned char digest[KV2_DIGEST])
{
	unsigned char small[KV_MSG_STACK];
	struct kv_msg m = { small, 0 };
	size_t size = kv2_extras_size(extra, n_extra), i;
	struct kvs_key key;
	int ret;

	ret = kv_msg_room(&m, sizeof(small), size);
	if (ret)
		return ret;
	kv_put_bytes(&m, kv_tag_extras2, sizeof(kv_tag_extras2));
	kv_put_u64(&m, n_extra);
	for (i = 0; i < n_extra; i++)
		kv_put_bytes(&m, extra[i].data, extra[i].len);
	if (kv_digest(KV_HASH_SHA256_V1, m.buf, m.len, &key))
		kv_put_key(digest, &key);
	else
		ret = -EIO;
	if (m.buf != small)
		free(m.buf);
	return ret;
}

/* The chaining value a key is: its bytes are the state big-endian. */
static void kv2_state(struct kv2_ctx *c, const struct kvs_key *key)
{
	uint32_t *st = kv2_h(c);
	int i;

	for (i = 0; i < 4; i++) {
		st[2 * i] = bswap_32((uint32_t)key->w[i]);
		st[2 * i + 1] = bswap_32((uint32_t)(key->w[i] >> 32));
	}
}

static void kv2_key(struct kvs_key *key, struct kv2_ctx *c)
{
	const uint32_t *st = kv2_h(c);
	int i;

	for (i = 0; i < 4; i++)
		key->w[i] = (uint64_t)bswap_32(st[2 * i]) |
			    (uint64_t)bswap_32(st[2 * i + 1]) << 32;
}

/* Non-zero if a token of the page is >= 2^24 (it needs the wide record). */
static uint32_t kv2_wide(const uint32_t *tokens, uint32_t n)
{
	uint32_t i, all = 0;

	for (i = 0; i < n; i++)
		all |= tokens[i];
	return all >> 24;
}

/*
 * 16 tokens, all below 2^24, packed into 48 bytes with three 16-byte
 * stores: the compression loads its block 16 bytes at a time right after,
 * and a load that spans several smaller stores waits for them to reach the
 * cache (~20 ns a page on this machine) where one store forwards.
 */
static void kv2_pack16(unsigned char *dst, const uint32_t *t)
{
	uint64_t w[6];
	int i;

	for (i = 0; i < 2; i++, t += 8) {
		w[3 * i] = t[0] | (uint64_t)t[1] << 24 | (uint64_t)t[2] << 48;
		w[3 * i + 1] = t[2] >> 16 | (uint64_t)t[3] << 8 |
			       (uint64_t)t[4] << 32 | (uint64_t)t[5] << 56;
		w[3 * i + 2] = t[5] >> 8 | (uint64_t)t[6] << 16 | (uint64_t)t[7] << 40;
	}
#if defined(__SSE2__) && __BYTE_ORDER == __LITTLE_ENDIAN
	for (i = 0; i < 3; i++)
		_mm_storeu_si128((__m128i *)(dst + 16 * i),
				 _mm_set_epi64x((long long)w[2 * i + 1], (long long)w[2 * i]));
#else
	for (i = 0; i < 6; i++) {
		w[i] = htole64(w[i]);
		memcpy(dst + 8 * i, &w[i], sizeof(w[i]));
	}
#endif
}

static void kv2_pack(unsigned char *dst, const uint32_t *tokens, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++) {
		dst[3 * i] = (unsigned char)tokens[i];
		dst[3 * i + 1] = (unsigned char)(tokens[i] >> 8);
		dst[3 * i + 2] = (unsigned char)(tokens[i] >> 16);
	}
}

static void kv2_trailer(unsigned char *blk, uint32_t index, unsigned int flags,
			int last)
{
	uint32_t le = htole32(index);

	memcpy(blk + KV2_OFF_INDEX, &le, sizeof(le));
	blk[KV2_OFF_FLAGS] = (unsigned char)flags;
	blk[KV2_OFF_LAST] = !!last;
	blk[KV2_OFF_VERSION] = 2;
	blk[KV2_OFF_ODD] = 0x01;
}

/* Bytes of a page's record. */
static size_t kv2_record_size(uint32_t tpp, unsigned int flags)
{
	return (size_t)tpp * (flags & KV2_WIDE ? 4 : 3) +
	       (flags & KV2_EXTRAS ? KV2_DIGEST : 0);
}

/* Compresses a page's record (@len > 0 bytes at @rec) into @st. */
static void kv2_blocks(struct kv2_ctx *c, const unsigned char *rec, size_t len,
		       unsigned int flags)
{
	unsigned char blk[64];
	size_t off = 0, n;
	uint32_t index = 0;

	do {
		n = len - off < KV2_PAYLOAD ? len - off : KV2_PAYLOAD;
		memcpy(blk, rec + off, n);
		memset(blk + n, 0, KV2_PAYLOAD - n);
		off += n;
		kv2_trailer(blk, index++, flags, off == len);
		kv2_compress(c, blk);
	} while (off < len);
}

/* The page's record in @rec; returns its flags. */
static unsigned int kv2_record(unsigned char *rec, uint32_t tpp,
			       const uint32_t *tokens, const unsigned char *digest)
{
	unsigned int flags = digest ? KV2_EXTRAS : 0;

	if (kv2_wide(tokens, tpp)) {
		flags |= KV2_WIDE;
		kv_put_tokens(rec, tokens, tpp);
	} else {
		kv2_pack(rec, tokens, tpp);
	}
	if (digest)
		memcpy(rec + kv2_record_size(tpp, flags) - KV2_DIGEST, digest,
		       KV2_DIGEST);
	return flags;
}

/*
 * A page whose packed tokens fit one block (16 tokens: 48 bytes) and that
 * has no extras, the common case, is packed straight into the block.
 */
static long kv2_chain_one(struct kv2_ctx *c, uint32_t tpp, const uint32_t *tokens,
			  size_t n_pages, struct kvs_key *keys)
{
	unsigned char blk[64] = { 0 }, rec[4 * (KV2_PAYLOAD / 3)];
	const uint32_t *t;
	size_t i;

	kv2_trailer(blk, 0, 0, 1);
	for (i = 0; i < n_pages; i++) {
		t = tokens + i * tpp;
		if (kv2_wide(t, tpp)) {
			kv2_record(rec, tpp, t, NULL);
			kv2_blocks(c, rec, kv2_record_size(tpp, KV2_WIDE), KV2_WIDE);
		} else {
			if (tpp == 16)
				kv2_pack16(blk, t);
			else
				kv2_pack(blk, t, tpp);
			kv2_compress(c, blk);
		}
		kv2_key(&keys[i], c);
	}
	return n_pages;
}

static long kv_chain_v2(const struct kv_block_hasher *h, const struct kvs_key *parent,
			const uint32_t *tokens, size_t n_pages,
			const struct kv_extra *extra, size_t n_extra,
			struct kvs_key *keys)
{
	unsigned char small[KV_MSG_STACK], digest[KV2_DIGEST], *rec = small;
	uint32_t tpp = h->tokens_per_page;
	struct kv2_ctx c;
	size_t size, i;
	unsigned int flags;
	int ret;

	kv2_state(&c, parent);
	if (!n_extra && 3 * (size_t)tpp <= KV2_PAYLOAD)
		return kv2_chain_one(&c, tpp, tokens, n_pages, keys);
	if (n_extra) {
		ret = kv2_extras_digest(extra, n_extra, digest);
		if (ret)
			return ret;
	}
	size = kv2_record_size(tpp, KV2_WIDE | KV2_EXTRAS);
	if (size > sizeof(small)) {
		rec = malloc(size);
		if (!rec)
			return -ENOMEM;
	}
	for (i = 0; i < n_pages; i++) {
		flags = kv2_record(rec, tpp, tokens + i * tpp, n_extra ? digest : NULL);
		kv2_blocks(&c, rec, kv2_record_size(tpp, flags), flags);
		kv2_key(&keys[i], &c);
	}
	if (rec != small)
		free(rec);
	return n_pages;
}

long kv_hash_chain(const struct kv_block_hasher *h, const struct kvs_key *parent,
		   const uint32_t *tokens, size_t n_tokens,
		   const struct kv_extra *extra, size_t n_extra,
		   struct kvs_key *keys)
{
	size_t n_pages = n_tokens / h->tokens_per_page;

	if (!n_pages)
		return 0;
	if (n_pages > LONG_MAX)
		return -EOVERFLOW;
	if (!parent)
		parent = &h->root;
	if (h->algo == KV_HASH_SHA256_V2)
		return kv_chain_v2(h, parent, tokens, n_pages, extra, n_extra, keys);
	return kv_chain_v1(h, parent, tokens, n_pages, extra, n_extra, keys);
}

long kv_hash_compressions(const struct kv_block_hasher *h, const uint32_t *tokens,
			  size_t n_tokens, const struct kv_extra *extra,
			  size_t n_extra)
{
	uint32_t tpp = h->tokens_per_page;
	size_t n_pages = n_tokens / tpp, size, i, n = 0;
	unsigned int flags;

	if (n_pages > LONG_MAX / 4)
		return -EOVERFLOW;
	if (h->algo == KV_HASH_XXH3 || !n_pages)
		return 0;
	if (h->algo == KV_HASH_SHA256_V1) {
		/* The 25-byte prefix state holds no whole block. */
		size = kv_msg_size(tpp, extra, n_extra);
		if (!size)
			return -EOVERFLOW;
		return (long)(n_pages * kv_sha_blocks(size));
	}
	if (n_extra) {
		size = kv2_extras_size(extra, n_extra);
		if (!size)
			return -EOVERFLOW;
		n = kv_sha_blocks(size);
	}
	for (i = 0; i < n_pages; i++) {
		flags = (n_extra ? KV2_EXTRAS : 0) |
			(kv2_wide(tokens + i * tpp, tpp) ? KV2_WIDE : 0);
		n += (kv2_record_size(tpp, flags) + KV2_PAYLOAD - 1) / KV2_PAYLOAD;
	}
	return (long)n;
}
