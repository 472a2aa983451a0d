# SPDX-License-Identifier: GPL-2.0
"""Pool.prefault(): a handle's mapping entered in the page tables ahead of
use, so that its first copy from pages another handle wrote takes no page
faults; the bytes are never changed."""
import resource

import numpy as np
import pytest

import kvshare


def _faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _copy_out_faults(p, pages, dst):
    """Minor faults of copying @pages out of @p into @dst (touched)."""
    pb = p.page_bytes
    addrs = [dst.ctypes.data + i * pb for i in range(len(pages))]
    before = _faults()
    p.copy_pages(pages, addrs, [pb] * len(pages), False)
    return _faults() - before


def test_prefault_takes_the_first_touch_faults(mkpool):
    """Pages written through one handle, read through a fresh one: without
    prefault the copy faults (at least one a 64 KiB, the kernel's
    fault-around), after it next to none; the bytes are those written."""
    name = mkpool(pages=64, layers=4, kv_heads=4, head_dim=64, tokens_per_page=4,
                  dtype="float32")
    with kvshare.Pool(name) as w:
        pb = w.page_bytes                       # 16 KiB: 4 MiB in all
        pages = w.alloc(64)
        src = np.random.default_rng(3).integers(0, 256, 64 * pb, dtype=np.uint8)
        w.copy_pages(pages, [src.ctypes.data + i * pb for i in range(64)], [pb] * 64, True)
        dst = np.ones(64 * pb, dtype=np.uint8)
        with kvshare.Pool(name) as cold:
            assert _copy_out_faults(cold, pages, dst) >= 64 * pb // 65536
        assert np.array_equal(dst, src)
        dst[:] = 1
        with kvshare.Pool(name) as warm:
            warm.prefault(0, warm.n_pages)
            assert _copy_out_faults(warm, pages, dst) <= 4
        assert np.array_equal(dst, src), "prefault changed the bytes"
        w.put(pages)


def test_prefault_ranges(mkpool):
    """Pages smaller than a system page and not aligned to one are fine;
    ranges outside the pool and closed handles are refused."""
    name = mkpool(pages=64)                     # 512-byte pages
    with kvshare.Pool(name) as p:
        before = bytes(memoryview(p.view(0, 64)).cast("B"))
        p.prefault(3, 5)
        p.prefault(0, 64)
        p.prefault(64, 0)
        assert bytes(memoryview(p.view(0, 64)).cast("B")) == before
        with pytest.raises(IndexError, match=r"pages \[60, \+5\) are not in the pool's 64"):
            p.prefault(60, 5)
        with pytest.raises(IndexError):
            p.prefault(65, 0)
    with pytest.raises(ValueError, match="closed Pool"):
        p.prefault(0, 1)


@pytest.mark.parametrize("stream", [True, False], ids=["streaming", "through_cache"])
def test_copy_pages_either_store(mkpool, stream):
    """copy_pages' stream=False (memcpy, for bytes the CPU reads next)
    moves the same bytes as its streaming stores."""
    name = mkpool(pages=8, layers=8, kv_heads=4, head_dim=32, tokens_per_page=4)
    with kvshare.Pool(name) as p:
        pb = p.page_bytes
        pages = p.alloc(3)
        src = np.random.default_rng(5).integers(0, 256, 3 * pb + 1, dtype=np.uint8)[1:]
        splits = (4095, 1, pb - 4096)
        addrs = [src.ctypes.data + i * pb + o for i in range(3) for o in (0, 4095, 4096)]
        p.copy_pages(pages, addrs, list(splits) * 3, True, stream=stream)
        dst = np.zeros(3 * pb + 1, dtype=np.uint8)[1:]
        addrs = [dst.ctypes.data + i * pb + o for i in range(3) for o in (0, 4095, 4096)]
        p.copy_pages(pages, addrs, list(splits) * 3, False, stream=stream)
        assert np.array_equal(dst, src)
        p.put(pages)
