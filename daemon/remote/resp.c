// SPDX-License-Identifier: GPL-2.0
/*
 * The remote tier's RESP2 reader and formatter (resp.h).
 *
 * The reader keeps one fixed buffer.  A line is parsed only once it is
 * whole in the buffer (at most KVSD_RESP_MAX_LINE bytes); a bulk
 * string's bytes are moved out of it as they come (into the reply's own
 * string, the sink, or nowhere), so the buffer never holds more than
 * one line's leftovers between reads and compacting it moves at most
 * that much.  The reply under construction hangs off r->root, each new
 * item attached to its parent at once, so that freeing the root frees
 * a reply cut short anywhere.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "resp.h"

/* A sunk bulk with at least this much left, and nothing buffered, is read in place. */
#define DIRECT_MIN	(64u << 10)
/* The read buffer's room a plan leaves for the bytes past it, at least. */
#define PLAN_SLACK	4096

/* A reply planned ahead (kvsd_resp_iov()): a bulk of @len bytes into @sink. */
struct spec {
	const struct kvsd_rsink *sink;
	size_t len;
	char want[24];			/* its header line, after the CRLF before it */
	unsigned int want_len;
	char got[24];			/* where recvmsg() put those bytes */
};

struct frame {
	struct kvsd_reply *r;		/* an array being filled */
	size_t next;			/* its next element */
};

struct kvsd_resp {
	char *buf;
	size_t start, end;		/* unparsed bytes: buf[start..end) */
	bool failed;
	char err[96];

	/* The reply in progress and its bounds. */
	struct kvsd_reply *root;
	struct frame stack[KVSD_RESP_MAX_DEPTH];
	unsigned int depth;
	size_t max_reply, used;		/* its wire bytes: bound, so far */
	size_t elems, max_elems;
	const struct kvsd_rsink *sink;	/* for the reply's (top-level) bulk */

	/* A bulk string in progress: its bytes, then CRLF. */
	struct kvsd_reply *bulk;
	size_t bulk_got;
	bool bulk_crlf;			/* the bytes are in; its CRLF is due */

	/* The last kvsd_resp_iov()'s plan, and the replies it completed. */
	bool planned;
	size_t cur_rem;			/* bytes of the bulk in progress planned */
	struct spec spec[KVSD_RESP_PLAN];
	unsigned int n_spec;
	size_t spec_bytes;		/* the plan's bytes past the bulk in progress */
	size_t plan_max;		/* the planned replies' bound */
	struct kvsd_reply *ready[KVSD_RESP_PLAN + 1];
	unsigned int n_ready, ready_at;
};

struct kvsd_resp *kvsd_resp_new(void)
{
	struct kvsd_resp *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->buf = malloc(KVSD_RESP_BUF);
	if (!r->buf) {
		free(r);
		return NULL;
	}
	kvsd_resp_expect(r, 4096, NULL);
	return r;
}

void kvsd_resp_free(struct kvsd_resp *r)
{
	if (!r)
		return;
	while (r->ready_at < r->n_ready)
		kvsd_reply_free(r->ready[r->ready_at++]);
	kvsd_reply_free(r->root);
	free(r->buf);
	free(r);
}

void kvsd_reply_free(struct kvsd_reply *rep)
{
	size_t i;

	if (!rep)
		return;
	if (rep->type == KVSD_REPLY_ARRAY && rep->element)
		for (i = 0; i < rep->elements; i++)
			kvsd_reply_free(rep->element[i]);
	free(rep->element);
	free(rep->str);
	free(rep);
}

bool kvsd_resp_busy(const struct kvsd_resp *r)
{
	return r->root || r->start < r->end || r->ready_at < r->n_ready;
}

const char *kvsd_resp_error(const struct kvsd_resp *r)
{
	return r->err[0] ? r->err : "protocol error";
}

void kvsd_resp_expect(struct kvsd_resp *r, size_t max_reply,
		      const struct kvsd_rsink *sink)
{
	if (r->root || r->ready_at < r->n_ready)
		return;		/* a reply in progress (or read ahead) keeps its bounds */
	r->max_reply = max_reply;
	/* Every element costs 3 bytes at least ("+\r\n"). */
	r->max_elems = max_reply / 3 + 1;
	if (r->max_elems > KVSD_RESP_MAX_ELEMENTS)
		r->max_elems = KVSD_RESP_MAX_ELEMENTS;
	r->sink = sink;
}

