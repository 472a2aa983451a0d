// SPDX-License-Identifier: GPL-2.0
/*
 * kvctl's JSON writer.  Pool names are restricted to [A-Za-z0-9._-] by
 * the ABI, but the writer escapes everything anyway so that its output
 * stays valid whatever an arbiter returns.
 */
#include "kvctl_json.h"

#include <inttypes.h>

void kvctl_json_init(struct kvctl_json *j, FILE *f)
{
	j->f = f;
	j->depth = 0;
	j->has_item[0] = false;
}

static void indent(struct kvctl_json *j)
{
	int i;

	for (i = 0; i < j->depth; i++)
		fputs("  ", j->f);
}

static void put_string(FILE *f, const char *s)
{
	const unsigned char *p;

	fputc('"', f);
	for (p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"':
			fputs("\\\"", f);
			break;
		case '\\':
			fputs("\\\\", f);
			break;
		case '\n':
			fputs("\\n", f);
			break;
		case '\t':
			fputs("\\t", f);
			break;
		default:
			/* Control bytes and non-ASCII: \u00XX keeps it valid UTF-8. */
			if (*p < 0x20 || *p >= 0x7f)
				fprintf(f, "\\u%04x", *p);
			else
				fputc(*p, f);
		}
	}
	fputc('"', f);
}

/* Separator, newline, indentation and "key": before any value. */
static void begin_value(struct kvctl_json *j, const char *key)
{
	if (j->depth > 0) {
		if (j->has_item[j->depth])
			fputc(',', j->f);
		fputc('\n', j->f);
		indent(j);
	}
	j->has_item[j->depth] = true;
	if (key) {
		put_string(j->f, key);
		fputs(": ", j->f);
	}
}

static void json_open(struct kvctl_json *j, const char *key, char c)
{
	begin_value(j, key);
	fputc(c, j->f);
	/* Deeper than kvctl ever nests is a bug in kvctl; stay valid anyway. */
	if (j->depth < KVCTL_JSON_DEPTH - 1)
		j->depth++;
	j->has_item[j->depth] = false;
}

static void json_close(struct kvctl_json *j, char c)
{
	bool had = j->has_item[j->depth];

	if (j->depth > 0)
		j->depth--;
	if (had) {
		fputc('\n', j->f);
		indent(j);
	}
	fputc(c, j->f);
}

void kvctl_json_obj(struct kvctl_json *j, const char *key)
{
	json_open(j, key, '{');
}

void kvctl_json_arr(struct kvctl_json *j, const char *key)
{
	json_open(j, key, '[');
}

void kvctl_json_end_obj(struct kvctl_json *j)
{
	json_close(j, '}');
}

void kvctl_json_end_arr(struct kvctl_json *j)
{
	json_close(j, ']');
}

void kvctl_json_str(struct kvctl_json *j, const char *key, const char *val)
{
	begin_value(j, key);
	put_string(j->f, val);
}

void kvctl_json_u64(struct kvctl_json *j, const char *key, uint64_t val)
{
	begin_value(j, key);
	fprintf(j->f, "%" PRIu64, val);
}

void kvctl_json_bool(struct kvctl_json *j, const char *key, bool val)
{
	begin_value(j, key);
	fputs(val ? "true" : "false", j->f);
}

void kvctl_json_null(struct kvctl_json *j, const char *key)
{
	begin_value(j, key);
	fputs("null", j->f);
}

void kvctl_json_finish(struct kvctl_json *j)
{
	fputc('\n', j->f);
}
