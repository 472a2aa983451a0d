# SPDX-License-Identifier: GPL-2.0
"""The binding's API: every call, its results, and its errors."""
import errno
import gc
import threading

import numpy as np
import pytest

import kvshare


def test_import_and_docstrings():
    for name in ("Arbiter", "Pool", "PoolView", "BlockHasher", "RadixCache",
                 "PrefixCache", "Request", "Node", "Error"):
        obj = getattr(kvshare, name)
        assert obj.__doc__ and len(obj.__doc__) > 20, name
    for meth in ("alloc", "publish", "lookup", "put", "quota", "stats", "view",
                 "close"):
        assert getattr(kvshare.Pool, meth).__doc__, meth
    assert issubclass(kvshare.Error, OSError)
    assert kvshare.NO_PAGE == 0xFFFFFFFF and kvshare.MAX_BATCH == 65536


def test_arbiter_info_pools_stats(arbiter, mkpool):
    info = arbiter.info()
    assert info["daemon"] is True and arbiter.is_daemon
    assert info["abi_version"] == kvshare.ABI_VERSION
    name = mkpool(pages=32, layers=3, kv_heads=2, head_dim=16, tokens_per_page=8,
                  dtype="f16", quota=20)
    (desc,) = [p for p in arbiter.pools() if p["name"] == name]
    assert desc["n_pages"] == 32 and desc["memory"] is True
    assert desc["max_pages_per_file"] == 20
    g = desc["geometry"]
    assert (g["n_layers"], g["n_kv_heads"], g["head_dim"], g["tokens_per_page"],
            g["dtype"]) == (3, 2, 16, 8, "float16")
    assert g["page_bytes"] == 2 * 3 * 2 * 16 * 8 * 2
    st = arbiter.stats(name, check=True)
    assert st["n_pages"] == 32 and st["n_free"] == 32


def test_pool_page_commands(mkpool):
    name = mkpool()
    with kvshare.Pool(name) as p:
        assert p.n_pages == 64 and p.tokens_per_page == 4
        assert p.page_shape == (2, 2, 4, 2, 8) and p.dtype == "bfloat16"
        h = kvshare.BlockHasher(4, "s")
        keys = h.hash(np.arange(32, dtype=np.uint32))
        assert keys.shape == (8, 4) and keys.dtype == np.uint64
        pages = p.alloc(8)
        assert pages.dtype == np.uint32 and len(set(pages.tolist())) == 8
        assert p.stats()["n_owned"] == 8
        assert p.quota() == (64, 8)
        res, ndup = p.publish(pages, keys)
        assert ndup == 0 and res.tolist() == pages.tolist()
        hits = p.lookup(keys)
        assert hits.tolist() == pages.tolist()
        # A second chain of the same keys is a duplicate: the canonical pages.
        other = p.alloc(8)
        res2, ndup2 = p.publish(other, keys)
        assert ndup2 == 8 and res2.tolist() == pages.tolist()
        p.put(hits)
        p.put(res2)
        p.put(res)
        st = p.stats()
        assert st["n_held"] == 0 and st["n_cached"] == 8
        # A partial chain: the lookup stops at the first miss.
        mixed = keys.copy()
        mixed[3] ^= np.uint64(1)
        got = p.lookup(mixed)
        assert got.tolist() == pages[:3].tolist()
        p.put(got)
        assert p.lookup(keys[:0] if False else mixed[3:4]).size == 0
        assert p.quota(10) == (10, 0)


def test_publish_parent_chain(mkpool):
    with kvshare.Pool(mkpool()) as p:
        h = kvshare.BlockHasher(4)
        keys = h.hash(np.arange(16, dtype=np.int32))
        a = p.alloc(2)
        res, _ = p.publish(a, keys[:2])
        b = p.alloc(2)
        res_b, _ = p.publish(b, keys[2:], parent=int(res[1]))
        assert p.lookup(keys).tolist() == res.tolist() + res_b.tolist()


