/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the remote tier stores: a page under a Redis key made of the
 * tier's namespace, the pool owner's uid, the clients' namespace (salt),
 * the geometry and the page's chain key; its value is a 128-byte header
 * and the page's bytes.  The header repeats all of the key's parts and
 * ends with an XXH3-128 checksum over the header and the bytes, so a
 * value stored under another key, of another geometry, or damaged is
 * refused on import.  The checksum stops corruption and mistakes, not a
 * forger: anyone who can write the key can compute it (docs/remote.md).
 * A tier with a MAC key (mac.h) appends a nonce and a tag over the
 * header and the bytes, says so in the header's flags, and refuses any
 * value without a tag valid under one of its keys.
 */
#ifndef _KVSHARED_REMOTE_PAGE_H
#define _KVSHARED_REMOTE_PAGE_H

#include <stddef.h>
#include <stdint.h>
#include <linux/kvshare.h>

#include "mac.h"

#define KVSD_RPAGE_VERSION	1
#define KVSD_RPAGE_HDR		128
#define KVSD_RPAGE_KEY_MAX	256
#define KVSD_RNS_MAX		64	/* namespace string, with its NUL */

/* Whose page, in which namespace and geometry: everything but the key. */
struct kvsd_rpage_id {
	char name[KVSD_RNS_MAX];	/* the tier's namespace (remote_namespace) */
	uint8_t name_digest[16];	/* XXH3-128 of name */
	uint32_t owner;			/* the pool owner's uid */
	uint64_t ns;			/* the clients' namespace in the pool */
	struct kvs_geometry geom;	/* page_bytes filled */
	struct kvsd_rmac *mac;		/* the tier's keys; NULL: none */
	/* The key up to the chain key, made once: a fetch makes hundreds of keys. */
	char key_prefix[KVSD_RPAGE_KEY_MAX - 64];
	size_t key_prefix_len;
};

/* Why a value was refused (the metrics' reason label). */
enum kvsd_rpage_bad {
	KVSD_RPAGE_OK,
	KVSD_RPAGE_BAD_SIZE,		/* not header + page_bytes */
	KVSD_RPAGE_BAD_FORMAT,		/* magic or version */
	KVSD_RPAGE_BAD_GEOMETRY,
	KVSD_RPAGE_BAD_KEY,		/* owner, namespace or chain key */
	KVSD_RPAGE_BAD_CHECKSUM,
	KVSD_RPAGE_BAD_MAC,		/* keyed tier: no tag, or valid under no key */
	KVSD_RPAGE_N_BAD,
};

extern const char *const kvsd_rpage_bad_names[KVSD_RPAGE_N_BAD];

void kvsd_rpage_id_init(struct kvsd_rpage_id *id, const char *name, uint32_t owner,
			uint64_t ns, const struct kvs_geometry *geom,
			struct kvsd_rmac *mac);

/* Bytes of the values @id stores: header, page and, keyed, the MAC. */
size_t kvsd_rpage_value_len(const struct kvsd_rpage_id *id);
/* Bytes of the longest value @id accepts (with a MAC, keyed or not). */
size_t kvsd_rpage_value_max(const struct kvsd_rpage_id *id);

/* The Redis key of @key; its length (< KVSD_RPAGE_KEY_MAX). */
size_t kvsd_rpage_key(char *buf, const struct kvsd_rpage_id *id,
		      const struct kvs_key *key);

/*
 * Seal the value @val of kvsd_rpage_value_len(id) bytes whose page bytes
 * are in place (at KVSD_RPAGE_HDR): its header and, keyed, its MAC.
 * 0, or -EIO when OpenSSL failed.
 */
int kvsd_rpage_seal(uint8_t *val, const struct kvsd_rpage_id *id,
		    const struct kvs_key *key);
/*
 * The same for a value sent from separate places (the tier sends a page
 * straight from the pool): the header into @hdr, keyed the MAC into @mac,
 * both over @bytes as they are now.  Bytes that change before they are
 * sent make a value every host refuses (checksum, mac), never a wrong one.
 */
int kvsd_rpage_seal_parts(uint8_t *hdr, const void *bytes, uint8_t *mac,
			  const struct kvsd_rpage_id *id, const struct kvs_key *key);

/*
 * Check a value fetched for @key: KVSD_RPAGE_OK or why not.  Its page
 * bytes are at KVSD_RPAGE_HDR.  Keyed, a value needs a valid MAC; without
 * a key, a MAC is skipped (such a tier trusts whoever writes to Redis).
 */
enum kvsd_rpage_bad kvsd_rpage_check(const void *val, size_t len,
				     const struct kvsd_rpage_id *id,
				     const struct kvs_key *key);
/*
 * The same for a value read into separate places (the tier reads a page
 * straight into the pool): its header, its page bytes and its MAC (NULL
 * if it came without one); @len is the whole value's length.
 */
enum kvsd_rpage_bad kvsd_rpage_check_parts(const void *hdr, const void *bytes,
					   const void *mac, size_t len,
					   const struct kvsd_rpage_id *id,
					   const struct kvs_key *key);

#endif /* _KVSHARED_REMOTE_PAGE_H */
