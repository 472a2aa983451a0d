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
 */
#ifndef _KVSHARED_REMOTE_PAGE_H
#define _KVSHARED_REMOTE_PAGE_H

#include <stddef.h>
#include <stdint.h>
#include <linux/kvshare.h>

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
};

/* Why a value was refused (the metrics' reason label). */
enum kvsd_rpage_bad {
	KVSD_RPAGE_OK,
	KVSD_RPAGE_BAD_SIZE,		/* not header + page_bytes */
	KVSD_RPAGE_BAD_FORMAT,		/* magic or version */
	KVSD_RPAGE_BAD_GEOMETRY,
	KVSD_RPAGE_BAD_KEY,		/* owner, namespace or chain key */
	KVSD_RPAGE_BAD_CHECKSUM,
	KVSD_RPAGE_N_BAD,
};

extern const char *const kvsd_rpage_bad_names[KVSD_RPAGE_N_BAD];

void kvsd_rpage_id_init(struct kvsd_rpage_id *id, const char *name, uint32_t owner,
			uint64_t ns, const struct kvs_geometry *geom);

/* The Redis key of @key; its length (< KVSD_RPAGE_KEY_MAX). */
size_t kvsd_rpage_key(char *buf, const struct kvsd_rpage_id *id,
		      const struct kvs_key *key);

/* Write the header of @bytes (page_bytes of them) into hdr. */
void kvsd_rpage_seal(uint8_t hdr[KVSD_RPAGE_HDR], const struct kvsd_rpage_id *id,
		     const struct kvs_key *key, const void *bytes);

/* Check a value fetched for @key: KVSD_RPAGE_OK or why not. */
enum kvsd_rpage_bad kvsd_rpage_check(const void *val, size_t len,
				     const struct kvsd_rpage_id *id,
				     const struct kvs_key *key);

#endif /* _KVSHARED_REMOTE_PAGE_H */
