// SPDX-License-Identifier: GPL-2.0
/*
 * The remote tier's page MAC (mac.h): the key files, their
 * generations, and ChaCha20-keyed Poly1305 from OpenSSL's EVP interface.
 */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "mac.h"

/* 64 hex digits and a newline, and one byte to tell a longer file. */
#define KEY_FILE_MAX	(2 * KVSD_RMAC_KEY + 2)

static EVP_MAC *poly1305;
static EVP_CIPHER *chacha20;
static pthread_once_t algs_once = PTHREAD_ONCE_INIT;

/*
 * Fetched once and kept for the process's life: a fetch takes OpenSSL's
 * store lock, which no page should wait on.
 */
static void algs_fetch(void)
{
	poly1305 = EVP_MAC_fetch(NULL, "POLY1305", NULL);
	chacha20 = EVP_CIPHER_fetch(NULL, "ChaCha20", NULL);
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * One key file: a regular file of our own uid that nobody else may read
 * (a key others can read is no key) or write (one they can write lets
 * them choose the key), holding 64 hex digits and at most a newline.
 * 0; 1 if @optional and it does not exist; -EINVAL with err.
 */
static int read_key(const char *path, bool optional, uint8_t key[KVSD_RMAC_KEY],
		    char *err, size_t err_len)
{
	char buf[KEY_FILE_MAX + 1];
	struct stat st;
	ssize_t n;
	int fd, i, ret = -EINVAL;

	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		if (optional && errno == ENOENT)
			return 1;
		snprintf(err, err_len, "'%s': %s", path, strerror(errno));
		return -EINVAL;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		snprintf(err, err_len, "'%s' is not a regular file", path);
		goto out;
	}
	if (st.st_uid != geteuid()) {
		snprintf(err, err_len, "'%s' belongs to uid %u, not to kvshared's uid %u",
			 path, (unsigned int)st.st_uid, (unsigned int)geteuid());
		goto out;
	}
	if (st.st_mode & 077) {
		snprintf(err, err_len, "'%s' has mode %04o: others may read or write "
			 "it; chmod 600 it", path, (unsigned int)(st.st_mode & 07777));
		goto out;
	}
	n = read(fd, buf, sizeof(buf));
	if (n < 0) {
		snprintf(err, err_len, "'%s': %s", path, strerror(errno));
		goto out;
	}
	if (n && buf[n - 1] == '\n')
		n--;
	if (n != 2 * KVSD_RMAC_KEY) {
		snprintf(err, err_len, "'%s' does not hold one key of 64 hex digits "
			 "(openssl rand -hex 32)", path);
		goto out;
	}
	for (i = 0; i < KVSD_RMAC_KEY; i++) {
		int hi = hex_digit(buf[2 * i]), lo = hex_digit(buf[2 * i + 1]);

		if (hi < 0 || lo < 0) {
			snprintf(err, err_len, "'%s': not a hex digit at byte %d", path,
				 hi < 0 ? 2 * i : 2 * i + 1);
			goto out;
		}
		key[i] = (uint8_t)(hi << 4 | lo);
	}
	ret = 0;
out:
	explicit_bzero(buf, sizeof(buf));
	close(fd);
	return ret;
}

static struct kvsd_rmac_keys *keys_read(const struct kvsd_rmac *m, char *err,
					size_t err_len, int *ret)
{
	struct kvsd_rmac_keys *k = calloc(1, sizeof(*k));

	if (!k) {
		snprintf(err, err_len, "out of memory");
		*ret = -ENOMEM;
		return NULL;
	}
	*ret = read_key(m->file, false, k->key[0], err, err_len);
	if (!*ret && m->file_old) {
		*ret = read_key(m->file_old, true, k->key[1], err, err_len);
		k->n = *ret ? 1 : 2;	/* 1: the old key's file is absent */
		if (*ret == 1)
			*ret = 0;
	} else {
		k->n = 1;
	}
	if (*ret) {
		explicit_bzero(k, sizeof(*k));
		free(k);
		return NULL;
	}
	atomic_init(&k->ref, 1);
	return k;
}

