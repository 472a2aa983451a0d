// SPDX-License-Identifier: GPL-2.0
/*
 * remote_forge: a Redis writer who holds the tier's Redis password but not
 * its MAC key, for tests/remote/mac_test.sh.  For every key read from
 * stdin, one a line, it plants a page of its own: the bytes rewritten, the header
 * left as the key wants it, and the XXH3-128 checksum recomputed, as
 * docs/remote.md documents the format (written from that text, not from
 * daemon/remote/page.c).
 *
 *	remote_forge PORT USER PASSWORD keep|strip <KEYS
 *
 * It logs in as USER and sends only GET and SET, what the tier's ACL user
 * may (tests/remote/lib.sh); the tests' admin lists the keys.
 *
 * keep: the MAC the value carried stays (now stale); strip: the MAC is
 * cut off and the header's MAC flag cleared, the format of a tier without
 * a key.  Prints how many values it planted; exits 1 if none.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <xxhash.h>

#define HDR		128	/* the header: ... flags (u64 LE) at 104, sum at 112 */
#define FLAGS_AT	104
#define SUM_AT		112
#define MAC_LEN		32	/* nonce and tag, after the bytes */

static void reseal(uint8_t *v, size_t page_bytes)
{
	XXH3_state_t *st = XXH3_createState();

	memset(v + SUM_AT, 0, 16);
	XXH3_128bits_reset(st);
	XXH3_128bits_update(st, v, HDR + page_bytes);
	XXH128_canonicalFromHash((XXH128_canonical_t *)(v + SUM_AT), XXH3_128bits_digest(st));
	XXH3_freeState(st);
}

/* Plant a page under @key; 1 if done. */
static int plant(redisContext *c, const char *key, int strip)
{
	redisReply *r = redisCommand(c, "GET %s", key), *w;
	uint64_t page_bytes, flags;
	size_t len, i;
	uint8_t *v;
	int done = 0;

	if (!r || r->type != REDIS_REPLY_STRING || r->len < HDR)
		goto out;
	v = (uint8_t *)r->str;
	memcpy(&page_bytes, v + 40, 8);	/* little-endian hosts only, as the tests */
	memcpy(&flags, v + FLAGS_AT, 8);
	if (r->len != HDR + page_bytes + (flags & 1 ? MAC_LEN : 0))
		goto out;
	for (i = 0; i < page_bytes; i += 64)	/* wrong contents, every cache line */
		v[HDR + i] += 0x5b;	/* not an involution: planting twice still forges */
	len = r->len;
	if (strip && (flags & 1)) {
		flags &= ~1ull;
		memcpy(v + FLAGS_AT, &flags, 8);
		len -= MAC_LEN;
	}
	reseal(v, page_bytes);
	w = redisCommand(c, "SET %s %b", key, v, len);
	done = w && w->type == REDIS_REPLY_STATUS;
	freeReplyObject(w);
out:
	freeReplyObject(r);
	return done;
}

int main(int argc, char **argv)
{
	unsigned long planted = 0;
	char key[512];
	redisContext *c;
	redisReply *r;

	if (argc != 5 || (strcmp(argv[4], "keep") && strcmp(argv[4], "strip"))) {
		fprintf(stderr, "usage: remote_forge PORT USER PASSWORD keep|strip <KEYS\n");
		return 2;
	}
	c = redisConnect("127.0.0.1", atoi(argv[1]));
	if (!c || c->err) {
		fprintf(stderr, "remote_forge: connect: %s\n", c ? c->errstr : "no memory");
		return 1;
	}
	r = redisCommand(c, "AUTH %s %s", argv[2], argv[3]);
	if (!r || r->type == REDIS_REPLY_ERROR) {
		fprintf(stderr, "remote_forge: AUTH refused\n");
		return 1;
	}
	freeReplyObject(r);
	while (fgets(key, sizeof(key), stdin)) {
		key[strcspn(key, "\r\n")] = '\0';
		if (key[0])
			planted += plant(c, key, !strcmp(argv[4], "strip"));
	}
	redisFree(c);
	printf("%lu\n", planted);
	return planted ? 0 : 1;
}
