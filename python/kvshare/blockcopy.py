# SPDX-License-Identifier: MIT
"""Whole KV blocks between an engine's paged KV cache and kvshare pages.

One pool page holds one engine block across all layers: page p, layer l
is the pool's ``(2, tokens_per_page, kv_heads, head_dim)`` slab at
``p * page_bytes + l * layer_bytes``, which has exactly the bytes of one
engine block of one layer.  The engine's cache is one tensor per layer, in
vLLM's layouts (research/engine-adapters.md):

* MHA: logical ``(num_blocks, H, block_size, 2*D)``, K in ``[..., :D]``
  and V in ``[..., D:]``; physically NHD ``(num_blocks, block_size, H,
  2*D)`` or HND ``(num_blocks, H, block_size, 2*D)``;
* MLA: ``(num_blocks, block_size, head_size)``, one latent per token, no
  K/V split: a pool of ``kv_heads=1, head_dim=head_size/2`` has exactly
  its bytes, nothing wasted.

A block of one layer is contiguous in every layout, so the slab keeps it
verbatim, in the engine's own order (K and V halves interleaved per row,
rows token-major for NHD, head-major for HND), not the pool's nominal
``(2, T, H, D)``: one contiguous copy per block and layer, no
de-interleaving.  Pages of different layouts therefore differ, and the
caller salts its keys with the layout so that they never meet.

Which copy path a pool and an engine take is decided by what the CUDA
driver says their memory is (``cuPointerGetAttribute``), not by torch's
device flag alone (a tensor torch calls CPU may be device memory, as on
the tests' driver stand-in):

* host pool, engine in host memory: the CPU copies, through torch views
  of the pool memory (``pool.tensor()``, no copy on the pool side);
* host pool, engine in device memory (a CUDA engine): the pool's mapping
  is registered with the driver once (``cuMemHostRegister``, pinned, so
  copies are DMA and asynchronous) and unregistered before it goes; each
  layer's blocks move in one ``cuMemcpy2DAsync`` per run of consecutive
  (block, page) pairs, on the engine's stream;
* GPU pool (``pool.is_device``), engine in device memory of the same
  GPU: the same copies, device to device;
* GPU pool, engine in host memory: refused (the CPU must not touch the
  pool, and a host engine has no stream to copy on).

Device copies are only enqueued: ``loaded(l)`` records an event after
layer l's loads and ``wait(l)`` waits for that event alone; ``sync()``
waits for everything, once, before pages are published.  Nothing else
synchronises.
"""
import errno

import torch


from . import _kvshare

__all__ = ["EngineLayout", "BlockCopier", "DTYPE_NAMES", "memory_of"]

# The torch dtypes an engine keeps one-byte KV in where torch has no dtype
# of the pool's name (fp8): SGLang and vLLM store it as uint8, or as one of
# torch's float8 types.
_BYTE_STORAGE = ("uint8", "float8_e4m3fn", "float8_e5m2")


def _dtype_names():
    """torch dtype -> pool dtype name (its torch spelling), from the one
    table of them, <kvshare/kv_layout.h>'s, as _kvshare.dtypes() gives it."""
    names = {}
    for _name, torch_name, _alias, itemsize in _kvshare.dtypes():
        t = getattr(torch, torch_name, None)
        if isinstance(t, torch.dtype):
            names[t] = torch_name
        elif itemsize == 1:
            for n in _BYTE_STORAGE:
                if hasattr(torch, n):
                    names[getattr(torch, n)] = torch_name
    return names


DTYPE_NAMES = _dtype_names()


