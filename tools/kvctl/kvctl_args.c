// SPDX-License-Identifier: GPL-2.0
/*
 * kvctl helpers shared by every command: option parsing, strict number
 * parsing, error messages, the device and the name tables of the ABI.
 *
 * Every error goes to stderr as "kvctl: <command>: <what was wrong>", so
 * scripts (and kvctl_test.sh) can rely on one shape.
 */
#include "kvctl.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kvshare/kv_layout.h>

struct kvctl_opt *kvctl_opt(struct kvctl_opt *opts, const char *name)
{
	for (; opts && opts->name; opts++)
		if (!strcmp(opts->name, name))
			return opts;
	return NULL;
}

/* "--name=value" matches option "--name" and yields "value". */
static struct kvctl_opt *match_opt(struct kvctl_opt *opts, const char *arg,
				   const char **inline_val)
{
	const char *eq = strchr(arg, '=');
	size_t len = eq ? (size_t)(eq - arg) : strlen(arg);

	*inline_val = eq ? eq + 1 : NULL;
	for (; opts && opts->name; opts++)
		if (strlen(opts->name) == len && !strncmp(opts->name, arg, len))
			return opts;
	return NULL;
}

/*
 * Parse argv (the command's own arguments, its name excluded); @opts is
 * NULL-name terminated, or NULL for a command without options.
 * Returns 0, -1 when help was asked for, or KVCTL_USAGE after printing why.
 */
int kvctl_parse(const char *cmd, int argc, char **argv, struct kvctl_opt *opts,
		char **pos, int max_pos, int *n_pos)
{
	bool opts_done = false;
	int i;

	*n_pos = 0;
	for (i = 0; i < argc; i++) {
		const char *a = argv[i];
		const char *val;
		struct kvctl_opt *o;

		if (!opts_done && (!strcmp(a, "--help") || !strcmp(a, "-h")))
			return -1;
		if (!opts_done && !strcmp(a, "--")) {
			opts_done = true;
			continue;
		}
		if (opts_done || a[0] != '-' || a[1] == '\0') {
			if (*n_pos >= max_pos)
				return kvctl_usage_err(cmd, "unexpected argument '%s'", a);
			pos[(*n_pos)++] = argv[i];
			continue;
		}
		o = match_opt(opts, a, &val);
		if (!o)
			return kvctl_usage_err(cmd, "unknown option '%s'", a);
		if (o->set)
			return kvctl_usage_err(cmd, "option '%s' given twice", o->name);
		if (!o->has_arg && val)
			return kvctl_usage_err(cmd, "option '%s' takes no value", o->name);
		if (o->has_arg && !val) {
			if (i + 1 >= argc)
				return kvctl_usage_err(cmd, "option '%s' needs a value",
						       o->name);
			val = argv[++i];
		}
		o->val = val;
		o->set = true;
	}
	return 0;
}

static int suffix_shift(char c)
{
	switch (c) {
	case 'k': case 'K':
		return 10;
	case 'm': case 'M':
		return 20;
	case 'g': case 'G':
		return 30;
	}
	return -1;
}

/*
 * A count: decimal or 0x hex, optionally with a binary k/M/G suffix
 * ("64k").  strtoull alone would take "-1" and " 5" and "5x"; we do not.
 */
int kvctl_num(const char *cmd, const char *what, const char *s,
	      uint64_t min, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;
	int shift = 0;

	if (!isdigit((unsigned char)s[0]))
		goto nan;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno == ERANGE)
		goto range;
	if (errno || end == s)
		goto nan;
	if (*end) {
		shift = suffix_shift(*end);
		if (shift < 0 || end[1])
			goto nan;
		if (v > (UINT64_MAX >> shift))
			goto range;
		v <<= shift;
	}
	if (v < min || v > max)
		goto range;
	*out = v;
	return 0;
nan:
	return kvctl_usage_err(cmd, "%s: '%s' is not a number", what, s);
range:
	return kvctl_usage_err(cmd, "%s: '%s' is out of range (%llu..%llu)", what,
			       s, (unsigned long long)min, (unsigned long long)max);
}

/* Permission bits: always octal, like chmod. */
int kvctl_octal(const char *cmd, const char *what, const char *s,
		uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (!isdigit((unsigned char)s[0]))
		goto bad;
	errno = 0;
	v = strtoull(s, &end, 8);
	if (errno || *end)
		goto bad;
	if (v > max)
		return kvctl_usage_err(cmd, "%s: '%s' is out of range (0..0%llo)",
				       what, s, (unsigned long long)max);
	*out = v;
	return 0;
bad:
	return kvctl_usage_err(cmd, "%s: '%s' is not an octal mode", what, s);
}

