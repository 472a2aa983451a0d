# SPDX-License-Identifier: MIT
"""kvshare as a vLLM v1 KV connector: the prompt prefixes one vLLM process
computed are loaded, not recomputed, by every other vLLM process of the
same model on the host.

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "KVShareConnector",
        "kv_role": "kv_both", "kv_connector_module_path": "kvshare.vllm",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"pool": "llama8b", "create_pages": 4096}}'

One kvshare pool page is one vLLM block across all layers (the pool's
geometry must be the engine's; see docs/engines.md).  Scheduler side
(EngineCore): page keys are chained SHA-256 of the prompt's full blocks,
salted with the model, the layout, the dtype and the block geometry (vLLM's
own block hashes differ between processes), plus a request's LoRA and
cache_salt; a LOOKUP counts the blocks present beyond vLLM's local hit and
gives its references back at once.  Worker side: the loads planned by the
scheduler are looked up again (a page may have gone since) and copied in (a
host engine's all at once, in one C call; a CUDA engine's enqueued layer by
layer, each layer waited for before its forward), and every block the
worker could not load is reported through get_block_ids_with_load_errors(),
so vLLM recomputes it.  A host engine's loads begin at the step's first
hook (handle_preemptions), on a copy thread, so that the copy overlaps
the model runner's preparation of the step.  Prompt blocks the
step completed are copied into freshly allocated pages layer by layer and
PUBLISHed in wait_for_save(), once every layer's bytes are in.  A kvshared
that stops answering (call deadline) or a pool error never reaches the
engine: the connector serves without sharing, recomputing, and reopens the
pool after retry_s.
"""
import errno
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole)

import kvshare
from kvshare import adapter
from kvshare.blockcopy import BlockCopier, EngineLayout, check_fits

__all__ = ["KVShareConnector", "KVShareConnectorMetadata"]

logger = logging.getLogger("vllm.kvshare")

KEY_BYTES = 32
# The connector's keys beyond kvshare.adapter's common ones (pool, arbiter,
# owner, create, pages, mode, timeout_ms, retry_s, namespace).
OWN_OPTIONS = {
    "kv_layout": (str, "NHD or HND: required of vLLM, salted into keys"),
    "prefault": (bool, "map the whole host pool into each worker at attach"),
}
# The owner: never someone else's pool unless named.
DEFAULTS = {"pool": "vllm-kv", "owner": None, "create": False, "mode": 0o600,
            "timeout_ms": 1000, "retry_s": 5.0, "namespace": "", "prefault": True}
# Pool.prefault's step: pages entered in the page tables a call, so that
# closing the pool waits for one step at most.
PREFAULT_STEP_BYTES = 64 << 20


def _options(kv_transfer_config):
    opts = adapter.Options(kv_transfer_config.kv_connector_extra_config, "kvshare.vllm",
                           dict(DEFAULTS, owner=os.getuid()), own=OWN_OPTIONS,
                           strict=True, log=logger)
    if opts.kv_layout not in (None, "NHD", "HND"):
        raise ValueError("kvshare.vllm: kv_layout is %r, not NHD or HND" % opts.kv_layout)
    if opts.create and not opts.pages:
        raise ValueError("kvshare.vllm: create needs pages (the size of the pool "
                         "created)")
    return opts


def _resolved_layout(vllm_config):
    """NHD or HND from the layout vLLM's engine core resolved (vLLM >= 0.32:
    cache_config.kv_cache_layout names a KVCacheLayout, e.g. LBHNC, whose
    stride order puts the heads (logical axis 2) before or after the
    tokens (axis 3); the old names are aliases); None if not resolved."""
    name = getattr(getattr(vllm_config, "cache_config", None), "kv_cache_layout", None)
    if not isinstance(name, str):
        return None
    if name in ("NHD", "HND"):
        return name
    try:
        from vllm.v1.kv_cache_layout import KVCacheLayout
        order = KVCacheLayout[name].stride_order
    except (ImportError, KeyError, AttributeError):
        return None
    return "HND" if order.index(2) < order.index(3) else "NHD"


