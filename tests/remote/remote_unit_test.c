// SPDX-License-Identifier: GPL-2.0
/*
 * remote_unit_test: the remote tier's pure parts, as TAP.  The page
 * format's check refuses every field that differs from what the importer
 * asked for, a keyed tier refuses every value without a valid MAC under
 * one of its keys (a forger who knows the format but not the key, and
 * the key files' rules), and the key slot is Redis Cluster's (the values
 * of the cluster specification).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <xxhash.h>

#include "cluster.h"
#include "page.h"

static int n_test, n_failed;

static void ok(int cond, const char *what)
{
	n_test++;
	if (!cond)
		n_failed++;
	printf("%sok %d %s\n", cond ? "" : "not ", n_test, what);
}

static uint16_t slot(const char *k)
{
	return kvsd_rcl_slot(k, strlen(k));
}

static void test_slots(void)
{
	ok(slot("foo") == 12182, "slot of foo is 12182 (CLUSTER KEYSLOT foo)");
	ok(slot("123456789") == 0x31c3 % 16384, "CRC16-XMODEM of 123456789 is 0x31c3");
	ok(slot("{user1000}.following") == slot("user1000") &&
	   slot("{user1000}.followers") == slot("user1000"), "a hash tag picks the slot");
	/* The next three: redis-server 7.0's CLUSTER KEYSLOT. */
	ok(slot("foo{}{bar}") == 8363, "an empty tag hashes the whole key (8363)");
	ok(slot("foo{{bar}}zap") == 4015 && slot("{bar") == 4015,
	   "the tag ends at the first } (4015)");
	ok(slot("foo{bar}{zap}") == 5061 && slot("bar") == 5061,
	   "only the first tag counts (5061)");
}

struct page {
	uint8_t hdr[KVSD_RPAGE_HDR];
	uint8_t bytes[512];
};

struct mpage {
	uint8_t hdr[KVSD_RPAGE_HDR];
	uint8_t bytes[512];
	uint8_t mac[KVSD_RMAC_LEN];
};

static void test_pages(void)
{
	struct kvs_geometry g = {
		.n_layers = 1, .n_kv_heads = 2, .head_dim = 8, .tokens_per_page = 8,
		.dtype = KVS_DTYPE_BF16, .page_bytes = 512,
	};
	struct kvs_key key = { { 1, 2, 3, 4 } }, other = { { 1, 2, 3, 5 } };
	struct kvsd_rpage_id id, id2;
	char k1[KVSD_RPAGE_KEY_MAX], k2[KVSD_RPAGE_KEY_MAX];
	struct page p, q;
	unsigned int i;

	for (i = 0; i < sizeof(p.bytes); i++)
		p.bytes[i] = (uint8_t)(i * 7);
	kvsd_rpage_id_init(&id, "model-a", 1000, 42, &g, NULL);
	kvsd_rpage_seal(p.hdr, &id, &key);
	ok(kvsd_rpage_check(&p, sizeof(p), &id, &key) == KVSD_RPAGE_OK,
	   "a sealed page passes its check");
	ok(kvsd_rpage_check(&p, sizeof(p) - 1, &id, &key) == KVSD_RPAGE_BAD_SIZE,
	   "a short value: size");
	q = p;
	q.bytes[300] ^= 1;
	ok(kvsd_rpage_check(&q, sizeof(q), &id, &key) == KVSD_RPAGE_BAD_CHECKSUM,
	   "one bit of the bytes flipped: checksum");
	q = p;
	q.hdr[0] = 'X';
	ok(kvsd_rpage_check(&q, sizeof(q), &id, &key) == KVSD_RPAGE_BAD_FORMAT,
	   "another magic: format");
	ok(kvsd_rpage_check(&p, sizeof(p), &id, &other) == KVSD_RPAGE_BAD_KEY,
	   "asked under another chain key: key");
	kvsd_rpage_id_init(&id2, "model-b", 1000, 42, &g, NULL);
	ok(kvsd_rpage_check(&p, sizeof(p), &id2, &key) == KVSD_RPAGE_BAD_KEY,
	   "another tier namespace: key");
	kvsd_rpage_id_init(&id2, "model-a", 1001, 42, &g, NULL);
	ok(kvsd_rpage_check(&p, sizeof(p), &id2, &key) == KVSD_RPAGE_BAD_KEY,
	   "another owner: key");
	kvsd_rpage_id_init(&id2, "model-a", 1000, 43, &g, NULL);
	ok(kvsd_rpage_check(&p, sizeof(p), &id2, &key) == KVSD_RPAGE_BAD_KEY,
	   "another client namespace: key");
	g.dtype = KVS_DTYPE_F16;
	kvsd_rpage_id_init(&id2, "model-a", 1000, 42, &g, NULL);
	ok(kvsd_rpage_check(&p, sizeof(p), &id2, &key) == KVSD_RPAGE_BAD_GEOMETRY,
	   "another dtype of the same size: geometry");
	/* A forger who rewrites the header and recomputes the sum passes. */
	q = p;
	q.bytes[0] ^= 0xff;
	kvsd_rpage_seal(q.hdr, &id, &key);
	ok(kvsd_rpage_check(&q, sizeof(q), &id, &key) == KVSD_RPAGE_OK,
	   "a resealed forgery passes (the checksum is no MAC: docs/remote.md)");
	kvsd_rpage_key(k1, &id, &key);
	kvsd_rpage_key(k2, &id2, &key);
	ok(!strcmp(k1, "kvs1:model-a:1000:000000000000002a:L1H2D8T8bf16:"
		       "0000000000000001000000000000000200000000000000030000000000000004"),
	   "the Redis key names namespace, owner, client namespace, geometry, key");
	ok(strcmp(k1, k2) != 0, "another geometry is another Redis key");
}

