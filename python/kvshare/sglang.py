# SPDX-License-Identifier: MIT
"""kvshare as SGLang's HiCache storage backend (L3): ``KVShareStorage``.

SGLang loads it with::

  --enable-hierarchical-cache --hicache-storage-backend dynamic
  --hicache-storage-backend-extra-config '{"backend_name": "kvshare",
      "module_path": "kvshare.sglang", "class_name": "KVShareStorage",
      "interface_v1": 1, "pool": "sglang", "create": true}'

builds it as ``KVShareStorage(storage_config, {})`` and calls
``register_mem_pool_host(host_pool)`` right after; that is where the page
geometry becomes known, so that is where the pool is attached (or created)
and checked.  Several engine processes on one host that attach the same
pool share their stored prefix pages: what one process backs up, every
other process of the same model, rank and layout prefetches.

Pages.  One SGLang page (every layer, K and V, page_size tokens) is one
kvshare page, byte for byte, in the order the host pool's
``get_page_buffer_meta`` lists its pieces; for MHA layer_first that is
kvshare's own layout, [layer][K, V][token][head][dim], and for the other
layouts it is SGLang's flat page (``get_data_page``), so both the zero-copy
calls and the generic ones move whole pages, a batch in one call
(``Pool.copy_pages``: no GIL, streaming stores).  The pool's
geometry must fit exactly: MHA pages need (layers, kv_heads, head_dim,
page_size, dtype); an MLA page holds one C-wide vector per token and layer
(C = kv_lora_rank + qk_rope_head_dim, no K/V split), stored in a pool of
kv_heads=1 and head_dim=C/2 whose "K" and "V" halves are the two halves of
the vector: the same bytes, nothing wasted (C must be even).

Keys.  SGLang's page keys (64 hex digits, chained SHA-256 of the tokens)
name no model, rank or layout, so each is mixed with this backend's
namespace: a SHA-256 over the model name, TP rank and size (not for MLA,
whose KV every rank shares), PP and CP ranks, layout, dtype, page geometry
and the operator's ``namespace`` salt.  Another model, rank or layout
never hits.

Visibility.  A backup copies into freshly ALLOCated (private) pages, then
PUBLISHes them: nobody sees a page before its bytes are complete, and a
key stored meanwhile by another process wins (ours goes back FREE).  A
prefetch LOOKUPs the keys, which pins the pages it found (a reference each)
so that they cannot be evicted and reused while it copies, then PUTs them.
A key evicted before the LOOKUP is a miss (False), never stale bytes.
``batch_exists`` LOOKUPs and PUTs at once: it pins nothing.

Misconfiguration (no such pool, a pool of other pages, bad extra config)
raises at start, so SGLang refuses the backend.  After that failures never
reach SGLang's threads: every call returns False, None or 0 when the
arbiter fails, and the engine recomputes.  A call kvshared does not answer
within ``timeout_ms`` breaks the calling thread's handle; it is closed, and
no thread attaches again for ``retry_s`` (attaching is bounded by libkv's
$KVSHARE_CALL_TIMEOUT_MS, and one thread attaches at a time).  Each thread
(SGLang's prefetch, prefetch-IO and backup threads, and the scheduler's
clear) gets its own handle, so no thread waits behind another's call.

Extra-config keys (all optional; kvshare.adapter, the same keys as
kvshare.vllm's): ``pool`` (name, default "sglang"), ``arbiter`` (socket or
device path; default libkv's), ``owner`` (uid or user name owning the
pool; default libkv's), ``create`` (create the pool with the engine's
geometry when it does not exist), ``pages`` and ``mode`` (its size, default
the host pool's page count, and permission bits, default 0o600),
``timeout_ms`` (call deadline), ``namespace`` (a salt: tenants that must
never hit each other's pages set different ones), ``retry_s`` (seconds
before a broken handle is opened again, default 5).
"""
import errno
import hashlib
import logging
import os
import threading
import time
from typing import Any, List, NamedTuple, Optional

import numpy
import torch

from sglang.srt.mem_cache.hicache_storage import (HiCacheStorage,
                                                  HiCacheStorageConfig,
                                                  HiCacheStorageExtraInfo)

import kvshare
from kvshare import adapter
from kvshare.blockcopy import DTYPE_NAMES

