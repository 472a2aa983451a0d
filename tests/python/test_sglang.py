# SPDX-License-Identifier: GPL-2.0
"""kvshare.sglang.KVShareStorage, driven as SGLang drives a storage backend.

SGLang's real interface files (hicache_storage.py, storage/backend_factory.py,
from ../shared/peers/sglang) build the backend through the "dynamic"
factory path; sglang_harness.HostPool stands in for the host KV pool (the
real one needs torch >= 2.1 and CUDA kernels) and replays the cache
controller's call orders: backup batch_set_v1 in 128-page slices, prefetch
batch_exists then batch_get_v1, or the generic batch_set/batch_get.  Every
test runs against a real kvshared."""
import errno
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import types

import pytest

torch = pytest.importorskip("torch")

import kvshare  # noqa: E402
import sglang_harness as H  # noqa: E402

try:
    SG = H.import_sglang()
except FileNotFoundError as e:          # no peers tree: nothing to drive
    pytest.skip(str(e), allow_module_level=True)

from kvshare import sglang as ks  # noqa: E402  (needs SGLang's interface first)

PS, LAYERS, HEADS, DIM, MLA_C = 16, 4, 2, 8, 24
MHA_LAYOUTS = ["layer_first", "page_first", "page_first_direct", "page_head"]
MLA_LAYOUTS = ["layer_first", "page_first", "page_first_direct"]
ALL = [(lay, False) for lay in MHA_LAYOUTS] + [(lay, True) for lay in MLA_LAYOUTS]
HERE = os.path.dirname(os.path.abspath(__file__))
_n = iter(range(1 << 30))


def host_pool(layout="page_first", mla=False, tokens=1024, dtype=torch.bfloat16,
              heads=HEADS, dim=DIM, c=MLA_C):
    if mla:
        return H.HostPool(layout, LAYERS, PS, tokens, dtype=dtype, mla_dim=c)
    return H.HostPool(layout, LAYERS, PS, tokens, dtype=dtype, heads=heads, head_dim=dim)


@pytest.fixture
def pools(arbiter):
    """pools() -> a fresh pool name; every pool made under one is checked
    (the arbiter's invariants, nothing held) and destroyed at the end."""
    names = []

    def make():
        names.append("sg%d" % next(_n))
        return names[-1]
    yield make
    for n in names:
        try:
            st = arbiter.stats(n, check=True)
        except kvshare.Error as e:
            if e.errno == errno.ENOENT:
                continue
            raise
        assert st["n_held"] == 0 and st["n_owned"] == 0, st
        arbiter.destroy_pool(n)


def backend(daemon, pool, host, mla=False, **kw):
    extra = H.kvshare_extra(pool, arbiter=daemon.socket, create=True, **kw)
    cfg_kw = {k: kw.pop(k) for k in list(kw) if k in ("tp_rank", "tp_size", "model",
                                                        "pp", "cp")}
    for k in cfg_kw:
        extra.pop(k, None)
    return H.attach(SG, H.storage_config(SG, extra, mla=mla, **cfg_kw), host)


def chain(n_pages, seed=0, prefix=()):
    toks = list(prefix) + [seed * 1000003 + i for i in range(n_pages * PS - len(prefix))]
    return H.page_keys(toks, PS)


def stored(host, keys, salt=0):
    slots = host.alloc(len(keys) * PS)
    H.fill(host, slots, keys, salt)
    return slots


def same_pages(host_a, slots_a, host_b, slots_b, n):
    return all(torch.equal(H.page_bytes(host_a, slots_a[i * PS]),
                           H.page_bytes(host_b, slots_b[i * PS])) for i in range(n))


def round_trip(writer, host_w, reader, host_r, keys):
    """@writer stores the pages of @keys from @host_w; @reader then loads
    every one of them into @host_r, byte for byte."""
    slots = stored(host_w, keys)
    assert all(writer.batch_set_v1(keys, slots))
    n, got = H.prefetch(SG, reader, host_r, keys)
    assert n == len(keys) and same_pages(host_w, slots, host_r, got, n)


# -- construction ---------------------------------------------------------------

