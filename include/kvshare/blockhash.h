/* SPDX-License-Identifier: MIT */
/*
 * Chained block keys, vLLM style: the key of page i of a prompt is
 *
 *   H("kvshare.block.v1", key(page i-1), tokens of page i, extras)
 *
 * with key(page -1) derived from the namespace salt, so that the same
 * tokens under another salt never meet.  Every variable-length part is
 * length-prefixed and the salt's absence is encoded apart from an empty
 * salt, so that no two inputs alias (("a","bc") and ("ab","c") differ).
 * Only full pages get keys.
 *
 * The bytes hashed, integers little-endian of fixed width:
 *
 *   root:  u64 16, "kvshare.root.v1\0", u64 has_salt, u64 salt_len, salt
 *   page:  u64 17, "kvshare.block.v1\0", parent key (4 x u64),
 *          u64 n_tokens, u32 tokens[n_tokens], u64 n_extra,
 *          n_extra x (u64 len, bytes)
 *
 * Two functions H hash those same bytes:
 *
 * KV_HASH_SHA256 (the default): SHA-256 from OpenSSL's libcrypto, the
 *   whole 256 bits kept.  Collision resistant, which a pool shared between
 *   processes that do not trust each other needs: a key is the proof of a
 *   prefix, and whoever can make two prompts collide can read the KV cache
 *   of another tenant's prompt, or poison it.  Use it whenever any attacher
 *   of the pool is outside your trust boundary, or when you do not know.
 *   Cost: 3 SHA-256 blocks per 16-token page (~0.4 ms per 50k tokens on a
 *   SHA-NI x86 core).
 *
 * KV_HASH_XXH3 (fast, opt-in): XXH3-128 from libxxhash; key words 0 and 1
 *   are the low and high 64 bits, words 2 and 3 are zero (so a fast key
 *   never equals a SHA-256 one).  Not collision resistant against an
 *   adversary: choose it only for a pool whose every attacher is trusted
 *   to the same degree, e.g. one engine's own replicas or data-parallel
 *   ranks in one container, with the pool's mode (0600/0660) keeping
 *   everyone else out.  About 6x faster than SHA-256.
 *
 * Every process sharing a namespace must use the same function and
 * tokens_per_page, or they simply never hit each other's pages.
 */
#ifndef KVSHARE_BLOCKHASH_H
#define KVSHARE_BLOCKHASH_H

#include <stddef.h>
#include <stdint.h>
#include <linux/kvshare.h>

#ifdef __cplusplus
extern "C" {
#endif

enum kv_hash_algo {
	KV_HASH_SHA256	= 0,	/* default: collision resistant */
	KV_HASH_XXH3	= 1,	/* fast: trusted attachers only (see above) */
};

struct kv_block_hasher {
	struct kvs_key root;		/* key(page -1): the salted start */
	uint32_t tokens_per_page;
	uint32_t algo;			/* enum kv_hash_algo */
};

/* Extra keys of a page, e.g. a LoRA id or a multimodal input's hash. */
struct kv_extra {
	const void *data;
	size_t len;
};

/*
 * SHA-256 keys.  @salt NULL: no salt (differs from an empty one).
 * 0 or -errno.
 */
int kv_hasher_init(struct kv_block_hasher *h, const void *salt, size_t salt_len,
		   uint32_t tokens_per_page);

/* The same with the function chosen explicitly (enum kv_hash_algo). */
int kv_hasher_init_algo(struct kv_block_hasher *h, unsigned int algo,
			const void *salt, size_t salt_len,
			uint32_t tokens_per_page);

/*
 * Keys of the full pages of @tokens, chained from @parent (NULL: the
 * root).  @extra applies to every page.  Returns the number of keys
 * written (n_tokens / tokens_per_page), or -errno.  Thread-safe: the
 * hasher is only read.
 */
long kv_hash_chain(const struct kv_block_hasher *h, const struct kvs_key *parent,
		   const uint32_t *tokens, size_t n_tokens,
		   const struct kv_extra *extra, size_t n_extra,
		   struct kvs_key *keys);

#ifdef __cplusplus
}
#endif

#endif /* KVSHARE_BLOCKHASH_H */