static int fail(struct kvsd_resp *r, const char *fmt, long long v)
{
	snprintf(r->err, sizeof(r->err), fmt, v);
	r->failed = true;
	return -EPROTO;
}

static bool sinking(const struct kvsd_resp *r)
{
	return r->bulk && r->bulk->sunk;
}

/* Where byte @at of the sunk bulk goes, and how many follow it there. */
static char *sink_at(const struct kvsd_rsink *s, size_t at, size_t *room)
{
	if (at < s->head_len) {
		*room = s->head_len - at;
		return (char *)s->head + at;
	}
	at -= s->head_len;
	if (at < s->body_len) {
		*room = s->body_len - at;
		return (char *)s->body + at;
	}
	at -= s->body_len;
	*room = s->tail_len - at;
	return (char *)s->tail + at;
}

/* A bulk of @n bytes fits the sink exactly, with or without its tail. */
static bool sink_fits(const struct kvsd_rsink *s, size_t n)
{
	return n == s->head_len + s->body_len ||
	       (s->tail && n == s->head_len + s->body_len + s->tail_len);
}

/* The read buffer with its unparsed bytes at its start when that makes room. */
static void buf_room(struct kvsd_resp *r)
{
	if (r->start == r->end) {
		r->start = r->end = 0;
	} else if (r->end == KVSD_RESP_BUF || r->start > KVSD_RESP_BUF / 2) {
		/* Leftovers are part of one line: short. */
		memmove(r->buf, r->buf + r->start, r->end - r->start);
		r->end -= r->start;
		r->start = 0;
	}
}

void kvsd_resp_space(struct kvsd_resp *r, char **p, size_t *len)
{
	size_t room;

	r->planned = false;
	if (sinking(r) && !r->bulk_crlf && r->start == r->end &&
	    r->bulk->len - r->bulk_got >= DIRECT_MIN && r->ready_at == r->n_ready) {
		*p = sink_at(r->sink, r->bulk_got, &room);
		*len = room;
		r->planned = true;
		r->cur_rem = room;
		r->n_spec = 0;
		r->spec_bytes = 0;
		return;
	}
	buf_room(r);
	*p = r->buf + r->end;
	*len = KVSD_RESP_BUF - r->end;
}

/* Sink @s's bytes [from, to) as iovecs; how many were added. */
static unsigned int sink_iov(const struct kvsd_rsink *s, size_t from, size_t to,
			     struct iovec *iov)
{
	unsigned int n = 0;
	size_t room;

	while (from < to) {
		iov[n].iov_base = sink_at(s, from, &room);
		iov[n].iov_len = room < to - from ? room : to - from;
		from += iov[n++].iov_len;
	}
	return n;
}

/*
 * The plan: the rest of a sunk bulk in progress straight into its sink,
 * then, for each next reply whose sink says what length to expect, its
 * header line into a scratch slot and its bytes into its sink, then the
 * read buffer.  A plan's bytes past the bulk in progress never exceed the
 * buffer's room less what the buffer itself is offered: should a header
 * not be what was expected, everything from it on is moved into the
 * buffer and parsed as it would have been.
 */
unsigned int kvsd_resp_iov(struct kvsd_resp *r, const struct kvsd_rsink *const *next,
			   unsigned int n_next, size_t max_reply, struct iovec *iov)
{
	unsigned int n = 0, k = 0;
	size_t avail, from;
	bool crlf;

	r->planned = true;
	r->cur_rem = 0;
	r->n_spec = 0;
	r->spec_bytes = 0;
	r->plan_max = max_reply;
	buf_room(r);
	avail = KVSD_RESP_BUF - r->end;
	if (r->failed || r->start != r->end || r->ready_at != r->n_ready)
		goto buffer;
	if (sinking(r) && !r->bulk_crlf) {
		/* The bulk in progress is the reply next[0] is for. */
		from = r->bulk_got;
		n = sink_iov(r->sink, from, r->bulk->len, iov);
		r->cur_rem = r->bulk->len - from;
		k = 1;
		crlf = true;
	} else if (!r->root) {
		crlf = false;
	} else {
		goto buffer;
	}
	for (; k < n_next && r->n_spec < KVSD_RESP_PLAN; k++) {
		const struct kvsd_rsink *s = next[k];
		struct spec *sp = &r->spec[r->n_spec];
		size_t cost;
		int w;

		if (!s || !s->expect || !sink_fits(s, s->expect))
			break;
		w = snprintf(sp->want, sizeof(sp->want), "%s$%zu\r\n", crlf ? "\r\n" : "",
			     s->expect);
		cost = (size_t)w + s->expect;
		if (s->expect + w > max_reply ||
		    r->spec_bytes + cost + PLAN_SLACK > avail)
			break;
		sp->sink = s;
		sp->len = s->expect;
		sp->want_len = (unsigned int)w;
		iov[n].iov_base = sp->got;
		iov[n++].iov_len = sp->want_len;
		n += sink_iov(s, 0, s->expect, iov + n);
		r->spec_bytes += cost;
		r->n_spec++;
		crlf = true;
	}
buffer:
	iov[n].iov_base = r->buf + r->end;
	iov[n++].iov_len = avail - r->spec_bytes;
	return n;
}