def test_factory_builds_it_and_creates_the_pool_with_the_engines_geometry(
        daemon, pools, arbiter):
    name = pools()
    host = host_pool("page_first")
    extra = H.kvshare_extra(name, arbiter=daemon.socket, create=True, pages=40,
                            mode="0640")
    b = H.attach(SG, H.storage_config(SG, extra), host)
    assert isinstance(b, ks.KVShareStorage) and isinstance(b, SG.HiCacheStorage)
    info = [p for p in arbiter.pools() if p["name"] == name][0]
    st = arbiter.stats(name)
    assert st["n_pages"] == 40
    with kvshare.Pool(name, daemon.socket) as p:
        assert p.geometry == {"n_layers": LAYERS, "n_kv_heads": HEADS, "head_dim": DIM,
                              "tokens_per_page": PS, "dtype": "bfloat16",
                              "page_bytes": 2 * LAYERS * PS * HEADS * DIM * 2}
    assert info["mode"] == 0o640
    b.close()
    # MLA: one C-wide vector a token and layer, in a pool of 1 head of C/2:
    # the page is exactly the engine's, no half wasted.
    name2 = pools()
    m = backend(daemon, name2, host_pool("page_first", mla=True), mla=True)
    with kvshare.Pool(name2, daemon.socket) as p:
        g = p.geometry
        assert (g["n_kv_heads"], g["head_dim"]) == (1, MLA_C // 2)
        assert g["page_bytes"] == LAYERS * PS * MLA_C * 2 == m.page.page_bytes
    m.close()


def test_missing_pool_is_refused_without_create(daemon, pools):
    extra = H.kvshare_extra(pools(), arbiter=daemon.socket)
    with pytest.raises(kvshare.Error) as ei:
        H.attach(SG, H.storage_config(SG, extra), host_pool())
    assert ei.value.errno == errno.ENOENT and "no such pool" in str(ei.value)


def test_a_pool_with_a_namespace_per_uid_works_too(daemon, pools, arbiter):
    """Tenants sharing a pool but not their caches: the arbiter puts each uid
    in its own namespace, and the backend (which attaches with ns 0, as such
    a pool requires) stores and loads as usual."""
    name = pools()
    arbiter.create_pool(name, pages=16, layers=LAYERS, kv_heads=HEADS, head_dim=DIM,
                        tokens_per_page=PS, dtype="bf16", ns_per_uid=True)
    hw, hr = host_pool(), host_pool()
    w = H.attach(SG, H.storage_config(SG, H.kvshare_extra(name, arbiter=daemon.socket)), hw)
    r = H.attach(SG, H.storage_config(SG, H.kvshare_extra(name, arbiter=daemon.socket)), hr)
    round_trip(w, hw, r, hr, chain(3))
    w.close()
    r.close()


DEVICE_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[2])
import sglang_harness as H
sg = H.import_sglang()
host = H.HostPool("page_first", 4, 16, 256, heads=2, head_dim=8)
cfg = H.storage_config(sg, H.kvshare_extra("gsg", arbiter=sys.argv[1]))
try:
    H.attach(sg, cfg, host)
except ValueError as e:
    print("refused:", e)
except Exception as e:
    print("cannot open the device pool: %r" % e)
    sys.exit(77)