__all__ = ["KVShareStorage", "EnginePage", "engine_page", "pool_geometry",
           "check_pool_fits", "namespace_digest", "kvshare_keys",
           "BackendOptions"]

logger = logging.getLogger(__name__)

# Keys handled per arbiter call: far above SGLang's 128-page batches, and
# within any sane per-handle quota.
CHUNK = 4096


MHA_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
MLA_LAYOUTS = ("layer_first", "page_first", "page_first_direct")


class EnginePage(NamedTuple):
    """One SGLang host-pool page, as the backend stores it."""
    kind: str           # "mha" or "mla"
    layout: str
    layers: int
    heads: int          # KV heads (MHA); 1 (MLA)
    head_dim: int       # MHA head dim; MLA: C, the whole vector
    tokens: int         # page_size
    dtype: Any          # torch dtype
    page_bytes: int

    def describe(self):
        width = ("%d kv heads x %d" % (self.heads, self.head_dim) if self.kind == "mha"
                 else "one %d-wide latent vector a token" % self.head_dim)
        return ("SGLang %s %s pages: %d layers, %s, %d tokens, %s (%d bytes)"
                % (self.kind.upper(), self.layout, self.layers, width, self.tokens,
                   str(self.dtype).replace("torch.", ""), self.page_bytes))


def _itemsize(dtype):
    return torch.empty((), dtype=dtype).element_size()


def engine_page(host) -> EnginePage:
    """The page of SGLang host pool @host (MHATokenToKVPoolHost or
    MLATokenToKVPoolHost).  ValueError for pools this backend cannot
    store: K and V of different head dims, decode context parallelism,
    unknown layouts or dtypes."""
    layout, ps, dtype = host.layout, int(host.page_size), host.dtype
    if dtype not in DTYPE_NAMES:
        known = ", ".join(dict.fromkeys(DTYPE_NAMES.values()))
        raise ValueError("kvshare.sglang: KV dtype %s has no kvshare equivalent "
                         "(%s)" % (dtype, known))
    if getattr(host, "dcp_size", 1) != 1:
        raise ValueError("kvshare.sglang: decode context parallelism (dcp_size %d) "
                         "shards every page; not supported" % host.dcp_size)
    c = getattr(host, "kv_cache_dim", None)
    if c is not None:
        kind, heads, dim, layouts, halves = "mla", 1, int(c), MLA_LAYOUTS, 1
    else:
        heads, dim = int(host.head_num), int(host.head_dim)
        if getattr(host, "v_head_dim", dim) != dim or not isinstance(
                host.kv_buffer, torch.Tensor):
            raise ValueError("kvshare.sglang: K and V of different head dims "
                             "(head_dim %d, v_head_dim %s) do not fit a kvshare page"
                             % (dim, getattr(host, "v_head_dim", "?")))
        kind, layouts, halves = "mha", MHA_LAYOUTS, 2
    if layout not in layouts:
        raise ValueError("kvshare.sglang: %s layout %r is not supported (%s)"
                         % (kind.upper(), layout, ", ".join(layouts)))
    layers = int(host.layer_num)
    nbytes = halves * layers * ps * heads * dim * _itemsize(dtype)
    return EnginePage(kind, layout, layers, heads, dim, ps, dtype, nbytes)


def pool_geometry(page: EnginePage) -> dict:
    """The kvshare pool geometry whose pages hold @page exactly.  MHA maps
    one to one; MLA's C-wide vector is split over a kvshare page's K and V
    halves (kv_heads=1, head_dim=C/2), so C must be even."""
    if page.kind == "mla":
        if page.head_dim % 2:
            raise ValueError("kvshare.sglang: an MLA vector of odd width %d cannot be "
                             "split over a kvshare page's K and V halves"
                             % page.head_dim)
        heads, dim = 1, page.head_dim // 2
    else:
        heads, dim = page.heads, page.head_dim
    return {"layers": page.layers, "kv_heads": heads, "head_dim": dim,
            "tokens_per_page": page.tokens, "dtype": DTYPE_NAMES[page.dtype]}


def check_pool_fits(pool, page: EnginePage):
    """ValueError, naming both geometries, unless @pool's pages are @page's."""
    adapter.check_geometry(pool, pool_geometry(page), page.page_bytes, "kvshare.sglang",
                           page.describe())


