# SPDX-License-Identifier: GPL-2.0
"""Pool.copy_pages(): whole pages between the pool and host pieces, in one
call; every size and index is checked before a byte moves."""
import sys
import threading
import time

import numpy as np
import pytest

import kvshare


def _pieces(buf, splits):
    """(addrs, sizes) of consecutive pieces of numpy @buf, of @splits bytes."""
    base, addrs, off = buf.ctypes.data, [], 0
    for s in splits:
        addrs.append(base + off)
        off += s
    return addrs, list(splits)


@pytest.mark.parametrize("splits", [None, (1,), (4095, 1, 4096, 64), (63, 4160 - 63)],
                         ids=["whole", "one_byte_first", "mixed", "unaligned"])
def test_round_trip_in_pieces(mkpool, splits):
    """Host pieces of any sizes (below and above the streaming threshold,
    at any alignment) land in the pages in order and come back equal."""
    name = mkpool(pages=16, layers=8, kv_heads=4, head_dim=32, tokens_per_page=4)
    with kvshare.Pool(name) as p:
        pb = p.page_bytes                   # 16 KiB
        if splits is None:
            splits = (pb,)
        elif sum(splits) != pb:
            splits = tuple(splits) + (pb - sum(splits),)
        pages = p.alloc(3)
        rng = np.random.default_rng(7)
        src = rng.integers(0, 256, 3 * pb + 1, dtype=np.uint8)[1:]   # unaligned host
        addrs, sizes = _pieces(src, splits * 3)
        p.copy_pages(pages, addrs, sizes, True)
        for i, page in enumerate(pages.tolist()):
            got = bytes(memoryview(p.page(page)).cast("B"))
            assert got == src[i * pb:(i + 1) * pb].tobytes()
        dst = np.zeros(3 * pb, dtype=np.uint8)
        addrs, sizes = _pieces(dst, splits * 3)
        p.copy_pages(pages[::-1].copy(), addrs, sizes, False)
        for i in range(3):
            assert np.array_equal(dst[i * pb:(i + 1) * pb], src[(2 - i) * pb:(3 - i) * pb])
        p.put(pages)


def test_checked_before_copying(mkpool):
    name = mkpool(pages=8)
    with kvshare.Pool(name) as p:
        pb = p.page_bytes
        pages = p.alloc(2)
        before = bytes(memoryview(p.view(0, 8)).cast("B"))
        buf = np.ones(2 * pb, dtype=np.uint8)
        a, s = _pieces(buf, (pb, pb))
        with pytest.raises(IndexError, match="page 8: the pool has 8 pages"):
            p.copy_pages(np.array([pages[0], 8], dtype=np.uint32), a, s, True)
        with pytest.raises(ValueError, match="hold %d bytes; a page is %d" % (pb - 1, pb)):
            p.copy_pages(pages, a, [pb, pb - 1], True)
        with pytest.raises(ValueError, match="3 addrs and 2 sizes"):
            p.copy_pages(pages, a + a[:1], s, True)
        with pytest.raises(ValueError, match="wraps"):
            p.copy_pages(pages[:1], [2**64 - 16], [pb], True)
        with pytest.raises(ValueError, match="a batch holds"):
            p.copy_pages(np.zeros(0, dtype=np.uint32), [], [], True)
        with pytest.raises(TypeError, match="addrs.0.: expected int"):
            p.copy_pages(pages, "xy", s, True)
        # Nothing was written by the refused calls.
        assert bytes(memoryview(p.view(0, 8)).cast("B")) == before
        p.put(pages)


def test_runs_without_the_gil(mkpool):
    """Another thread runs Python in the middle of a large copy: the copy
    does not hold the GIL."""
    name = mkpool(pages=64, layers=32, kv_heads=8, head_dim=64, tokens_per_page=16)
    with kvshare.Pool(name) as p:
        pb, pages = p.page_bytes, p.alloc(64)
        buf = np.ones(64 * pb, dtype=np.uint8)
        a, s = _pieces(buf, (pb,) * 64)
        p.copy_pages(pages, a, s, True)          # fault the pages in first
        stamps, stop = [], threading.Event()

        def tick():
            clock = time.perf_counter
            while not stop.is_set():
                stamps.append(clock())
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)                # hand the GIL over at once
        t = threading.Thread(target=tick)
        try:
            t.start()
            time.sleep(0.01)
            calls = []
            for i in range(10):
                t0 = time.perf_counter()
                p.copy_pages(pages, a, s, bool(i % 2))
                calls.append((t0, time.perf_counter()))
        finally:
            stop.set()
            t.join()
            sys.setswitchinterval(interval)
        p.put(pages)

    def longest_stall(t0, t1):
        inside = [t0] + [x for x in stamps if t0 < x < t1] + [t1]
        return max(b - a for a, b in zip(inside, inside[1:])) / (t1 - t0)
    # With the GIL held the ticker stalls for the whole copy: most of each
    # call's time.  Released, it keeps running in at least one of them.
    stalls = sorted(longest_stall(*c) for c in calls)
    assert stalls[0] < 0.5, "the ticker stalled in every copy: %s" % stalls


def test_closed_pool(mkpool):
    p = kvshare.Pool(mkpool(pages=4))
    p.close()
    with pytest.raises(ValueError, match="closed Pool"):
        p.copy_pages([0], [0], [0], True)