"""


def test_a_gpu_pool_is_refused(monkeypatch):
    """The backend copies with the CPU: a memory=cuda pool (on the CUDA
    driver stand-in) is refused at start, never memmoved."""
    from conftest import BUILD, _kvshared
    from kvshare.session import Daemon
    stub = os.path.abspath(os.path.join(BUILD, "tests", "gpu"))
    if not os.path.exists(os.path.join(stub, "libcuda.so.1")):
        pytest.skip("the CUDA driver stand-in is not built")
    old = os.environ.get("LD_LIBRARY_PATH")
    monkeypatch.setenv("LD_LIBRARY_PATH", stub + (":" + old if old else ""))
    spec = ("gsg:pages=8,layers=%d,kv_heads=%d,head_dim=%d,tokens_per_page=%d,dtype=bf16,"
            "mode=0600,memory=cuda" % (LAYERS, HEADS, DIM, PS))
    with Daemon(pools=[spec], kvshared=_kvshared()) as d:
        r = subprocess.run([sys.executable, "-c", DEVICE_CHILD, d.socket, HERE],
                           capture_output=True, text=True, timeout=60)
    if r.returncode == 77:
        pytest.skip(r.stdout.strip())
    assert r.returncode == 0 and "refused:" in r.stdout, r.stdout + r.stderr
    assert "GPU memory" in r.stdout and "must be host memory" in r.stdout


@pytest.mark.parametrize("mla", [False, True])
def test_pool_of_another_geometry_is_refused_naming_both(daemon, pools, arbiter, mla):
    name = pools()
    arbiter.create_pool(name, pages=8, layers=LAYERS, kv_heads=HEADS, head_dim=16,
                        tokens_per_page=PS, dtype="bf16")
    extra = H.kvshare_extra(name, arbiter=daemon.socket, create=True)
    with pytest.raises(ValueError) as ei:
        H.attach(SG, H.storage_config(SG, extra, mla=mla), host_pool(mla=mla))
    msg = str(ei.value)
    assert "2 kv heads x 16" in msg                                 # the pool's
    assert ("1 kv heads x 12" if mla else "2 kv heads x 8") in msg  # the engine's
    assert arbiter.stats(name)["n_files"] == 0                      # not left attached


def test_unstorable_engine_pages_are_refused(daemon, pools):
    with pytest.raises(ValueError, match="odd width 23"):
        backend(daemon, pools(), host_pool(mla=True, c=23), mla=True)
    with pytest.raises(ValueError, match="no kvshare equivalent"):
        backend(daemon, pools(), host_pool(dtype=torch.int32))


@pytest.mark.parametrize("key,value,what", [
    ("create", "yes", "expected bool"), ("pool", "a/b", "A-Za-z0-9"),
    ("mode", "rw", "octal"), ("mode", 0o1777, "0..0777"), ("timeout_ms", -1, "0..86400000"),
    ("pages", 0, "at least 1"), ("owner", 1.5, "expected str or int"),
    ("retry_s", True, "expected int or float")])
def test_bad_extra_config_is_refused_at_construction(key, value, what):
    extra = dict(H.kvshare_extra("x"), **{key: value})
    with pytest.raises(ValueError) as ei:
        SG.StorageBackendFactory.create_backend("dynamic", H.storage_config(SG, extra), None)
    assert what in str(ei.value) and (key in str(ei.value) or key in ("pool", "mode"))


# -- the controller's calls, every layout ---------------------------------------

@pytest.mark.parametrize("layout,mla", ALL)
@pytest.mark.parametrize("write_v1,read_v1", [(True, True), (False, False), (True, False),
                                              (False, True)])
def test_backup_then_prefetch_gives_the_same_bytes(daemon, pools, arbiter, layout, mla,
                                                   write_v1, read_v1):
    """A second engine prefetches what the first backed up, byte for byte,
    whichever of the zero-copy and generic paths each one takes."""
    name = pools()
    hw, hr = host_pool(layout, mla, tokens=3000), host_pool(layout, mla, tokens=3000)
    w, r = backend(daemon, name, hw, mla), backend(daemon, name, hr, mla)
    keys = chain(150)                                # two controller batches
    slots = stored(hw, keys)
    assert H.backup(SG, w, hw, keys, slots, v1=write_v1) == 150
    before = arbiter.stats(name)
    assert H.query(SG, r, keys + chain(3, seed=9)) == 150
    after = arbiter.stats(name)                         # batch_exists pins nothing,
    assert after["n_held"] == 0                         # and is a peek: not counted
    assert (after["lookups"], after["hits"]) == (before["lookups"], before["hits"])
    n, rslots = H.prefetch(SG, r, hr, keys, v1=read_v1)
    assert n == 150 and same_pages(hw, slots, hr, rslots, n)
    st = w.stats()
    assert st["set_pages"] == 150 and st["errors"] == 0
    w.close()
    r.close()


def test_pool_pages_hold_kvshares_layout_for_layer_first(daemon, pools):
    """MHA layer_first pages are stored as kvshare lays a page out, [layer]
    [K, V][token][head][dim]: pool.tensor() shows the engine's K and V."""
    name = pools()
    host = host_pool("layer_first")
    b = backend(daemon, name, host)
    keys = chain(2)
    slots = stored(host, keys)
    assert all(b.batch_set_v1(keys, slots))
    with kvshare.Pool(name, daemon.socket) as p:
        pages = p.lookup(ks.kvshare_keys(b._ns, keys))
        kv = p.tensor()
        for i, pg in enumerate(pages.tolist()):
            s = int(slots[i * PS])
            for layer in range(LAYERS):
                for kv_half in (0, 1):            # bits: random pages hold NaNs
                    assert torch.equal(kv[pg, layer, kv_half].view(torch.int16),
                                       host.kv_buffer[kv_half, layer, s:s + PS].view(
                                           torch.int16))
        del kv
        p.put(pages)
    b.close()


def test_get_that_misses_returns_false_from_there_and_copies_nothing(daemon, pools):
    name = pools()
    hw, hr = host_pool(), host_pool()
    w, r = backend(daemon, name, hw), backend(daemon, name, hr)
    keys = chain(6)
    assert all(w.batch_set_v1(keys[:4], stored(hw, keys[:4])))
    slots = hr.alloc(6 * PS)
    res = r.batch_get_v1(keys[:2] + [chain(1, seed=5)[0]] + keys[2:5], slots)
    assert res == [True, True, False, False, False, False]
    # Pages 2.. of the slots were not written (the host pool starts zeroed).
    assert all(int(H.page_bytes(hr, slots[i * PS]).count_nonzero()) == 0
               for i in range(2, 6))
    assert int(H.page_bytes(hr, slots[PS]).count_nonzero()) > 0
    got = r.batch_get(keys, [hr.get_dummy_flat_data_page() for _ in keys])
    assert [g is not None for g in got] == [True] * 4 + [False] * 2
    assert r.stats()["get_misses"] >= 2
    w.close()
    r.close()