def namespace_digest(config: HiCacheStorageConfig, page: EnginePage,
                     salt: str = "") -> bytes:
    """32 bytes naming everything a stored page's meaning depends on."""
    fields = [("model", config.model_name or "")]
    if not config.is_mla_model:
        fields.append(("tp", "%d/%d" % (config.tp_rank, config.tp_size)))
    fields += [("pp", "%d/%d" % (config.pp_rank, config.pp_size)),
               ("cp", "%d/%d" % (config.attn_cp_rank, config.attn_cp_size)),
               ("kind", page.kind), ("layout", page.layout), ("dtype", page.dtype),
               ("page", "%dx%dx%dx%d" % (page.layers, page.heads, page.head_dim,
                                         page.tokens)),
               ("salt", salt)]
    return adapter.salt_digest("kvshare.sglang/1", fields)


def kvshare_keys(ns: bytes, keys: List[str]) -> numpy.ndarray:
    """SGLang page keys as kvshare keys ((n, 4) uint64) in namespace @ns.
    A 64-hex-digit key (SGLang's SHA-256 chain) is XORed with the namespace:
    one vectorised step, distinct for distinct keys within a namespace, and
    across namespaces as hard to collide as SHA-256 itself.  Any other key
    (e.g. "<key>.draft", or hex in capitals) is hashed with the namespace."""
    n = len(keys)
    words = numpy.frombuffer(ns, dtype=numpy.uint64)
    if n and set(map(len, keys)) == {64}:
        joined = "".join(keys)
        try:
            raw = bytes.fromhex(joined)
        except ValueError:
            raw = b""
        # Lowercase hex only (what SGLang makes): one string, one key.
        if len(raw) == 32 * n and raw.hex() == joined:
            return numpy.frombuffer(raw, dtype=numpy.uint64).reshape(n, 4) ^ words
    out = numpy.empty((n, 4), dtype=numpy.uint64)
    for i, k in enumerate(keys):
        raw = None
        if len(k) == 64:
            try:
                raw = bytes.fromhex(k)
            except ValueError:
                pass
        if raw is not None and raw.hex() == k:
            out[i] = numpy.frombuffer(raw, dtype=numpy.uint64) ^ words
        else:
            digest = hashlib.sha256(ns + b"\0key:" + k.encode("utf-8", "surrogatepass"))
            out[i] = numpy.frombuffer(digest.digest(), dtype=numpy.uint64)
    return out


class BackendOptions(adapter.Options):
    """The backend's keys of SGLang's extra config, validated
    (kvshare.adapter).  Keys that are not ours (backend_name, module_path,
    interface_v1, ...) belong to SGLang and are left alone."""

    DEFAULTS = {"pool": "sglang", "create": False, "mode": 0o600, "namespace": "",
                "retry_s": 5.0}

    def __init__(self, extra: Optional[dict]):
        super().__init__(extra, "kvshare.sglang", self.DEFAULTS, log=logger)


class _Handle:
    """One thread's attachment: the Pool and a lock that close() takes so
    that no copy runs while the mapping goes away."""
    __slots__ = ("pool", "lock")

    def __init__(self, pool):
        self.pool = pool
        self.lock = threading.Lock()


class _Stats:
    """Cumulative counters (stats()) and per-batch samples for SGLang's
    storage metrics (get_stats())."""

    FIELDS = ("exists_calls", "exists_hits", "get_calls", "get_pages", "get_misses",
              "set_calls", "set_pages", "set_skipped", "set_dups", "set_failed",
              "errors", "handles", "broken")

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = dict.fromkeys(self.FIELDS, 0)
        self.samples = ([], [], [], [])   # prefetch pages, backup pages, GB/s each

    def add(self, **kw):
        with self.lock:
            for k, v in kw.items():
                self.counts[k] += v

    def sample(self, kind, pages, nbytes, seconds):
        with self.lock:
            i = 0 if kind == "get" else 1
            self.samples[i].append(pages)
            self.samples[i + 2].append(nbytes / max(seconds, 1e-9) / 1e9)

    def take_samples(self):
        with self.lock:
            s, self.samples = self.samples, ([], [], [], [])
            return s


def _storage_metrics_class():
    """SGLang's StorageMetrics, where this SGLang has one (its
    StorageMetricsCollector asserts the type)."""
    for mod in ("sglang.srt.observability.metrics_collector",
                "sglang.srt.metrics.collector"):
        try:
            return getattr(__import__(mod, fromlist=["StorageMetrics"]), "StorageMetrics")
        except Exception:
            continue
    return None


