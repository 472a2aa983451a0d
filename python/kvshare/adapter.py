# SPDX-License-Identifier: MIT
"""What kvshare's engine adapters (kvshare.sglang, kvshare.vllm) share: the
options of their extra configs, key salts, the pool geometry check, and
opening (or creating) a pool again after a failure.

Options.  The same thing has the same key in both engines' extra configs:

  pool        pool name (1..63 of [A-Za-z0-9._-])
  arbiter     the arbiter: kvshared's socket or /dev/kvshare (libkv's choice)
  owner       uid or user name that must own the pool
  create      create the pool with the engine's geometry when it is missing
  pages       the size of a pool created
  mode        the permission bits of a pool created (int, or octal "0660")
  timeout_ms  deadline of every call to kvshared (0..86400000)
  retry_s     after a failure, seconds before the pool is opened again
  namespace   a salt mixed into every key (tenants that must not hit)

Renamed keys still work for one release, with a warning: vLLM's
``socket`` (now ``arbiter``), ``create_pages: N`` (now ``create: true,
pages: N``) and ``create_mode`` (now ``mode``).
"""
import errno
import hashlib
import logging
import re
import time

import kvshare

__all__ = ["Options", "open_pool", "Reopen", "salt_text", "salt_digest",
           "check_geometry", "geometry_text", "DAEMON_GONE"]

# A handle broken with these lost its kvshared (the connection closed, as
# when the daemon exits or restarts): a new one can be opened at once.
DAEMON_GONE = (errno.ENOTCONN, errno.EPIPE, errno.ECONNRESET)

_POOL_NAME = re.compile(r"^[A-Za-z0-9._-]{1,63}$")
_MAX_TIMEOUT_MS = 86400000

# key: (type(s), meaning) of the keys every adapter takes.
COMMON = {
    "pool": (str, "pool name"),
    "arbiter": (str, "kvshared socket or /dev/kvshare"),
    "owner": ((str, int), "uid or user name owning the pool"),
    "create": (bool, "create the pool when missing"),
    "pages": (int, "pages of a pool created"),
    "mode": ((int, str), "permission bits of a pool created"),
    "timeout_ms": (int, "call deadline"),
    "retry_s": ((int, float), "seconds before reopening after a failure"),
    "namespace": (str, "a salt mixed into every key"),
}

# The old keys of one release ago: old -> new.
RENAMED = {"socket": "arbiter", "create_mode": "mode"}


def _type_names(types):
    types = types if isinstance(types, tuple) else (types,)
    return " or ".join(t.__name__ for t in types)


class Options:
    """An adapter's extra config, validated: every COMMON key (and the
    adapter's own, @own: key -> (types, meaning)) as an attribute.
    @defaults: the adapter's default for each key (None: unset).
    @strict: unknown keys are an error (vLLM's config is the connector's
    alone); else they are left to the engine (SGLang's holds its own).
    ValueError names the key and what was wrong."""

    def __init__(self, extra, who, defaults, own=None, strict=False, log=None):
        self.who = who
        log = log or logging.getLogger("kvshare")
        spec = dict(COMMON, **(own or {}))
        extra = dict(extra or {})
        self._renamed(extra, log)
        if strict:
            unknown = sorted(set(extra) - set(spec))
            if unknown:
                raise ValueError("%s: unknown extra config keys %s (known: %s)"
                                 % (who, unknown, ", ".join(sorted(spec))))
        for key, (types, _) in spec.items():
            setattr(self, key, self._get(extra, key, types, defaults.get(key)))
        self._check()

    def _renamed(self, extra, log):
        """Old keys, moved to their new names (a warning each)."""
        for old, new in RENAMED.items():
            if old in extra:
                self._move(extra, old, new, extra.pop(old), log)
        if "create_pages" in extra:
            n = extra.pop("create_pages")
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise ValueError("%s: extra config 'create_pages' %r: a page count, "
                                 "0 or more" % (self.who, n))
            self._move(extra, "create_pages", "create", n > 0, log,
                       also="\"create\": true, \"pages\": N")
            if n:
                self._move(extra, "create_pages", "pages", n, None)

    def _move(self, extra, old, new, value, log, also=None):
        if new in extra and extra[new] != value:
            raise ValueError("%s: extra config has both %r (%r) and its new name %r (%r)"
                             % (self.who, old, value, new, extra[new]))
        extra[new] = value
        if log is not None:
            log.warning("%s: extra config key %r is deprecated and goes in the next "
                        "release; use %s", self.who, old, also or repr(new))

    def _get(self, extra, key, types, default):
        if extra.get(key) is None:
            return default
        v, tt = extra[key], types if isinstance(types, tuple) else (types,)
        if not isinstance(v, tt) or (isinstance(v, bool) and bool not in tt):
            raise ValueError("%s: extra config %r: expected %s, got %r"
                             % (self.who, key, _type_names(types), v))
        return v

    def _check(self):
        who = self.who
        if not _POOL_NAME.match(self.pool or ""):
            raise ValueError("%s: pool %r: 1..63 of [A-Za-z0-9._-]" % (who, self.pool))
        if self.pages is not None and self.pages < 1:
            raise ValueError("%s: pages %d: at least 1" % (who, self.pages))
        if isinstance(self.mode, str):
            try:
                self.mode = int(self.mode, 8)
            except ValueError:
                raise ValueError("%s: mode %r: octal permission bits, e.g. \"0660\""
                                 % (who, self.mode)) from None
        if self.mode is not None and not 0 <= self.mode <= 0o777:
            raise ValueError("%s: mode %o: permission bits 0..0777" % (who, self.mode))
        if self.timeout_ms is not None and not 0 <= self.timeout_ms <= _MAX_TIMEOUT_MS:
            raise ValueError("%s: timeout_ms %d: 0..%d"
                             % (who, self.timeout_ms, _MAX_TIMEOUT_MS))
        if self.retry_s is not None:
            if self.retry_s < 0:
                raise ValueError("%s: retry_s %g: not negative" % (who, self.retry_s))
            self.retry_s = float(self.retry_s)


