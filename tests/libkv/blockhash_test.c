// SPDX-License-Identifier: GPL-2.0
/*
 * Chained block keys, both SHA-256 encodings: known answers computed by
 * independent implementations of the documented encodings (v1: Python's
 * hashlib; v2: tests/libkv/blockhash_ref.py, SHA-256's compression in pure
 * Python), v2 against a reference written here from FIPS 180-4 on random
 * inputs (the compression alone, then whole chains), the chain property,
 * full pages only, the encodings that must not alias (salts, extras, page
 * sizes, v1 against v2, the escape of token ids >= 2^24), and the
 * compression counts the documentation states.
 */
#include <stdlib.h>
#include <string.h>

#include <kvshare/blockhash.h>
#include "kselftest_harness.h"

#define TPP 4

static const unsigned int sha_algos[] = { KV_HASH_SHA256_V1, KV_HASH_SHA256_V2 };
#define N_SHA_ALGOS (sizeof(sha_algos) / sizeof(sha_algos[0]))

static int key_eq(const struct kvs_key *a, const struct kvs_key *b)
{
	return !memcmp(a, b, sizeof(*a));
}

/* SHA-256 of the v1 encoding in <kvshare/blockhash.h>, from Python's hashlib. */
TEST(v1_known_answer)
{
	static const struct kvs_key want[2] = {
		{ { 0xbdb1c4bb06a98754ull, 0x56fd7c3eed04b547ull,
		    0xba53089082ec5f98ull, 0x3363d506dd4a9347ull } },
		{ { 0x4ba496e74f38cd1aull, 0x5e10497c40ad1146ull,
		    0x204025069ac303eeull, 0x0d9a6bc4dfaa7397ull } },
	};
	const uint32_t tokens[] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct kv_block_hasher h;
	struct kvs_key k[2];

	ASSERT_EQ(0, kv_hasher_init_algo(&h, KV_HASH_SHA256_V1, "tenant-a", 8, TPP));
	ASSERT_EQ(2, kv_hash_chain(&h, NULL, tokens, 8, NULL, 0, k));
	ASSERT_TRUE(key_eq(&want[0], &k[0]));
	ASSERT_TRUE(key_eq(&want[1], &k[1]));
}

/* Hashing a prompt in two calls, the second from the first's last key. */
TEST(chain_continues)
{
	uint32_t tokens[6 * TPP + 3];
	struct kvs_key whole[6], part[6];
	struct kv_block_hasher h;
	unsigned int i, a;

	for (i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++)
		tokens[i] = i * 31 + 7;
	tokens[3 * TPP] = 0x9000000;	/* one wide page (v2) in the middle */
	for (a = 0; a < N_SHA_ALGOS; a++) {
		ASSERT_EQ(0, kv_hasher_init_algo(&h, sha_algos[a], NULL, 0, TPP));
		/* Only full pages: the last 3 tokens have no key. */
		ASSERT_EQ(6, kv_hash_chain(&h, NULL, tokens, 6 * TPP + 3, NULL, 0, whole));
		ASSERT_EQ(2, kv_hash_chain(&h, NULL, tokens, 2 * TPP, NULL, 0, part));
		ASSERT_EQ(4, kv_hash_chain(&h, &part[1], tokens + 2 * TPP, 4 * TPP + 3,
					   NULL, 0, part + 2));
		for (i = 0; i < 6; i++)
			ASSERT_TRUE(key_eq(&whole[i], &part[i]));
		ASSERT_EQ(0, kv_hash_chain(&h, NULL, tokens, TPP - 1, NULL, 0, part));
	}
}