class KVShareStorage(HiCacheStorage):
    """SGLang HiCache storage backend over a kvshare pool (see the module
    docstring).  Thread-safe; never raises out of a storage call."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs=None):
        self.config = storage_config
        self.options = BackendOptions(storage_config.extra_config)
        if storage_config.should_split_heads:
            raise ValueError("kvshare.sglang: split heads (tp_lcm_size with the "
                             "page_head layout) is not supported")
        self.mem_pool_host = None
        self.page = None
        self._ns = None
        self._local = threading.local()
        self._handles = []
        self._handles_lock = threading.Lock()
        self._closed = False
        self._reopen = adapter.Reopen(self.options.retry_s)   # when threads attach
        self._opening = threading.Lock()
        self._stats = _Stats()
        self._last_log = {}

    # -- attaching --------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host):
        """Learn the page geometry, attach the pool (creating it with that
        geometry when asked and missing) and check that it fits.  Raises
        ValueError or kvshare.Error, which makes SGLang refuse the backend."""
        super().register_mem_pool_host(mem_pool_host)
        page = engine_page(mem_pool_host)
        geometry = pool_geometry(page)
        self.page = page
        self._ns = namespace_digest(self.config, page, self.options.namespace)
        pool = self._checked(self._attach(geometry, mem_pool_host))
        self._adopt(pool)
        if pool.max_pages_per_file < 2 * 128:
            # A backup holds a batch's stored pages and its new ones at once.
            logger.warning("kvshare.sglang: pool %r lets a handle hold %d pages; SGLang's "
                           "128-page batches need 256, so larger ones will fail",
                           pool.name, pool.max_pages_per_file)
        logger.info("kvshare.sglang: pool %r (owner %d, %d pages) for %s",
                    pool.name, pool.owner, pool.n_pages, page.describe())

    def _checked(self, pool):
        """@pool if its pages are the engine's and in host memory (the
        copies are the CPU's); else closed, and ValueError."""
        try:
            check_pool_fits(pool, self.page)
            if pool.is_device:
                raise ValueError("kvshare.sglang: pool %r is GPU memory; SGLang's host "
                                 "pool is copied with the CPU, so the pool must be host "
                                 "memory" % pool.name)
        except Exception:
            pool.close()
            raise
        return pool

    def _attach(self, geometry, host):
        """The pool, created with @geometry and the host pool's page count
        (unless ``pages``) when missing and ``create``."""
        return adapter.open_pool(self.options, geometry=geometry, pages=int(host.page_num),
                                 log=logger)

    def _adopt(self, pool):
        h = _Handle(pool)
        with self._handles_lock:
            if self._closed:
                pool.close()
                return None
            self._handles.append(h)
        self._local.handle = h
        return h

    def _handle(self):
        """This thread's handle: opened on first use, reopened (no more often
        than every retry_s) after it broke.  None while there is none."""
        h = getattr(self._local, "handle", None)
        if h is not None and not h.pool.closed:
            broken = h.pool.broken
            if broken is None:
                return h
            self._drop(h, "broken (%s)" % errno.errorcode.get(broken, broken),
                       why=broken)
        if self._closed or self.page is None or not self._reopen.ready():
            return None
        # One thread at a time attaches: while kvshared is stopped, an open
        # waits out $KVSHARE_CALL_TIMEOUT_MS (libkv's deadline for opening);
        # the threads behind it then see its failure and do not wait again.
        with self._opening:
            if self._closed or not self._reopen.ready():
                return None
            try:
                # A kvshared restarted without the pool gets it back when
                # the operator asked for creation.
                pool = self._checked(self._attach(pool_geometry(self.page),
                                                  self.mem_pool_host))
            except Exception as e:
                self._reopen.failed()
                self._log("open", "kvshare.sglang: cannot attach pool %r: %s; serving "
                          "without it for %gs" % (self.options.pool, e,
                                                  self.options.retry_s))
                return None
        self._stats.add(handles=1)
        return self._adopt(pool)

    def _drop(self, h, reason, why=None):
        """Close a handle broken with errno @why.  Every thread then waits
        retry_s before attaching again, unless the daemon went away (see
        adapter.Reopen): it is likely down for all of them."""
        self._local.handle = None
        wait = self._reopen.failed(why)
        self._stats.add(broken=1)
        with self._handles_lock:
            if h in self._handles:
                self._handles.remove(h)
        with h.lock:
            try:
                h.pool.close()
            except Exception as e:
                logger.debug("kvshare.sglang: closing a broken handle: %s", e)
        self._log("drop", "kvshare.sglang: pool %r handle %s: closed; reopening %s"
                  % (self.options.pool, reason, "in %gs" % wait if wait else "now"))

    def _log(self, what, msg):
        """Log at most every 10 s per kind: a dead daemon must not flood."""
        now = time.monotonic()
        if now - self._last_log.get(what, -1e9) >= 10.0:
            self._last_log[what] = now
            logger.warning(msg)

    def _call(self, what, failed, fn, *args):
        """fn(handle, *args) on this thread's handle; @failed when there is
        no handle or anything goes wrong (logged, never raised).  A handle
        whose daemon went away (the connection closed: kvshared restarted)
        is replaced at once and the call made again, once: after a restart
        no call is lost to a stale handle.  A call that timed out is not
        retried; the handle waits retry_s (the daemon may be stopped)."""
        for attempt in (0, 1):
            h = self._handle()
            if h is None:
                return failed
            with h.lock:
                if h.pool.closed:
                    return failed
                try:
                    return fn(h, *args)
                except kvshare.Error as e:
                    lost = e.errno
                    if not (attempt == 0 and lost in adapter.DAEMON_GONE
                            and h.pool.broken in adapter.DAEMON_GONE):
                        self._stats.add(errors=1)
                        self._log(what, "kvshare.sglang: %s failed: %s" % (what, e))
                        return failed
                except Exception:
                    self._stats.add(errors=1)
                    logger.exception("kvshare.sglang: %s failed", what)
                    return failed
            self._drop(h, "lost its daemon (%s)" % errno.errorcode.get(lost, lost), lost)
        return failed

    # -- keys and host memory --------------------------------------------

    def _keys(self, keys):
        return kvshare_keys(self._ns, keys)

    def _page_pieces(self, keys, host_indices):
        """The host pool's (addresses, sizes) of the pages at @host_indices,
        page after page in meta order; None (logged) if the indices are not
        len(keys) whole pages inside the host pool."""
        n, ps = len(keys), self.page.tokens
        idx = host_indices
        if not isinstance(idx, torch.Tensor) or idx.dim() != 1 or idx.numel() != n * ps:
            self._log("indices", "kvshare.sglang: %d keys need %d host slots, got %s"
                      % (n, n * ps, getattr(idx, "shape", type(idx).__name__)))
            return None
        idx = idx.to("cpu", torch.int64)
        rows = idx.reshape(n, ps)
        first = rows[:, 0]
        if (bool((first % ps != 0).any()) or int(first.min()) < 0
                or int(rows[:, -1].max()) >= self.mem_pool_host.size
                or not torch.equal(rows - first[:, None], torch.arange(ps).expand(n, ps))):
            self._log("indices", "kvshare.sglang: host indices are not whole pages "
                      "of the host pool")
            return None
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(idx)
        if len(ptrs) % n or sum(sizes) != n * self.page.page_bytes:
            self._log("meta", "kvshare.sglang: the host pool's page pieces (%d, %d bytes) "
                      "are not %d pages of %d bytes"
                      % (len(ptrs), sum(sizes), n, self.page.page_bytes))
            return None
        return ptrs, sizes

    def _fits(self, t):
        return (isinstance(t, torch.Tensor) and t.device.type == "cpu"
                and t.numel() * t.element_size() == self.page.page_bytes)

    def _to_pool_order(self, flat):
        """An SGLang flat page (get_data_page) as the bytes a pool page holds."""
        p = self.page
        if p.kind == "mha" and p.layout == "layer_first":
            return flat.reshape(2, p.layers, -1).transpose(0, 1).contiguous()
        return flat.contiguous()

    # -- the calls SGLang makes ----------------------------------------------

    def batch_exists(self, keys, extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        """Keys stored, counted from the first; pins nothing."""
        n = 0
        for s in range(0, len(keys), CHUNK):
            part = keys[s:s + CHUNK]
            hit = self._call("batch_exists", 0, self._exists, part)
            n += hit
            if hit < len(part):
                break
        self._stats.add(exists_calls=1, exists_hits=n)
        return n

    def _exists(self, h, keys):
        # A peek: one call, no reference, no eviction-order change.
        return h.pool.contains(self._keys(keys))

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Copy the stored pages of @keys into the host pool at
        @host_indices: True for each page copied, from the first on."""
        return self._in_chunks("batch_get_v1", self._get_pieces, keys, host_indices)

    def _get_pieces(self, h, keys, pieces):
        """LOOKUP (one reference a page found), copy, PUT."""
        t0 = time.perf_counter()
        ptrs, sizes = pieces
        per, pb = len(ptrs) // len(keys), self.page.page_bytes
        pages = h.pool.lookup(self._keys(keys))
        n = len(pages)
        try:
            if n:
                h.pool.copy_pages(pages, ptrs[:n * per], sizes[:n * per], False)
        finally:
            if n:
                h.pool.put(pages)
        self._stats.add(get_calls=1, get_pages=n, get_misses=len(keys) - n)
        self._stats.sample("get", n, n * pb, time.perf_counter() - t0)
        return [True] * n + [False] * (len(keys) - n)

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info: Optional[HiCacheStorageExtraInfo] = None) -> List[bool]:
        """Store the host pool's pages at @host_indices under @keys: True
        for each page stored (now, or already)."""
        return self._in_chunks("batch_set_v1", self._set_pieces, keys, host_indices)

    def _in_chunks(self, what, move, keys, host_indices):
        """@move (_get_pieces or _set_pieces) over CHUNK keys at a time:
        one bool a key, stopping at the first chunk not moved whole."""
        if self.page is None or not keys:
            return [False] * len(keys)
        ps, out = self.page.tokens, []
        for s in range(0, len(keys), CHUNK):
            part = keys[s:s + CHUNK]
            pieces = self._page_pieces(part, host_indices[s * ps:(s + len(part)) * ps])
            moved = [False] * len(part)
            if pieces is not None:
                moved = self._call(what, moved, move, part, pieces)
            out += moved
            if not all(moved):
                break
        return out + [False] * (len(keys) - len(out))

    def _set_pieces(self, h, keys, pieces):
        """Pages already stored are skipped; the rest are copied into fresh
        OWNED pages, then PUBLISHed under their keys, chained to the last
        stored one (so the arbiter evicts leaves first), then PUT."""
        t0 = time.perf_counter()
        ptrs, sizes = pieces
        n, per = len(keys), len(ptrs) // len(keys)
        pb, pool = self.page.page_bytes, h.pool
        kk = self._keys(keys)
        have = pool.lookup(kk)
        k = len(have)
        try:
            if k < n:
                try:
                    fresh = pool.alloc(n - k)
                except kvshare.Error as e:
                    if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                        raise
                    self._log("alloc", "kvshare.sglang: no room for %d pages in pool %r: %s"
                              % (n - k, pool.name, e))
                    self._stats.add(set_calls=1, set_skipped=k, set_failed=n - k)
                    return [True] * k + [False] * (n - k)
                try:
                    pool.copy_pages(fresh, ptrs[k * per:], sizes[k * per:], True)
                except BaseException:
                    pool.put(fresh)
                    raise
                results, n_dup = pool.publish(fresh, kk[k:],
                                              parent=have[-1] if k else kvshare.NO_PAGE)
                pool.put(results)
                self._stats.add(set_dups=n_dup)
        finally:
            if k:
                pool.put(have)
        self._stats.add(set_calls=1, set_pages=n - k, set_skipped=k)
        self._stats.sample("set", n - k, (n - k) * pb, time.perf_counter() - t0)
        return [True] * n

    # The generic (tensor) path: flat pages of get_data_page() layout.

    def batch_set(self, keys: List[str], values: Optional[Any] = None,
                  target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> bool:
        """Store flat pages (SGLang's get_data_page); all or nothing.  Pages
        of another size (e.g. a draft model's) are not stored: False."""
        if self.page is None or values is None or len(values) != len(keys):
            return False
        if not keys:
            return True
        if not all(self._fits(v) for v in values):
            self._log("size", "kvshare.sglang: batch_set: a page is not %d bytes on the "
                      "CPU (draft pages are not stored)" % self.page.page_bytes)
            return False
        for s in range(0, len(keys), CHUNK):
            pages = [self._to_pool_order(v) for v in values[s:s + CHUNK]]
            pieces = ([t.data_ptr() for t in pages], [self.page.page_bytes] * len(pages))
            done = self._call("batch_set", [False], self._set_pieces, keys[s:s + CHUNK],
                              pieces)
            if not all(done):
                return False
        return True

    def set(self, key: str, value: Optional[Any] = None, target_location=None,
            target_sizes=None) -> bool:
        return self.batch_set([key], [value])

    def batch_get(self, keys: List[str], target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None):
        """Fill flat pages (SGLang's get_dummy_flat_data_page; new ones when
        None): each filled tensor, then None from the first page missing."""
        if self.page is None:
            return [None] * len(keys)
        p = self.page
        if target_locations is None:
            target_locations = [torch.empty(p.page_bytes // _itemsize(p.dtype), dtype=p.dtype)
                                for _ in keys]
        if len(target_locations) != len(keys):
            return [None] * len(keys)
        out = []
        for key, t in zip(keys, target_locations):
            if not self._fits(t) or not t.is_contiguous():
                self._log("size", "kvshare.sglang: batch_get: a target is not a contiguous "
                          "%d-byte CPU page" % p.page_bytes)
                break
            out.append(t)
        reorder = p.kind == "mha" and p.layout == "layer_first"
        bufs = ([torch.empty_like(t) for t in out] if reorder else out)
        got = []
        for s in range(0, len(bufs), CHUNK):
            part = bufs[s:s + CHUNK]
            pieces = ([t.data_ptr() for t in part], [p.page_bytes] * len(part))
            g = self._call("batch_get", [False] * len(part), self._get_pieces,
                           keys[s:s + CHUNK], pieces)
            got += g
            if not all(g):
                break
        result = []
        for t, b, ok in zip(out, bufs, got):
            if not ok:
                break
            if reorder:
                t.view(2, p.layers, -1).copy_(b.view(p.layers, 2, -1).transpose(0, 1))
            result.append(t)
        return result + [None] * (len(keys) - len(result))

    def get(self, key: str, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None):
        return self.batch_get([key], None if target_location is None
                              else [target_location])[0]

    # -- administration -------------------------------------------------------

    def clear(self) -> bool:
        """Evict every cached page of the pool that nobody holds now: all of
        the pool's namespaces, so only the pool's owner may (others get a
        warning and False).  Pages in use stay until their holders PUT."""
        return self._call("clear", False, self._clear)

    def _clear(self, h):
        pool = h.pool
        if pool.owner != os.geteuid():
            logger.warning("kvshare.sglang: clear: pool %r is uid %d's and shared with "
                           "other engines; only its owner can clear it (pages age out "
                           "as the pool needs room)", pool.name, pool.owner)
            return False
        for _ in range(3):
            st = pool.stats()
            n = min(st["n_free"] + st["n_cached"], kvshare.MAX_BATCH)
            if not n:
                return True
            try:
                pages = pool.alloc(n)
            except kvshare.Error as e:
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    continue          # raced with another process: count again
                raise
            pool.put(pages)
            logger.info("kvshare.sglang: clear: evicted %d cached pages of pool %r",
                        st["n_cached"], pool.name)
            return True
        return False

    def stats(self) -> dict:
        """Cumulative counters of this backend."""
        with self._stats.lock:
            return dict(self._stats.counts)

    def get_stats(self):
        """SGLang's StorageMetrics of the batches since the last call (pages
        and GB/s of each prefetch and backup batch), when this SGLang has
        the class; else None, which SGLang ignores."""
        cls = _storage_metrics_class()
        if cls is None:
            return None
        pre, back, pre_bw, back_bw = self._stats.take_samples()
        return cls(prefetch_pgs=pre, backup_pgs=back, prefetch_bandwidth=pre_bw,
                   backup_bandwidth=back_bw)

    def close(self):
        """Detach every thread's handle; later calls fail (False, 0, None)."""
        with self._handles_lock:
            self._closed = True
            handles, self._handles = self._handles, []
        for h in handles:
            with h.lock:
                try:
                    h.pool.close()
                except Exception as e:
                    logger.warning("kvshare.sglang: close: %s", e)
