/* SPDX-License-Identifier: MIT */
/*
 * Chained block keys, vLLM style: the key of page i of a prompt is a
 * function of key(page i-1), the tokens of page i and its extras, with
 * key(page -1) (the root) derived from the namespace salt and the page
 * size, so that the same tokens under another salt never meet.  Only full
 * pages get keys.  Integers are little-endian of fixed width throughout.
 *
 * Three functions, chosen per hasher (enum kv_hash_algo).  Their keys never
 * alias each other, so one pool may hold keys of several (they simply never
 * hit each other's pages); every process sharing a namespace must use the
 * same function and tokens_per_page to share.
 *
 * KV_HASH_SHA256_V2 (the default; KV_HASH_SHA256 means it): one SHA-256
 *   compression per 16-token page.  The parent key is the chaining value
 *   and the page is one or more 64-byte blocks (Merkle-Damgard style):
 *
 *     root   = SHA-256(u64 16, "kvshare.root.v2\0", u64 tokens_per_page,
 *                      u64 has_salt, u64 salt_len, salt)
 *     key(i) = f(...f(f(key(i-1), B_0), B_1)..., B_k-1)
 *
 *   f is SHA-256's compression function (FIPS 180-4 6.2.2, no padding, no
 *   length), the 256-bit key is its chaining value written as SHA-256
 *   writes a digest (w[0] = digest bytes 0..7 little-endian, as in v1).
 *   The page's record is its tokens, 3 bytes each if every token of the
 *   page is below 2^24 ("packed") else 4 bytes each ("wide": the escape for
 *   larger ids, decided page by page), then, when the page has extras, the
 *   32-byte extras digest
 *
 *     SHA-256(u64 18, "kvshare.extras.v2\0", u64 n_extra,
 *             n_extra x (u64 len, bytes))
 *
 *   computed once per kv_hash_chain() call.  The record is cut into
 *   56-byte payloads (the last one zero-padded), each followed by an
 *   8-byte trailer:
 *
 *     bytes 56..59  u32 index of the block within the page
 *     byte  60      flags: bit 0 wide tokens, bit 1 extras digest
 *     byte  61      1 on the page's last block, else 0
 *     byte  62      2 (the encoding's version)
 *     byte  63      0x01
 *
 *   Byte 63 is odd, and the last byte of the final block of every SHA-256
 *   computation (of bytes) is the low byte of the message's bit length, a
 *   multiple of 8: a page block is never such a final block.  That, the
 *   last-block flag and the page size in the root make the whole encoding
 *   suffix-free and uniquely decodable, which is what the Merkle-Damgard
 *   argument needs: two different inputs with one key give a collision of
 *   the compression function (docs/keys.md has the proof).  Assumed: f is
 *   collision resistant (the assumption SHA-256's own security argument
 *   rests on); the root and the extras digest are full SHA-256.
 *
 *   Compression calls per page: ceil((w * tokens_per_page + 32 * e) / 56),
 *   w = 3 packed or 4 wide, e = 1 with extras: for 16 tokens 1 (packed, no
 *   extras: the common case) or 2 (wide, extras, or both); plus the extras
 *   digest once per call.  kv_hash_compressions() counts them.
 *
 * KV_HASH_SHA256_V1 (the encoding before v2, kept for pools and tools
 *   that hold v1 keys): H = SHA-256 of
 *
 *     root:  u64 16, "kvshare.root.v1\0", u64 has_salt, u64 salt_len, salt
 *     page:  u64 17, "kvshare.block.v1\0", parent key (4 x u64),
 *            u64 n_tokens, u32 tokens[n_tokens], u64 n_extra,
 *            n_extra x (u64 len, bytes)
 *
 *   Every variable-length part is length-prefixed and the salt's absence is
 *   encoded apart from an empty salt, so that no two inputs alias.  A
 *   16-token page is 137 bytes, 3 compression calls (ceil((137 + 9) / 64)).
 *
 * Both SHA-256 encodings are collision resistant, which a pool shared
 * between processes that do not trust each other needs: a key is the proof
 * of a prefix, and whoever can make two prompts collide can read the KV
 * cache of another tenant's prompt, or poison it.  Use one whenever any
 * attacher of the pool is outside your trust boundary, or when you do not
 * know.
 *
 * KV_HASH_XXH3 (fast, opt-in): XXH3-128 from libxxhash over v1's bytes;
 *   key words 0 and 1 are the low and high 64 bits, words 2 and 3 are zero
 *   (so a fast key never equals a SHA-256 one).  Not collision resistant
 *   against an adversary: choose it only for a pool whose every attacher is
 *   trusted to the same degree, e.g. one engine's own replicas or
 *   data-parallel ranks in one container, with the pool's mode (0600/0660)
 *   keeping everyone else out.
 *
 * Cost per 50k tokens (3125 16-token pages, SHA-NI x86, `kvbench radix
 * --hash-only`): v1 ~450 us, v2 ~165 us against a floor of ~145 us (3125
 * compressions of ~46 ns each, one after the other: each needs the last
 * one's output), XXH3 ~70-120 us.
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
	KV_HASH_SHA256		= 0,	/* default: the newest SHA-256 encoding */
	KV_HASH_XXH3		= 1,	/* fast: trusted attachers only (see above) */
	KV_HASH_SHA256_V1	= 2,	/* 3 compressions a 16-token page */
	KV_HASH_SHA256_V2	= 3,	/* 1 compression a 16-token page */
};

/* algo is never KV_HASH_SHA256: init resolves it to the version it means. */
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
 * SHA-256 keys, the default encoding (v2).  @salt NULL: no salt (differs
 * from an empty one).  0 or -errno.
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

/*
 * The SHA-256 compression-function calls kv_hash_chain() makes for these
 * arguments (the extras digest included; 0 for XXH3), or -errno.
 */
long kv_hash_compressions(const struct kv_block_hasher *h, const uint32_t *tokens,
			  size_t n_tokens, const struct kv_extra *extra,
			  size_t n_extra);

/*
 * SHA-256's compression function: @state (h0..h7) becomes f(@state,
 * @block).  The primitive v2 keys are built from, exported for tests and
 * for kvbench's floor; OpenSSL's SHA-NI/AVX2 code where libcrypto has it.
 */
void kv_sha256_compress(uint32_t state[8], const unsigned char block[64]);

#ifdef __cplusplus
}
#endif

#endif /* KVSHARE_BLOCKHASH_H */
