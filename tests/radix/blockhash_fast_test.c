// SPDX-License-Identifier: GPL-2.0
/*
 * Block keys, XXH3 and SHA-256 v1 (v2: tests/libkv/blockhash_test.c):
 * known answers computed outside libkv (the documented encoding written by
 * Python, hashed by Python's hashlib and by Debian's xxhsum -H2), the chain
 * property and the encodings that must not alias in the fast mode too,
 * large pages and extras (the heap path), and that the functions never
 * give the same key.
 */
#include <errno.h>
#include <string.h>

#include <kvshare/blockhash.h>
#include "kselftest_harness.h"

#define TPP 4

static int key_eq(const struct kvs_key *a, const struct kvs_key *b)
{
	return !memcmp(a, b, sizeof(*a));
}

/* XXH3-128 of the encoding, from xxhsum -H2 over bytes Python wrote. */
TEST(xxh3_known_answer)
{
	static const struct kvs_key want[2] = {
		{ { 0x502848faf3be98aaull, 0xc3efc36857fc15eeull, 0, 0 } },
		{ { 0x3173fde7ddb90f68ull, 0xf8f94335b78ff47dull, 0, 0 } },
	};
	const uint32_t tokens[] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct kv_block_hasher h;
	struct kvs_key k[2];

	ASSERT_EQ(0, kv_hasher_init_algo(&h, KV_HASH_XXH3, "tenant-a", 8, TPP));
	ASSERT_EQ(2, kv_hash_chain(&h, NULL, tokens, 8, NULL, 0, k));
	ASSERT_TRUE(key_eq(&want[0], &k[0]));
	ASSERT_TRUE(key_eq(&want[1], &k[1]));
}

/* An extra key (a LoRA id) and no salt, XXH3 and SHA-256 v1 (same bytes). */
TEST(extra_known_answers)
{
	static const struct kvs_key sha = { { 0xa676f577cd8f1695ull, 0x9c47c997bf93d45cull,
					      0x040e7f9a313300b1ull, 0xbb27071e87cb8b29ull } };
	static const struct kvs_key xxh = { { 0x79b5384eebdf0654ull, 0x7b6dafe93c358a0aull,
					      0, 0 } };
	const struct kv_extra lora = { "lora-7", 6 };
	const uint32_t tokens[TPP] = { 9, 8, 7, 6 };
	struct kv_block_hasher h;
	struct kvs_key k;

	ASSERT_EQ(0, kv_hasher_init_algo(&h, KV_HASH_SHA256_V1, NULL, 0, TPP));
	ASSERT_EQ(1, kv_hash_chain(&h, NULL, tokens, TPP, &lora, 1, &k));
	ASSERT_TRUE(key_eq(&sha, &k));
	ASSERT_EQ(0, kv_hasher_init_algo(&h, KV_HASH_XXH3, NULL, 0, TPP));
	ASSERT_EQ(1, kv_hash_chain(&h, NULL, tokens, TPP, &lora, 1, &k));
	ASSERT_TRUE(key_eq(&xxh, &k));
}

/* 300-token pages and a 2000-byte extra: messages past the stack buffer. */
TEST(large_page_known_answers)
{
	static const struct kvs_key sha = { { 0xe7f65c9747080e10ull, 0x9e379926373a2f7full,
					      0xd8cf1c447a89daacull, 0x8c6a2e308550e674ull } };
	static const struct kvs_key xxh = { { 0x919fe9cc0283a230ull, 0x195e6edf93d9e781ull,
					      0, 0 } };
	static char big[2000];
	const struct kv_extra extra = { big, sizeof(big) };
	uint32_t tokens[300];
	struct kv_block_hasher h;
	struct kvs_key k;
	int i;

	memset(big, 'x', sizeof(big));
	for (i = 0; i < 300; i++)
		tokens[i] = i * 7 + 1;
	ASSERT_EQ(0, kv_hasher_init_algo(&h, KV_HASH_SHA256_V1, "", 0, 300));
	ASSERT_EQ(1, kv_hash_chain(&h, NULL, tokens, 300, &extra, 1, &k));
	ASSERT_TRUE(key_eq(&sha, &k));
	ASSERT_EQ(0, kv_hasher_init_algo(&h, KV_HASH_XXH3, "", 0, 300));
	ASSERT_EQ(1, kv_hash_chain(&h, NULL, tokens, 300, &extra, 1, &k));
	ASSERT_TRUE(key_eq(&xxh, &k));
}