def test_errors_carry_errno(mkpool):
    name = mkpool(pages=8, quota=4)
    with kvshare.Pool(name) as p:
        with pytest.raises(kvshare.Error) as e:
            p.alloc(5)
        assert e.value.errno == errno.EDQUOT and "alloc of 5 pages" in str(e.value)
        with pytest.raises(kvshare.Error) as e:
            p.put([3])
        assert e.value.errno == errno.ENOENT and "not held" in str(e.value)
        with pytest.raises(kvshare.Error) as e:
            p.quota(100)
        assert e.value.errno == errno.EINVAL and "max_pages_per_file" in str(e.value)
        got = p.alloc(4)
        with pytest.raises(kvshare.Error) as e:
            p.publish(np.array([got[0], got[0]], dtype=np.uint32),
                      kvshare.BlockHasher(4).hash(np.arange(8, dtype=np.uint32)))
        assert e.value.errno == errno.EINVAL and "twice" in str(e.value)
        p.put(got)
    with pytest.raises(kvshare.Error) as e:
        kvshare.Pool("no-such-pool")
    assert e.value.errno == errno.ENOENT and "no-such-pool" in str(e.value)
    with pytest.raises(kvshare.Error) as e:
        kvshare.Pool(name, "/nonexistent/socket")
    assert e.value.errno == errno.ENOENT


def test_pool_full_enospc(mkpool):
    name = mkpool(pages=4)
    with kvshare.Pool(name) as p, kvshare.Pool(name) as other:
        held = other.alloc(4)
        with pytest.raises(kvshare.Error) as e:
            p.alloc(1)
        assert e.value.errno == errno.ENOSPC and "no free" in str(e.value)
        other.put(held)


@pytest.mark.parametrize("bad,exc", [
    (-1, ValueError), (0, ValueError), (65537, ValueError), (2**70, OverflowError),
    ("3", TypeError), (1.5, TypeError), (None, TypeError)])
def test_bad_counts(mkpool, bad, exc):
    with kvshare.Pool(mkpool()) as p:
        with pytest.raises(exc):
            p.alloc(bad)
        assert p.stats()["n_held"] == 0


def test_bad_arguments(mkpool):
    with kvshare.Pool(mkpool()) as p:
        keys = kvshare.BlockHasher(4).hash(np.arange(8, dtype=np.uint32))
        with pytest.raises(TypeError):
            p.put(np.array([1, 2], dtype=np.int64))      # not 32-bit
        with pytest.raises(TypeError):
            p.put("abc")
        with pytest.raises(TypeError):
            p.put([1, "x"])
        with pytest.raises(OverflowError):
            p.put([-1])
        with pytest.raises(ValueError):
            p.put([])
        with pytest.raises(ValueError):
            p.lookup(b"x" * 31)                          # not whole keys
        with pytest.raises(ValueError):
            p.lookup(b"")
        with pytest.raises(TypeError):
            p.lookup(12)
        with pytest.raises(ValueError):
            p.publish(p.alloc(1), keys)                  # 1 page, 2 keys
        with pytest.raises(ValueError):
            p.publish([0], keys[:1], parent=-5)
        with pytest.raises(IndexError):
            p.view(64)
        with pytest.raises(IndexError):
            p.view(60, 5)
        with pytest.raises(IndexError):
            p.page(2**31)
        with pytest.raises(ValueError):
            p.view(0, -1)
        with pytest.raises(TypeError):
            kvshare.Pool(5)
        with pytest.raises(TypeError):
            kvshare.Pool("x", arbiter=3)
        with pytest.raises(ValueError):
            kvshare.BlockHasher(0)
        with pytest.raises(ValueError):
            kvshare.BlockHasher(4, algo="md5")
        with pytest.raises(TypeError):
            kvshare.BlockHasher(4, salt=3)
        with pytest.raises(TypeError):
            kvshare.BlockHasher(4).hash([1, 2], extra=b"lora")
        with pytest.raises(ValueError):
            kvshare.BlockHasher(4).hash([1, 2, 3, 4], parent=b"short")
        with pytest.raises(ValueError):
            kvshare.RadixCache(0)
        with pytest.raises(ValueError):
            kvshare.PrefixCache(p, max_reqs=0)
        with pytest.raises(TypeError):
            kvshare.PrefixCache("pool")
        with pytest.raises(TypeError):
            kvshare.Arbiter(3)
        with kvshare.Arbiter() as a, pytest.raises(TypeError):
            a.create_pool("x", pages=4)                  # geometry missing
        owner_err = pytest.raises(kvshare.Error)
        with owner_err:
            kvshare.Pool("x", owner="no-such-user-kvshare")
        # None of that took or leaked anything.
        st = p.stats()
        assert st["n_owned"] == 1 and st["n_held"] == 1