def geometry_text(g):
    """A pool geometry dict (layers, kv_heads, head_dim, tokens_per_page,
    dtype) in words."""
    return ("%d layers, %d kv heads x %d, %d tokens a page, %s"
            % (g["layers"], g["kv_heads"], g["head_dim"], g["tokens_per_page"], g["dtype"]))


def pool_geometry(pool):
    """@pool's geometry, as the dict open_pool() and check_geometry() take."""
    g = pool.geometry
    return {"layers": g["n_layers"], "kv_heads": g["n_kv_heads"], "head_dim": g["head_dim"],
            "tokens_per_page": g["tokens_per_page"], "dtype": g["dtype"]}


def check_geometry(pool, want, page_bytes, who, engine):
    """ValueError, naming both geometries, unless @pool's pages are the
    engine's: geometry @want (a dict as pool_geometry's), @page_bytes each.
    @engine says what the engine's pages are, for the message."""
    have = pool_geometry(pool)
    if have != want or pool.page_bytes != page_bytes:
        raise ValueError(
            "%s: pool %r does not fit the engine's pages: the pool has %s (%d bytes a "
            "page); %s need a pool of %s" % (who, pool.name, geometry_text(have),
                                             pool.page_bytes, engine, geometry_text(want)))


def open_pool(opts, name=None, geometry=None, pages=None, log=None):
    """Attach pool @name (default opts.pool) as @opts say; when it is
    missing and opts.create, create it first with @geometry (a dict as
    pool_geometry's) and opts.pages (else @pages) pages, mode opts.mode (a
    race with another process creating it is fine).  With an int
    opts.owner, a pool of another owner is refused (EACCES).  Raises
    kvshare.Error (ENOENT saying how to get the pool created)."""
    name = name or opts.pool
    try:
        pool = kvshare.Pool(name, opts.arbiter, owner=opts.owner, timeout_ms=opts.timeout_ms)
    except kvshare.Error as e:
        if e.errno != errno.ENOENT or not opts.create or geometry is None:
            if e.errno == errno.ENOENT and not opts.create:
                raise kvshare.Error(e.errno, "%s: %s: set \"create\": true (and \"pages\") "
                                    "to have it created" % (opts.who, e.strerror or e)) \
                    from None
            raise
        n = opts.pages or pages
        if not n:
            raise kvshare.Error(errno.ENOENT, "%s: pool %r is missing and no size is "
                                "known to create it: set \"pages\"" % (opts.who, name))
        mode = 0o600 if opts.mode is None else opts.mode
        try:
            with kvshare.Arbiter(opts.arbiter, timeout_ms=opts.timeout_ms) as arb:
                arb.create_pool(name, pages=n, mode=mode, **geometry)
            (log or logging.getLogger("kvshare")).info(
                "%s: created pool %r: %d pages of %s, mode %o", opts.who, name, n,
                geometry_text(geometry), mode)
        except kvshare.Error as ce:
            if ce.errno != errno.EEXIST:        # another rank created it meanwhile
                raise
        pool = kvshare.Pool(name, opts.arbiter, owner=opts.owner, timeout_ms=opts.timeout_ms)
    if isinstance(opts.owner, int) and pool.owner != opts.owner:
        pool.close()
        raise kvshare.Error(errno.EACCES, "%s: pool %r is owned by uid %d, not %d"
                            % (opts.who, name, pool.owner, opts.owner))
    return pool


class Reopen:
    """When a pool that failed may be opened again: retry_s after the
    failure, or at once when its daemon went away (the connection closed:
    a restarted kvshared answers a new handle now; a stopped one would make
    every opener wait out its deadline)."""

    def __init__(self, retry_s):
        self.retry_s = retry_s
        self.at = 0.0

    def ready(self):
        return time.monotonic() >= self.at

    def failed(self, why=None):
        """A handle failed with errno @why: wait retry_s unless its daemon
        is gone.  Returns the seconds waited (0: reopen now)."""
        if why in DAEMON_GONE:
            return 0.0
        self.at = time.monotonic() + self.retry_s
        return self.retry_s


def salt_text(tag, fields):
    """The salt of an adapter's keys: @tag (adapter and version) and the
    (name, value) pairs @fields everything a stored page's meaning depends
    on, in order, as "tag|name=value|...".  One text for one meaning."""
    return "|".join([tag] + ["%s=%s" % (k, v) for k, v in fields])


def salt_digest(tag, fields):
    """salt_text() as 32 bytes (SHA-256)."""
    return hashlib.sha256(salt_text(tag, fields).encode()).digest()
