// SPDX-License-Identifier: GPL-2.0
/*
 * The remote tier's page format (page.h).  Little-endian on the wire;
 * the header's fields in order, the page bytes, and with RPAGE_F_MAC the
 * nonce and the tag (mac.h).
 */
#include <endian.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY	/* XXH3_state_t on the stack */
#include <xxhash.h>
#include <kvshare/kv_layout.h>

#include "page.h"

static const char magic[8] = "KVSPAGE";

struct rpage_hdr {
	char magic[8];
	uint32_t version;
	uint32_t hdr_len;
	uint32_t n_layers, n_kv_heads, head_dim, tokens_per_page, dtype;
	uint32_t owner;
	uint64_t page_bytes;
	uint64_t ns;
	uint8_t name_digest[16];
	uint64_t key[4];
	uint64_t flags;			/* RPAGE_F_* */
	uint8_t sum[16];
};

_Static_assert(sizeof(struct rpage_hdr) == KVSD_RPAGE_HDR, "page header is 128 bytes");

/* A MAC (mac.h: nonce, tag) follows the page bytes. */
#define RPAGE_F_MAC	1ull

const char *const kvsd_rpage_bad_names[KVSD_RPAGE_N_BAD] = {
	[KVSD_RPAGE_OK] = "ok",
	[KVSD_RPAGE_BAD_SIZE] = "size",
	[KVSD_RPAGE_BAD_FORMAT] = "format",
	[KVSD_RPAGE_BAD_GEOMETRY] = "geometry",
	[KVSD_RPAGE_BAD_KEY] = "key",
	[KVSD_RPAGE_BAD_CHECKSUM] = "checksum",
	[KVSD_RPAGE_BAD_MAC] = "mac",
};

/* The dtype's short name in keys ("x": unknown; never for a valid pool). */
static const char *dtype_tag(uint32_t dtype)
{
	const struct kv_dtype_name *d = kv_dtype_by_id(dtype);

	return d ? d->name : "x";
}

void kvsd_rpage_id_init(struct kvsd_rpage_id *id, const char *name, uint32_t owner,
			uint64_t ns, const struct kvs_geometry *geom,
			struct kvsd_rmac *mac)
{
	XXH128_hash_t h;
	int n;

	memset(id, 0, sizeof(*id));
	snprintf(id->name, sizeof(id->name), "%s", name);
	h = XXH3_128bits(id->name, strlen(id->name));
	XXH128_canonicalFromHash((XXH128_canonical_t *)id->name_digest, h);
	id->owner = owner;
	id->ns = ns;
	id->geom = *geom;
	id->mac = mac;
	/* At most 63 + 3 * 10 + 16 + 4 + 1 + 10 + 20 bytes: room for the chain key. */
	n = snprintf(id->key_prefix, sizeof(id->key_prefix), "kvs%u:%s:%u:%016llx:L%uH%uD%uT%u%s:",
		     KVSD_RPAGE_VERSION, id->name, id->owner, (unsigned long long)id->ns,
		     geom->n_layers, geom->n_kv_heads, geom->head_dim,
		     geom->tokens_per_page, dtype_tag(geom->dtype));
	id->key_prefix_len = n < (int)sizeof(id->key_prefix) ? (size_t)n
							     : sizeof(id->key_prefix) - 1;
}

size_t kvsd_rpage_value_len(const struct kvsd_rpage_id *id)
{
	return KVSD_RPAGE_HDR + id->geom.page_bytes + (id->mac ? KVSD_RMAC_LEN : 0);
}

size_t kvsd_rpage_value_max(const struct kvsd_rpage_id *id)
{
	return KVSD_RPAGE_HDR + id->geom.page_bytes + KVSD_RMAC_LEN;
}

size_t kvsd_rpage_key(char *buf, const struct kvsd_rpage_id *id,
		      const struct kvs_key *key)
{
	static const char hex[] = "0123456789abcdef";
	char *p = buf + id->key_prefix_len;
	int w, b;

	memcpy(buf, id->key_prefix, id->key_prefix_len);
	for (w = 0; w < 4; w++)
		for (b = 60; b >= 0; b -= 4)
			*p++ = hex[(key->w[w] >> b) & 15];
	*p = '\0';
	return p - buf;
}

static void hdr_fill(struct rpage_hdr *h, const struct kvsd_rpage_id *id,
		     const struct kvs_key *key)
{
	const struct kvs_geometry *g = &id->geom;
	unsigned int i;

	memset(h, 0, sizeof(*h));
	memcpy(h->magic, magic, sizeof(h->magic));
	h->version = htole32(KVSD_RPAGE_VERSION);
	h->hdr_len = htole32(KVSD_RPAGE_HDR);
	h->n_layers = htole32(g->n_layers);
	h->n_kv_heads = htole32(g->n_kv_heads);
	h->head_dim = htole32(g->head_dim);
	h->tokens_per_page = htole32(g->tokens_per_page);
	h->dtype = htole32(g->dtype);
	h->owner = htole32(id->owner);
	h->page_bytes = htole64(g->page_bytes);
	h->ns = htole64(id->ns);
	memcpy(h->name_digest, id->name_digest, sizeof(h->name_digest));
	for (i = 0; i < 4; i++)
		h->key[i] = htole64(key->w[i]);
}