def _layout(vllm_config, opts):
    """The KV layout the workers use: MLA, the one configured, the one
    vLLM's engine core resolved, or vLLM's global one (before 0.32)."""
    model = getattr(vllm_config, "model_config", None)
    if getattr(model, "use_mla", False):
        return "MLA"
    if opts.kv_layout:
        return opts.kv_layout
    resolved = _resolved_layout(vllm_config)
    if resolved:
        return resolved
    try:
        from vllm.v1.attention.backends.utils import get_kv_cache_layout
        return get_kv_cache_layout()
    except Exception:       # noqa: BLE001 -- any failure: the default, which
        return "NHD"        # register_kv_caches checks against the caches


def _ranks(vllm_config, role):
    """(tp_rank, tp_size, pp_rank, pp_size) of this process (the scheduler
    speaks for rank 0)."""
    par = getattr(vllm_config, "parallel_config", None)
    tp = getattr(par, "tensor_parallel_size", 1) or 1
    pp = getattr(par, "pipeline_parallel_size", 1) or 1
    if role != KVConnectorRole.WORKER or (tp == 1 and pp == 1):
        return 0, tp, 0, pp
    from vllm.distributed.parallel_state import (get_pp_group,
                                                 get_tensor_model_parallel_rank)
    return get_tensor_model_parallel_rank(), tp, get_pp_group().rank_in_group, pp


