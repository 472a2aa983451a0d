# SPDX-License-Identifier: GPL-2.0
"""Pool.contains(): LOOKUP's run length with KVS_LOOKUP_PEEK, taking nothing."""
import errno
import signal
import time

import numpy as np
import pytest

import kvshare


def _chain(p, keys):
    """Publish @keys as one chain; the pages, referenced by @p."""
    res, _ = p.publish(p.alloc(len(keys)), keys)
    return res


def _counters(p):
    st = p.stats()
    return {k: st[k] for k in ("n_held", "n_refs", "n_shared", "n_cached",
                               "n_evictable", "lookups", "hits")}


def test_contains_counts_lookups_run_and_takes_nothing(mkpool):
    with kvshare.Pool(mkpool()) as a, kvshare.Pool(a.name) as b:
        keys = kvshare.BlockHasher(4, "c").hash(np.arange(40, dtype=np.uint32))
        pages = _chain(a, keys[:6])
        a.put(pages[4:])                        # two of them CACHED
        mixed = keys.copy()
        mixed[3] ^= np.uint64(1)
        before = _counters(b)
        assert b.contains(keys) == 6
        assert b.contains(keys[:2]) == 2
        assert b.contains(mixed) == 3
        assert b.contains(keys[6:]) == 0
        assert b.contains(keys[:1].tobytes()) == 1   # any buffer of keys
        assert _counters(b) == before
        assert b.quota()[1] == 0
        # lookup() agrees, and does take what it finds.
        for k in (keys, mixed, keys[6:]):
            hits = b.lookup(k)
            assert len(hits) == b.contains(k)
            if len(hits):
                b.put(hits)
        a.put(pages[:4])


def test_contains_leaves_the_eviction_order(mkpool):
    """x, then y, CACHED in a full pool: after contains(x) the next alloc
    evicts x; after lookup+put of x (the control) it evicts y."""
    for peek in (True, False):
        with kvshare.Pool(mkpool(pages=4)) as p:
            keys = kvshare.BlockHasher(4, "lru").hash(np.arange(8, dtype=np.uint32))
            x, y = keys[0:1], keys[1:2]
            p.put(_chain(p, x))
            p.put(_chain(p, y))
            filler = p.alloc(2)
            if peek:
                assert p.contains(x) == 1
            else:
                p.put(p.lookup(x))
            got = p.alloc(1)
            assert (p.contains(x), p.contains(y)) == ((0, 1) if peek else (1, 0))
            p.put(filler)
            p.put(got)


def test_contains_errors_as_for_lookup(mkpool):
    p = kvshare.Pool(mkpool())
    keys = kvshare.BlockHasher(4).hash(np.arange(8, dtype=np.uint32))
    with pytest.raises(ValueError):
        p.contains(keys[:0])                    # no keys
    with pytest.raises(ValueError):
        p.contains(b"\0" * 31)                  # not whole keys
    with pytest.raises(TypeError):
        p.contains(7)
    with pytest.raises(TypeError):
        p.contains()
    assert p.stats()["n_held"] == 0
    p.close()
    with pytest.raises(ValueError, match="closed"):
        p.contains(keys)


def test_contains_on_a_stopped_daemon_raises(own_daemon):
    """A SIGSTOPped kvshared: contains() raises CallTimeout within the
    handle's deadline, as lookup() does."""
    arb = kvshare.Arbiter(own_daemon.socket)
    arb.create_pool("stop", pages=8, layers=1, kv_heads=1, head_dim=8,
                    tokens_per_page=4, dtype="bf16")
    p = kvshare.Pool("stop", own_daemon.socket, timeout_ms=200)
    keys = kvshare.BlockHasher(4).hash(np.arange(8, dtype=np.uint32))
    assert p.contains(keys) == 0
    own_daemon.proc.send_signal(signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(kvshare.CallTimeout) as e:
            p.contains(keys)
        assert e.value.errno == errno.ETIMEDOUT
        assert time.monotonic() - t0 < 2.0
    finally:
        own_daemon.proc.send_signal(signal.SIGCONT)
    p.close()
    arb.destroy_pool("stop")
    arb.close()