/* A chain hashed in pieces equals the chain hashed whole. */
TEST(xxh3_chain_continues)
{
	uint32_t tokens[9 * TPP + 1];
	struct kvs_key whole[9], part[9];
	struct kv_block_hasher h;
	unsigned int i;

	for (i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++)
		tokens[i] = i * 131 + 3;
	ASSERT_EQ(0, kv_hasher_init_algo(&h, KV_HASH_XXH3, "s", 1, TPP));
	ASSERT_EQ(9, kv_hash_chain(&h, NULL, tokens, 9 * TPP + 1, NULL, 0, whole));
	ASSERT_EQ(4, kv_hash_chain(&h, &h.root, tokens, 4 * TPP + 2, NULL, 0, part));
	ASSERT_EQ(5, kv_hash_chain(&h, &part[3], tokens + 4 * TPP, 5 * TPP, NULL, 0,
				   part + 4));
	for (i = 0; i < 9; i++)
		ASSERT_TRUE(key_eq(&whole[i], &part[i]));
	for (i = 0; i < 9; i++)
		ASSERT_EQ(0, whole[i].w[2] | whole[i].w[3]);
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

TEST(xxh3_encodings_do_not_alias)
{
	const struct kv_extra a_bc[2] = { { "a", 1 }, { "bc", 2 } };
	const struct kv_extra ab_c[2] = { { "ab", 2 }, { "c", 1 } };
	const struct kv_extra empty[1] = { { "", 0 } };
	const unsigned int X = KV_HASH_XXH3;
	struct kvs_key k1, k2;

	first_key(_metadata, X, NULL, 0, NULL, 0, &k1);
	first_key(_metadata, X, "", 0, NULL, 0, &k2);
	ASSERT_FALSE(key_eq(&k1, &k2));		/* no salt vs empty salt */
	first_key(_metadata, X, "tenant-a", 8, NULL, 0, &k1);
	first_key(_metadata, X, "tenant-b", 8, NULL, 0, &k2);
	ASSERT_FALSE(key_eq(&k1, &k2));
	first_key(_metadata, X, NULL, 0, a_bc, 2, &k1);
	first_key(_metadata, X, NULL, 0, ab_c, 2, &k2);
	ASSERT_FALSE(key_eq(&k1, &k2));		/* ("a","bc") vs ("ab","c") */
	first_key(_metadata, X, NULL, 0, NULL, 0, &k1);
	first_key(_metadata, X, NULL, 0, empty, 1, &k2);
	ASSERT_FALSE(key_eq(&k1, &k2));		/* no extra vs one empty extra */
	/* Same input, other function: never the same key. */
	first_key(_metadata, KV_HASH_SHA256_V1, "s", 1, NULL, 0, &k1);
	first_key(_metadata, X, "s", 1, NULL, 0, &k2);
	ASSERT_FALSE(key_eq(&k1, &k2));
	ASSERT_NE(0, k1.w[2] | k1.w[3]);
	first_key(_metadata, KV_HASH_SHA256_V2, "s", 1, NULL, 0, &k1);
	ASSERT_FALSE(key_eq(&k1, &k2));
	ASSERT_NE(0, k1.w[2] | k1.w[3]);
}

/*
 * kv_hasher_init is SHA-256, the newest encoding (v2); XXH3 keeps v1's
 * root; unknown functions are refused.
 */
TEST(algo_selection)
{
	struct kv_block_hasher a, b;

	ASSERT_EQ(0, kv_hasher_init(&a, "x", 1, TPP));
	ASSERT_EQ(KV_HASH_SHA256_V2, a.algo);
	ASSERT_EQ(0, kv_hasher_init_algo(&b, KV_HASH_SHA256, "x", 1, TPP));
	ASSERT_TRUE(key_eq(&a.root, &b.root));
	ASSERT_EQ(0, kv_hasher_init_algo(&b, KV_HASH_XXH3, "x", 1, TPP));
	ASSERT_EQ(KV_HASH_XXH3, b.algo);
	ASSERT_EQ(-EINVAL, kv_hasher_init_algo(&b, 4, "x", 1, TPP));
	ASSERT_EQ(-EINVAL, kv_hasher_init_algo(&b, KV_HASH_XXH3, NULL, 1, TPP));
	ASSERT_EQ(-EINVAL, kv_hasher_init_algo(&b, KV_HASH_XXH3, NULL, 0, 0));
}

TEST_HARNESS_MAIN
