# SPDX-License-Identifier: MIT
"""Whole KV blocks between an engine's paged KV cache and kvshare pages.

One pool page holds one engine block across all layers: page p, layer l
is the pool's ``(2, tokens_per_page, kv_heads, head_dim)`` slab at
``p * page_bytes + l * layer_bytes``.  The engine's cache is one tensor
per layer, in vLLM's layouts (research/engine-adapters.md):

* MHA: logical ``(num_blocks, H, block_size, 2*D)``, K in ``[..., :D]``
  and V in ``[..., D:]``; physically NHD ``(num_blocks, block_size, H,
  2*D)`` or HND ``(num_blocks, H, block_size, 2*D)``.  A block is ``rows
  = block_size * H`` rows of ``2*D``; the page keeps the K halves of the
  rows, then the V halves, in the engine's row order (so NHD pages are
  the pool's own ``(T, H, D)`` order, HND pages are ``(H, T, D)``: the
  caller salts its keys with the layout, so the two never meet).
* MLA: ``(num_blocks, block_size, head_size)``, one latent per token, no
  K/V split: the block's bytes fill the layer slab of a pool with
  ``kv_heads=1, head_dim=head_size/2`` exactly, nothing wasted.

Host pools are copied by the CPU through torch views of the pool memory
(``pool.tensor()``, no copy on the pool side; a CUDA engine cache makes
torch move the bytes between host and device).  GPU pools
(``pool.is_device``) are copied device to device with ``cuMemcpy2DAsync``
on a stream (``kvshare._kvshare.cuda_copy2d``), one copy per block half.
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
        self.blocks.append(phys.reshape(t.shape[0], heads * block_size, 2, dim)
                           .transpose(1, 2))
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

    def _page_view(self, page, layer):
        v = self.pages[page, layer]
        return v if self.eng.layout == "MLA" else v.view(
            2, self.eng.block_size * self.eng.kv_heads, self.eng.head_dim)

    def load(self, layer, pairs):
        """Pool pages -> engine blocks."""
        if self.device:
            return self._dev(layer, pairs, to_engine=True)
        blocks = self.eng.blocks[layer]
        for block, page in pairs:
            blocks[block].copy_(self._page_view(page, layer))

    def save(self, layer, pairs):
        """Engine blocks -> pool pages."""
        if self.device:
            return self._dev(layer, pairs, to_engine=False)
        blocks = self.eng.blocks[layer]
        for block, page in pairs:
            self._page_view(page, layer).copy_(blocks[block])

    def _dev(self, layer, pairs, to_engine):
        eng = self.eng
        t = eng.blocks[layer]
        isz = eng.itemsize
        block_bytes = t.stride(0) * isz
        slab0 = self._base + layer * self._layer_bytes
        if eng.layout == "MLA":
            width = block_bytes
            epitch = ppitch = width
            height = 1
            halves = ((0, 0),)
        else:
            rows = eng.block_size * eng.kv_heads
            width = eng.head_dim * isz
            epitch, ppitch, height = 2 * width, width, rows
            halves = ((0, 0), (width, rows * width))     # (engine, page) offsets
        eng_addrs, page_addrs = [], []
        base = t.data_ptr()
        for block, page in pairs:
            e = base + block * block_bytes
            p = slab0 + page * self._page_bytes
            for eo, po in halves:
                eng_addrs.append(e + eo)
                page_addrs.append(p + po)
        if not eng_addrs:
            return
        if to_engine:
            _kvshare.cuda_copy2d(eng_addrs, page_addrs, epitch, ppitch, width, height,
                                 self._stream, self._ordinal)
        else:
            _kvshare.cuda_copy2d(page_addrs, eng_addrs, ppitch, epitch, width, height,
                                 self._stream, self._ordinal)

    def sync(self):
        """Wait for the enqueued device copies (no-op for host pools)."""
        if self.device:
            _kvshare.cuda_synchronize(self._stream, self._ordinal)

    def release(self):
        """Drop the views of the pool memory (so the pool can close)."""
        self.pages = None
        self._pool = None