/* One token changed: that page's key and every later one change, none before. */
TEST(divergence_changes_the_rest)
{
	static const uint32_t tpps[] = { TPP, 16 };
	uint32_t a[4 * 16], b[4 * 16], tpp;
	struct kvs_key ka[4], kb[4];
	struct kv_block_hasher h;
	unsigned int i, al, t;

	for (al = 0; al < N_SHA_ALGOS; al++) {
		for (t = 0; t < 2; t++) {
			tpp = tpps[t];
			for (i = 0; i < 4 * tpp; i++)
				a[i] = b[i] = i;
			b[2 * tpp + 1] ^= 1;
			ASSERT_EQ(0, kv_hasher_init_algo(&h, sha_algos[al], "s", 1, tpp));
			ASSERT_EQ(4, kv_hash_chain(&h, NULL, a, 4 * tpp, NULL, 0, ka));
			ASSERT_EQ(4, kv_hash_chain(&h, NULL, b, 4 * tpp, NULL, 0, kb));
			ASSERT_TRUE(key_eq(&ka[0], &kb[0]));
			ASSERT_TRUE(key_eq(&ka[1], &kb[1]));
			ASSERT_FALSE(key_eq(&ka[2], &kb[2]));
			ASSERT_FALSE(key_eq(&ka[3], &kb[3]));
		}
	}
}

static void first_key(struct __test_metadata *_metadata, unsigned int algo,
		      const void *salt, size_t salt_len,
		      const struct kv_extra *extra, size_t n_extra, struct kvs_key *k)
{
	const uint32_t tokens[TPP] = { 9, 8, 7, 6 };
	struct kv_block_hasher h;

	ASSERT_EQ(0, kv_hasher_init_algo(&h, algo, salt, salt_len, TPP));
	ASSERT_EQ(1, kv_hash_chain(&h, NULL, tokens, TPP, extra, n_extra, k));
}

/* Salts and extras are length-prefixed; absent is not empty. */
TEST(encodings_do_not_alias)
{
	const struct kv_extra a_bc[2] = { { "a", 1 }, { "bc", 2 } };
	const struct kv_extra ab_c[2] = { { "ab", 2 }, { "c", 1 } };
	const struct kv_extra empty[1] = { { "", 0 } };
	const struct kv_extra lora[2] = { { "lora-7", 6 }, { "lora-8", 6 } };
	struct kvs_key k1, k2;
	unsigned int a, al;

	for (a = 0; a < N_SHA_ALGOS; a++) {
		al = sha_algos[a];
		first_key(_metadata, al, NULL, 0, NULL, 0, &k1);
		first_key(_metadata, al, "", 0, NULL, 0, &k2);
		ASSERT_FALSE(key_eq(&k1, &k2));		/* no salt vs empty salt */

		first_key(_metadata, al, "tenant-a", 8, NULL, 0, &k1);
		first_key(_metadata, al, "tenant-b", 8, NULL, 0, &k2);
		ASSERT_FALSE(key_eq(&k1, &k2));		/* salts separate */
		first_key(_metadata, al, "tenant-a", 8, NULL, 0, &k2);
		ASSERT_TRUE(key_eq(&k1, &k2));		/* ... and only salts */

		first_key(_metadata, al, NULL, 0, a_bc, 2, &k1);
		first_key(_metadata, al, NULL, 0, ab_c, 2, &k2);
		ASSERT_FALSE(key_eq(&k1, &k2));		/* ("a","bc") vs ("ab","c") */

		first_key(_metadata, al, NULL, 0, NULL, 0, &k1);
		first_key(_metadata, al, NULL, 0, empty, 1, &k2);
		ASSERT_FALSE(key_eq(&k1, &k2));		/* no extra vs one empty extra */

		first_key(_metadata, al, NULL, 0, &lora[0], 1, &k1);
		first_key(_metadata, al, NULL, 0, &lora[1], 1, &k2);
		ASSERT_FALSE(key_eq(&k1, &k2));		/* extras separate */
		first_key(_metadata, al, NULL, 0, &lora[0], 1, &k2);
		ASSERT_TRUE(key_eq(&k1, &k2));		/* ... deterministically */
	}
}