class EngineLayout:
    """The geometry of an engine's per-layer KV tensors, checked uniform.

    Attributes: ``layers``, ``kv_heads``, ``head_dim`` (what a pool page
    must have), ``block_size``, ``dtype`` (a pool dtype name), ``layout``
    ("NHD", "HND" or "MLA"), ``num_blocks``, and ``blocks``: per layer,
    the tensor in physical order (each block contiguous)."""

    def __init__(self, tensors, block_size, mla):
        if not tensors:
            raise ValueError("no KV cache tensors to register")
        self.block_size = block_size
        self.blocks = []
        first = None
        for name, t in tensors:
            g = self._one(name, t, block_size, mla)
            if first is None:
                first = g
            elif g != first:
                raise ValueError(
                    "layer %s has KV geometry %s, layer %s has %s: kvshare needs "
                    "one geometry for all layers" % (name, g, tensors[0][0], first))
        (self.layout, self.num_blocks, self.kv_heads, self.head_dim,
         self.dtype, self.itemsize) = first
        self.layers = len(tensors)

    def _one(self, name, t, block_size, mla):
        if not isinstance(t, torch.Tensor):
            raise TypeError("layer %s: KV cache is %s, not a torch.Tensor"
                            % (name, type(t).__name__))
        dtype = DTYPE_NAMES.get(t.dtype)
        if dtype is None:
            raise ValueError("layer %s: KV cache dtype %s has no kvshare pool dtype"
                             % (name, t.dtype))
        # The physical order: dims by decreasing stride (the block dim first).
        order = [0] + sorted(range(1, t.dim()), key=lambda d: -t.stride(d))
        phys = t.permute(order)
        if not phys.is_contiguous():
            raise ValueError("layer %s: KV cache of shape %s strides %s is not "
                             "block-major with contiguous blocks"
                             % (name, tuple(t.shape), t.stride()))
        if mla:
            if t.dim() != 3 or t.shape[1] != block_size or t.shape[2] % 2:
                raise ValueError(
                    "layer %s: an MLA KV cache must be (num_blocks, block_size=%d, "
                    "even head_size), not %s" % (name, block_size, tuple(t.shape)))
            self.blocks.append(phys.reshape(t.shape[0], -1))
            return ("MLA", t.shape[0], 1, t.shape[2] // 2, dtype, t.element_size())
        if t.dim() != 4 or t.shape[2] != block_size or t.shape[3] % 2:
            raise ValueError(
                "layer %s: an attention KV cache must be (num_blocks, kv_heads, "
                "block_size=%d, 2*head_dim) (NHD or HND in memory), not %s"
                % (name, block_size, tuple(t.shape)))
        heads, dim = t.shape[1], t.shape[3] // 2
        # Token-major rows (NHD) unless the head stride is the larger one;
        # with one head the two are the same bytes.
        layout = "HND" if heads > 1 and t.stride(1) > t.stride(2) else "NHD"
        # (num_blocks, rows, 2, D) -> (num_blocks, 2, rows, D): K rows, V rows.
        self.blocks.append(phys.reshape(t.shape[0], -1))
        return (layout, t.shape[0], heads, dim, dtype, t.element_size())

    def describe(self):
        return ("%d layers, %d kv_heads x head_dim %d, %d tokens a block, %s (%s)"
                % (self.layers, self.kv_heads, self.head_dim, self.block_size,
                   self.dtype, self.layout))


def pool_describe(pool):
    return ("%d layers, %d kv_heads x head_dim %d, %d tokens a page, %s"
            % (pool.n_layers, pool.n_kv_heads, pool.head_dim,
               pool.tokens_per_page, pool.dtype))


def check_fits(pool, eng, pool_name):
    """ValueError, giving both geometries, unless one pool page is one
    engine block across all layers."""
    if (pool.n_layers, pool.n_kv_heads, pool.head_dim, pool.tokens_per_page,
            pool.dtype) != (eng.layers, eng.kv_heads, eng.head_dim,
                            eng.block_size, eng.dtype):
        raise ValueError(
            "kvshare pool %r does not fit this engine's KV blocks: the pool has "
            "%s; the engine has %s%s" % (
                pool_name, pool_describe(pool), eng.describe(),
                " (MLA: a pool of kv_heads=1, head_dim=head_size/2)"
                if eng.layout == "MLA" else ""))


# cuMemHostRegister flag: pinned for every context of the process.
_HOST_REGISTER_PORTABLE = 0x01


def memory_of(address):
    """("device", ordinal, start, size) or ("host", None, None, None) for an
    address, as the CUDA driver sees it: host for pageable memory the
    driver does not know, and for everything when there is no driver."""
    try:
        info = _kvshare.cuda_pointer_info(address)
    except _kvshare.Error as e:
        if e.errno != errno.ENODEV:
            raise
        info = None
    if info is None or info[0] == "host":
        return ("host", None, None, None)
    return info


def _engine_memory(eng):
    """("device", ordinal) or ("host", None): where every layer of the
    engine's cache lives, checked the same for all and against torch."""
    where = None
    for layer, t in enumerate(eng.blocks):
        kind, ordinal, start, size = memory_of(t.data_ptr())
        nbytes = t.numel() * t.element_size()
        if kind == "device" and not (start <= t.data_ptr() and
                                     t.data_ptr() + nbytes <= start + size):
            raise ValueError(
                "KV cache layer %d (%d bytes at %#x) runs out of the device "
                "allocation it starts in ([%#x, %#x))" % (
                    layer, nbytes, t.data_ptr(), start, start + size))
        if t.is_cuda and (kind != "device" or ordinal != t.device.index):
            raise ValueError(
                "KV cache layer %d is a torch tensor on %s, but the CUDA driver says "
                "its memory is %s" % (layer, t.device, "host memory" if kind == "host"
                                      else "on device %d" % ordinal))
        if where is None:
            where = (kind, ordinal)
        elif where != (kind, ordinal):
            raise ValueError(
                "KV cache layer %d is in %s memory%s but layer 0 in %s memory%s: "
                "kvshare needs all layers in one place" % (
                    layer, kind, "" if ordinal is None else " of device %d" % ordinal,
                    where[0], "" if where[1] is None else " of device %d" % where[1]))
    return where


class BlockCopier:
    """Copies blocks of one layer between the engine's cache (``eng``, an
    EngineLayout) and pages of ``pool``.  ``load(l, pairs)`` and
    ``save(l, pairs)`` take (block_id, page) pairs.  ``direction`` is
    "host" (CPU copies, done at once), "host-cuda" (host pool, CUDA engine)
    or "cuda" (GPU pool, CUDA engine); the last two (``is_async``) only
    enqueue their copies, on ``stream``: an int CUstream, a callable
    returning one, or None for torch's current CUDA stream of the engine's
    device (the legacy default stream, 0, where torch has no CUDA)."""

    def __init__(self, pool, eng, stream=None):
        self.eng = eng
        self._pool = pool
        self.pages = None
        self._registered = None           # the pinned pool range we own
        self._events = {}                 # layer -> CUevent of its loads
        self._unwaited = set()            # layers loaded, not waited for
        self._marked = set()              # ... whose event follows their loads
        self._save_streams = set()        # streams with saves since sync()
        self._load_streams = set()        # ... with loads
        kind, self._ordinal = _engine_memory(eng)
        if pool.is_device:
            pk, po, _, _ = memory_of(pool.address)
            if pk != "device":
                raise ValueError("kvshare pool: libkv says it is GPU memory, the CUDA "
                                 "driver does not know its address %#x" % pool.address)
            if kind != "device":
                raise ValueError(
                    "a GPU pool (memory=cuda) serves CUDA engines only, and this "
                    "engine's KV caches are in host memory: give it a host pool")
            if po != self._ordinal:
                raise ValueError(
                    "the GPU pool is on device %d but the engine's KV caches are on "
                    "device %d: a GPU pool serves engines on its own GPU" % (
                        po, self._ordinal))
            self.direction = "cuda"
        elif memory_of(pool.address)[0] != "host":
            raise ValueError("kvshare pool: libkv says it is host memory, the CUDA "
                             "driver says its address %#x is device memory"
                             % pool.address)
        elif kind == "device":
            self.direction = "host-cuda"
        else:
            self.direction = "host"
        self.is_async = self.direction != "host"
        self.device = pool.is_device
        self._stream_src = stream
        self._page_bytes = pool.page_bytes
        self._layer_bytes = pool.page_bytes // pool.n_layers
        self._base = pool.address
        if self.direction == "host":
            shape = (pool.n_pages, eng.layers, -1)
            self.pages = pool.tensor().view(shape[0], shape[1], -1)
            # load_all's host pieces: a block of layer l is at
            # _layer_addrs[l] + block * _block_bytes (one pool layer slab).
            self._layer_addrs = [t.data_ptr() for t in eng.blocks]
            self.stream_loads = True
            self._block_bytes = eng.blocks[0].stride(0) * eng.itemsize
            if self._block_bytes != self._layer_bytes:
                raise ValueError("an engine block of one layer is %d bytes, a pool "
                                 "page's layer %d" % (self._block_bytes, self._layer_bytes))
        elif self.direction == "host-cuda":
            self._register(pool)

    def _register(self, pool):
        """Pin the pool's mapping for this attachment (undone by release())."""
        size = pool.n_pages * pool.page_bytes
        try:
            _kvshare.cuda_host_register(self._base, size, flags=_HOST_REGISTER_PORTABLE,
                                        device=self._ordinal)
            self._registered = self._base
        except _kvshare.Error as e:
            if e.errno != errno.EEXIST:
                raise
            # Someone in this process pinned it already: fine if all of it.
            kind, _, start, rsize = memory_of(self._base)
            if kind != "host" or not (start <= self._base and
                                      self._base + size <= start + rsize):
                raise _kvshare.Error(errno.EEXIST, "kvshare pool mapping [%#x, +%d) is "
                                     "partly registered with CUDA already: %s"
                                     % (self._base, size, e))

    def stream(self):
        """The CUstream copies go on now."""
        src = self._stream_src
        if callable(src):
            return int(src())
        if src is not None:
            return int(src)
        if torch.cuda.is_available():
            return torch.cuda.current_stream(self._ordinal).cuda_stream
        return 0

    def load(self, layer, pairs):
        """Pool pages -> engine blocks."""
        if self.is_async:
            return self._async(layer, pairs, to_engine=True)
        blocks, pages = self.eng.blocks[layer], self.pages[:, layer]
        first = pairs[0][0] if pairs else 0
        if [b for b, _ in pairs] == list(range(first, first + len(pairs))):
            # Consecutive blocks (the usual case): one gather, measured as
            # fast as a memcpy of the same bytes.
            idx = torch.tensor([p for _, p in pairs], dtype=torch.int64)
            torch.index_select(pages, 0, idx, out=blocks[first:first + len(pairs)])
            return
        for block, page in pairs:
            blocks[block].copy_(pages[page])

    def load_all(self, pairs):
        """Pool pages -> engine blocks, every layer at once (host copies):
        one Pool.copy_pages call, without the GIL, streaming stores, each
        page's layer slabs to that layer's block.  Block ids are checked
        here (copy_pages trusts host addresses), pages there."""
        if not pairs:
            return
        eng = self.eng
        blocks = [b for b, _ in pairs]
        bad = [b for b in blocks if not 0 <= b < eng.num_blocks]
        if bad:
            raise ValueError("load_all: block %d out of range: the engine has %d blocks"
                             % (bad[0], eng.num_blocks))
        base = self._layer_addrs
        step = self._block_bytes
        addrs = [a + b * step for b in blocks for a in base]
        self._pool.copy_pages([p for _, p in pairs], addrs,
                              [self._layer_bytes] * len(addrs), False,
                              stream=self.stream_loads)

    def zero(self, blocks):
        """Zero engine @blocks in every layer (blocks a load did not fill;
        on the engine's device, ordered after the copies enqueued)."""
        for t in self.eng.blocks:
            t.index_fill_(0, torch.tensor(blocks, dtype=torch.int64, device=t.device), 0)

    def save(self, layer, pairs):
        """Engine blocks -> pool pages (a loop: index_copy_ into the
        strided page view measured 2-3x slower)."""
        if self.is_async:
            return self._async(layer, pairs, to_engine=False)
        blocks, pages = self.eng.blocks[layer], self.pages[:, layer]
        for block, page in pairs:
            pages[page].copy_(blocks[block])

    def _async(self, layer, pairs, to_engine):
        """One cuMemcpy2DAsync per run of pairs consecutive in both the
        blocks and the pages: rows of one block, a block apart on the
        engine side and a page apart on the pool side."""
        if not pairs:
            return
        t = self.eng.blocks[layer]
        block_bytes = t.stride(0) * self.eng.itemsize
        eng0 = t.data_ptr()
        slab0 = self._base + layer * self._layer_bytes
        eng_addrs, page_addrs, heights = [], [], []
        run_b = run_p = None
        for block, page in sorted(pairs):
            if run_b is not None and block == run_b + heights[-1] and \
                    page == run_p + heights[-1]:
                heights[-1] += 1
                continue
            run_b, run_p = block, page
            eng_addrs.append(eng0 + block * block_bytes)
            page_addrs.append(slab0 + page * self._page_bytes)
            heights.append(1)
        stream = self.stream()
        host = self.direction == "host-cuda"
        if to_engine:
            _kvshare.cuda_copy2d(eng_addrs, page_addrs, block_bytes, self._page_bytes,
                                 block_bytes, heights, stream, self._ordinal,
                                 src_host=host)
            self._unwaited.add(layer)
            self._marked.discard(layer)
            self._load_streams.add(stream)
        else:
            _kvshare.cuda_copy2d(page_addrs, eng_addrs, self._page_bytes, block_bytes,
                                 block_bytes, heights, stream, self._ordinal,
                                 dst_host=host)
            self._save_streams.add(stream)

    def loaded(self, layer):
        """Mark the end of layer's loads enqueued so far (an event)."""
        if not self.is_async or layer not in self._unwaited:
            return
        ev = self._events.get(layer)
        if ev is None:
            ev = self._events[layer] = _kvshare.cuda_event("create", device=self._ordinal)
        _kvshare.cuda_event("record", ev, self.stream(), self._ordinal)
        self._marked.add(layer)

    def wait(self, layer):
        """Wait for layer's loads through its event, and for no other
        copies (all of them, if loaded() did not mark its end)."""
        if layer not in self._unwaited:
            return
        self._unwaited.discard(layer)
        if layer not in self._marked:
            return self.sync()
        self._marked.discard(layer)
        _kvshare.cuda_event("synchronize", self._events[layer], device=self._ordinal)

    def sync(self):
        """Wait for every copy enqueued since the last sync() and not
        waited for already, once a stream (no-op when there is none)."""
        streams = self._save_streams | (self._load_streams if self._unwaited else set())
        self._save_streams, self._load_streams = set(), set()
        self._unwaited.clear()
        self._marked.clear()
        for s in sorted(streams):
            _kvshare.cuda_synchronize(s, self._ordinal)

    def release(self):
        """Wait for the copies in flight, unpin and drop the views of the
        pool memory (so the pool can close)."""
        if self.is_async:
            try:
                self.sync()
            except _kvshare.Error:
                pass            # their blocks are reported by the caller
            for ev in self._events.values():
                try:
                    _kvshare.cuda_event("destroy", ev, device=self._ordinal)
                except _kvshare.Error:
                    pass
            self._events = {}
        if self._registered is not None:
            addr, self._registered = self._registered, None
            _kvshare.cuda_host_unregister(addr, device=self._ordinal)
        self.pages = None
        self._pool = None
