/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A tiny streaming JSON writer: enough for kvctl's objects, arrays,
 * strings and unsigned numbers, always valid output (strings escaped,
 * commas tracked per nesting level), indented for people.
 */
#ifndef _KVCTL_JSON_H
#define _KVCTL_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define KVCTL_JSON_DEPTH	8

struct kvctl_json {
	FILE *f;
	int depth;
	bool has_item[KVCTL_JSON_DEPTH];	/* a comma is due at this level */
};

/* @key is the member name inside an object, NULL inside an array or at top. */
void kvctl_json_init(struct kvctl_json *j, FILE *f);
void kvctl_json_obj(struct kvctl_json *j, const char *key);
void kvctl_json_arr(struct kvctl_json *j, const char *key);
void kvctl_json_end_obj(struct kvctl_json *j);
void kvctl_json_end_arr(struct kvctl_json *j);
void kvctl_json_str(struct kvctl_json *j, const char *key, const char *val);
void kvctl_json_u64(struct kvctl_json *j, const char *key, uint64_t val);
void kvctl_json_bool(struct kvctl_json *j, const char *key, bool val);
void kvctl_json_null(struct kvctl_json *j, const char *key);
/* Ends the document with a newline. */
void kvctl_json_finish(struct kvctl_json *j);

#endif /* _KVCTL_JSON_H */