/* The reply in progress is whole: it waits in the ready queue. */
static void ready_push(struct kvsd_resp *r)
{
	r->ready[r->n_ready++] = r->root;
	r->root = NULL;
	r->bulk = NULL;
	r->bulk_crlf = false;
	r->used = r->elems = 0;
}

/* The first @len bytes of the plan's segments from item @k on, into @dst. */
static void spec_copy(struct kvsd_resp *r, unsigned int k, size_t len, char *dst)
{
	size_t at = 0, c, room;

	for (; k < r->n_spec && len; k++) {
		const struct spec *sp = &r->spec[k];

		c = sp->want_len < len ? sp->want_len : len;
		memcpy(dst + at, sp->got, c);
		at += c;
		len -= c;
		for (size_t from = 0; from < sp->len && len; from += c) {
			const char *src = sink_at(sp->sink, from, &room);

			c = room < sp->len - from ? room : sp->len - from;
			c = c < len ? c : len;
			memcpy(dst + at, src, c);
			at += c;
			len -= c;
		}
	}
}

void kvsd_resp_filled(struct kvsd_resp *r, size_t n)
{
	unsigned int k;
	size_t c, in_spec, past;

	if (!r->planned) {
		r->end += n;
		return;
	}
	r->planned = false;
	if (r->cur_rem) {
		c = n < r->cur_rem ? n : r->cur_rem;
		r->bulk_got += c;
		r->used += c;
		n -= c;
		if (r->bulk_got == r->bulk->len)
			r->bulk_crlf = true;
	}
	for (k = 0; k < r->n_spec && n; k++) {
		struct spec *sp = &r->spec[k];
		struct kvsd_reply *it;
		size_t line = sp->want_len - (r->bulk ? 2 : 0);

		if (n < sp->want_len || memcmp(sp->got, sp->want, sp->want_len))
			break;	/* not (yet) what was expected: parsed from the buffer */
		it = calloc(1, sizeof(*it));
		if (!it)
			break;	/* the same: the parser reports it */
		if (r->bulk) {	/* the CRLF that ends the bulk before */
			r->used += 2;
			ready_push(r);
		}
		it->type = KVSD_REPLY_STRING;
		it->len = sp->len;
		it->sunk = true;
		r->root = r->bulk = it;
		r->sink = sp->sink;
		r->max_reply = r->plan_max;
		r->used = line;
		n -= sp->want_len;
		c = n < sp->len ? n : sp->len;
		r->bulk_got = c;
		r->used += c;
		r->bulk_crlf = c == sp->len;
		n -= c;
	}
	/* What came past the last item taken: into the buffer, in order. */
	in_spec = 0;
	if (k < r->n_spec) {
		size_t rest = 0;
		unsigned int i;

		for (i = k; i < r->n_spec; i++)
			rest += r->spec[i].want_len + r->spec[i].len;
		in_spec = n < rest ? n : rest;
	}
	past = n - in_spec;
	if (in_spec) {
		memmove(r->buf + r->end + in_spec, r->buf + r->end, past);
		spec_copy(r, k, in_spec, r->buf + r->end);
	}
	r->end += n;
}

/* A decimal integer, the whole of s[0..len): 0, or -1 if it is not one. */
static int parse_ll(const char *s, size_t len, long long *out)
{
	unsigned long long v = 0, lim;
	bool neg = len && s[0] == '-';
	size_t i = neg;

	if (i == len || len - i > 19)
		return -1;
	lim = neg ? (unsigned long long)__LONG_LONG_MAX__ + 1 : __LONG_LONG_MAX__;
	for (; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (unsigned long long)(s[i] - '0');
		if (v > lim)
			return -1;
	}
	*out = neg ? (long long)(0 - v) : (long long)v;
	return 0;
}