/* A key file under @dir: 64 hex digits of @byte, mode @mode. */
static char *key_file(const char *dir, const char *name, int byte, mode_t mode)
{
	static char paths[4][256];
	static int next;
	char *path = paths[next++ % 4];
	FILE *f;
	int i;

	snprintf(path, sizeof(paths[0]), "%s/%s", dir, name);
	f = fopen(path, "w");
	for (i = 0; f && i < KVSD_RMAC_KEY; i++)
		fprintf(f, "%02x", byte);
	if (f) {
		fputc('\n', f);
		fclose(f);
	}
	chmod(path, mode);
	return path;
}

/*
 * What a forger who knows the format but not the key can do: rewrite the
 * bytes and recompute the XXH3-128 checksum (the header's last 16 bytes,
 * over the header with them zeroed and the bytes: docs/remote.md).
 */
static void forge_sum(struct mpage *m)
{
	XXH3_state_t *st = XXH3_createState();

	memset(m->hdr + KVSD_RPAGE_HDR - 16, 0, 16);
	XXH3_128bits_reset(st);
	XXH3_128bits_update(st, m->hdr, KVSD_RPAGE_HDR);
	XXH3_128bits_update(st, m->bytes, sizeof(m->bytes));
	XXH128_canonicalFromHash((XXH128_canonical_t *)(m->hdr + KVSD_RPAGE_HDR - 16),
				 XXH3_128bits_digest(st));
	XXH3_freeState(st);
}