def test_bad_calls_fail_cleanly(daemon, pools, arbiter):
    name = pools()
    host = host_pool()
    b = backend(daemon, name, host)
    keys = chain(3)
    slots = stored(host, keys)
    assert b.batch_set_v1(keys, slots[:-1]) == [False] * 3              # one slot short
    assert b.batch_set_v1(keys, slots + 1) == [False] * 3               # not page-aligned
    assert b.batch_set_v1(keys, slots + host.size) == [False] * 3       # outside the pool
    assert b.batch_get_v1(keys, torch.flip(slots, [0])) == [False] * 3  # pages reversed
    assert b.batch_set(keys, [torch.zeros(5)] * 3) is False             # a draft's pages
    assert b.batch_set(keys, None) is False
    assert b.batch_get(keys, [torch.zeros(5)] * 3) == [None] * 3
    assert b.batch_exists([]) == 0 and b.batch_get_v1([], slots[:0]) == []
    assert b.batch_exists(keys) == 0                                    # nothing was stored
    assert arbiter.stats(name, check=True)["n_held"] == 0
    # Draft keys ("<key>.draft") and other strings are keys too.
    draft = [k + ".draft" for k in keys]
    assert b.batch_set(draft, [host.get_data_page(slots[i * PS]) for i in range(3)])
    assert b.batch_exists(draft) == 3 and b.batch_exists(keys) == 0
    assert b.exists(draft[0]) and not b.exists(keys[0])
    page = b.get(draft[1], host.get_dummy_flat_data_page())
    assert torch.equal(page.view(torch.int16), host.get_data_page(slots[PS]).view(torch.int16))
    assert b.set(keys[0], host.get_data_page(slots[0])) and b.exists(keys[0])
    b.close()
    assert b.batch_exists(draft) == 0 and b.batch_get_v1(keys, slots) == [False] * 3


# -- keys and namespaces -----------------------------------------------------------

def test_kvshare_keys_are_one_mapping_per_namespace():
    ns1, ns2 = os.urandom(32), os.urandom(32)
    keys = chain(5)
    k1 = ks.kvshare_keys(ns1, keys)
    assert k1.shape == (5, 4) and len({bytes(r) for r in k1}) == 5
    # The vectorised path and the one-key path agree.
    assert all((ks.kvshare_keys(ns1, [k]) == k1[i]).all() for i, k in enumerate(keys))
    assert (ks.kvshare_keys(ns1, keys + ["x"])[:5] == k1).all()
    assert not (ks.kvshare_keys(ns2, keys) == k1).all(axis=1).any()
    odd = ks.kvshare_keys(ns1, ["x", "y", keys[0] + ".draft", "g" * 64, keys[1].upper()])
    assert len({bytes(r) for r in odd} | {bytes(r) for r in k1}) == 10
    assert (ks.kvshare_keys(ns1, [k.upper() for k in keys]) != k1).any(axis=1).all()


def test_namespace_names_everything_a_page_depends_on():
    page = ks.EnginePage("mha", "page_first", 4, 2, 8, 16, torch.bfloat16, 4096)
    base = dict(tp_rank=0, tp_size=2, pp=(0, 1), cp=(0, 1), model="m", mla=False)

    def ns(page=page, salt="", **kw):
        return ks.namespace_digest(H.storage_config(SG, {}, **dict(base, **kw)), page, salt)
    ref = ns()
    others = [ns(model="m2"), ns(tp_rank=1), ns(tp_size=4), ns(pp=(1, 2)), ns(cp=(1, 2)),
              ns(salt="tenant-b"), ns(page=page._replace(layout="page_head")),
              ns(page=page._replace(dtype=torch.float16)),
              ns(page=page._replace(tokens=32)), ns(page=page._replace(layers=5))]
    assert ref not in others and len(set(others)) == len(others)
    # MLA: the KV is the same on every rank, so the rank is not in it.
    assert ns(mla=True, tp_rank=0) == ns(mla=True, tp_rank=1)