def test_use_after_close(mkpool):
    p = kvshare.Pool(mkpool())
    v = p.view()
    arr = np.asarray(v)
    pc = kvshare.PrefixCache(p)
    with pytest.raises(BufferError):
        p.close()                      # a view and a cache are alive
    pc.close()
    pc.close()                         # idempotent
    with pytest.raises(ValueError):
        pc.match_prefix([1, 2, 3, 4])
    with pytest.raises(BufferError):
        p.close()                      # the numpy array over the memory
    del arr
    gc.collect()
    p.close()
    p.close()
    assert p.closed
    with pytest.raises(ValueError, match="closed"):
        memoryview(v)                  # a view outliving its pool maps nothing
    for call in (lambda: p.alloc(1), lambda: p.put([0]), lambda: p.lookup(b"\0" * 32),
                 lambda: p.stats(), lambda: p.view(), lambda: p.quota()):
        with pytest.raises(ValueError, match="closed"):
            call()
    a = kvshare.Arbiter()
    a.close()
    with pytest.raises(ValueError, match="closed"):
        a.info()
    r = kvshare.RadixCache(4)
    r.close()
    with pytest.raises(ValueError, match="closed"):
        r.match_prefix([1, 2, 3, 4])


def test_exported_tensor_keeps_pool_open(mkpool):
    torch = pytest.importorskip("torch")
    p = kvshare.Pool(mkpool())
    t = p.tensor()
    with pytest.raises(BufferError):
        p.close()
    del t
    gc.collect()
    p.close()


def test_radix_cache_semantics():
    r = kvshare.RadixCache(2)
    tok = np.arange(10, dtype=np.uint32)
    assert r.insert(tok, np.arange(5, dtype=np.uint32)) == 0
    assert r.insert(tok[:6], [7, 8, 9]) == 6           # all present: caller keeps 7, 8, 9
    m = r.match_prefix(np.array([0, 1, 2, 3, 99, 5], dtype=np.uint32))
    assert m.length == 4 and m.pages.tolist() == [0, 1]
    assert r.peek(tok)[1] == 10
    assert r.total_size == 5 and r.node_count == 3     # split at 6 and at 4
    assert r.lock(m.last_node) == -2
    assert r.protected_size == 2 and r.evictable_size == 3
    assert r.evict(100) == 3
    assert r.take_released().tolist() == [4, 3, 2]     # deepest first
    assert m.last_node.info["lock_ref"] == 1           # locked: still valid
    assert r.unlock(m.last_node) == 2
    with pytest.raises(kvshare.Error) as e:
        r.unlock(m.last_node)                          # stale after the evict
    assert e.value.errno == errno.ESTALE
    r.check()
    r.close()
    assert r.take_released().tolist() == [1, 0]