TEST(bad_arguments)
{
	struct kv_block_hasher h;

	ASSERT_EQ(-EINVAL, kv_hasher_init(&h, NULL, 0, 0));
	ASSERT_EQ(-EINVAL, kv_hasher_init(&h, NULL, 3, 16));
	ASSERT_EQ(-EINVAL, kv_hasher_init_algo(&h, 4, NULL, 0, 16));
	ASSERT_EQ(-EINVAL, kv_hasher_init_algo(&h, ~0u, NULL, 0, 16));
}

/* The default is v2: kv_hasher_init and KV_HASH_SHA256 resolve to it. */
TEST(default_is_v2)
{
	struct kv_block_hasher a, b, c;

	ASSERT_EQ(0, kv_hasher_init(&a, "x", 1, 16));
	ASSERT_EQ(KV_HASH_SHA256_V2, a.algo);
	ASSERT_EQ(0, kv_hasher_init_algo(&b, KV_HASH_SHA256, "x", 1, 16));
	ASSERT_EQ(KV_HASH_SHA256_V2, b.algo);
	ASSERT_EQ(0, kv_hasher_init_algo(&c, KV_HASH_SHA256_V2, "x", 1, 16));
	ASSERT_TRUE(key_eq(&a.root, &b.root));
	ASSERT_TRUE(key_eq(&a.root, &c.root));
	ASSERT_EQ(0, kv_hasher_init_algo(&c, KV_HASH_SHA256_V1, "x", 1, 16));
	ASSERT_EQ(KV_HASH_SHA256_V1, c.algo);
	ASSERT_FALSE(key_eq(&a.root, &c.root));
}

/* --- a reference of v2 from FIPS 180-4, sharing nothing with libkv --- */

static const uint32_t ref_k[64] = {
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

#define ROTR(x, n)	((uint32_t)((x) >> (n) | (x) << (32 - (n))))

/* FIPS 180-4 6.2.2 steps 1-4, letter for letter. */
static void ref_compress(uint32_t H[8], const uint8_t M[64])
{
	uint32_t W[64], a, b, c, d, e, f, g, h, T1, T2;
	int t;

	for (t = 0; t < 16; t++)
		W[t] = (uint32_t)M[4 * t] << 24 | (uint32_t)M[4 * t + 1] << 16 |
		       (uint32_t)M[4 * t + 2] << 8 | (uint32_t)M[4 * t + 3];
	for (t = 16; t < 64; t++)
		W[t] = (ROTR(W[t - 2], 17) ^ ROTR(W[t - 2], 19) ^ (W[t - 2] >> 10)) +
		       W[t - 7] +
		       (ROTR(W[t - 15], 7) ^ ROTR(W[t - 15], 18) ^ (W[t - 15] >> 3)) +
		       W[t - 16];
	a = H[0]; b = H[1]; c = H[2]; d = H[3];
	e = H[4]; f = H[5]; g = H[6]; h = H[7];
	for (t = 0; t < 64; t++) {
		T1 = h + (ROTR(e, 6) ^ ROTR(e, 11) ^ ROTR(e, 25)) +
		     ((e & f) ^ (~e & g)) + ref_k[t] + W[t];
		T2 = (ROTR(a, 2) ^ ROTR(a, 13) ^ ROTR(a, 22)) +
		     ((a & b) ^ (a & c) ^ (b & c));
		h = g; g = f; f = e; e = d + T1;
		d = c; c = b; b = a; a = T1 + T2;
	}
	H[0] += a; H[1] += b; H[2] += c; H[3] += d;
	H[4] += e; H[5] += f; H[6] += g; H[7] += h;
}

/* A byte buffer to build messages in. */
struct ref_buf {
	uint8_t *p;
	size_t len, cap;
};

static void ref_add(struct ref_buf *b, const void *p, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = 2 * (b->len + n) + 64;
		b->p = realloc(b->p, b->cap);
	}
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
}

static void ref_u64(struct ref_buf *b, uint64_t v)
{
	uint8_t le[8];
	int i;

	for (i = 0; i < 8; i++)
		le[i] = (uint8_t)(v >> 8 * i);
	ref_add(b, le, 8);
}