/* XXH3-128 of the header with its sum zeroed, then the bytes. */
static void checksum(const struct rpage_hdr *h, const void *bytes, uint64_t len,
		     uint8_t out[16])
{
	struct rpage_hdr z = *h;
	XXH3_state_t st;

	memset(z.sum, 0, sizeof(z.sum));
	XXH3_128bits_reset(&st);
	XXH3_128bits_update(&st, &z, sizeof(z));
	XXH3_128bits_update(&st, bytes, len);
	XXH128_canonicalFromHash((XXH128_canonical_t *)out, XXH3_128bits_digest(&st));
}

int kvsd_rpage_seal(uint8_t *val, const struct kvsd_rpage_id *id,
		    const struct kvs_key *key)
{
	size_t len = KVSD_RPAGE_HDR + id->geom.page_bytes;

	return kvsd_rpage_seal_parts(val, val + KVSD_RPAGE_HDR, val + len, id, key);
}

int kvsd_rpage_seal_parts(uint8_t *hdr, const void *bytes, uint8_t *mac,
			  const struct kvsd_rpage_id *id, const struct kvs_key *key)
{
	struct kvsd_rmac_keys *k;
	struct rpage_hdr h;
	int ret;

	hdr_fill(&h, id, key);
	if (id->mac)
		h.flags = htole64(RPAGE_F_MAC);
	checksum(&h, bytes, id->geom.page_bytes, h.sum);
	memcpy(hdr, &h, sizeof(h));
	if (!id->mac)
		return 0;
	/* The tag covers the header as stored, checksum and flags included. */
	k = kvsd_rmac_get(id->mac);
	ret = kvsd_rmac_sign_parts(k, hdr, KVSD_RPAGE_HDR, bytes, id->geom.page_bytes, mac);
	kvsd_rmac_put(k);
	return ret;
}

/* A keyed tier's verdict on a value's MAC (absent: refused). */
static enum kvsd_rpage_bad mac_check(const struct kvsd_rpage_id *id, const void *hdr,
				     const void *bytes, const uint8_t *mac, bool has_mac)
{
	struct kvsd_rmac_keys *k;
	int ret;

	if (!has_mac || !mac)
		return KVSD_RPAGE_BAD_MAC;
	k = kvsd_rmac_get(id->mac);
	ret = kvsd_rmac_verify_parts(k, hdr, KVSD_RPAGE_HDR, bytes, id->geom.page_bytes, mac);
	kvsd_rmac_put(k);
	return ret < 0 ? KVSD_RPAGE_BAD_MAC : KVSD_RPAGE_OK;
}

enum kvsd_rpage_bad kvsd_rpage_check(const void *val, size_t len,
				     const struct kvsd_rpage_id *id,
				     const struct kvs_key *key)
{
	size_t body = KVSD_RPAGE_HDR + id->geom.page_bytes;
	const uint8_t *v = val;

	if (len < KVSD_RPAGE_HDR)
		return KVSD_RPAGE_BAD_SIZE;
	return kvsd_rpage_check_parts(v, v + KVSD_RPAGE_HDR,
				      len == body + KVSD_RMAC_LEN ? v + body : NULL, len,
				      id, key);
}

enum kvsd_rpage_bad kvsd_rpage_check_parts(const void *hdr, const void *bytes,
					   const void *mac, size_t len,
					   const struct kvsd_rpage_id *id,
					   const struct kvs_key *key)
{
	size_t body = KVSD_RPAGE_HDR + id->geom.page_bytes;
	struct rpage_hdr want, got;
	uint8_t sum[16];
	bool has_mac;

	if (len != body && len != body + KVSD_RMAC_LEN)
		return KVSD_RPAGE_BAD_SIZE;
	memcpy(&got, hdr, sizeof(got));
	hdr_fill(&want, id, key);
	if (memcmp(got.magic, want.magic, sizeof(got.magic)) ||
	    got.version != want.version || got.hdr_len != want.hdr_len ||
	    (got.flags & ~htole64(RPAGE_F_MAC)))
		return KVSD_RPAGE_BAD_FORMAT;
	has_mac = got.flags & htole64(RPAGE_F_MAC);
	if (len != body + (has_mac ? KVSD_RMAC_LEN : 0) || (has_mac && !mac))
		return KVSD_RPAGE_BAD_SIZE;
	if (memcmp(&got.n_layers, &want.n_layers,
		   offsetof(struct rpage_hdr, owner) -
		   offsetof(struct rpage_hdr, n_layers)) ||
	    got.page_bytes != want.page_bytes)
		return KVSD_RPAGE_BAD_GEOMETRY;
	if (got.owner != want.owner || got.ns != want.ns ||
	    memcmp(got.name_digest, want.name_digest, sizeof(got.name_digest)) ||
	    memcmp(got.key, want.key, sizeof(got.key)))
		return KVSD_RPAGE_BAD_KEY;
	/*
	 * Keyed, a valid tag implies the checksum (our seal computed it), so
	 * the checksum is computed only to say why a value fails: damaged
	 * (checksum) or consistent but not ours (mac).
	 */
	if (id->mac && mac_check(id, hdr, bytes, mac, has_mac) == KVSD_RPAGE_OK)
		return KVSD_RPAGE_OK;
	checksum(&got, bytes, id->geom.page_bytes, sum);
	if (memcmp(sum, got.sum, sizeof(sum)))
		return KVSD_RPAGE_BAD_CHECKSUM;
	return id->mac ? KVSD_RPAGE_BAD_MAC : KVSD_RPAGE_OK;
}