int kvctl_usage_err(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "kvctl: %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see 'kvctl %s --help')\n", cmd);
	return KVCTL_USAGE;
}

int kvctl_err(const char *fmt, ...)
{
	va_list ap;

	fputs("kvctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return KVCTL_FAIL;
}

/* What an errno means across kvshare commands (kvshare.h, "Errors"). */
static const char *generic_msg(int err)
{
	switch (err) {
	case ENOTTY:
		return "the device does not know this command (not kvshare, or another ABI)";
	case EFAULT:
		return "bad address passed to the arbiter";
	case EINVAL:
		return "invalid argument";
	case E2BIG:
		return "request too large";
	case ENOMEM:
		return "the arbiter is out of memory";
	case ENOENT:
		return "no such pool";
	case EACCES:
		return "permission denied by the pool's mode";
	case EPERM:
		return "not permitted (neither owner nor admin)";
	case EUCLEAN:
		return "pool invariants are broken";
	}
	return strerror(err);
}

/* "kvctl: pool create: name 'x' already exists (EEXIST)" */
int kvctl_ioc_err(const char *cmd, int err, const char *msg)
{
	const char *name = strerrorname_np(err);

	fprintf(stderr, "kvctl: %s: %s (", cmd, msg ? msg : generic_msg(err));
	if (name)
		fprintf(stderr, "%s)\n", name);
	else
		fprintf(stderr, "errno %d)\n", err);
	return KVCTL_FAIL;
}

/*
 * Open the arbiter on first use: the module's device or the daemon's
 * socket, whichever --device names (libkv picks when it names nothing).
 * kvctl only manages and inspects, so io_uring is never needed.
 */
int kvctl_open(struct kvctl *k)
{
	int ret;

	if (k->arb)
		return 0;
	ret = kv_arbiter_open(k->device, KV_ARBITER_NO_URING, &k->arb);
	if (!ret)
		return 0;
	if (ret == -ENOENT && !k->device)
		return kvctl_err("no arbiter: neither " KVCTL_DEFAULT_DEVICE
				 " (kvshare.ko) nor the kvshared socket " KVS_DAEMON_SOCKET
				 " exists");
	if (ret == -ENOENT)
		return kvctl_err("cannot open %s: no such device or socket", k->device);
	if (ret == -ECONNREFUSED)
		return kvctl_err("cannot open %s: nobody listens (is kvshared running?)",
				 k->device);
	return kvctl_err("cannot open %s: %s", k->device ? k->device : "the arbiter",
			 strerror(-ret));
}

/* Returns 0 or a positive errno. */
int kvctl_ioctl(struct kvctl *k, unsigned long req, void *arg)
{
	return -kv_arbiter_call(k->arb, req, arg);
}

static const char *const state_names[] = {
	[KVS_PAGE_FREE] = "free",
	[KVS_PAGE_OWNED] = "owned",
	[KVS_PAGE_SHARED] = "shared",
	[KVS_PAGE_CACHED] = "cached",
};

#define NAMES(a)	(sizeof(a) / sizeof((a)[0]))

static const char *name_of(const char *const *tab, size_t n, uint32_t v)
{
	return v < n && tab[v] ? tab[v] : "unknown";
}

static int parse_name(const char *const *tab, size_t n, const char *s,
		      uint32_t *out)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (tab[i] && !strcasecmp(tab[i], s)) {
			*out = i;
			return 0;
		}
	}
	return -1;
}

/* <kvshare/kv_layout.h>'s table: the short names, every spelling accepted. */
const char *kvctl_dtype_name(uint32_t dtype)
{
	const struct kv_dtype_name *d = kv_dtype_by_id(dtype);

	return d ? d->name : "unknown";
}

int kvctl_dtype_parse(const char *s, uint32_t *dtype)
{
	const struct kv_dtype_name *d = kv_dtype_by_name(s);

	if (!d)
		return -1;
	*dtype = d->dtype;
	return 0;
}

const char *kvctl_state_name(uint32_t state)
{
	return name_of(state_names, NAMES(state_names), state);
}

int kvctl_state_parse(const char *s, uint32_t *state)
{
	return parse_name(state_names, NAMES(state_names), s, state);
}
