# SPDX-License-Identifier: MIT
"""kvshare: share LLM KV-cache pages between processes, from Python.

The C extension ``kvshare._kvshare`` binds libkv; this package adds the
torch and numpy conveniences on top.  The objects:

* :class:`Arbiter` -- pool administration (create, destroy, list, stats);
* :class:`Pool` -- a pool attached and mapped: ``alloc``/``publish``/
  ``lookup``/``put``/``quota`` over numpy arrays of pages and keys, and its
  memory without a copy (``view``, ``numpy``, ``tensor``); in-flight dedupe
  with ``alloc_claim`` and ``lookup(keys, wait_ms=...)``;
* :class:`BlockHasher` -- chained SHA-256 / XXH3 page keys, equal to libkv's;
* :class:`RadixCache` -- SGLang's RadixCache at page granularity, alone;
* :class:`PrefixCache` -- the same tree wired to the arbiter, as engines
  use it (``match``, ``reserve``, ``cache_finished_req``, ...).

Errors from the arbiter or libkv are :class:`Error`, an ``OSError`` whose
``errno`` is the call's.  A call to kvshared that gets no answer within the
handle's deadline (``timeout_ms``) raises :class:`CallTimeout`, which is
both an :class:`Error` and a ``TimeoutError`` (errno ``ETIMEDOUT``).
"""
from ._kvshare import (ABI_VERSION, MAX_BATCH, NO_PAGE, Arbiter, BlockHasher,
                       CallTimeout, Error, LookupResult, MatchResult, Node,
                       PoolView, PrefixCache, RadixCache, Request, __version__)
from ._kvshare import Pool as _Pool

__all__ = ["ABI_VERSION", "MAX_BATCH", "NO_PAGE", "Arbiter", "BlockHasher",
           "CallTimeout", "Error", "LookupResult", "MatchResult", "Node", "Pool",
           "PoolView", "PrefixCache", "RadixCache", "Request"]


class Pool(_Pool):
    __doc__ = _Pool.__doc__

    def numpy(self, start=0, count=None):
        """Pages [start, start + count) as a numpy array over the pool memory
        (no copy), shape (pages, layers, 2, tokens_per_page, kv_heads,
        head_dim).  bfloat16 pools give uint16 arrays of the bits (numpy has
        no bfloat16); use tensor() for real bfloat16.  A device pool
        (is_device) raises BufferError: the CPU must not read GPU memory."""
        import numpy
        view = self.view(start, count)
        if self.is_device:
            # The buffer protocol refuses device memory with BufferError,
            # saying why; numpy.asarray would hide it in an object array.
            memoryview(view).release()
        return numpy.asarray(view)

    def tensor(self, start=0, count=None):
        """Pages [start, start + count) as a torch tensor over the pool memory
        (no copy, through DLPack), shape (pages, layers, 2, tokens_per_page,
        kv_heads, head_dim) and the pool's dtype.  A device pool (is_device)
        gives a CUDA tensor, and needs a torch with CUDA
        (torch.cuda.is_available()): otherwise RuntimeError (Debian's torch
        is CPU-only)."""
        import torch.utils.dlpack
        view = self.view(start, count)
        if self.is_device and not torch.cuda.is_available():
            raise RuntimeError(
                "pool %r is GPU device memory, but this torch has no CUDA "
                "(torch.cuda.is_available() is False; Debian's torch is "
                "CPU-only): a CUDA tensor of the pool needs a CUDA build of "
                "torch and a GPU" % self.name)
        return torch.utils.dlpack.from_dlpack(view)

    def page_tensor(self, page):
        """One page as a tensor of shape page_shape (no copy)."""
        return self.tensor(page, 1)[0]


def key_hex(key):
    """A key (4 uint64) as 64 hex digits, word 0 first, little-endian bytes."""
    import numpy
    return numpy.ascontiguousarray(key, dtype=numpy.uint64).tobytes().hex()