def test_prefix_cache_requests(mkpool):
    name = mkpool(pages=64)
    with kvshare.Pool(name) as p, kvshare.PrefixCache(p, salt="m") as pc:
        tok = np.arange(30, dtype=np.uint32)
        r = pc.match(tok)
        assert r.active and r.cached_len == 0 and r.slot >= 0
        pc.reserve(r, 30)
        assert r.n_tokens == 30 and len(r.pages) == 8
        with pytest.raises(ValueError):
            pc.cache_finished_req(r, tok[:10])          # fewer tokens than KV
        pc.cache_finished_req(r, tok)
        assert not r.active
        with pytest.raises(ValueError, match="finished"):
            pc.reserve(r, 40)
        st = pc.stats
        assert st["published"] == 7 and st["allocated"] == 8
        # The next request hits the 7 full pages locally.
        r2 = pc.match(tok)
        assert r2.cached_len == 28 and r2.last_node.info["lock_ref"] == 1
        pc.reserve(r2, 33)
        # Chunked prefill: cache what is there, keep going.
        pc.cache_unfinished_req(r2, np.arange(33, dtype=np.uint32))
        assert r2.cached_len == 32
        pc.abort(r2)
        assert pc.total_size == 8
        assert pc.evict(100) == 8
        with pytest.raises(TypeError):
            pc.reserve("req", 3)
        with pytest.raises(ValueError):
            pc.match(tok, n_match=31)
    with kvshare.Pool(name) as p:
        assert p.stats()["n_held"] == 0


def test_dropped_request_is_aborted(mkpool):
    name = mkpool()
    with kvshare.Pool(name) as p, kvshare.PrefixCache(p) as pc:
        r = pc.match(np.arange(16, dtype=np.uint32))
        pc.reserve(r, 16)
        assert p.stats()["n_owned"] == 4
        del r
        gc.collect()
        assert p.stats()["n_owned"] == 0


