// SPDX-License-Identifier: GPL-2.0
/*
 * Chained block keys: a known answer computed by an independent
 * implementation of the documented encoding (Python's hashlib), the chain
 * property, full pages only, and the encodings that must not alias.
 */
#include <string.h>

#include <kvshare/blockhash.h>
#include "kselftest_harness.h"

#define TPP 4

static int key_eq(const struct kvs_key *a, const struct kvs_key *b)
{
	return !memcmp(a, b, sizeof(*a));
}

/* SHA-256 of the encoding in <kvshare/blockhash.h>, from Python's hashlib. */
TEST(known_answer)
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

	ASSERT_EQ(0, kv_hasher_init(&h, "tenant-a", 8, TPP));
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
	unsigned int i;

	for (i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++)
		tokens[i] = i * 31 + 7;
	ASSERT_EQ(0, kv_hasher_init(&h, NULL, 0, TPP));
	/* Only full pages: the last 3 tokens have no key. */
	ASSERT_EQ(6, kv_hash_chain(&h, NULL, tokens, 6 * TPP + 3, NULL, 0, whole));
	ASSERT_EQ(2, kv_hash_chain(&h, NULL, tokens, 2 * TPP, NULL, 0, part));
	ASSERT_EQ(4, kv_hash_chain(&h, &part[1], tokens + 2 * TPP, 4 * TPP + 3,
				   NULL, 0, part + 2));
	for (i = 0; i < 6; i++)
		ASSERT_TRUE(key_eq(&whole[i], &part[i]));
	ASSERT_EQ(0, kv_hash_chain(&h, NULL, tokens, TPP - 1, NULL, 0, part));
}

/* One token changed: that page's key and every later one change, none before. */
TEST(divergence_changes_the_rest)
{
	uint32_t a[4 * TPP], b[4 * TPP];
	struct kvs_key ka[4], kb[4];
	struct kv_block_hasher h;
	unsigned int i;

	for (i = 0; i < 4 * TPP; i++)
		a[i] = b[i] = i;
	b[2 * TPP + 1] ^= 1;
	ASSERT_EQ(0, kv_hasher_init(&h, "s", 1, TPP));
	ASSERT_EQ(4, kv_hash_chain(&h, NULL, a, 4 * TPP, NULL, 0, ka));
	ASSERT_EQ(4, kv_hash_chain(&h, NULL, b, 4 * TPP, NULL, 0, kb));
	ASSERT_TRUE(key_eq(&ka[0], &kb[0]));
	ASSERT_TRUE(key_eq(&ka[1], &kb[1]));
	ASSERT_FALSE(key_eq(&ka[2], &kb[2]));
	ASSERT_FALSE(key_eq(&ka[3], &kb[3]));
}

static void first_key(struct __test_metadata *_metadata, const void *salt,
		      size_t salt_len, const struct kv_extra *extra, size_t n_extra,
		      struct kvs_key *k)
{
	const uint32_t tokens[TPP] = { 9, 8, 7, 6 };
	struct kv_block_hasher h;

	ASSERT_EQ(0, kv_hasher_init(&h, salt, salt_len, TPP));
	ASSERT_EQ(1, kv_hash_chain(&h, NULL, tokens, TPP, extra, n_extra, k));
}

/* Salts and extras are length-prefixed; absent is not empty. */
TEST(encodings_do_not_alias)
{
	const struct kv_extra a_bc[2] = { { "a", 1 }, { "bc", 2 } };
	const struct kv_extra ab_c[2] = { { "ab", 2 }, { "c", 1 } };
	const struct kv_extra empty[1] = { { "", 0 } };
	struct kvs_key k1, k2;

	first_key(_metadata, NULL, 0, NULL, 0, &k1);
	first_key(_metadata, "", 0, NULL, 0, &k2);
	ASSERT_FALSE(key_eq(&k1, &k2));		/* no salt vs empty salt */

	first_key(_metadata, "tenant-a", 8, NULL, 0, &k1);
	first_key(_metadata, "tenant-b", 8, NULL, 0, &k2);
	ASSERT_FALSE(key_eq(&k1, &k2));		/* salts separate */
	first_key(_metadata, "tenant-a", 8, NULL, 0, &k2);
	ASSERT_TRUE(key_eq(&k1, &k2));		/* ... and only salts */

	first_key(_metadata, NULL, 0, a_bc, 2, &k1);
	first_key(_metadata, NULL, 0, ab_c, 2, &k2);
	ASSERT_FALSE(key_eq(&k1, &k2));		/* ("a","bc") vs ("ab","c") */

	first_key(_metadata, NULL, 0, NULL, 0, &k1);
	first_key(_metadata, NULL, 0, empty, 1, &k2);
	ASSERT_FALSE(key_eq(&k1, &k2));		/* no extra vs one empty extra */
}

TEST(bad_arguments)
{
	struct kv_block_hasher h;

	ASSERT_EQ(-EINVAL, kv_hasher_init(&h, NULL, 0, 0));
	ASSERT_EQ(-EINVAL, kv_hasher_init(&h, NULL, 3, 16));
}

TEST_HARNESS_MAIN
