/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The remote tier's RESP2 reader and command formatter: the project's
 * own, because a Redis is not trusted to be well-behaved.  Debian's
 * hiredis 0.14 allocates whatever element vector a reply declares
 * (`*2147483647` stalled a tier for seconds) and has no nesting or size
 * limit; this reader bounds every reply before it allocates anything:
 *
 *   - bytes: one reply is at most max_reply bytes on the wire, and a
 *     bulk string's declared length is checked against that before a
 *     byte of it is stored;
 *   - elements: at most KVSD_RESP_MAX_ELEMENTS in one reply (all levels
 *     together) and never more than its byte bound can carry (3 bytes
 *     each at least), so an array header cannot make it allocate more
 *     than a small multiple of the bytes actually allowed;
 *   - nesting: at most KVSD_RESP_MAX_DEPTH levels (CLUSTER SLOTS needs 4);
 *   - lines (+, -, :, and the headers): at most KVSD_RESP_MAX_LINE bytes;
 *   - types: + - : $ * only (RESP2; HELLO 3 is never sent); a length
 *     other than -1 that is negative, a number that is not one, a bulk
 *     not ended by CRLF: a protocol error, and the caller closes the
 *     connection.
 *
 * It works in linear time in the bytes fed, so the caller's deadline
 * bounds the time a reply may take.
 *
 * A reply may be read into a sink: a bulk string of exactly the sink's
 * length goes straight into the caller's memory (a page's header into
 * one buffer, its bytes into the pool page) with no allocation and at
 * most one copy, none for large ones (kvsd_resp_space() offers the sink
 * itself to recv() into).  A bulk of another length is counted and
 * discarded (str NULL): the caller sees its length and refuses it.
 */
#ifndef _KVSHARED_REMOTE_RESP_H
#define _KVSHARED_REMOTE_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct iovec;

#define KVSD_RESP_MAX_DEPTH	8
#define KVSD_RESP_MAX_ELEMENTS	65536
#define KVSD_RESP_MAX_LINE	4096
#define KVSD_RESP_BUF		(256u << 10)	/* the read buffer */
#define KVSD_RESP_PLAN		32	/* replies read ahead into their sinks, at most */
/* Iovecs of a plan, at most: 3 + 4 a reply read ahead + the buffer. */
#define KVSD_RESP_IOV		(4 + 4 * KVSD_RESP_PLAN)

enum kvsd_reply_type {
	KVSD_REPLY_STATUS = 1,		/* +OK */
	KVSD_REPLY_ERROR,		/* -ERR ... */
	KVSD_REPLY_INTEGER,		/* :1 */
	KVSD_REPLY_STRING,		/* $3 abc */
	KVSD_REPLY_NIL,			/* $-1, *-1 */
	KVSD_REPLY_ARRAY,		/* *2 ... */
};

struct kvsd_reply {
	enum kvsd_reply_type type;
	size_t len;			/* bytes of str (STRING: of the value) */
	char *str;			/* NUL-terminated; NULL for a sunk or discarded bulk */
	long long integer;
	size_t elements;		/* ARRAY */
	struct kvsd_reply **element;	/* ARRAY, every one set */
	bool sunk;			/* STRING: its bytes are in the sink */
};

/*
 * Where a bulk string of head_len + body_len bytes goes, or, with a
 * tail, of head_len + body_len + tail_len (a value's optional trailer:
 * the reply's len says which came).
 */
struct kvsd_rsink {
	void *head;
	size_t head_len;
	void *body;
	size_t body_len;
	void *tail;			/* NULL: none */
	size_t tail_len;
	/*
	 * The length the bulk most likely has (head + body, or with the
	 * tail), so that the reader may read it ahead (kvsd_resp_iov());
	 * 0: not ahead.
	 */
	size_t expect;
};

struct kvsd_resp;

struct kvsd_resp *kvsd_resp_new(void);
void kvsd_resp_free(struct kvsd_resp *r);

/*
 * The next reply's bounds: at most @max_reply bytes, and @sink (or NULL)
 * for its bulk string.  Call before each reply; a reply in progress keeps
 * the bounds it started with.
 */
void kvsd_resp_expect(struct kvsd_resp *r, size_t max_reply,
		      const struct kvsd_rsink *sink);

/*
 * Where the next bytes from the socket go, and how many at most: the
 * read buffer, or the sink of a large bulk string in progress (nothing
 * is buffered then, so the bytes can only be that string's).
 */
void kvsd_resp_space(struct kvsd_resp *r, char **p, size_t *len);
/*
 * The same for readv()/recvmsg(), reading ahead: @next are the sinks of
 * the replies still to come, in order (next[0]: the reply in progress
 * or, if none, the next one), @max_reply their bound.  The rest of a
 * sunk bulk in progress goes straight into its sink; then, for each next
 * reply whose sink has an expected length, the header line that length
 * would have and the bytes straight into that sink; then the read
 * buffer.  Bytes that turn out to be something else (a nil, an error, a
 * value of another length) are moved into the buffer and parsed as
 * always: what a sink received ahead is overwritten or, its reply not
 * being that value, never claimed.  Fills up to KVSD_RESP_IOV iovecs;
 * returns how many.
 */
unsigned int kvsd_resp_iov(struct kvsd_resp *r, const struct kvsd_rsink *const *next,
			   unsigned int n_next, size_t max_reply, struct iovec *iov);
/* @n bytes arrived where kvsd_resp_space() or kvsd_resp_iov() said. */
void kvsd_resp_filled(struct kvsd_resp *r, size_t n);

/*
 * The next whole reply: 1 and *out (the caller's, kvsd_reply_free()),
 * 0 if more bytes are needed, or -EPROTO (kvsd_resp_error() says why;
 * the reader is then unusable: close the connection).
 */
int kvsd_resp_next(struct kvsd_resp *r, struct kvsd_reply **out);
const char *kvsd_resp_error(const struct kvsd_resp *r);
/* True while part of a reply has been read. */
bool kvsd_resp_busy(const struct kvsd_resp *r);

void kvsd_reply_free(struct kvsd_reply *rep);

/*
 * A command: a RESP array of @argc bulk strings, in one malloc'd buffer
 * (*buf, its length returned), or -ENOMEM.
 */
int kvsd_resp_format(char **buf, int argc, const char *const *argv,
		     const size_t *lens);

/*
 * Words from Redis (@s, @len bytes) as printable ASCII for the log:
 * anything else, newlines and escape sequences included, as \xNN; cut
 * to fit @out (always NUL-terminated).  Returns out.
 */
char *kvsd_resp_escape(char *out, size_t out_len, const char *s, size_t len);

#endif /* _KVSHARED_REMOTE_RESP_H */