def test_gil_released_during_arbiter_calls(mkpool):
    """Threads sharing one pool handle run arbiter calls concurrently."""
    name = mkpool(pages=256)
    errs = []
    with kvshare.Pool(name) as p:
        def work():
            try:
                for _ in range(200):
                    p.put(p.alloc(4))
            except Exception as e:      # noqa: BLE001 - reported below
                errs.append(e)
        ts = [threading.Thread(target=work) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errs
        assert p.stats()["n_held"] == 0


def test_interpreter_exit_closes(mkpool, tmp_path):
    """Objects left open at interpreter exit are closed cleanly."""
    import subprocess
    import sys
    import os
    name = mkpool()
    code = ("import kvshare, numpy as np\n"
            "p = kvshare.Pool(%r)\n"
            "pc = kvshare.PrefixCache(p)\n"
            "r = pc.match(np.arange(16, dtype=np.uint32)); pc.reserve(r, 16)\n"
            "v = p.view(); t = p.tensor()\n"
            "held = p.alloc(3)\n" % name)
    out = subprocess.run([sys.executable, "-c", code], env=os.environ, capture_output=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    with kvshare.Pool(name) as p:
        assert p.stats()["n_held"] == 0


def test_prefix_cache_insert_and_sglang_names(mkpool):
    name = mkpool(pages=64)
    with kvshare.Pool(name) as p, kvshare.PrefixCache(p, salt="m") as pc:
        tok = np.arange(100, 118, dtype=np.uint32)           # 4 full pages + 2 tokens
        pages = p.alloc(5)
        assert pc.insert(tok, pages) == 0
        assert pc.total_size == 4
        st = p.stats()
        assert st["n_held"] == 4 and st["n_owned"] == 0       # the partial page was PUT
        dup = p.alloc(5)
        assert pc.insert(tok, dup) == 16                      # all there: dups are PUT
        assert p.stats()["n_held"] == 4
        m = pc.match_prefix(tok)
        assert m.length == 16 and m.pages.tolist() == pages[:4].tolist()
        with pytest.raises(ValueError, match="tree's own"):
            pc.insert(tok, np.concatenate([m.pages, [0]]).astype(np.uint32))
        with pytest.raises(ValueError):
            pc.insert(tok, pages[:2])                          # too few pages
        assert pc.inc_lock_ref(m.last_node) == -4 and pc.protected_size == 4
        assert pc.dec_lock_ref(m.last_node) == 4
        # Another process's view: the chain is published under the salt.
        keys = kvshare.BlockHasher(4, "m").hash(tok)
        with kvshare.Pool(name) as q:
            hits = q.lookup(keys)
            assert hits.tolist() == pages[:4].tolist()
            q.put(hits)


@pytest.mark.parametrize("call", [
    lambda p, pc, r: pc.reserve(r, 2**40),
    lambda p, pc, r: pc.reserve(r, -1),
    lambda p, pc, r: kvshare.PrefixCache(p, max_context=2**33),
    lambda p, pc, r: kvshare.Pool(p.name, ns=-1),
    lambda p, pc, r: kvshare.Pool(p.name, ns=2**64),
    lambda p, pc, r: kvshare.BlockHasher(2**32 + 16),
    lambda p, pc, r: kvshare.RadixCache(-4),
    lambda p, pc, r: kvshare.Arbiter().create_pool("big", pages=2**70, layers=1,
                                                   kv_heads=1, head_dim=1,
                                                   tokens_per_page=1),
    lambda p, pc, r: kvshare.Arbiter().create_pool("big", pages=4, layers=2**32,
                                                   kv_heads=1, head_dim=1,
                                                   tokens_per_page=1),
    lambda p, pc, r: p.view(-1),
    lambda p, pc, r: p.quota(-1),
    lambda p, pc, r: pc.evict(-1),
])
def test_huge_and_negative_values_rejected(mkpool, call):
    with kvshare.Pool(mkpool()) as p, kvshare.PrefixCache(p) as pc:
        r = pc.match(np.arange(8, dtype=np.uint32))
        with pytest.raises((ValueError, OverflowError)):
            call(p, pc, r)
        assert r.active and r.n_tokens == 0
        pc.abort(r)
        assert p.stats()["n_held"] == 0


def test_handles_refuse_use_after_fork(mkpool):
    """A forked child sharing the parent's handle would take and drop the
    parent's holdings: it gets an error, and its exit puts nothing back."""
    import os
    name = mkpool()
    with kvshare.Pool(name) as p, kvshare.PrefixCache(p) as pc:
        tok = np.arange(32, dtype=np.uint32)
        r = pc.match(tok)
        pc.reserve(r, 32)
        pc.cache_finished_req(r, tok)
        r2 = pc.match(tok)
        held = p.stats()["n_held"]
        pid = os.fork()
        if pid == 0:
            code = 9
            try:
                code = 0
                for call in (lambda: p.alloc(1), lambda: pc.match_prefix(tok),
                             lambda: pc.evict(100), lambda: p.stats()):
                    try:
                        call()
                        code = 1
                    except kvshare.Error as e:
                        if e.errno != errno.EBADFD or "before fork" not in str(e):
                            code = 2
                del r2                      # must not abort the parent's request
                pc.close()                  # must not PUT the parent's pages
                p.close()
            finally:
                os._exit(code)
        _, st = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(st) == 0
        assert p.stats()["n_held"] == held
        assert pc.match_prefix(tok).length == 32
        pc.abort(r2)


def test_numpy_integers_pass_as_ints(mkpool):
    """A page taken from a result array passes where an int is expected
    (parent=, page(), wait_ms=), as CPython's own "I" format takes it;
    floats are refused, never rounded."""
    with kvshare.Pool(mkpool()) as p:
        keys = kvshare.BlockHasher(4, "np").hash(np.arange(8, dtype=np.uint32))
        first, _ = p.publish(p.alloc(1), keys[:1])
        second, _ = p.publish(p.alloc(1), keys[1:], parent=first[0])
        assert isinstance(first[0], np.uint32) and p.page(first[0]).start == first[0]
        hits = p.lookup(keys, np.int64(5))
        assert list(hits) == [first[0], second[0]]
        with pytest.raises(TypeError, match="parent"):
            p.publish([0], keys[:1], parent=np.float64(first[0]))
        with pytest.raises(TypeError, match="page"):
            p.page(float(first[0]))
        with pytest.raises(TypeError, match="wait_ms"):
            p.lookup(keys, np.float32(5))
        p.put(hits)
        p.put(first)
        p.put(second)
        assert p.quota()[1] == 0