/*
 * A new item: attached where it belongs (the root, or its parent's next
 * slot), counted against the element bound.
 */
static struct kvsd_reply *item_new(struct kvsd_resp *r, enum kvsd_reply_type type)
{
	struct kvsd_reply *it = calloc(1, sizeof(*it));
	struct frame *f;

	if (!it)
		return NULL;
	it->type = type;
	if (!r->depth) {
		r->root = it;
		return it;
	}
	f = &r->stack[r->depth - 1];
	f->r->element[f->next++] = it;
	return it;
}

/* An item is whole: close the arrays it completes.  1: the reply is whole. */
static int item_done(struct kvsd_resp *r)
{
	while (r->depth &&
	       r->stack[r->depth - 1].next == r->stack[r->depth - 1].r->elements)
		r->depth--;
	return !r->depth;
}

/* A length of -1: a nil reply (RESP2's null array and null bulk string). */
static int nil_item(struct kvsd_resp *r)
{
	if (!item_new(r, KVSD_REPLY_NIL))
		return -ENOMEM;
	return item_done(r);
}

static int array_start(struct kvsd_resp *r, long long n)
{
	struct kvsd_reply *it;

	if (n == -1)
		return nil_item(r);
	if (n < 0)
		return fail(r, "array of %lld elements", n);
	if ((size_t)n > r->max_elems - r->elems)
		return fail(r, "array of %lld elements: more than the reply may hold", n);
	if (n && r->depth == KVSD_RESP_MAX_DEPTH)
		return fail(r, "arrays nested deeper than %lld", KVSD_RESP_MAX_DEPTH);
	r->elems += n;
	it = item_new(r, KVSD_REPLY_ARRAY);
	if (!it)
		return -ENOMEM;
	if (!n)
		return item_done(r);
	it->element = calloc(n, sizeof(*it->element));
	if (!it->element)
		return -ENOMEM;
	it->elements = n;
	r->stack[r->depth].r = it;
	r->stack[r->depth].next = 0;
	r->depth++;
	return 0;
}

static int bulk_start(struct kvsd_resp *r, long long n)
{
	struct kvsd_reply *it;

	if (n == -1)
		return nil_item(r);
	if (n < 0)
		return fail(r, "bulk string of %lld bytes", n);
	if ((unsigned long long)n > r->max_reply - r->used)
		return fail(r, "bulk string of %lld bytes: more than the reply may hold", n);
	it = item_new(r, KVSD_REPLY_STRING);
	if (!it)
		return -ENOMEM;
	it->len = n;
	/* Only a top-level bulk of the sink's exact length is sunk. */
	if (!r->depth && r->sink && sink_fits(r->sink, n)) {
		it->sunk = true;
	} else if (!r->sink || r->depth) {
		it->str = malloc(n + 1);
		if (!it->str)
			return -ENOMEM;
		it->str[n] = '\0';
	}	/* else: a value of the wrong size, discarded */
	r->bulk = it;
	r->bulk_got = 0;
	r->bulk_crlf = !n;
	return 0;
}

/* One header or simple line, CRLF cut off: an item, maybe whole. */
static int line(struct kvsd_resp *r, const char *s, size_t len)
{
	struct kvsd_reply *it;
	long long v;

	switch (s[0]) {
	case '+':
	case '-':
		it = item_new(r, s[0] == '+' ? KVSD_REPLY_STATUS : KVSD_REPLY_ERROR);
		if (!it || !(it->str = malloc(len)))
			return -ENOMEM;
		memcpy(it->str, s + 1, len - 1);
		it->str[len - 1] = '\0';
		it->len = len - 1;
		return item_done(r);
	case ':':
		if (parse_ll(s + 1, len - 1, &v))
			return fail(r, "an integer that is not one", 0);
		it = item_new(r, KVSD_REPLY_INTEGER);
		if (!it)
			return -ENOMEM;
		it->integer = v;
		return item_done(r);
	case '$':
	case '*':
		if (parse_ll(s + 1, len - 1, &v))
			return fail(r, "a length that is not a number", 0);
		return s[0] == '$' ? bulk_start(r, v) : array_start(r, v);
	}
	return fail(r, "unknown reply type 0x%02llx", (unsigned char)s[0]);
}