int kvsd_rmac_new(struct kvsd_rmac **out, const char *file, const char *file_old,
		  char *err, size_t err_len)
{
	struct kvsd_rmac *m;
	int ret;

	pthread_once(&algs_once, algs_fetch);
	if (!poly1305 || !chacha20) {
		snprintf(err, err_len, "OpenSSL %s has no %s", OpenSSL_version(OPENSSL_VERSION),
			 poly1305 ? "ChaCha20" : "Poly1305");
		return -EIO;
	}
	m = calloc(1, sizeof(*m));
	if (m)
		pthread_mutex_init(&m->mu, NULL);
	if (!m || !(m->file = strdup(file)) ||
	    (file_old && !(m->file_old = strdup(file_old)))) {
		kvsd_rmac_free(m);
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	m->keys = keys_read(m, err, err_len, &ret);
	if (!m->keys) {
		kvsd_rmac_free(m);
		return ret;
	}
	*out = m;
	return 0;
}

int kvsd_rmac_reload(struct kvsd_rmac *m, char *err, size_t err_len)
{
	struct kvsd_rmac_keys *k, *old;
	int ret;

	k = keys_read(m, err, err_len, &ret);
	if (!k)
		return ret;
	pthread_mutex_lock(&m->mu);
	old = m->keys;
	m->keys = k;
	pthread_mutex_unlock(&m->mu);
	kvsd_rmac_put(old);	/* freed once the thread's last page is done */
	return 0;
}

void kvsd_rmac_free(struct kvsd_rmac *m)
{
	if (!m)
		return;
	kvsd_rmac_put(m->keys);
	pthread_mutex_destroy(&m->mu);
	free(m->file);
	free(m->file_old);
	free(m);
}

struct kvsd_rmac_keys *kvsd_rmac_get(struct kvsd_rmac *m)
{
	struct kvsd_rmac_keys *k;

	pthread_mutex_lock(&m->mu);
	k = m->keys;
	atomic_fetch_add(&k->ref, 1);
	pthread_mutex_unlock(&m->mu);
	return k;
}

void kvsd_rmac_put(struct kvsd_rmac_keys *k)
{
	if (k && atomic_fetch_sub(&k->ref, 1) == 1) {
		explicit_bzero(k, sizeof(*k));
		free(k);
	}
}

/*
 * Each thread's two OpenSSL contexts, made on its first tag and freed when
 * it exits: making them costs as much as tagging 16 KiB.
 */
struct tag_ctx {
	EVP_CIPHER_CTX *c;
	EVP_MAC_CTX *p;
	uint64_t salt, count;	/* the thread's next nonce */
};

static pthread_key_t ctx_key;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;

static void ctx_free(void *arg)
{
	struct tag_ctx *x = arg;

	EVP_CIPHER_CTX_free(x->c);
	EVP_MAC_CTX_free(x->p);
	free(x);
}

static void ctx_key_make(void)
{
	if (pthread_key_create(&ctx_key, ctx_free))
		abort();	/* PTHREAD_KEYS_MAX keys taken: a bug of ours */
}

static struct tag_ctx *ctx_get(void)
{
	struct tag_ctx *x;

	pthread_once(&ctx_once, ctx_key_make);
	x = pthread_getspecific(ctx_key);
	if (x)
		return x;
	x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	x->c = EVP_CIPHER_CTX_new();
	x->p = EVP_MAC_CTX_new(poly1305);
	if (!x->c || !x->p || RAND_bytes((uint8_t *)&x->salt, sizeof(x->salt)) != 1 ||
	    pthread_setspecific(ctx_key, x)) {
		ctx_free(x);
		return NULL;
	}
	return x;
}

/* The tag of @msg under @key and @nonce (the one-time key of mac.h). */
/* The tag of @msg then @msg2 (len2 0: none). */
static int tag(const uint8_t key[KVSD_RMAC_KEY], const uint8_t nonce[KVSD_RMAC_NONCE],
	       const void *msg, size_t len, const void *msg2, size_t len2,
	       uint8_t out[KVSD_RMAC_TAG])
{
	static const uint8_t zero[KVSD_RMAC_KEY];
	struct tag_ctx *x = ctx_get();
	uint8_t otk[KVSD_RMAC_KEY];
	size_t tag_len = 0;
	int n = 0, ok;

	/* ChaCha20's 16-byte IV is the block counter and nonce: all of N. */
	ok = x && EVP_EncryptInit_ex2(x->c, chacha20, key, nonce, NULL) &&
	     EVP_EncryptUpdate(x->c, otk, &n, zero, sizeof(zero)) && n == sizeof(otk) &&
	     EVP_MAC_init(x->p, otk, sizeof(otk), NULL) && EVP_MAC_update(x->p, msg, len) &&
	     (!len2 || EVP_MAC_update(x->p, msg2, len2)) &&
	     EVP_MAC_final(x->p, out, &tag_len, KVSD_RMAC_TAG) && tag_len == KVSD_RMAC_TAG;
	explicit_bzero(otk, sizeof(otk));
	return ok ? 0 : -EIO;
}

/*
 * A nonce no other value gets: the thread's random 64-bit salt and its
 * count of nonces.  A thread never repeats one; two threads (of any
 * host, any run) collide only if they drew the same salt, about s^2 / 2^65
 * for s threads in a key's life.  RAND_bytes() for every page would cost
 * a third of the tag of a 16 KiB page.
 */
int kvsd_rmac_sign(const struct kvsd_rmac_keys *k, const void *msg, size_t len,
		   uint8_t out[KVSD_RMAC_LEN])
{
	return kvsd_rmac_sign_parts(k, msg, len, NULL, 0, out);
}

int kvsd_rmac_sign_parts(const struct kvsd_rmac_keys *k, const void *msg, size_t len,
			 const void *msg2, size_t len2, uint8_t out[KVSD_RMAC_LEN])
{
	struct tag_ctx *x = ctx_get();

	if (!x)
		return -EIO;
	memcpy(out, &x->salt, sizeof(x->salt));
	memcpy(out + sizeof(x->salt), &x->count, sizeof(x->count));
	x->count++;
	return tag(k->key[0], out, msg, len, msg2, len2, out + KVSD_RMAC_NONCE);
}

int kvsd_rmac_verify(const struct kvsd_rmac_keys *k, const void *msg, size_t len,
		     const uint8_t mac[KVSD_RMAC_LEN])
{
	return kvsd_rmac_verify_parts(k, msg, len, NULL, 0, mac);
}

int kvsd_rmac_verify_parts(const struct kvsd_rmac_keys *k, const void *msg, size_t len,
			   const void *msg2, size_t len2, const uint8_t mac[KVSD_RMAC_LEN])
{
	uint8_t want[KVSD_RMAC_TAG];
	unsigned int i;
	int ret;

	for (i = 0; i < k->n; i++) {
		ret = tag(k->key[i], mac, msg, len, msg2, len2, want);
		if (ret)
			return ret;
		if (!CRYPTO_memcmp(want, mac + KVSD_RMAC_NONCE, KVSD_RMAC_TAG))
			return (int)i;
	}
	return -EBADMSG;
}