def test_another_model_rank_layout_or_tenant_never_hits(daemon, pools):
    name = pools()
    keys = chain(4)
    host = host_pool("page_first")
    w = backend(daemon, name, host, tp_rank=0, tp_size=2, model="org/model-a")
    assert all(w.batch_set_v1(keys, stored(host, keys)))
    same = backend(daemon, name, host_pool("page_first"), tp_rank=0, tp_size=2,
                   model="org/model-a")
    assert same.batch_exists(keys) == 4
    for kw, layout in [({"model": "org/model-b"}, "page_first"),
                       ({"tp_rank": 1}, "page_first"), ({"tp_size": 4}, "page_first"),
                       ({"pp": (1, 2)}, "page_first"), ({"cp": (1, 2)}, "page_first"),
                       ({"namespace": "tenant-b"}, "page_first"), ({}, "layer_first"),
                       ({}, "page_first_direct")]:
        args = dict(dict(tp_rank=0, tp_size=2, model="org/model-a"), **kw)
        other = backend(daemon, name, host_pool(layout), **args)
        assert other.batch_exists(keys) == 0, (kw, layout)
        other.close()
    same.close()
    w.close()
    # MLA: rank 0 writes, rank 1 reads the same pages.
    name2 = pools()
    h0, h1 = host_pool(mla=True), host_pool(mla=True)
    r0 = backend(daemon, name2, h0, mla=True, tp_rank=0, tp_size=2)
    r1 = backend(daemon, name2, h1, mla=True, tp_rank=1, tp_size=2)
    round_trip(r0, h0, r1, h1, keys)
    r0.close()
    r1.close()


# -- concurrency ------------------------------------------------------------------

def test_three_controller_threads_at_once(daemon, pools, arbiter):
    """Backup, prefetch and prefetch-IO threads on one backend, on chains
    that share a prefix: every load is the right bytes, nothing stays held."""
    name = pools()
    host = host_pool("page_first_direct", tokens=20000)
    b = backend(daemon, name, host, pages=4096)
    lock = threading.Lock()
    errors = []
    common = list(range(5000, 5000 + 64))

    def worker(t):
        try:
            for r in range(4):
                keys = chain(40, seed=100 * t + r % 2, prefix=common)
                with lock:
                    slots = stored(host, keys)
                H.backup(SG, b, host, keys, slots)
                with lock:
                    hit = H.query(SG, b, keys)
                    dst = host.alloc(hit * PS)
                n = H.load(SG, b, host, keys[:hit], dst)
                with lock:
                    if n != 40 or not same_pages(host, slots, host, dst, n):
                        errors.append((t, r, hit, n))
                    host.free(slots)
                    host.free(dst)
        except Exception as e:                       # pragma: no cover
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    st = b.stats()
    assert st["errors"] == 0 and st["set_skipped"] > 0    # the shared prefix, stored once
    assert len(b._handles) == 4             # one handle a thread (and register's)
    b.close()
    assert arbiter.stats(name, check=True)["n_held"] == 0


def test_racing_backup_eviction_and_prefetch_never_show_wrong_bytes(daemon, pools,
                                                                    arbiter):
    """A writer backs up chain after chain into a pool too small for them
    (ALLOC evicts), while a reader prefetches them all the time: a page it
    gets is always the right bytes (published only once copied; pinned
    while copied out), and a page evicted is a miss."""
    name = pools()
    hw = host_pool("page_first", tokens=40 * PS, heads=8, dim=64)   # 128 KiB pages
    hr = host_pool("page_first", tokens=40 * PS, heads=8, dim=64)
    w = backend(daemon, name, hw, pages=48)
    r = backend(daemon, name, hr)
    chains = [chain(32, seed=s) for s in range(6)]
    stop, bad, loaded = threading.Event(), [], [0]

    def writer():
        try:
            for c in chains * 8:
                slots = stored(hw, c)
                H.backup(SG, w, hw, c, slots)
                hw.free(slots)
        finally:
            stop.set()

    def reader():
        nbytes = H.page_bytes(hr, 0).numel()
        while not stop.is_set():
            for c in chains:
                slots = hr.alloc(32 * PS)
                for i, ok in enumerate(r.batch_get_v1(c, slots)):
                    if ok:
                        loaded[0] += 1
                        if not torch.equal(H.page_bytes(hr, slots[i * PS]),
                                           H.page_content(c[i], nbytes)):
                            bad.append(c[i])
                hr.free(slots)
    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not bad and loaded[0] > 0
    assert arbiter.stats(name)["evictions"] > 0
    w.close()
    r.close()


