// SPDX-License-Identifier: GPL-2.0
/*
 * remote_resp_test: the remote tier's RESP reader (daemon/remote/resp.c)
 * against the hostile-Redis corpus (tests/remote/corpus/MANIFEST), as
 * TAP.  Every file is fed whole, a byte at a time and in odd chunks; each
 * way must give the manifest's outcome, within 100 ms and 1 MiB of heap
 * beyond the reader's own buffer.  (Built without ASan, whose allocator
 * mallinfo2() does not see.)
 * Then the sink (values straight into a page), the bounds one at a time,
 * the log escaping and the formatter.
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/uio.h>

#include "resp.h"

#define GET_BOUND	(16384 + 128 + 64)	/* a 16 KiB page's GET (daemon/remote/thread.c) */

static int n_test, n_failed;

static void ok(int cond, const char *fmt, const char *arg)
{
	n_test++;
	if (!cond)
		n_failed++;
	printf("%sok %d ", cond ? "" : "not ", n_test);
	printf(fmt, arg);
	putchar('\n');
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const char *const type_names[] = {
	[KVSD_REPLY_STATUS] = "status", [KVSD_REPLY_ERROR] = "error",
	[KVSD_REPLY_INTEGER] = "integer", [KVSD_REPLY_STRING] = "string",
	[KVSD_REPLY_NIL] = "nil", [KVSD_REPLY_ARRAY] = "array",
};

/*
 * Feed @len bytes in chunks of @chunk (0: as much as the reader takes);
 * the first reply's outcome: its type's name, "proto" or "more".
 */
static size_t heap_peak;	/* the most feed() had allocated, reader included */

static size_t heap_now(void)
{
	return mallinfo2().uordblks;
}

static const char *feed(const char *buf, size_t len, size_t chunk, size_t bound,
			const struct kvsd_rsink *sink, struct kvsd_reply **out)
{
	size_t heap0 = heap_now();
	struct kvsd_resp *r = kvsd_resp_new();
	const char *res = "more";
	size_t at = 0, room, n;
	char *p;
	int ret;

	*out = NULL;
	if (!r)
		return "nomem";
	kvsd_resp_expect(r, bound, sink);
	while (at < len) {
		kvsd_resp_space(r, &p, &room);
		n = len - at;
		if (chunk && n > chunk)
			n = chunk;
		if (n > room)
			n = room;
		memcpy(p, buf + at, n);
		kvsd_resp_filled(r, n);
		at += n;
		ret = kvsd_resp_next(r, out);
		if (heap_now() - heap0 > heap_peak)
			heap_peak = heap_now() - heap0;
		if (ret < 0) {
			res = "proto";
			break;
		}
		if (ret) {
			res = type_names[(*out)->type];
			break;
		}
	}
	kvsd_resp_free(r);
	return res;
}

/* What recvmsg() would do: up to @n bytes of @src into @iov in order. */
static size_t scatter(const struct iovec *iov, unsigned int n_iov, const char *src, size_t n)
{
	size_t at = 0, c;
	unsigned int i;

	for (i = 0; i < n_iov && at < n; i++) {
		c = iov[i].iov_len < n - at ? iov[i].iov_len : n - at;
		memcpy(iov[i].iov_base, src + at, c);
		at += c;
	}
	return at;
}

/*
 * The same through the read-ahead (kvsd_resp_iov()), every reply
 * expected to be a value of @sink's expected length: the first reply's
 * outcome, and it must be the one feed() gives.
 */
static const char *feed_iov(const char *buf, size_t len, size_t chunk, size_t bound,
			    const struct kvsd_rsink *sink, struct kvsd_reply **out)
{
	const struct kvsd_rsink *next[KVSD_RESP_PLAN + 1];
	struct iovec iov[KVSD_RESP_IOV];
	struct kvsd_resp *r = kvsd_resp_new();
	const char *res = "more";
	unsigned int i, n_iov;
	size_t at = 0, n;
	int ret;

	*out = NULL;
	if (!r)
		return "nomem";
	for (i = 0; i <= KVSD_RESP_PLAN; i++)
		next[i] = sink;
	kvsd_resp_expect(r, bound, sink);
	while (at < len) {
		n_iov = kvsd_resp_iov(r, next, KVSD_RESP_PLAN + 1, bound, iov);
		n = len - at;
		if (chunk && n > chunk)
			n = chunk;
		n = scatter(iov, n_iov, buf + at, n);
		kvsd_resp_filled(r, n);
		at += n;
		ret = kvsd_resp_next(r, out);
		if (ret < 0) {
			res = "proto";
			break;
		}
		if (ret) {
			res = type_names[(*out)->type];
			break;
		}
	}
	kvsd_resp_free(r);
	return res;
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc(n + 1);
	if (buf && fread(buf, 1, n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*len = n;
	return buf;
}

static void test_corpus(const char *dir)
{
	static const size_t chunks[] = { 0, 1, 7, 4093 };
	static char hdr[128], body[16384], tail[32];
	/* Read ahead as the tier does: every reply expected to be a page. */
	const struct kvsd_rsink page = { hdr, 128, body, 16384, tail, 32, 128 + 16384 };
	char path[512], line[256], name[128], want[32], after[32], what[512];
	FILE *m;

	snprintf(path, sizeof(path), "%s/MANIFEST", dir);
	m = fopen(path, "r");
	ok(m != NULL, "the corpus manifest %s opens", path);
	if (!m)
		return;
	while (fgets(line, sizeof(line), m)) {
		struct kvsd_reply *rep;
		const char *got = NULL, *bad = NULL;
		size_t len, i, heap_max = 0;
		double t0, worst = 0;
		char *buf;

		if (line[0] == '#' || sscanf(line, "%127s %31s %31s", name, want, after) != 3)
			continue;
		snprintf(path, sizeof(path), "%s/%s.resp", dir, name);
		buf = slurp(path, &len);
		if (!buf) {
			ok(0, "corpus %s: file missing", name);
			continue;
		}
		for (i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
			heap_peak = 0;
			t0 = now_ms();
			got = feed(buf, len, chunks[i], GET_BOUND, NULL, &rep);
			if (now_ms() - t0 > worst)
				worst = now_ms() - t0;
			if (heap_peak > heap_max)
				heap_max = heap_peak;
			kvsd_reply_free(rep);
			if (strcmp(got, want)) {
				bad = got;
				break;
			}
			got = feed_iov(buf, len, chunks[i], GET_BOUND, &page, &rep);
			kvsd_reply_free(rep);
			if (strcmp(got, want)) {
				bad = got;
				break;
			}
		}
		snprintf(what, sizeof(what), "%s (%zu bytes): %s%s%s, every chunking, read "
			 "ahead or not; "
			 "%.1f ms, heap +%zu KiB at most", name, len, want,
			 bad ? " but got " : "", bad ? bad : "", worst, heap_max >> 10);
		ok(!bad && worst < 100 && heap_max < KVSD_RESP_BUF + (1u << 20), "%s", what);
		free(buf);
	}
	fclose(m);
}

static void test_sink(void)
{
	size_t page = 16384, len = 128 + page, i;
	char *buf = malloc(len + 32), *hdr = malloc(128), *body = malloc(page);
	struct kvsd_rsink sink = { hdr, 128, body, page, NULL, 0, 0 };
	struct kvsd_reply *rep;
	int off, good = 1;

	off = sprintf(buf, "$%zu\r\n", len);
	for (i = 0; i < len; i++)
		buf[off + i] = (char)(i * 7 + (i >> 8));
	memcpy(buf + off + len, "\r\n", 2);
	for (i = 0; i < 3; i++) {
		static const size_t chunks[] = { 0, 1, 1000 };

		memset(hdr, 0, 128);
		memset(body, 0, page);
		good &= !strcmp(feed(buf, off + len + 2, chunks[i], GET_BOUND, &sink, &rep),
				"string") && rep->sunk && !rep->str && rep->len == len &&
			!memcmp(hdr, buf + off, 128) && !memcmp(body, buf + off + 128, page);
		kvsd_reply_free(rep);
	}
	ok(good, "%s", "a value of the sink's length goes to its header and page, whole "
	   "or a byte at a time");

	{
		char tail[8];

		sink.body_len = page - 8;	/* now the value is the sink and a tail */
		sink.tail = tail;
		sink.tail_len = 8;
		memset(tail, 0, sizeof(tail));
		ok(!strcmp(feed(buf, off + len + 2, 3, GET_BOUND, &sink, &rep), "string") &&
		   rep->sunk && rep->len == len && !memcmp(tail, buf + off + len - 8, 8) &&
		   !memcmp(body, buf + off + 128, page - 8),
		   "%s", "a value with the sink's optional tail fills head, page and tail");
		kvsd_reply_free(rep);
		sink.tail = NULL;
		sink.tail_len = 0;
	}
	/* Without a tail, that value is 8 bytes longer than the sink. */
	ok(!strcmp(feed(buf, off + len + 2, 0, GET_BOUND, &sink, &rep), "string") &&
	   !rep->sunk && !rep->str && rep->len == len,
	   "%s", "a value of another length is discarded, its length kept (refused as size)");
	kvsd_reply_free(rep);
	free(buf);
	free(hdr);
	free(body);
}

/* A large value is read in place: the reader offers the page itself. */
static void test_direct(void)
{
	size_t page = 2u << 20, len = 128 + page;
	char *hdr = malloc(128), *body = malloc(page), line[32], *p;
	struct kvsd_rsink sink = { hdr, 128, body, page, NULL, 0, 0 };
	struct kvsd_resp *r = kvsd_resp_new();
	struct kvsd_reply *rep = NULL;
	size_t room, at = 0, n;
	int in_place = 0, calls = 0, ret = 0;

	kvsd_resp_expect(r, len + 64, &sink);
	n = sprintf(line, "$%zu\r\n", len);
	kvsd_resp_space(r, &p, &room);
	memcpy(p, line, n);
	memset(p + n, 'h', 128);
	kvsd_resp_filled(r, n + 128);
	kvsd_resp_next(r, &rep);
	while (at < page) {
		kvsd_resp_space(r, &p, &room);
		in_place += p == body + at;
		n = page - at < room ? page - at : room;
		memset(p, 'b', n);
		kvsd_resp_filled(r, n);
		at += n;
		calls++;
		ret = kvsd_resp_next(r, &rep);
	}
	kvsd_resp_space(r, &p, &room);
	memcpy(p, "\r\n", 2);
	kvsd_resp_filled(r, 2);
	ret = kvsd_resp_next(r, &rep);
	ok(ret == 1 && rep && rep->sunk && in_place == calls && body[0] == 'b' &&
	   body[page - 1] == 'b' && hdr[127] == 'h',
	   "%s", "a 2 MiB value is read straight into the page, never through the buffer");
	kvsd_reply_free(rep);
	kvsd_resp_free(r);
	free(hdr);
	free(body);
}

/*
 * A pipeline read ahead: values of the expected length, each into its own
 * sink, among a nil, an error, a value of another length, one with the
 * optional tail, a status; in chunks of every size.  Every reply must be
 * what it is, every sunk value whole in its own sink, and the replies
 * must be exactly those feed()'s way gives.
 */
#define RA_N		40
static void test_readahead(void)
{
	static const size_t chunks[] = { 0, 1, 5, 130, 4096, 16519, 65536, 300000 };
	size_t page = 16384, vlen = 128 + page, cap = RA_N * (vlen + 64), len = 0, ci;
	char *stream = malloc(cap), *mem = calloc(RA_N, vlen + 32);
	struct kvsd_rsink sinks[RA_N];
	const struct kvsd_rsink *next[KVSD_RESP_PLAN + 1];
	enum kvsd_reply_type want[RA_N];
	size_t want_len[RA_N];
	unsigned int i, k;
	int good = 1, ahead = 0;

	for (i = 0; i < RA_N; i++) {
		char *m = mem + (size_t)i * (vlen + 32);
		size_t b, l = vlen;

		sinks[i] = (struct kvsd_rsink){ m, 128, m + 128, page, m + vlen, 32, vlen };
		want[i] = KVSD_REPLY_STRING;
		if (i == 7) {
			len += sprintf(stream + len, "$-1\r\n");
			want[i] = KVSD_REPLY_NIL;
			continue;
		}
		if (i == 13) {
			len += sprintf(stream + len, "-MOVED 1 127.0.0.1:7\r\n");
			want[i] = KVSD_REPLY_ERROR;
			continue;
		}
		if (i == 21) {
			len += sprintf(stream + len, "+OK\r\n");
			want[i] = KVSD_REPLY_STATUS;
			continue;
		}
		if (i == 17)
			l = vlen + 32;		/* with the tail */
		if (i == 29)
			l = vlen - 1;		/* another length: discarded */
		want_len[i] = l;
		len += sprintf(stream + len, "$%zu\r\n", l);
		for (b = 0; b < l; b++)
			stream[len + b] = (char)(i * 31 + b * 7 + (b >> 9));
		len += l;
		memcpy(stream + len, "\r\n", 2);
		len += 2;
	}
	for (ci = 0; ci < sizeof(chunks) / sizeof(chunks[0]); ci++) {
		struct kvsd_resp *r = kvsd_resp_new();
		struct iovec iov[KVSD_RESP_IOV];
		unsigned int got = 0, n_iov;
		size_t at = 0, n, off;
		struct kvsd_reply *rep;
		int ret;

		memset(mem, 0, RA_N * (vlen + 32));
		kvsd_resp_expect(r, GET_BOUND, &sinks[0]);
		while (at < len && good) {
			for (k = 0; k <= KVSD_RESP_PLAN && got + k < RA_N; k++)
				next[k] = &sinks[got + k];
			n_iov = kvsd_resp_iov(r, next, k, GET_BOUND, iov);
			ahead += n_iov > 4;
			n = len - at;
			if (chunks[ci] && n > chunks[ci])
				n = chunks[ci];
			n = scatter(iov, n_iov, stream + at, n);
			kvsd_resp_filled(r, n);
			at += n;
			for (;;) {
				if (got < RA_N)
					kvsd_resp_expect(r, GET_BOUND, &sinks[got]);
				ret = kvsd_resp_next(r, &rep);
				if (ret <= 0) {
					good &= ret == 0;
					break;
				}
				good &= got < RA_N && rep->type == want[got];
				if (good && rep->type == KVSD_REPLY_STRING) {
					good &= rep->len == want_len[got] &&
						rep->sunk == (got != 29);
				}
				kvsd_reply_free(rep);
				got++;
			}
		}
		good &= got == RA_N && !kvsd_resp_busy(r);
		/* Every value whole in its own sink, the tail too where it came. */
		for (i = 0, off = 0; good && i < RA_N; i++) {
			const char *m = mem + (size_t)i * (vlen + 32);
			size_t line;

			line = strchr(stream + off, '\n') - (stream + off) + 1;
			if (want[i] == KVSD_REPLY_STRING && i != 29)
				good &= !memcmp(m, stream + off + line, want_len[i]);
			off += line + (want[i] == KVSD_REPLY_STRING ? want_len[i] + 2 : 0);
		}
		kvsd_resp_free(r);
		if (!good)
			printf("# read ahead: chunks of %zu failed\n", chunks[ci]);
	}
	ok(good && ahead, "%s", "a pipeline read ahead into its sinks, a nil, an error, a status, "
	   "a value with its tail and one of another length among the pages, in chunks of "
	   "every size: every reply as it is, every page whole in its own sink");
	free(stream);
	free(mem);
}

static void test_bounds(void)
{
	static const char slots_like[] = "*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n$9\r\n127.0.0.1\r\n"
					 ":7000\r\n$4\r\nabcd\r\n*0\r\n";
	struct kvsd_reply *rep;
	char buf[64];

	ok(!strcmp(feed(slots_like, sizeof(slots_like) - 1, 0, 1u << 20, NULL, &rep),
		   "array") && rep->elements == 1 && rep->element[0]->elements == 3 &&
	   rep->element[0]->element[2]->element[1]->integer == 7000,
	   "%s", "a CLUSTER SLOTS reply (4 levels) is read whole");
	kvsd_reply_free(rep);
	{
		size_t n = 65536, len, i;
		char *big = malloc(16 + 4 * (n + 1));

		len = sprintf(big, "*%zu\r\n", n);
		for (i = 0; i < n; i++)
			len += sprintf(big + len, ":1\r\n");
		heap_peak = 0;
		ok(!strcmp(feed(big, len, 0, 1u << 20, NULL, &rep), "array") &&
		   heap_peak < KVSD_RESP_BUF + (8u << 20),
		   "%s", "the most elements a 1 MiB reply may have (65536) cost under 8 MiB");
		kvsd_reply_free(rep);
		len = sprintf(big, "*%zu\r\n", n + 1);
		ok(!strcmp(feed(big, len, 0, 1u << 20, NULL, &rep), "proto"),
		   "%s", "one more is refused at the header");
		free(big);
	}
	ok(!strcmp(feed("$-1\r\n+OK\r\n:5\r\n", 14, 1, 100, NULL, &rep), "nil"),
	   "%s", "pipelined replies come one at a time, in order");
	kvsd_reply_free(rep);
	ok(!strcmp(feed("$20\r\n01234567890123456789\r\n", 27, 0, 20, NULL, &rep), "proto"),
	   "%s", "a bulk longer than the reply's bound is refused before it is read");
	ok(!strcmp(feed("*3\r\n:1\r\n:2\r\n:3\r\n", 16, 0, 8, NULL, &rep), "proto"),
	   "%s", "an array declaring more than its bytes can hold is refused at its header");
	ok(!strcmp(feed(":-9223372036854775808\r\n", 23, 0, 100, NULL, &rep), "integer") &&
	   rep->integer == -9223372036854775807ll - 1, "%s", "the smallest integer parses");
	kvsd_reply_free(rep);
	kvsd_resp_escape(buf, sizeof(buf), "a\x1b[31m\n\\z", 9);
	ok(!strcmp(buf, "a\\x1b[31m\\x0a\\x5cz"), "%s",
	   "Redis's words are escaped for the log: no escape sequence, no newline");
	kvsd_resp_escape(buf, 8, "\n\n\n\n", 4);
	ok(!strcmp(buf, "\\x0a"), "%s", "escaping cuts whole sequences to fit");
	{
		const char *argv[] = { "GET", "key" };
		size_t lens[] = { 3, 3 };
		char *cmd = NULL;
		int n = kvsd_resp_format(&cmd, 2, argv, lens);

		ok(n == 22 && !memcmp(cmd, "*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n", 22), "%s",
		   "a command is a RESP array of bulk strings");
		free(cmd);
	}
}

int main(int argc, char **argv)
{
	printf("TAP version 13\n");
	test_corpus(argc > 1 ? argv[1] : "tests/remote/corpus");
	test_sink();
	test_direct();
	test_readahead();
	test_bounds();
	printf("1..%d\n", n_test);
	return n_failed ? 1 : 0;
}
