/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The remote tier's page MAC (docs/remote.md, "Pages a Redis writer
 * cannot forge").  With remote_mac_key_file, every value kvshared stores
 * ends with a 128-bit nonce N and a Poly1305 tag over the value's header
 * and bytes, under a one-time key that is a PRF of the tier key K and N:
 *
 *	otk = ChaCha20 block(K, counter and nonce = N), its first 32 bytes
 *	tag = Poly1305(otk, header || bytes)
 *
 * Poly1305 is a one-time MAC: a key that tags two messages gives itself
 * away.  Here no one-time key is ever used twice, as no N is (a thread's
 * random 64-bit salt and its count: kvsd_rmac_sign()), and nobody without
 * K can tell one from random.  A key file holds 32 bytes as
 * 64 hex digits; a second, older key is accepted (never used to sign) so
 * that keys rotate without a restart (SIGHUP rereads both files).
 */
#ifndef _KVSHARED_REMOTE_MAC_H
#define _KVSHARED_REMOTE_MAC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define KVSD_RMAC_KEY		32
#define KVSD_RMAC_NONCE		16
#define KVSD_RMAC_TAG		16
#define KVSD_RMAC_LEN		(KVSD_RMAC_NONCE + KVSD_RMAC_TAG) /* what a value carries */

/* One generation of keys, never changed once made: shared, counted. */
struct kvsd_rmac_keys {
	atomic_uint ref;
	unsigned int n;			/* 1, or 2 with an old key */
	uint8_t key[2][KVSD_RMAC_KEY];	/* [0] signs and verifies; [1] verifies */
};

/* A tier's keys as configured: the files, and the generation read last. */
struct kvsd_rmac {
	char *file, *file_old;		/* file_old: NULL, or may be absent */
	pthread_mutex_t mu;
	struct kvsd_rmac_keys *keys;	/* under mu */
};

/*
 * Read the key files into a new *out.  The key file must exist; the old
 * key's file may be absent (no old key).  Each must be a regular file of
 * kvshared's uid that nobody else may read or write.  0 or -errno, with
 * what was wrong in err.
 */
int kvsd_rmac_new(struct kvsd_rmac **out, const char *file, const char *file_old,
		  char *err, size_t err_len);
/* Read the files again; on any error the keys in use stay.  0 or -errno. */
int kvsd_rmac_reload(struct kvsd_rmac *m, char *err, size_t err_len);
void kvsd_rmac_free(struct kvsd_rmac *m);

/* The current generation, held until kvsd_rmac_put(). */
struct kvsd_rmac_keys *kvsd_rmac_get(struct kvsd_rmac *m);
void kvsd_rmac_put(struct kvsd_rmac_keys *k);

/* Tag @msg under key[0] with a nonce never used before, into @out.  0 or -EIO. */
int kvsd_rmac_sign(const struct kvsd_rmac_keys *k, const void *msg, size_t len,
		   uint8_t out[KVSD_RMAC_LEN]);
/* The same over a message in two pieces: @msg, then @msg2. */
int kvsd_rmac_sign_parts(const struct kvsd_rmac_keys *k, const void *msg, size_t len,
			 const void *msg2, size_t len2, uint8_t out[KVSD_RMAC_LEN]);
/*
 * Check @mac (nonce and tag) over @msg: 0 under the key, 1 under the old
 * key, -EBADMSG under neither, -EIO if OpenSSL failed.
 */
int kvsd_rmac_verify(const struct kvsd_rmac_keys *k, const void *msg, size_t len,
		     const uint8_t mac[KVSD_RMAC_LEN]);
/* The same over a message in two pieces: @msg, then @msg2. */
int kvsd_rmac_verify_parts(const struct kvsd_rmac_keys *k, const void *msg, size_t len,
			   const void *msg2, size_t len2, const uint8_t mac[KVSD_RMAC_LEN]);

#endif /* _KVSHARED_REMOTE_MAC_H */
