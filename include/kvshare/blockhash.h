/* SPDX-License-Identifier: MIT */
/*
 * Chained block keys, vLLM style: the key of page i of a prompt is
 *
 *   SHA-256("kvshare.block.v1", key(page i-1), tokens of page i, extras)
 *
 * with key(page -1) derived from the namespace salt, so that the same
 * tokens under another salt never meet.  Every variable-length part is
 * length-prefixed and the salt's absence is encoded apart from an empty
 * salt, so that no two inputs alias (("a","bc") and ("ab","c") differ).
 * Only full pages get keys.  SHA-256 (OpenSSL's libcrypto) is collision
 * resistant, which a pool shared between mutually distrusting processes
 * needs: a key is the proof of a prefix.
 */
#ifndef KVSHARE_BLOCKHASH_H
#define KVSHARE_BLOCKHASH_H

#include <stddef.h>
#include <stdint.h>
#include <linux/kvshare.h>

#ifdef __cplusplus
extern "C" {
#endif

struct kv_block_hasher {
	struct kvs_key root;		/* key(page -1): the salted start */
	uint32_t tokens_per_page;
};

/* Extra keys of a page, e.g. a LoRA id or a multimodal input's hash. */
struct kv_extra {
	const void *data;
	size_t len;
};

/* @salt NULL: no salt (differs from an empty one).  0 or -errno. */
int kv_hasher_init(struct kv_block_hasher *h, const void *salt, size_t salt_len,
		   uint32_t tokens_per_page);

/*
 * Keys of the full pages of @tokens, chained from @parent (NULL: the
 * root).  @extra applies to every page.  Returns the number of keys
 * written (n_tokens / tokens_per_page), or -errno.
 */
long kv_hash_chain(const struct kv_block_hasher *h, const struct kvs_key *parent,
		   const uint32_t *tokens, size_t n_tokens,
		   const struct kv_extra *extra, size_t n_extra,
		   struct kvs_key *keys);

#ifdef __cplusplus
}
#endif

#endif /* KVSHARE_BLOCKHASH_H */