class _Prefaulter:
    """A thread entering every page of @pool in this process's page tables,
    PREFAULT_STEP_BYTES a call (without the GIL); stop() returns once the
    call in progress is done.  Failures are logged, never raised: a page
    not prefaulted is faulted in by its first copy, as without this."""

    def __init__(self, pool):
        self._pool = pool
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kvshare-prefault",
                                        daemon=True)
        self._thread.start()

    def _run(self):
        pool = self._pool
        step = max(1, PREFAULT_STEP_BYTES // pool.page_bytes)
        t = time.monotonic()
        try:
            for first in range(0, pool.n_pages, step):
                if self._stop.is_set():
                    return
                pool.prefault(first, min(step, pool.n_pages - first))
        except OSError as e:
            logger.log(logging.INFO if e.errno == errno.EINVAL else logging.WARNING,
                       "kvshare: pool %r not prefaulted (%s): its pages are faulted in "
                       "by their first load", pool.name, e)
            return
        except ValueError:      # closed under us
            return
        logger.info("kvshare: pool %r: %d pages prefaulted in %.2f s", pool.name,
                    pool.n_pages, time.monotonic() - t)

    def stop(self):
        self._stop.set()
        self._thread.join()


class KVShareConnectorMetadata(KVConnectorMetadata):
    """What the scheduler tells the workers for one step: plain data (it is
    pickled to them).  reqs: one dict per request with a transfer,
    ``req_id``, ``block_ids`` (blocks 0..n-1 of the request), ``keys``
    (their 32-byte keys, concatenated), ``load`` and ``save``: [start, end)
    block ranges, and ``zero_unloaded``: True when the load's blocks were
    taken off vLLM's zeroing (the worker zeros those it fails to load)."""

    def __init__(self, reqs=None):
        self.reqs = reqs or []


class _ReqState:
    __slots__ = ("keys", "n_blocks", "block_ids", "load_tokens")

    def __init__(self, keys):
        self.keys = keys
        self.n_blocks = len(keys) // KEY_BYTES
        self.block_ids = []
        self.load_tokens = 0


class KVShareConnector(KVConnectorBase_V1):
    """vLLM v1 KV connector over a kvshare pool; both roles (see module doc)."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role,
                         kv_cache_config=kv_cache_config)
        self._opts = _options(self._kv_transfer_config)
        self._block_size = vllm_config.cache_config.block_size
        self._layout = _layout(vllm_config, self._opts)
        tp_rank, tp, pp_rank, pp = _ranks(vllm_config, role)
        name = self._opts.pool
        name += ".tp%d" % tp_rank if tp > 1 else ""
        name += ".pp%d" % pp_rank if pp > 1 else ""
        self._pool_name = name
        model = getattr(vllm_config, "model_config", None)
        self._model = str(getattr(model, "model", "") or "")
        # Both dtypes name the bytes a block holds: the pool's dtype alone
        # does not (vLLM stores fp8_e4m3 and fp8_e5m2 caches both as uint8,
        # one pool dtype "fp8"), nor does the model's under cache_dtype=fp8*.
        cache = getattr(vllm_config, "cache_config", None)
        self._cache_dtype = str(getattr(cache, "cache_dtype", "") or "")
        self._model_dtype = str(getattr(model, "dtype", "") or "")
        self._pool = None
        self._reopen = adapter.Reopen(self._opts.retry_s)
        self._copier = None
        self._prefaulter = None
        self._loader = None             # the host loads' copy thread
        self._layers = {}
        self.stats = dict(lookups=0, hit_tokens=0, loaded_blocks=0, load_errors=0,
                          saved_blocks=0, dup_blocks=0, failures=0)
        policy = getattr(self._kv_transfer_config, "kv_load_failure_policy", "recompute")
        if policy != "recompute":
            logger.warning("kvshare: kv_load_failure_policy is %r: a page evicted "
                           "between lookup and load fails its request; set "
                           "\"recompute\" to recompute it instead", policy)
        # Workers open the pool (and create it) at register_kv_caches, when
        # the engine's geometry is known; the scheduler now.
        self._reqs = {}
        self._step = None
        self._errors = set()
        if role == KVConnectorRole.SCHEDULER:
            self._pool = self._open(create=False)
            if self._pool.tokens_per_page != self._block_size:
                raise ValueError(
                    "kvshare pool %r has %d tokens a page, but vLLM's block_size is %d"
                    % (name, self._pool.tokens_per_page, self._block_size))
            self._hasher = kvshare.BlockHasher(self._block_size, self._salt())

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config):
        kvt = vllm_config.kv_transfer_config
        return (kvt.kv_connector_extra_config or {}).get("kv_layout")

    # ---- the pool ----

    def _salt(self):
        p = self._pool
        return adapter.salt_text("kvshare.vllm/2", [
            ("model", self._model), ("namespace", self._opts.namespace),
            ("layout", self._layout), ("layers", p.n_layers), ("kv_heads", p.n_kv_heads),
            ("head_dim", p.head_dim), ("block", p.tokens_per_page), ("dtype", p.dtype),
            ("cache_dtype", self._cache_dtype), ("model_dtype", self._model_dtype)])

    def _open(self, create, eng=None):
        """The pool; the worker (@create, engine geometry @eng) creates it
        when missing and the config says ``create`` (kvshare.adapter)."""
        geometry = None
        if create and eng is not None:
            geometry = {"layers": eng.layers, "kv_heads": eng.kv_heads,
                        "head_dim": eng.head_dim, "tokens_per_page": eng.block_size,
                        "dtype": eng.dtype}
        return adapter.open_pool(self._opts, name=self._pool_name, geometry=geometry,
                                 log=logger)

    def _get(self):
        """The pool, reopened after a failure once retry_s passed (at once
        when its daemon went away; a worker creates it again, as at start,
        if a restarted kvshared lacks it); or None."""
        if self._pool is None and self._reopen.ready():
            try:
                eng = self._copier.eng if self._copier is not None else None
                self._pool = self._open(create=eng is not None, eng=eng)
                if self._copier is not None:
                    check_fits(self._pool, self._copier.eng, self._pool_name)
                    self._copier = BlockCopier(self._pool, self._copier.eng)
                    self._start_prefault()
                logger.info("kvshare: pool %r is back", self._pool_name)
            except (kvshare.Error, ValueError) as e:
                self._failed(e)
        return self._pool

    def _failed(self, e):
        """Serve without sharing for retry_s: close the handle (the arbiter
        then drops everything it held), recompute meanwhile."""
        self.stats["failures"] += 1
        wait = self._reopen.failed(getattr(e, "errno", None)
                                   if self._pool is None else self._pool.broken)
        logger.warning("kvshare: pool %r failed (%s); recomputing without it%s",
                       self._pool_name, e, " for %.1f s" % wait if wait else
                       " until the next call reopens it")
        self._close_pool()

    def _start_prefault(self):
        """A host pool's pages mapped into this worker in the background
        (Pool.prefault), so that no load takes their first-touch faults."""
        if not self._opts.prefault or self._copier.direction != "host":
            return
        self._prefaulter = _Prefaulter(self._pool)

    def _close_pool(self):
        """Let go of the prefaulter, the copier's views, then of the handle
        (the arbiter then drops everything it held)."""
        if self._prefaulter is not None:
            self._prefaulter.stop()
            self._prefaulter = None
        copy = self._step.pop("copy", None) if self._step else None
        if copy is not None and copy.exception() is not None:
            self._loads_lost()          # waited for: the mapping outlives it
        if self._copier is not None:
            try:
                self._copier.release()
            except kvshare.Error as e:      # the mapping goes anyway
                logger.warning("kvshare: releasing pool %r's copies: %s",
                               self._pool_name, e)
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                pool.close()
            except (BufferError, kvshare.Error):
                pass                  # the handle is broken: dropping it is enough

    # ---- scheduler side ----

    def _request_keys(self, request):
        """The request's prompt block keys as bytes, or None when it must
        not be shared (multimodal inputs or prompt embeddings: their KV
        depends on more than the token ids)."""
        prompt = request.prompt_token_ids
        if (prompt is None or getattr(request, "mm_features", None)
                or getattr(request, "prompt_embeds", None) is not None):
            return None
        extra = []
        lora = getattr(request, "lora_request", None)
        if lora is not None:
            extra.append("lora=%s" % getattr(lora, "lora_name", lora))
        if getattr(request, "cache_salt", None):
            extra.append("cache_salt=%s" % request.cache_salt)
        n = min(len(prompt) // self._block_size, kvshare.MAX_BATCH)
        if not n:
            return b""
        keys = self._hasher.hash(prompt[:n * self._block_size], extra=tuple(extra))
        return keys.tobytes()

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        """Tokens loadable beyond the local hit (always leaving the last
        prompt token to compute); no state changes: the pool is peeked
        (Pool.contains), which takes nothing."""
        pool = self._get()
        keys = self._request_keys(request) if pool is not None else None
        if not keys:
            return 0, False
        n = min((len(request.prompt_token_ids) - 1) // self._block_size,
                len(keys) // KEY_BYTES)
        if n * self._block_size <= num_computed_tokens:
            return 0, False
        try:
            hits = pool.contains(numpy.frombuffer(keys[:n * KEY_BYTES], numpy.uint64)
                                 .reshape(n, 4))
        except kvshare.Error as e:
            self._failed(e)
            return 0, False
        self.stats["lookups"] += 1
        ext = max(0, hits * self._block_size - num_computed_tokens)
        self.stats["hit_tokens"] += ext
        return ext, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        st = self._reqs.get(request.request_id)
        if st is None:
            keys = self._request_keys(request)
            if keys is None:
                return
            st = self._reqs[request.request_id] = _ReqState(keys)
        st.load_tokens = num_external_tokens

    def build_connector_meta(self, scheduler_output):
        reqs = []
        sched = scheduler_output.num_scheduled_tokens
        for nr in scheduler_output.scheduled_new_reqs:
            st = self._reqs.get(nr.req_id)
            if st is not None:
                st.block_ids = list(nr.block_ids[0]) if nr.block_ids else []
                self._plan(reqs, nr.req_id, st, nr.num_computed_tokens,
                           sched.get(nr.req_id, 0))
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            st = self._reqs.get(req_id)
            if st is None:
                continue
            new = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:
                st.block_ids = list(new[0]) if new else []
            elif new:
                st.block_ids.extend(new[0])
            self._plan(reqs, req_id, st, cached.num_computed_tokens[i],
                       sched.get(req_id, 0))
        self._skip_zeroing(scheduler_output, reqs)
        return KVShareConnectorMetadata(reqs)

    @staticmethod
    def _skip_zeroing(scheduler_output, reqs):
        """vLLM (0.32) zeros every block it allocates before the step's
        forward (SchedulerOutput.new_block_ids_to_zero), the blocks a load
        fills included; on a CPU that is one torch zero_() a block and
        layer, 1024 calls and 64 MiB for an 8k-token load of 4 layers.  The
        worker overwrites every byte of the blocks it loads and zeros those
        it fails to load (each request marked ``zero_unloaded``), so they
        are taken off vLLM's list."""
        zero = getattr(scheduler_output, "new_block_ids_to_zero", None)
        if not zero:
            return
        mine = set()
        for r in reqs:
            s, e = r["load"]
            if s < e:
                mine.update(r["block_ids"][s:e])
                r["zero_unloaded"] = True
        if mine:
            scheduler_output.new_block_ids_to_zero = [b for b in zero if b not in mine] or None

    def _plan(self, reqs, req_id, st, computed, scheduled):
        bs = self._block_size
        load = [0, 0]
        if st.load_tokens:
            load = [(computed - st.load_tokens) // bs, computed // bs]
            st.load_tokens = 0
        # The prompt blocks this step completes.
        save = [computed // bs, min(st.n_blocks, (computed + scheduled) // bs)]
        end = min(max(load[1], save[1]), len(st.block_ids))
        load[1] = min(load[1], end)
        save[1] = min(save[1], end)
        if load[0] < load[1] or save[0] < save[1]:
            reqs.append(dict(req_id=req_id, block_ids=st.block_ids[:end],
                             keys=st.keys[:end * KEY_BYTES], load=load, save=save))

    def update_connector_output(self, connector_output):
        bad = getattr(connector_output, "invalid_block_ids", None)
        if bad:
            self.stats["load_errors"] += len(bad)

    def request_finished(self, request, block_ids):
        # Saves are done by the end of each step: vLLM may free the blocks.
        self._reqs.pop(request.request_id, None)
        return False, None

    # ---- worker side ----

    def register_kv_caches(self, kv_caches):
        # vLLM >= 0.32 resolves the layout in the engine core and hands it
        # to the workers before allocating the caches: read it again now.
        self._layout = _layout(self._vllm_config, self._opts)
        names = list(kv_caches)
        eng = EngineLayout([(n, kv_caches[n]) for n in names], self._block_size,
                           self._layout == "MLA")
        if eng.layout != self._layout:
            raise ValueError(
                "kvshare: vLLM's KV caches are %s but the connector keys pages as %s "
                "(set kv_connector_extra_config kv_layout to %s)"
                % (eng.layout, self._layout, eng.layout))
        pool = self._open(create=True, eng=eng)
        try:
            check_fits(pool, eng, self._pool_name)
            # The copy path (and a GPU pool for a host engine refused).
            copier = BlockCopier(pool, eng)
        except (ValueError, kvshare.Error):
            pool.close()
            raise
        self._pool = pool
        self._layers = {n: i for i, n in enumerate(names)}
        self._copier = copier
        if not copier.is_async:
            self._loader = ThreadPoolExecutor(1, thread_name_prefix="kvshare-load")
        self._start_prefault()

    def _keys(self, r, start, end):
        return numpy.frombuffer(r["keys"], numpy.uint64).reshape(-1, 4)[start:end]

    def _begin_step(self, meta):
        """The step of @meta begins, unless it has (handle_preemptions came
        first); a step that began and was never cleared (the engine failed
        between the two hooks) gives back what it holds first."""
        step = self._step
        if step is not None and step["meta"] is meta:
            return
        if step is not None:
            step["saved"] = set()
            self.wait_for_save()
        self._step = dict(meta=meta, loads=[], refs=[], left=set(), saves=None,
                          saved=set(), failed=set(), load_started=False, copy=None)

    def handle_preemptions(self, kv_connector_metadata):
        """vLLM (>= 0.32) calls this first in a worker's step, before the
        model runner prepares the step's inputs (execute_model): a host
        engine's loads begin here, their copy on the copy thread (one C
        call, without the GIL), so that it overlaps that preparation;
        wait_for_layer_load waits for it before the first layer reads the
        blocks.  The blocks are the step's own: vLLM allocated them for
        these loads and zeros only others (_skip_zeroing).  Nothing else is
        preempted here: every save is done within its step."""
        if self._loader is None:
            return
        self._begin_step(kv_connector_metadata)
        self._start_loads(kv_connector_metadata, early=True)

    def bind_connector_metadata(self, connector_metadata):
        # The step begins here (or at handle_preemptions), not at
        # start_load_kv: vLLM >= 0.32 calls start_load_kv after the forward
        # (so after save_kv_layer) on steps without synchronous loads
        # (SchedulerOutput.has_sync_kv_loads).
        super().bind_connector_metadata(connector_metadata)
        self._begin_step(connector_metadata)

    def start_load_kv(self, forward_context, **kwargs):
        self._start_loads(self._get_connector_metadata())

    def _start_loads(self, meta, early=False):
        """The step's loads looked up and started (once a step): device
        copies enqueued, host copies done, or begun on the copy thread when
        @early."""
        step = self._step
        if step is None or step["load_started"]:
            return
        step["load_started"] = True
        pool = self._get() if self._copier is not None else None
        for r in meta.reqs:
            s, e = r["load"]
            if s >= e:
                continue
            blocks = r["block_ids"][s:e]
            hits = ()
            if pool is not None:
                try:
                    hits = pool.lookup(self._keys(r, s, e))
                except kvshare.Error as exc:
                    self._fail_loads(exc)
                    pool = None
            if len(hits):
                step["refs"].append(hits)
                step["loads"].append(list(zip(blocks, hits.tolist())))
            if len(hits) < len(blocks):
                self._unloaded(r, blocks[len(hits):])
        if not step["loads"]:
            return
        if self._copier.is_async:
            step["left"] = set(range(len(self._layers)))
            self._enqueue_loads()
            return
        # Host copies: every layer of every load at once, in one C call
        # without the GIL (copies a layer would take the CPU the layers'
        # forwards need: they buy no overlap).
        pairs = [pr for pairs in step["loads"] for pr in pairs]
        if early:
            step["copy"] = self._loader.submit(self._copier.load_all, pairs)
            return
        try:
            self._copier.load_all(pairs)
        except (kvshare.Error, OSError, ValueError) as exc:
            self._fail_loads(exc)

    def _wait_copy(self):
        """The step's host copy begun at handle_preemptions, waited for."""
        copy = self._step.pop("copy", None) if self._step else None
        if copy is None:
            return
        exc = copy.exception()
        if exc is None:
            return
        if not isinstance(exc, (kvshare.Error, OSError, ValueError)):
            raise exc
        self._fail_loads(exc)

    def _enqueue_loads(self):
        """Device copies: every layer's loads enqueued now, on the engine's
        stream, each layer's end marked by an event that
        wait_for_layer_load waits for (the copies overlap the layers
        before it)."""
        try:
            for layer in range(len(self._layers)):
                for pairs in self._step["loads"]:
                    self._copier.load(layer, pairs)
                self._copier.loaded(layer)
        except (kvshare.Error, OSError, RuntimeError) as exc:
            self._fail_loads(exc)

    def _unloaded(self, r, blocks):
        """@blocks of request @r are not loaded: reported, so that vLLM
        recomputes them, and zeroed first where the scheduler took them
        off vLLM's zeroing (_skip_zeroing)."""
        self._errors.update(blocks)
        self._step["failed"].add(r["req_id"])
        if r.get("zero_unloaded") and self._copier is not None:
            try:
                self._copier.zero(blocks)
            except (RuntimeError, ValueError) as exc:
                logger.warning("kvshare: zeroing %d blocks it could not load: %s",
                               len(blocks), exc)

    def _fail_loads(self, exc):
        """Every load of the step failed: report its blocks, drop its pages."""
        self._loads_lost()
        self._failed(exc)

    def _loads_lost(self):
        """Every load of the step is reported, none is put back: the pool
        is failing, and closing it drops the step's references."""
        step = self._step
        for r in step["meta"].reqs:
            s, e = r["load"]
            if s < e:
                self._unloaded(r, r["block_ids"][s:e])
        step["loads"], step["refs"], step["left"] = [], [], set()

    def _load_layer(self, layer):
        """Layer's device copies (enqueued by start_load_kv) waited for;
        host copies are all done in start_load_kv."""
        self._step["left"].discard(layer)
        try:
            self._copier.wait(layer)
        except (kvshare.Error, OSError, RuntimeError) as exc:
            self._fail_loads(exc)

    def wait_for_layer_load(self, layer_name):
        step = self._step
        if step is not None and not step["load_started"]:
            self.start_load_kv(None)    # loads must precede the forward
        self._wait_copy()
        layer = self._layers.get(layer_name)
        if step is not None and layer in step["left"]:
            self._load_layer(layer)

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        step = self._step
        if step is None or not self.has_connector_metadata():
            return
        if step["saves"] is None:
            step["saves"] = self._prepare_saves()
        layer = self._layers.get(layer_name)
        if self._pool is None:          # failed this step: the arbiter took them back
            step["saves"] = []
        if layer is None or not step["saves"]:
            return
        try:
            for op in step["saves"]:
                self._copier.save(layer, op["pairs"])
            step["saved"].add(layer)
        except (kvshare.Error, OSError, RuntimeError) as exc:
            logger.warning("kvshare: saving layer %s failed (%s): this step's "
                           "blocks are not shared", layer_name, exc)
            self._drop_saves()

    def _prepare_saves(self):
        """For each request whose prompt blocks this step completes: the
        blocks missing from the pool (from the first missing one: earlier
        blocks the pool lost are saved again), fresh pages for them, and
        the reference to the last present block, their parent."""
        pool = self._get() if self._copier is not None else None
        ops = []
        for r in self._get_connector_metadata().reqs:
            s, e = r["save"]
            if pool is None or s >= e or r["req_id"] in self._step["failed"]:
                continue
            keys = self._keys(r, 0, e)
            try:
                hits = pool.lookup(keys)
                if len(hits) >= e:
                    pool.put(hits)
                    continue
                lo = len(hits)
                try:
                    pages = pool.alloc(e - lo)
                except kvshare.Error as exc:
                    if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                        raise
                    if len(hits):
                        pool.put(hits)
                    continue          # full: this prefix is not shared
            except kvshare.Error as exc:
                self._failed(exc)
                return []
            ops.append(dict(pairs=list(zip(r["block_ids"][lo:e], pages.tolist())),
                            pages=pages, keys=keys[lo:], hits=hits))
        return ops

    def _drop_saves(self):
        """Give back the pages of this step's saves (nothing is published)."""
        ops, self._step["saves"] = self._step["saves"] or [], []
        try:
            for op in ops if self._pool is not None else ():
                self._pool.put(op["pages"])
                if len(op["hits"]):
                    self._pool.put(op["hits"])
        except kvshare.Error as exc:
            self._failed(exc)

    def wait_for_save(self):
        step = self._step
        if step is None:
            return
        self._wait_copy()
        for layer in sorted(step["left"]):
            self._load_layer(layer)
        pool = self._pool
        try:
            if self._copier is not None and pool is not None:
                self._copier.sync()
        except (kvshare.Error, OSError, RuntimeError) as exc:
            self._fail_loads(exc)
            pool = None
        self.stats["loaded_blocks"] += sum(len(p) for p in step["loads"])
        if pool is None:                # closed: the arbiter dropped it all
            self._step = None
            return
        if len(step["saved"]) != len(self._layers):
            self._drop_saves()          # never publish a page missing layers
        try:
            for refs in step["refs"]:
                pool.put(refs)
            for op in step["saves"] or ():
                parent = int(op["hits"][-1]) if len(op["hits"]) else kvshare.NO_PAGE
                results, n_dup = pool.publish(op["pages"], op["keys"], parent=parent)
                pool.put(results)
                if len(op["hits"]):
                    pool.put(op["hits"])
                self.stats["saved_blocks"] += len(results) - n_dup
                self.stats["dup_blocks"] += n_dup
        except kvshare.Error as exc:
            self._failed(exc)
        self._step = None

    def get_finished(self, finished_req_ids):
        return None, None

    def get_block_ids_with_load_errors(self):
        errors, self._errors = self._errors, set()
        self.stats["load_errors"] += len(errors)
        return errors

    def clear_connector_metadata(self):
        if self._step is not None:      # no wait_for_save: give back what we hold
            self._step["saved"] = set()
            self.wait_for_save()
        super().clear_connector_metadata()

    def shutdown(self):
        self._close_pool()
        if self._loader is not None:
            self._loader.shutdown()
            self._loader = None