static void ref_u32(struct ref_buf *b, uint32_t v)
{
	uint8_t le[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
			  (uint8_t)(v >> 24) };

	ref_add(b, le, 4);
}

static void ref_lp(struct ref_buf *b, const void *p, size_t n)
{
	ref_u64(b, n);
	ref_add(b, p, n);
}

static const uint32_t ref_iv[8] = {
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

static void ref_out(const uint32_t H[8], uint8_t out[32])
{
	int i;

	for (i = 0; i < 32; i++)
		out[i] = (uint8_t)(H[i / 4] >> (24 - 8 * (i % 4)));
}

static void ref_in(uint32_t H[8], const uint8_t in[32])
{
	int i;

	for (i = 0; i < 8; i++)
		H[i] = (uint32_t)in[4 * i] << 24 | (uint32_t)in[4 * i + 1] << 16 |
		       (uint32_t)in[4 * i + 2] << 8 | in[4 * i + 3];
}

/* SHA-256 (FIPS 180-4 5.1.1 padding) over ref_compress. */
static void ref_sha256(const uint8_t *m, size_t len, uint8_t out[32])
{
	struct ref_buf b = { 0 };
	uint32_t H[8];
	size_t i;

	memcpy(H, ref_iv, sizeof(H));
	ref_add(&b, m, len);
	ref_add(&b, "\x80", 1);
	while (b.len % 64 != 56)
		ref_add(&b, "", 1);
	for (i = 0; i < 8; i++) {
		uint8_t be = (uint8_t)((uint64_t)len * 8 >> (56 - 8 * i));

		ref_add(&b, &be, 1);
	}
	for (i = 0; i < b.len; i += 64)
		ref_compress(H, b.p + i);
	ref_out(H, out);
	free(b.p);
}

static void ref_key(struct kvs_key *k, const uint8_t d[32])
{
	int i, j;

	for (i = 0; i < 4; i++) {
		k->w[i] = 0;
		for (j = 7; j >= 0; j--)
			k->w[i] = k->w[i] << 8 | d[8 * i + j];
	}
}

/* The v2 keys of @n_pages pages, per the header's description. */
static void ref_chain_v2(const void *salt, size_t salt_len, uint32_t tpp,
			 const uint32_t *tokens, size_t n_pages,
			 const struct kv_extra *extra, size_t n_extra,
			 struct kvs_key *keys)
{
	struct ref_buf m = { 0 }, rec = { 0 };
	uint8_t root[32], digest[32], blk[64], out[32];
	uint32_t H[8], t;
	uint8_t t3[3];
	size_t p, i, off, n, idx;
	int wide;

	ref_lp(&m, "kvshare.root.v2", 16);
	ref_u64(&m, tpp);
	ref_u64(&m, salt != NULL);
	ref_lp(&m, salt, salt_len);
	ref_sha256(m.p, m.len, root);
	ref_in(H, root);
	m.len = 0;
	ref_lp(&m, "kvshare.extras.v2", 18);
	ref_u64(&m, n_extra);
	for (i = 0; i < n_extra; i++)
		ref_lp(&m, extra[i].data, extra[i].len);
	ref_sha256(m.p, m.len, digest);
	for (p = 0; p < n_pages; p++) {
		wide = 0;
		for (i = 0; i < tpp; i++)
			wide |= tokens[p * tpp + i] > 0xffffff;
		rec.len = 0;
		for (i = 0; i < tpp; i++) {
			t = tokens[p * tpp + i];
			t3[0] = (uint8_t)t;
			t3[1] = (uint8_t)(t >> 8);
			t3[2] = (uint8_t)(t >> 16);
			if (wide)
				ref_u32(&rec, t);
			else
				ref_add(&rec, t3, 3);
		}
		if (n_extra)
			ref_add(&rec, digest, 32);
		for (off = 0, idx = 0; off < rec.len; off += n, idx++) {
			n = rec.len - off > 56 ? 56 : rec.len - off;
			memset(blk, 0, sizeof(blk));
			memcpy(blk, rec.p + off, n);
			blk[56] = (uint8_t)idx;
			blk[57] = (uint8_t)(idx >> 8);
			blk[58] = (uint8_t)(idx >> 16);
			blk[59] = (uint8_t)(idx >> 24);
			blk[60] = (uint8_t)(wide | (n_extra ? 2 : 0));
			blk[61] = off + n == rec.len;
			blk[62] = 2;
			blk[63] = 1;
			ref_compress(H, blk);
		}
		ref_out(H, out);
		ref_key(&keys[p], out);
	}
	free(m.p);
	free(rec.p);
}

/* xorshift64*: reproducible inputs. */
static uint64_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

/* The reference is SHA-256 (FIPS 180-4 appendix B.1's "abc"). */
TEST(v2_reference_is_sha256)
{
	static const uint8_t abc[32] = {
		0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40, 0xde,
		0x5d, 0xae, 0x22, 0x23, 0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17, 0x7a, 0x9c,
		0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad,
	};
	uint8_t out[32];

	ref_sha256((const uint8_t *)"abc", 3, out);
	ASSERT_EQ(0, memcmp(abc, out, 32));
}

/* libkv's compression (OpenSSL's SHA-NI/AVX2 code) is FIPS 180-4's. */
TEST(v2_compress_matches_reference)
{
	uint32_t a[8], b[8];
	uint8_t blk[64];
	uint64_t s = 0x1234567;
	int n, i;

	for (n = 0; n < 4096; n++) {
		for (i = 0; i < 8; i++)
			a[i] = b[i] = (uint32_t)rnd(&s);
		for (i = 0; i < 64; i++)
			blk[i] = (uint8_t)rnd(&s);
		kv_sha256_compress(a, blk);
		ref_compress(b, blk);
		ASSERT_EQ(0, memcmp(a, b, sizeof(a)));
	}
	/* From the IV over a padded "abc": SHA-256("abc") itself. */
	memcpy(a, ref_iv, sizeof(a));
	memset(blk, 0, sizeof(blk));
	memcpy(blk, "abc\x80", 4);
	blk[63] = 24;
	kv_sha256_compress(a, blk);
	ASSERT_EQ(0xba7816bfu, a[0]);
	ASSERT_EQ(0xf20015adu, a[7]);
}

/* Known answers from tests/libkv/blockhash_ref.py (pure Python). */
TEST(v2_known_answers)
{
	static const struct kvs_key tpp16[2] = {
		{ { 0xcc645caeb2900397ull, 0xc58733a6d5ebf52bull,
		    0x7cb487ac1109f495ull, 0xc9fa14c6999b2f47ull } },
		{ { 0x68907ad962d59c1aull, 0xd67c6a6b6a70d675ull,
		    0xbeadd49d46f4ada7ull, 0x0bb93b6533c387d8ull } },
	};
	static const struct kvs_key root16 = {
		{ 0xa859f91245a59ba0ull, 0x12ea3eaa8e7a0c5aull,
		  0x27cdaa15fd015552ull, 0x1f7c55d5db2b9366ull } };
	static const struct kvs_key wide[2] = {
		{ { 0x112191a0d7ebf841ull, 0xef2dfbb735a9e5c2ull,
		    0xb015f17719a8e1dbull, 0x55ac22d9ecda72c1ull } },
		{ { 0x967161e960043d9eull, 0x14e2ededdd7502caull,
		    0x2d11b47545913a03ull, 0xd545d1b4e27239e1ull } },
	};
	static const struct kvs_key extra = {
		{ 0xf76cab9507cd4681ull, 0xb98072b7d138b496ull,
		  0x7419647248c55cfaull, 0xd5fc322fbdcccc7full } };
	static const struct kvs_key tpp4 = {
		{ 0x4a3a778311f5dd02ull, 0xc39a48ebf6fc75adull,
		  0x42ff9ff7dc544fcbull, 0xb5b7cfe3592fe5b8ull } };
	static const struct kvs_key tpp20 = {
		{ 0xb6f43ce928cfcf8eull, 0x8245f2f283ebac01ull,
		  0xc605a3c6875bab16ull, 0xef715fa674a9f433ull } };
	static const struct kvs_key tpp300 = {
		{ 0x07e9a79ac656c3aeull, 0xc3648b9f645059aeull,
		  0x9a3555c7c8d2c464ull, 0x54537642415ddaf1ull } };
	static char big[2000];
	const struct kv_extra lora = { "lora-7", 6 };
	const struct kv_extra two[2] = { { big, sizeof(big) }, { "", 0 } };
	static uint32_t tok[300];
	struct kv_block_hasher h;
	struct kvs_key k[2];
	int i;

	for (i = 0; i < 32; i++)
		tok[i] = i + 1;
	ASSERT_EQ(0, kv_hasher_init_algo(&h, KV_HASH_SHA256_V2, "tenant-a", 8, 16));
	ASSERT_TRUE(key_eq(&root16, &h.root));
	ASSERT_EQ(2, kv_hash_chain(&h, NULL, tok, 32, NULL, 0, k));
	ASSERT_TRUE(key_eq(&tpp16[0], &k[0]));
	ASSERT_TRUE(key_eq(&tpp16[1], &k[1]));

	/* Page 0 escapes (2^24 and 2^32 - 1), page 1 is packed again. */
	for (i = 0; i < 32; i++)
		tok[i] = i < 15 ? 7 : 3;
	tok[15] = 1u << 24;
	tok[16] = 0xffffffffu;
	ASSERT_EQ(2, kv_hash_chain(&h, NULL, tok, 32, NULL, 0, k));
	ASSERT_TRUE(key_eq(&wide[0], &k[0]));
	ASSERT_TRUE(key_eq(&wide[1], &k[1]));

	for (i = 0; i < 16; i++)
		tok[i] = 100 + i;
	ASSERT_EQ(0, kv_hasher_init_algo(&h, KV_HASH_SHA256_V2, NULL, 0, 16));
	ASSERT_EQ(1, kv_hash_chain(&h, NULL, tok, 16, &lora, 1, k));
	ASSERT_TRUE(key_eq(&extra, &k[0]));

	tok[0] = 9, tok[1] = 8, tok[2] = 7, tok[3] = 6;
	ASSERT_EQ(0, kv_hasher_init_algo(&h, KV_HASH_SHA256_V2, "", 0, 4));
	ASSERT_EQ(1, kv_hash_chain(&h, NULL, tok, 4, NULL, 0, k));
	ASSERT_TRUE(key_eq(&tpp4, &k[0]));

	for (i = 0; i < 300; i++)
		tok[i] = i * 7 + 1;
	ASSERT_EQ(0, kv_hasher_init_algo(&h, KV_HASH_SHA256_V2, "s", 1, 20));
	ASSERT_EQ(1, kv_hash_chain(&h, NULL, tok, 20, NULL, 0, k));
	ASSERT_TRUE(key_eq(&tpp20, &k[0]));

	memset(big, 'x', sizeof(big));
	ASSERT_EQ(0, kv_hasher_init_algo(&h, KV_HASH_SHA256_V2, "", 0, 300));
	ASSERT_EQ(1, kv_hash_chain(&h, NULL, tok, 300, two, 2, k));
	ASSERT_TRUE(key_eq(&tpp300, &k[0]));
}

/*
 * Whole chains against the reference: page sizes around the one-block
 * limit (18 packed tokens) and beyond, token ids around the 2^24 escape,
 * 0-3 extras of 0-100 bytes.
 */
TEST(v2_matches_reference)
{
	static const uint32_t tpps[] = { 1, 2, 3, 4, 13, 14, 15, 16, 17, 18, 19,
					 20, 32, 64, 100, 333 };
	static const uint32_t edge[] = { 0, 1, 0xfffffe, 0xffffff, 0x1000000,
					 0x1000001, 0x7fffffff, 0xffffffff };
	static uint8_t xbytes[3][100];
	static uint32_t tok[5 * 333];
	struct kvs_key got[5], want[5];
	struct kv_extra x[3];
	struct kv_block_hasher h;
	uint64_t s = 42, r;
	size_t t, n, i, n_extra, salt_len;
	char salt[8];

	for (n = 0; n < 400; n++) {
		t = tpps[n % (sizeof(tpps) / sizeof(tpps[0]))];
		for (i = 0; i < 5 * t; i++) {
			r = rnd(&s);
			/* Mostly a vocabulary's ids, some at the escape's edges. */
			tok[i] = r % 8 ? (uint32_t)(r >> 32) % 200000 : edge[(r >> 8) % 8];
		}
		n_extra = n / 16 % 4;	/* every page size with 0-3 extras */
		for (i = 0; i < n_extra; i++) {
			x[i].len = rnd(&s) % 101;
			memset(xbytes[i], (int)rnd(&s), x[i].len);
			x[i].data = xbytes[i];
		}
		salt_len = n % 9 < 8 ? n % 9 : 0;
		memset(salt, 'a' + (int)(n % 26), sizeof(salt));
		ASSERT_EQ(0, kv_hasher_init_algo(&h, KV_HASH_SHA256_V2,
						 n % 9 == 8 ? NULL : salt, salt_len, t));
		ASSERT_EQ(5, kv_hash_chain(&h, NULL, tok, 5 * t, x, n_extra, got));
		ref_chain_v2(n % 9 == 8 ? NULL : salt, salt_len, t, tok, 5, x, n_extra,
			     want);
		for (i = 0; i < 5; i++)
			ASSERT_TRUE(key_eq(&want[i], &got[i])) {
				TH_LOG("tpp %zu, n_extra %zu, page %zu", t, n_extra, i);
			}
	}
}

/*
 * Ids of 2^24 and above escape to the wide record: packing them in 3
 * bytes would give 2^24 + x the key of x.  The escape is per page.
 */
TEST(v2_token_escape)
{
	uint32_t a[32], b[32];
	struct kvs_key ka[2], kb[2];
	struct kv_block_hasher h;
	int i, j;
	static const uint32_t hi[] = { 1u << 24, 1u << 25, 1u << 31, 0xff000000u };

	ASSERT_EQ(0, kv_hasher_init(&h, "s", 1, 16));
	for (j = 0; j < 4; j++) {
		for (i = 0; i < 32; i++)
			a[i] = b[i] = 1000 + i;
		b[5] += hi[j];		/* same low 24 bits */
		ASSERT_EQ(2, kv_hash_chain(&h, NULL, a, 32, NULL, 0, ka));
		ASSERT_EQ(2, kv_hash_chain(&h, NULL, b, 32, NULL, 0, kb));
		ASSERT_FALSE(key_eq(&ka[0], &kb[0]));
		ASSERT_FALSE(key_eq(&ka[1], &kb[1]));
	}
	/* The largest packed id and the smallest escaped one. */
	for (i = 0; i < 16; i++)
		a[i] = b[i] = 0xffffff;
	b[0] = 0x1000000;
	ASSERT_EQ(1, kv_hash_chain(&h, NULL, a, 16, NULL, 0, ka));
	ASSERT_EQ(1, kv_hash_chain(&h, NULL, b, 16, NULL, 0, kb));
	ASSERT_FALSE(key_eq(&ka[0], &kb[0]));
}

/* v1 and v2 keys never meet: roots, first keys, keys deeper in a chain. */
TEST(v1_v2_do_not_alias)
{
	struct kv_block_hasher h1, h2;
	struct kvs_key k1[4], k2[4];
	uint32_t tok[64];
	int i, j;

	for (i = 0; i < 64; i++)
		tok[i] = i;
	ASSERT_EQ(0, kv_hasher_init_algo(&h1, KV_HASH_SHA256_V1, "s", 1, 16));
	ASSERT_EQ(0, kv_hasher_init_algo(&h2, KV_HASH_SHA256_V2, "s", 1, 16));
	ASSERT_FALSE(key_eq(&h1.root, &h2.root));
	ASSERT_EQ(4, kv_hash_chain(&h1, NULL, tok, 64, NULL, 0, k1));
	ASSERT_EQ(4, kv_hash_chain(&h2, NULL, tok, 64, NULL, 0, k2));
	for (i = 0; i < 4; i++)
		for (j = 0; j < 4; j++)
			ASSERT_FALSE(key_eq(&k1[i], &k2[j]));
	/* The same parent under both: still different. */
	ASSERT_EQ(1, kv_hash_chain(&h1, &h2.root, tok, 16, NULL, 0, k1));
	ASSERT_EQ(1, kv_hash_chain(&h2, &h2.root, tok, 16, NULL, 0, k2));
	ASSERT_FALSE(key_eq(&k1[0], &k2[0]));
}

/* The page size is in v2's root: 4-token pages never meet 8-token ones. */
TEST(v2_page_size_separates)
{
	struct kv_block_hasher h4, h8;
	struct kvs_key k4[4], k8[2];
	uint32_t tok[16];
	int i;

	for (i = 0; i < 16; i++)
		tok[i] = i;
	ASSERT_EQ(0, kv_hasher_init(&h4, "s", 1, 4));
	ASSERT_EQ(0, kv_hasher_init(&h8, "s", 1, 8));
	ASSERT_FALSE(key_eq(&h4.root, &h8.root));
	ASSERT_EQ(4, kv_hash_chain(&h4, NULL, tok, 16, NULL, 0, k4));
	ASSERT_EQ(2, kv_hash_chain(&h8, NULL, tok, 16, NULL, 0, k8));
	for (i = 0; i < 4; i++) {
		ASSERT_FALSE(key_eq(&k4[i], &k8[0]));
		ASSERT_FALSE(key_eq(&k4[i], &k8[1]));
	}
}

/* The compression counts <kvshare/blockhash.h> states. */
TEST(compressions_counted)
{
	static uint32_t tok[50000];
	const struct kv_extra lora = { "lora-7", 6 };
	struct kv_block_hasher h;
	int i;

	for (i = 0; i < 50000; i++)
		tok[i] = i % 128000;
	ASSERT_EQ(0, kv_hasher_init(&h, "s", 1, 16));
	ASSERT_EQ(3125, kv_hash_compressions(&h, tok, 50000, NULL, 0));
	/* With extras: 2 a page, 1 once for the digest (48 + 9 bytes). */
	ASSERT_EQ(2 * 3125 + 1, kv_hash_compressions(&h, tok, 50000, &lora, 1));
	tok[17] = 1u << 30;			/* page 1 escapes: 64 bytes, 2 blocks */
	ASSERT_EQ(3126, kv_hash_compressions(&h, tok, 50000, NULL, 0));
	ASSERT_EQ(0, kv_hasher_init(&h, "s", 1, 18));	/* 54 bytes: 1 block */
	ASSERT_EQ(2, kv_hash_compressions(&h, tok + 100, 36, NULL, 0));
	ASSERT_EQ(0, kv_hasher_init(&h, "s", 1, 19));	/* 57 bytes: 2 blocks */
	ASSERT_EQ(4, kv_hash_compressions(&h, tok + 40, 38, NULL, 0));
	ASSERT_EQ(0, kv_hasher_init_algo(&h, KV_HASH_SHA256_V1, "s", 1, 16));
	ASSERT_EQ(3 * 3125, kv_hash_compressions(&h, tok, 50000, NULL, 0));
	ASSERT_EQ(0, kv_hasher_init_algo(&h, KV_HASH_XXH3, "s", 1, 16));
	ASSERT_EQ(0, kv_hash_compressions(&h, tok, 50000, NULL, 0));
}

TEST_HARNESS_MAIN