/* Move what is buffered of the bulk in progress; 1 when it is whole. */
static int bulk_bytes(struct kvsd_resp *r)
{
	struct kvsd_reply *b = r->bulk;
	size_t avail = r->end - r->start, n, room;
	char *dst;

	while (r->bulk_got < b->len && avail) {
		n = b->len - r->bulk_got;
		dst = NULL;
		if (b->sunk)
			dst = sink_at(r->sink, r->bulk_got, &room);
		else if (b->str)
			dst = b->str + r->bulk_got, room = n;
		else
			room = n;	/* discarded */
		n = n < room ? n : room;
		n = n < avail ? n : avail;
		if (dst)
			memcpy(dst, r->buf + r->start, n);
		r->start += n;
		r->used += n;
		r->bulk_got += n;
		avail -= n;
	}
	if (r->bulk_got < b->len)
		return 0;
	r->bulk_crlf = true;
	if (avail < 2)
		return 0;
	if (r->buf[r->start] != '\r' || r->buf[r->start + 1] != '\n')
		return fail(r, "a bulk string not ended by CRLF", 0);
	r->start += 2;
	r->used += 2;
	r->bulk = NULL;
	r->bulk_crlf = false;
	return 1;
}

/* Parse one item or move a bulk's bytes: 1 (progress), 0 (more bytes needed), -errno. */
static int step(struct kvsd_resp *r)
{
	const char *s = r->buf + r->start, *cr;
	size_t avail = r->end - r->start, scan, len;
	int ret;

	if (r->bulk) {
		ret = bulk_bytes(r);
		if (ret <= 0)
			return ret;
		item_done(r);
		return 1;
	}
	scan = avail < KVSD_RESP_MAX_LINE + 2 ? avail : KVSD_RESP_MAX_LINE + 2;
	cr = memchr(s, '\r', scan);
	if (!cr || (size_t)(cr - s) + 1 == avail) {
		if (scan > KVSD_RESP_MAX_LINE + 1)
			return fail(r, "a line longer than %lld bytes", KVSD_RESP_MAX_LINE);
		return 0;
	}
	len = cr - s;
	if (cr[1] != '\n' || !len)
		return fail(r, "a line not ended by CRLF", 0);
	if (len + 2 > r->max_reply - r->used)
		return fail(r, "a reply longer than %lld bytes", (long long)r->max_reply);
	r->start += len + 2;
	r->used += len + 2;
	ret = line(r, s, len);
	return ret < 0 ? ret : 1;
}

int kvsd_resp_next(struct kvsd_resp *r, struct kvsd_reply **out)
{
	int ret;

	*out = NULL;
	if (r->ready_at < r->n_ready) {
		*out = r->ready[r->ready_at++];
		if (r->ready_at == r->n_ready)
			r->ready_at = r->n_ready = 0;
		return 1;
	}
	if (r->failed)
		return -EPROTO;
	for (;;) {
		ret = step(r);
		if (ret == -ENOMEM)
			return fail(r, "out of memory", 0);
		if (ret < 0)
			return ret;
		if (!ret)
			return 0;
		if (!r->depth && !r->bulk && r->root) {
			*out = r->root;
			r->root = NULL;
			r->used = r->elems = 0;
			r->sink = NULL;
			return 1;
		}
	}
}

int kvsd_resp_format(char **buf, int argc, const char *const *argv,
		     const size_t *lens)
{
	size_t total = 16, off;
	char *p;
	int i;

	for (i = 0; i < argc; i++)
		total += lens[i] + 24;
	p = malloc(total);
	if (!p)
		return -ENOMEM;
	off = sprintf(p, "*%d\r\n", argc);
	for (i = 0; i < argc; i++) {
		off += sprintf(p + off, "$%zu\r\n", lens[i]);
		memcpy(p + off, argv[i], lens[i]);
		off += lens[i];
		memcpy(p + off, "\r\n", 2);
		off += 2;
	}
	*buf = p;
	return (int)off;
}

char *kvsd_resp_escape(char *out, size_t out_len, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t i, o = 0;

	if (!out_len)
		return out;
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c >= 0x20 && c < 0x7f && c != '\\') {
			if (o + 1 >= out_len)
				break;
			out[o++] = (char)c;
		} else {
			if (o + 4 >= out_len)
				break;
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		}
	}
	out[o] = '\0';
	return out;
}