static void test_mac(void)
{
	struct kvs_geometry g = {
		.n_layers = 1, .n_kv_heads = 2, .head_dim = 8, .tokens_per_page = 8,
		.dtype = KVS_DTYPE_BF16, .page_bytes = 512,
	};
	struct kvs_key key = { { 1, 2, 3, 4 } };
	char dir[] = "/tmp/remote_unit_XXXXXX", err[512], cmd[300];
	struct kvsd_rmac *mac = NULL, *bad = NULL;
	struct kvsd_rpage_id id, plain;
	struct mpage m, old, q;
	struct page p;
	char *ka, *kb, *kold;
	unsigned int i;

	if (!mkdtemp(dir)) {
		ok(0, "mkdtemp");
		return;
	}
	ka = key_file(dir, "a", 0xa1, 0600);
	kold = key_file(dir, "old", 0x01, 0600);
	unlink(kold);	/* no old key yet: an absent old file is none */
	ok(!kvsd_rmac_new(&mac, ka, kold, err, sizeof(err)) && mac->keys->n == 1,
	   "a 0600 key file of our uid loads; an absent old key file is no old key");
	if (!mac)
		return;
	for (i = 0; i < sizeof(m.bytes); i++)
		m.bytes[i] = (uint8_t)(i * 5);
	kvsd_rpage_id_init(&id, "model-a", 1000, 42, &g, mac);
	kvsd_rpage_id_init(&plain, "model-a", 1000, 42, &g, NULL);
	ok(kvsd_rpage_value_len(&id) == sizeof(m) && kvsd_rpage_value_len(&plain) == sizeof(p),
	   "a keyed value is 32 bytes longer: the nonce and the tag");
	ok(!kvsd_rpage_seal(m.hdr, &id, &key) &&
	   kvsd_rpage_check(&m, sizeof(m), &id, &key) == KVSD_RPAGE_OK,
	   "a keyed page passes its check");
	ok(kvsd_rpage_check(&m, sizeof(m), &plain, &key) == KVSD_RPAGE_OK,
	   "a tier without a key takes it (and trusts Redis)");
	q = m;
	q.bytes[100] ^= 0x40;
	forge_sum(&q);
	ok(kvsd_rpage_check(&q, sizeof(q), &plain, &key) == KVSD_RPAGE_OK &&
	   kvsd_rpage_check(&q, sizeof(q), &id, &key) == KVSD_RPAGE_BAD_MAC,
	   "bytes rewritten, checksum recomputed: passes without a key, mac with one");
	memcpy(p.hdr, m.hdr, sizeof(p.hdr));
	memcpy(p.bytes, m.bytes, sizeof(p.bytes));
	kvsd_rpage_seal(p.hdr, &plain, &key);
	ok(kvsd_rpage_check(&p, sizeof(p), &id, &key) == KVSD_RPAGE_BAD_MAC,
	   "a page sealed without the key (no MAC): mac");
	q = m;
	q.mac[KVSD_RMAC_NONCE + 3] ^= 1;
	ok(kvsd_rpage_check(&q, sizeof(q), &id, &key) == KVSD_RPAGE_BAD_MAC,
	   "one bit of the tag flipped: mac");
	q = m;
	q.mac[0] ^= 1;
	ok(kvsd_rpage_check(&q, sizeof(q), &id, &key) == KVSD_RPAGE_BAD_MAC,
	   "one bit of the nonce flipped (another one-time key): mac");
	q = m;
	q.hdr[KVSD_RPAGE_HDR - 24] |= 2;	/* flags: a bit no version knows */
	ok(kvsd_rpage_check(&q, sizeof(q), &id, &key) == KVSD_RPAGE_BAD_FORMAT,
	   "an unknown flag: format");
	ok(kvsd_rpage_check(&m, sizeof(p), &id, &key) == KVSD_RPAGE_BAD_SIZE,
	   "a keyed value cut to the unkeyed length: size");
	q = m;
	kvsd_rpage_seal(q.hdr, &id, &key);
	ok(memcmp(q.mac, m.mac, KVSD_RMAC_NONCE) != 0 &&
	   kvsd_rpage_check(&q, sizeof(q), &id, &key) == KVSD_RPAGE_OK,
	   "the same page sealed twice draws two nonces");
	{
		/* Sealed in parts, as the tier sends a page from the pool. */
		uint8_t hdr[KVSD_RPAGE_HDR], tag[KVSD_RMAC_LEN];

		q = m;
		ok(!kvsd_rpage_seal_parts(hdr, m.bytes, tag, &id, &key) &&
		   (memcpy(q.hdr, hdr, sizeof(hdr)), memcpy(q.mac, tag, sizeof(tag)),
		    kvsd_rpage_check(&q, sizeof(q), &id, &key) == KVSD_RPAGE_OK) &&
		   !memcmp(hdr, m.hdr, KVSD_RPAGE_HDR),
		   "a page sealed in parts (header, pool bytes, MAC apart) passes, same header");
		q.bytes[7] ^= 1;	/* the page changed after its seal, before it was sent */
		ok(kvsd_rpage_check(&q, sizeof(q), &id, &key) == KVSD_RPAGE_BAD_CHECKSUM,
		   "a page that changed between its seal and its send is refused (checksum)");
	}

	/* Rotation: b signs, a is still accepted; then a goes. */
	old = m;
	kb = key_file(dir, "b", 0xb2, 0600);
	snprintf(cmd, sizeof(cmd), "mv %s/a %s/old && mv %s/b %s/a", dir, dir, dir, dir);
	ok(!system(cmd) && !kvsd_rmac_reload(mac, err, sizeof(err)) && mac->keys->n == 2 &&
	   kvsd_rpage_check(&old, sizeof(old), &id, &key) == KVSD_RPAGE_OK,
	   "rotated: a page of the old key still passes while it is accepted");
	kvsd_rpage_seal(m.hdr, &id, &key);
	unlink(kold);
	ok(!kvsd_rmac_reload(mac, err, sizeof(err)) && mac->keys->n == 1 &&
	   kvsd_rpage_check(&old, sizeof(old), &id, &key) == KVSD_RPAGE_BAD_MAC &&
	   kvsd_rpage_check(&m, sizeof(m), &id, &key) == KVSD_RPAGE_OK,
	   "the old key removed: its pages fail (mac), the new key's pass");
	chmod(ka, 0640);
	ok(kvsd_rmac_reload(mac, err, sizeof(err)) == -EINVAL && strstr(err, "mode 0640") &&
	   kvsd_rpage_check(&m, sizeof(m), &id, &key) == KVSD_RPAGE_OK,
	   "a reload that finds a bad file keeps the keys in use");

	/* The files' rules. */
	ok(kvsd_rmac_new(&bad, ka, NULL, err, sizeof(err)) == -EINVAL &&
	   strstr(err, "mode 0640: others may read"), "a group-readable key file is refused");
	chmod(ka, 0600);
	kb = key_file(dir, "short", 0xcc, 0600);
	truncate(kb, 40);
	ok(kvsd_rmac_new(&bad, kb, NULL, err, sizeof(err)) == -EINVAL &&
	   strstr(err, "64 hex digits"), "a key file of 20 bytes is refused");
	kb = key_file(dir, "nothex", 0xcc, 0600);
	snprintf(cmd, sizeof(cmd), "sed -i 's/^c/g/' %s", kb);
	ok(!system(cmd) && kvsd_rmac_new(&bad, kb, NULL, err, sizeof(err)) == -EINVAL &&
	   strstr(err, "not a hex digit at byte 0"), "a key file with a non-hex digit is refused");
	snprintf(cmd, sizeof(cmd), "%s/link", dir);
	symlink(ka, cmd);
	ok(kvsd_rmac_new(&bad, cmd, NULL, err, sizeof(err)) == -EINVAL &&
	   strstr(err, "Too many levels"), "a key file that is a symlink is refused");
	ok(kvsd_rmac_new(&bad, kold, NULL, err, sizeof(err)) == -EINVAL &&
	   strstr(err, "No such file"), "an absent key file is refused");
	if (!geteuid()) {
		chown(ka, 65534, 65534);
		ok(kvsd_rmac_new(&bad, ka, NULL, err, sizeof(err)) == -EINVAL &&
		   strstr(err, "belongs to uid 65534"), "another uid's key file is refused");
	} else {
		ok(1, "# SKIP another uid's key file (needs root)");
	}
	kvsd_rmac_free(mac);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	system(cmd);
}

int main(void)
{
	printf("TAP version 13\n1..40\n");
	test_slots();
	test_pages();
	test_mac();
	return n_failed ? 1 : 0;
}