def test_two_engine_processes_every_layout_tp_and_mla(daemon):
    """One process backs up (TP ranks 0 and 1 of 2; with MLA rank 0 only),
    three threads at once; another prefetches, three threads at once, and
    gets its own rank's bytes (MLA: rank 0's) in every layout."""
    prefix = "sgx%d" % next(_n)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH",
                                                                             "")]))
    outs = []
    for mode in ("write", "read"):
        p = subprocess.run([sys.executable, os.path.join(HERE, "sglang_replay.py"), mode,
                            daemon.socket, prefix], env=env, capture_output=True, text=True,
                           timeout=240)
        assert p.returncode == 0, p.stderr[-3000:]
        outs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    wrote, read = outs
    per_chain = (40 + 150) // PS
    for key, res in read.items():
        assert res["bad"] == 0 and res["errors"] == 0, (key, res)
        assert res["pages"] == 3 * per_chain, (key, res)
    assert len(read) == 14 and len(wrote) == 11       # MLA rank 1 wrote nothing
    with kvshare.Arbiter(daemon.socket) as a:
        for p in a.pools():
            if p["name"].startswith(prefix):
                assert a.stats(p["name"], check=True)["n_held"] == 0
                a.destroy_pool(p["name"])


# -- the reference: SGLang's own HiCacheFile -------------------------------------

@pytest.mark.parametrize("v1", [True, False])
def test_same_exists_counts_and_bytes_as_hicachefile(daemon, pools, tmp_path, v1):
    """One random trace of controller calls against KVShareStorage and
    SGLang's HiCacheFile (real, on tmp_path): every batch_exists count and
    every loaded byte agree."""
    rng = random.Random(19)
    name = pools()
    hk, hf = host_pool("layer_first", tokens=40000), host_pool("layer_first", tokens=40000)
    kvs = backend(daemon, name, hk, pages=2048)
    hcf = SG.HiCacheFile(H.storage_config(SG, {}), file_path=str(tmp_path))
    roots = [list(range(r * 10**6, r * 10**6 + 2 * PS)) for r in range(3)]
    chains = []
    for i in range(12):
        n = rng.randrange(1, 40)
        chains.append(chain(n, seed=i + 1, prefix=rng.choice(roots)))
    n_ops = {"set": 0, "exists": 0, "get": 0}
    for _ in range(60):
        keys = rng.choice(chains)
        cut = rng.randrange(1, len(keys) + 1)
        op = rng.choice(["set", "exists", "get"])
        n_ops[op] += 1
        if op == "set":
            part = keys[:cut]
            sk, sf = stored(hk, part), stored(hf, part)
            assert H.backup(SG, kvs, hk, part, sk, v1) == H.backup(SG, hcf, hf, part, sf,
                                                                   v1=False)
            hk.free(sk)
            hf.free(sf)
        elif op == "exists":
            assert H.query(SG, kvs, keys) == H.query(SG, hcf, keys)
        else:
            nk, sk = H.prefetch(SG, kvs, hk, keys, v1)
            nf, sf = H.prefetch(SG, hcf, hf, keys, v1=False)
            assert nk == nf and same_pages(hk, sk, hf, sf, nk)
            hk.free(sk)
            hf.free(sf)
    assert min(n_ops.values()) >= 10
    kvs.close()


# -- failures --------------------------------------------------------------------

