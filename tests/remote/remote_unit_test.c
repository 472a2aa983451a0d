// SPDX-License-Identifier: GPL-2.0
/*
 * remote_unit_test: the remote tier's pure parts, as TAP.  The page
 * format's check refuses every field that differs from what the importer
 * asked for, and the key slot is Redis Cluster's (the values of the
 * cluster specification).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	kvsd_rpage_id_init(&id, "model-a", 1000, 42, &g);
	kvsd_rpage_seal(p.hdr, &id, &key, p.bytes);
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
	kvsd_rpage_id_init(&id2, "model-b", 1000, 42, &g);
	ok(kvsd_rpage_check(&p, sizeof(p), &id2, &key) == KVSD_RPAGE_BAD_KEY,
	   "another tier namespace: key");
	kvsd_rpage_id_init(&id2, "model-a", 1001, 42, &g);
	ok(kvsd_rpage_check(&p, sizeof(p), &id2, &key) == KVSD_RPAGE_BAD_KEY,
	   "another owner: key");
	kvsd_rpage_id_init(&id2, "model-a", 1000, 43, &g);
	ok(kvsd_rpage_check(&p, sizeof(p), &id2, &key) == KVSD_RPAGE_BAD_KEY,
	   "another client namespace: key");
	g.dtype = KVS_DTYPE_F16;
	kvsd_rpage_id_init(&id2, "model-a", 1000, 42, &g);
	ok(kvsd_rpage_check(&p, sizeof(p), &id2, &key) == KVSD_RPAGE_BAD_GEOMETRY,
	   "another dtype of the same size: geometry");
	/* A forger who rewrites the header and recomputes the sum passes. */
	q = p;
	q.bytes[0] ^= 0xff;
	kvsd_rpage_seal(q.hdr, &id, &key, q.bytes);
	ok(kvsd_rpage_check(&q, sizeof(q), &id, &key) == KVSD_RPAGE_OK,
	   "a resealed forgery passes (the checksum is no MAC: docs/remote.md)");
	kvsd_rpage_key(k1, &id, &key);
	kvsd_rpage_key(k2, &id2, &key);
	ok(!strcmp(k1, "kvs1:model-a:1000:000000000000002a:L1H2D8T8bf16:"
		       "0000000000000001000000000000000200000000000000030000000000000004"),
	   "the Redis key names namespace, owner, client namespace, geometry, key");
	ok(strcmp(k1, k2) != 0, "another geometry is another Redis key");
}

int main(void)
{
	printf("TAP version 13\n1..18\n");
	test_slots();
	test_pages();
	return n_failed ? 1 : 0;
}
