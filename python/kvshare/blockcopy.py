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

Host pools are copied by the CPU through torch views of the pool memory
(``pool.tensor()``, no copy on the pool side; a CUDA engine cache makes
torch move the bytes between host and device).  GPU pools
(``pool.is_device``) are copied device to device with ``cuMemcpy2DAsync``
on a stream (``kvshare._kvshare.cuda_copy2d``), one copy per block and
layer.
"""
import torch

from . import _kvshare

__all__ = ["EngineLayout", "BlockCopier", "DTYPE_NAMES"]

DTYPE_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16",
               torch.float32: "float32", torch.uint8: "fp8"}
for _n in ("float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _n):
        DTYPE_NAMES[getattr(torch, _n)] = "fp8"


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


class BlockCopier:
    """Copies blocks of one layer between the engine's cache (``eng``, an
    EngineLayout) and pages of ``pool``.  ``load(l, pairs)`` and
    ``save(l, pairs)`` take (block_id, page) pairs; device copies are
    only enqueued until ``sync()``."""

    def __init__(self, pool, eng):
        self.eng = eng
        self.device = pool.is_device
        self._pool = pool
        if self.device:
            self._base = pool.address
            self._page_bytes = pool.page_bytes
            self._layer_bytes = pool.page_bytes // pool.n_layers
            self._ordinal = pool.page(0).__dlpack_device__()[1]
            self._stream = (torch.cuda.current_stream().cuda_stream
                            if torch.cuda.is_available() else 0)
            self.pages = None
        else:
            shape = (pool.n_pages, eng.layers, -1)
            self.pages = pool.tensor().view(shape[0], shape[1], -1)

    def load(self, layer, pairs):
        """Pool pages -> engine blocks."""
        if self.device:
            return self._dev(layer, pairs, to_engine=True)
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

    def save(self, layer, pairs):
        """Engine blocks -> pool pages (a loop: index_copy_ into the
        strided page view measured 2-3x slower)."""
        if self.device:
            return self._dev(layer, pairs, to_engine=False)
        blocks, pages = self.eng.blocks[layer], self.pages[:, layer]
        for block, page in pairs:
            pages[page].copy_(blocks[block])

    def _dev(self, layer, pairs, to_engine):
        eng = self.eng
        t = eng.blocks[layer]
        block_bytes = t.stride(0) * eng.itemsize
        slab0 = self._base + layer * self._layer_bytes
        eng_addrs, page_addrs = [], []
        base = t.data_ptr()
        for block, page in pairs:
            eng_addrs.append(base + block * block_bytes)
            page_addrs.append(slab0 + page * self._page_bytes)
        if not eng_addrs:
            return
        if to_engine:
            _kvshare.cuda_copy2d(eng_addrs, page_addrs, block_bytes, block_bytes,
                                 block_bytes, 1, self._stream, self._ordinal)
        else:
            _kvshare.cuda_copy2d(page_addrs, eng_addrs, block_bytes, block_bytes,
                                 block_bytes, 1, self._stream, self._ordinal)

    def sync(self):
        """Wait for the enqueued device copies (no-op for host pools)."""
        if self.device:
            _kvshare.cuda_synchronize(self._stream, self._ordinal)

    def release(self):
        """Drop the views of the pool memory (so the pool can close)."""
        self.pages = None
        self._pool = None