def test_stopped_kvshared_makes_calls_fail_within_the_deadline(own_daemon):
    """SIGSTOPped kvshared: every call returns a miss within its deadline
    (the engine recomputes), none raises, three threads at once; once it
    runs again the backend reattaches and the stored pages are back."""
    d = own_daemon
    host = host_pool()
    extra = H.kvshare_extra("stopped", arbiter=d.socket, create=True, timeout_ms=300,
                            retry_s=2)
    b = H.attach(SG, H.storage_config(SG, extra), host)
    keys = chain(5)
    slots = stored(host, keys)
    assert all(b.batch_set_v1(keys, slots)) and b.batch_exists(keys) == 5
    d.proc.send_signal(signal.SIGSTOP)
    results = {}
    try:
        t0 = time.monotonic()
        assert b.batch_exists(keys) == 0
        assert time.monotonic() - t0 < 2.0
        t1 = time.monotonic()                       # broken: fails at once now
        assert b.batch_get_v1(keys, host.alloc(5 * PS)) == [False] * 5
        assert b.batch_set_v1(keys, slots) == [False] * 5
        assert b.clear() is False and b.batch_get(keys) == [None] * 5
        assert time.monotonic() - t1 < 0.25

        def other_thread(i):
            t = time.monotonic()
            results[i] = (b.batch_exists(keys), b.batch_set_v1(keys, slots),
                          time.monotonic() - t)
        threads = [threading.Thread(target=other_thread, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        for i in range(3):
            n, done, secs = results[i]
            assert n == 0 and done == [False] * 5 and secs < 2.0, results[i]
    finally:
        d.proc.send_signal(signal.SIGCONT)
    time.sleep(2.1)
    assert b.batch_exists(keys) == 5
    n, dst = H.prefetch(SG, b, host, keys)
    assert n == 5 and same_pages(host, slots, host, dst, 5)
    st = b.stats()
    assert st["broken"] >= 1 and st["errors"] >= 1 and st["handles"] >= 1
    b.close()


ATTACKER = r"""
import os, sys, numpy as np
os.setgroups([]); os.setgid(65534); os.setuid(65534)
import tempfile                  # torch 2's caches: not root's home
os.environ["HOME"] = os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp()
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.environ["HOME"]
sys.path[:0] = sys.argv[4].split(os.pathsep)
import kvshare, torch
import sglang_harness as H
H.import_sglang()
from kvshare import sglang as ks
sock, name, ns = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3])
keys = H.page_keys(list(range(4 * 16)), 16)
a = kvshare.Arbiter(sock)
a.create_pool(name, pages=16, layers=4, kv_heads=2, head_dim=8, tokens_per_page=16,
              dtype="bf16", mode=0o666)
p = kvshare.Pool(name, sock, owner=65534)
pages = p.alloc(len(keys))
p.numpy()[pages] = 0xEEEE                   # poison, under the victim's keys
p.publish(pages, ks.kvshare_keys(ns, keys))
try:
    kvshare.Pool(name, sock, owner=0)
    print("attached", flush=True)
except kvshare.Error as e:
    print("refused", e.errno, flush=True)
print("published", flush=True)
sys.stdin.readline()
"""


def _unreadable_by_nobody(paths):
    """The first of @paths uid 65534 cannot list (a 0700 directory above a
    clone made by mktemp -d, say), or None: the attacker below imports
    kvshare and the test helpers from them."""
    probe = ("import os,sys\nos.setgroups([]);os.setgid(65534);os.setuid(65534)\n"
             "for p in sys.argv[1:]:\n"
             " try: os.listdir(p)\n"
             " except OSError as e: print(p, e.strerror); break\n")
    out = subprocess.run([sys.executable, "-c", probe] + list(paths),
                         capture_output=True, text=True, timeout=30)
    return out.stdout.strip() or out.stderr.strip() or None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the attacker as uid 65534")
def test_a_foreign_owners_pool_of_the_same_name_is_never_used(daemon, arbiter):
    """uid 65534 creates a pool of the name the engine is configured with
    and publishes poisoned pages under the engine's own keys.  The engine
    (root) never attaches it: without create it finds no pool of its owner;
    with create it makes its own, where the poison is not.  And the
    attacker cannot attach the engine's pool (mode 0600)."""
    name = "sg-foreign%d" % next(_n)
    host = host_pool()
    cfg = H.storage_config(SG, H.kvshare_extra(name, arbiter=daemon.socket))
    ns = ks.namespace_digest(cfg, ks.engine_page(host))
    dirs = [os.path.dirname(kvshare.__path__[0]), HERE]
    why = _unreadable_by_nobody(dirs)
    if why:
        pytest.skip("uid 65534 cannot read the tree, so the attacker cannot run: " + why)
    path = os.pathsep.join(dirs)
    att = subprocess.Popen([sys.executable, "-c", ATTACKER, daemon.socket, name, ns.hex(),
                            path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        line = att.stdout.readline()
        assert line.startswith("refused"), line + att.stderr.read()   # root's pool: none yet
        assert att.stdout.readline().startswith("published")
        with pytest.raises(kvshare.Error) as ei:
            H.attach(SG, cfg, host)
        assert ei.value.errno == errno.ENOENT
        b = backend(daemon, name, host)                 # create: root's own pool
        keys = H.page_keys(list(range(4 * 16)), 16)
        assert b.batch_exists(keys) == 0                # the poison is not in it
        round_trip(b, host, b, host, keys)
        assert b.options.mode == 0o600 and b._local.handle.pool.owner == 0
        b.close()
        # Now root has one: the attacker is refused by its mode.
        probe = subprocess.run(
            [sys.executable, "-c", "import os,sys;os.setgroups([]);os.setgid(65534);"
             "os.setuid(65534);sys.path[:0]=[%r];import kvshare\ntry:\n kvshare.Pool(%r,%r,"
             "owner=0);print('attached')\nexcept kvshare.Error as e:\n print('refused',"
             "e.errno)" % (os.path.dirname(kvshare.__path__[0]), name, daemon.socket)],
            capture_output=True, text=True, timeout=30)
        assert probe.stdout.split() == ["refused", str(errno.EACCES)], probe
    finally:
        att.communicate("\n", timeout=30)
    arbiter.stats(name, check=True)
    arbiter.destroy_pool(name)


# -- administration ---------------------------------------------------------------

def test_clear_evicts_what_nobody_holds_and_get_stats(daemon, pools, arbiter):
    name = pools()
    host = host_pool()
    b = backend(daemon, name, host)
    keys = chain(6)
    slots = stored(host, keys)
    assert all(b.batch_set_v1(keys, slots))
    assert H.prefetch(SG, b, host, keys)[0] == 6
    mod = None
    if ks._storage_metrics_class() is None:        # the peers tree has no metrics module
        assert b.get_stats() is None
        mod = types.ModuleType("sglang.srt.observability.metrics_collector")

        class StorageMetrics:                      # the dataclass's four fields
            def __init__(self, prefetch_pgs, backup_pgs, prefetch_bandwidth,
                         backup_bandwidth):
                self.prefetch_pgs, self.backup_pgs = prefetch_pgs, backup_pgs
                self.prefetch_bandwidth = prefetch_bandwidth
                self.backup_bandwidth = backup_bandwidth
        mod.StorageMetrics = StorageMetrics
        sys.modules[mod.__name__] = mod
    try:
        m = b.get_stats()                          # an installed SGLang's own class
        assert type(m).__name__ == "StorageMetrics"
        assert m.prefetch_pgs == [6] and m.backup_pgs == [6]
        assert all(x > 0 for x in m.prefetch_bandwidth + m.backup_bandwidth)
        assert b.get_stats().prefetch_pgs == []    # samples since the last call
    finally:
        if mod is not None:
            del sys.modules[mod.__name__]
    assert b.clear() is True
    assert b.batch_exists(keys) == 0 and arbiter.stats(name)["n_cached"] == 0
    st = b.stats()
    assert st["exists_calls"] >= 2 and st["get_pages"] == 6 and st["set_pages"] == 6
    b.close()


# -- end to end ---------------------------------------------------------------------

def test_model_outputs_with_prefetched_kv_equal_recomputation(daemon, pools):
    """A small decoder (kvshare.demo's) prefills a prompt in engine A, whose
    host pool backs its pages up; engine B prefetches them, computes only
    the rest of the prompt and decodes: every logit torch.equal to B
    computing everything from scratch."""
    from kvshare.demo import Model
    L, Hh, D, T = LAYERS, HEADS, DIM, PS
    model = Model(torch, 7, L, Hh, D, 4, 97, 256, T)
    prompt = [(i * 37 + 11) % 97 for i in range(5 * T + 5)]
    n_full = len(prompt) // T
    keys = H.page_keys(prompt, T)
    name = pools()

    def run(kv, start, n_gen):
        """Logits of positions start.. of the prompt, then n_gen greedy tokens."""
        pages = list(range(kv.shape[0]))
        toks, logits = list(prompt), []
        for pos in range(start, len(prompt) + n_gen - 1):
            out = model.step(kv, pages, toks[pos], pos)
            logits.append(out)
            if pos + 1 >= len(toks):
                toks.append(int(out.argmax()))
        return logits, toks

    def device_kv():
        return torch.zeros(8, L, 2, T, Hh, D, dtype=torch.bfloat16)

    # Engine A: prefill, then its host pool (page_first) backs the pages up.
    kv_a = device_kv()
    run(kv_a, 0, 1)
    host_a = host_pool("page_first")
    a = backend(daemon, name, host_a)
    slots = host_a.alloc(n_full * T)
    for i in range(n_full):       # device page -> host page: [L,2,T,H,D] -> [2,T,L,H,D]
        host_a.set_from_flat_data_page(slots[i * T], kv_a[i].permute(1, 2, 0, 3, 4))
    assert H.backup(SG, a, host_a, keys, slots) == n_full
    # Engine B: prefetch, load to its device pages, compute the rest.
    host_b = host_pool("page_first")
    b = backend(daemon, name, host_b)
    n, got = H.prefetch(SG, b, host_b, keys)
    assert n == n_full
    kv_b = device_kv()
    for i in range(n):
        page = host_b.get_data_page(got[i * T], flat=False)       # (2, T, L, H, D)
        kv_b[i] = page.permute(2, 0, 1, 3, 4)
    logits_b, toks_b = run(kv_b, n * T, 4)
    scratch, toks_s = run(device_kv(), 0, 4)
    assert toks_b == toks_s
    tail = scratch[n * T:]
    assert len(tail) == len(logits_b) == 5 + 3
    assert all(torch.equal(x, y) for x, y in zip(logits_b, tail))
    a.close()
    b.close()
