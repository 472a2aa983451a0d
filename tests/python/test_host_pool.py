# SPDX-License-Identifier: GPL-2.0
"""A CUDA engine over a host pool (issue 25), on the CUDA driver stand-in
(tests/gpu/cudastub): the layout of several engine processes on one host,
each on its own GPU, sharing prefixes through a pool in host memory.

The engine's KV caches are "device memory" of the stand-in (the mapping of
a memory=cuda pool, wrapped as torch tensors that torch calls CPU: only the
driver's pointer attributes say they are device memory), the pool is host
memory.  The stand-in keeps asynchronous copies queued until their stream
is synchronised or an event after them is waited on, and counts
synchronisations, registrations and copies from pageable memory, so these
tests see what a GPU would do: a missing wait reads stale bytes, a copy
from unregistered memory is counted, every wait is counted.

As in test_vllm_device.py, each check runs in a child python started with
the stand-in first in LD_LIBRARY_PATH (libkv and kvshare dlopen the driver
as the process starts)."""
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import cuda_daemon_serving

HERE = os.path.dirname(os.path.abspath(__file__))
GEO = "layers=3,kv_heads=2,head_dim=8,tokens_per_page=4,dtype=bf16,mode=0600"
POOLS = ["hpool:pages=128," + GEO,                  # the shared pool: host memory
         "hgpu:pages=64," + GEO + ",memory=cuda",   # a GPU pool of the same pages
         "heng:pages=512," + GEO + ",memory=cuda"]  # device memory for the caches

# What every child starts with: the stand-in's counters and device memory
# for engine caches.
PRELUDE = textwrap.dedent(r'''
    import ctypes, errno, mmap, sys, types
    import torch
    import kvshare
    from kvshare import _kvshare
    from kvshare.blockcopy import memory_of

    sock = sys.argv[1]
    stub = ctypes.CDLL("libcuda.so.1")
    stub.kvs_cudastub_counter.restype = ctypes.c_ulong
    stub.kvs_cudastub_counter.argtypes = [ctypes.c_char_p]

    def count(name):
        v = stub.kvs_cudastub_counter(name.encode())
        assert v != ctypes.c_ulong(-1).value, name
        return v

    def counts():
        return {k: count(k) for k in ("syncs", "async_copies", "pageable_copies",
                                      "host_registers", "host_registered", "queued")}

    def delta(before):
        now = counts()
        return {k: now[k] - before[k] for k in now}

    engmem = kvshare.Pool("heng", sock)
    assert engmem.is_device
    DEV = engmem.address
    raw = torch.frombuffer((ctypes.c_char * (engmem.n_pages * engmem.page_bytes))
                           .from_address(DEV), dtype=torch.uint8)

    def caches(region, layout="NHD", nb=48, heads=2, dim=8, bs=4):
        """Per-layer KV caches in device memory, NaN to start with."""
        per = nb * bs * heads * 2 * dim * 2
        out = []
        for l in range(3):
            off = 65536 + (region * 3 + l) * per
            t = raw[off:off + per].view(torch.bfloat16)
            t.fill_(float("nan"))
            if layout == "NHD":
                out.append(t.view(nb, bs, heads, 2 * dim).permute(0, 2, 1, 3))
            else:
                out.append(t.view(nb, heads, bs, 2 * dim))
        return out

    def refused(exc, f, *words):
        try:
            f()
        except exc as e:
            for w in words:
                assert w in str(e), (w, str(e))
            return e
        raise AssertionError("not refused: %s" % (words,))
''')

# The stand-in's model of the driver, as the copy path relies on it.
DRIVER_CHILD = PRELUDE + textwrap.dedent(r'''
    PG = mmap.PAGESIZE
    buf = mmap.mmap(-1, 4 * PG)
    host = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    hostview = (ctypes.c_char * (4 * PG)).from_address(host)

    # Pointer attributes: device memory, its device and range; host memory
    # only once registered; pageable memory is unknown to the driver.
    kind, ordinal, start, size = memory_of(DEV + 100)
    assert (kind, ordinal) == ("device", 0) and start <= DEV + 100 < start + size
    assert memory_of(host) == ("host", None, None, None)
    assert _kvshare.cuda_pointer_info(host) is None
    assert _kvshare.cuda_pointer_info(torch.zeros(8).data_ptr()) is None

    # Registration, with the driver's errors.
    c0 = counts()
    _kvshare.cuda_host_register(host, 2 * PG)
    assert delta(c0)["host_registers"] == 1 and delta(c0)["host_registered"] == 1
    assert _kvshare.cuda_pointer_info(host + 5) == ("host", 0, host, 2 * PG)
    e = refused(kvshare.Error, lambda: _kvshare.cuda_host_register(host, 2 * PG),
                "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED")
    assert e.errno == errno.EEXIST
    # Sharing a page with a registered range is registered already too.
    refused(kvshare.Error, lambda: _kvshare.cuda_host_register(host + 2 * PG - 8, 16),
            "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED")
    refused(kvshare.Error, lambda: _kvshare.cuda_host_register(DEV, PG),
            "CUDA_ERROR_INVALID_VALUE")                     # device memory
    refused(ValueError, lambda: _kvshare.cuda_host_register(host, 0), "not a range")
    e = refused(kvshare.Error, lambda: _kvshare.cuda_host_unregister(host + 8),
                "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED")    # not its base
    assert e.errno == errno.ENOENT

    # An asynchronous copy from pinned memory lands only at a wait.
    dst = DEV + 8192
    raw[8192:8192 + PG] = 7
    hostview[:PG] = bytes(range(256)) * (PG // 256)
    ev = _kvshare.cuda_event("create")
    c0 = counts()
    _kvshare.cuda_copy2d([dst], [host], PG, PG, PG, 1, src_host=True)
    _kvshare.cuda_event("record", ev, 0)
    assert bytes(raw[8192:8192 + PG]) == b"\x07" * PG, "landed before any wait"
    assert delta(c0)["queued"] == 2 and delta(c0)["pageable_copies"] == 0
    _kvshare.cuda_event("synchronize", ev)
    assert bytes(raw[8192:8192 + PG]) == hostview[:PG]
    assert delta(c0)["syncs"] == 1 and delta(c0)["queued"] == 0
    # Device to pinned host: the same; runs of rows with their own heights.
    raw[8192:8192 + 2 * PG] = torch.arange(2 * PG, dtype=torch.int64).remainder(251) \
        .to(torch.uint8)
    _kvshare.cuda_copy2d([host, host + PG], [dst, dst + PG], PG // 2, PG, PG // 2,
                         [1, 2], 0, dst_host=True)
    assert hostview[:PG // 2] != bytes(raw[8192:8192 + PG // 2])
    _kvshare.cuda_synchronize()
    assert hostview[:PG // 2] == bytes(raw[8192:8192 + PG // 2])
    assert hostview[PG:PG + PG // 2] == bytes(raw[8192 + PG:8192 + PG + PG // 2])
    assert hostview[PG + PG // 2:2 * PG] == bytes(raw[8192 + 2 * PG:8192 + 2 * PG +
                                                      PG // 2])
    refused(ValueError, lambda: _kvshare.cuda_copy2d([host], [dst], 8, 8, 8, [1, 2],
                                                     dst_host=True), "2 heights")
    # Pageable memory: done within the call, and counted.
    c0 = counts()
    _kvshare.cuda_copy2d([dst], [host + 3 * PG], 64, 64, 64, 1, src_host=True)
    assert delta(c0)["pageable_copies"] == 1 and delta(c0)["queued"] == 0
    # Unregistering with a copy still queued: the copy fails when it runs.
    _kvshare.cuda_copy2d([dst], [host], 64, 64, 64, 1, src_host=True)
    _kvshare.cuda_host_unregister(host)
    e = refused(kvshare.Error, lambda: _kvshare.cuda_synchronize(),
                "CUDA_ERROR_ILLEGAL_ADDRESS")
    refused(kvshare.Error, lambda: _kvshare.cuda_host_unregister(host),
            "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED")
    assert memory_of(host) == ("host", None, None, None)
    _kvshare.cuda_event("destroy", ev)
    print("ok: the stand-in models the driver")
''')


# Two CUDA engines share prompts through the host pool, and one engine's
# steps are counted.
VLLM_CHILD = PRELUDE + textwrap.dedent(r'''
    import vllm_engine
    from vllm_engine import Engine, Request

    NS = types.SimpleNamespace
    g = torch.Generator().manual_seed(11)
    sys_p = torch.randint(0, 97, (18,), generator=g).tolist()
    ps = [sys_p + torch.randint(0, 97, (k,), generator=g).tolist() for k in (13, 31)]

    def runs(pairs):
        pairs, n = sorted(pairs), 0
        for i, (b, p) in enumerate(pairs):
            n += not i or (b, p) != (pairs[i - 1][0] + 1, pairs[i - 1][1] + 1)
        return n

    for i, layout in enumerate(("NHD", "HND")):
        c0 = counts()
        engines = []
        for who in range(2):
            eng = Engine(sock, "hpool", layout, kv_caches=caches(2 * i + who, layout))
            assert eng.worker._copier.direction == "host-cuda", eng.worker._copier.direction
            engines.append(eng)
        # Each attachment pinned its own mapping of the pool, once.
        d = delta(c0)
        assert d["host_registers"] == 2 and d["host_registered"] == 2, ("host_registers", d)
        outs = []
        for eng in engines:
            reqs = [Request("r%d" % j, p) for j, p in enumerate(ps)]
            for r in reqs:
                eng.add(r)
            eng.run(24)
            outs.append(reqs)
        (a, ra), (b, rb) = zip(engines, outs)
        assert a.worker.stats["saved_blocks"] > 0
        assert a.worker.stats["loaded_blocks"] == 4, (layout, a.worker.stats)
        assert b.worker.stats["loaded_blocks"] == sum((len(p) - 1) // 4 for p in ps)
        assert b.worker.stats["load_errors"] == 0 and b.worker.stats["failures"] == 0
        for x, y in zip(ra, rb):
            n = (len(x.prompt_token_ids) - 1) // 4
            assert a.block_digest(x, n) == b.block_digest(y, n), layout
            # B computed only past what it loaded: those outputs are A's.
            both = set(x.outputs) & set(y.outputs)
            assert len(x.prompt_token_ids) - 1 in both
            for pos in both:
                assert torch.equal(x.outputs[pos], y.outputs[pos]), (layout, pos)
        d = delta(c0)
        assert d["pageable_copies"] == 0, d
        assert d["async_copies"] > 0 and d["queued"] == 0, d
        for eng in engines:
            eng.close()
        assert delta(c0)["host_registered"] == 0, "a mapping was left registered"

    # One engine's steps, counted: save 8 blocks, load them into 8 others.
    eng = Engine(sock, "hpool", "NHD", kv_caches=caches(5))
    Meta = sys.modules["kvshare.vllm"].KVShareConnectorMetadata   # loaded by then
    w, sched = eng.worker, eng.sched
    pool = w._pool
    layers = len(eng.names)
    prompt = torch.randint(0, 97, (8 * 4 + 1,), generator=g).tolist()
    keys = sched._request_keys(NS(prompt_token_ids=prompt))
    kv = [t.permute(0, 2, 1, 3) for t in eng.kv]        # (block, token, head, 2D)
    for l, t in enumerate(kv):
        t[:8].copy_(torch.randn(t[:8].shape, generator=g).to(torch.bfloat16))

    def step(meta):
        fc = NS(attn_metadata={n: object() for n in eng.names}, no_compile_layers={})
        c = counts()
        w.bind_connector_metadata(meta)
        w.start_load_kv(fc)
        for name in eng.names:
            w.wait_for_layer_load(name)
            w.save_kv_layer(name, None, fc.attn_metadata[name])
        w.wait_for_save()
        assert not w.get_block_ids_with_load_errors()
        w.clear_connector_metadata()
        return delta(c)

    d = step(Meta([dict(req_id="s", block_ids=list(range(8)), keys=keys, load=[0, 0],
                        save=[0, 8])]))
    hits = pool.lookup(numpy.frombuffer(keys, numpy.uint64).reshape(-1, 4))
    pages = hits.tolist()
    pool.put(hits)
    assert len(pages) == 8, pages
    # Fresh pages of a fresh pool come in runs: fewer copies than blocks.
    assert runs(zip(range(8), pages)) < 8, pages
    assert d["syncs"] == 1, ("save", d)
    assert d["async_copies"] == layers * runs(zip(range(8), pages)), ("save", d, pages)
    assert d["pageable_copies"] == 0, d
    d = step(Meta([dict(req_id="l", block_ids=list(range(8, 16)), keys=keys,
                        load=[0, 8], save=[0, 0])]))
    assert d["syncs"] <= layers, ("load", d)
    assert d["async_copies"] == layers * runs(zip(range(8, 16), pages)), ("load", d)
    assert d["pageable_copies"] == 0 and d["queued"] == 0, d
    for l, t in enumerate(kv):
        assert torch.equal(t[8:16], t[:8]), "layer %d loaded other bytes" % l
    print("copies a layer: save %d, load %d runs of 8 blocks"
          % (runs(zip(range(8), pages)), runs(zip(range(8, 16), pages))))
    eng.close()

    # A GPU pool for an engine in host memory is refused, naming both.
    e = refused(ValueError, lambda: Engine(sock, "hgpu", "NHD"), "GPU pool",
                "host memory")
    # Layers in both memories: refused, naming the first that differs.
    mixed = caches(6)
    mixed[2] = torch.zeros(mixed[2].permute(0, 2, 1, 3).shape,
                           dtype=torch.bfloat16).permute(0, 2, 1, 3)
    refused(ValueError, lambda: Engine(sock, "hpool", "NHD", kv_caches=mixed),
            "layer 2 is in host memory", "all layers in one place")
    # An engine in host memory (CPU tensors) with the driver there: CPU
    # copies, as without one; nothing registered, no driver copy.
    c0 = counts()
    cpu = Engine(sock, "hpool", "NHD")
    assert cpu.worker._copier.direction == "host"
    reqs = [Request("c%d" % j, p) for j, p in enumerate(ps)]
    for r in reqs:
        cpu.add(r)
    cpu.run(24)
    assert cpu.worker.stats["loaded_blocks"] > 0 and cpu.worker.stats["load_errors"] == 0
    cpu.close()
    d = delta(c0)
    assert d["host_registers"] == 0 and d["async_copies"] == 0 and d["syncs"] == 0, d
    print("ok: CUDA engines shared through the host pool")
''').replace("import vllm_engine", "import numpy, vllm_engine")


# SGLang moves device <-> host itself (its HiCache controller); the backend
# copies between SGLang's host pool and kvshare's, both host memory.
SGLANG_CHILD = PRELUDE + textwrap.dedent(r'''
    import test_sglang as T

    c0 = counts()
    host_w, host_r = T.host_pool(), T.host_pool()
    d = types.SimpleNamespace(socket=sock)
    wr, rd = T.backend(d, "hsg", host_w), T.backend(d, "hsg", host_r)
    keys = T.chain(6, seed=9)
    T.round_trip(wr, host_w, rd, host_r, keys)
    p = kvshare.Pool("hsg", sock)
    assert not p.is_device and memory_of(p.address)[0] == "host"
    assert memory_of(host_w.kv_buffer.data_ptr())[0] == "host"
    p.close()
    assert delta(c0) == {k: 0 for k in c0}, ("the SGLang backend used the driver",
                                             delta(c0))
    for b in (wr, rd):
        b.close()
    print("ok: the SGLang backend copies host to host")
''')


@pytest.fixture
def cuda_daemon(monkeypatch):
    yield from cuda_daemon_serving(monkeypatch, POOLS)


def run_child(script, daemon):
    env = os.environ.copy()
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", script, daemon.socket],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                       timeout=120, cwd=HERE)
    out = r.stdout.decode(errors="replace")
    assert r.returncode == 0, out[-4000:]
    return out


def test_host_pool_stand_in_models_the_driver(cuda_daemon):
    out = run_child(DRIVER_CHILD, cuda_daemon)
    assert "ok: the stand-in models the driver" in out, out[-4000:]


def test_host_pool_cuda_engines_load_and_save_equal_bytes(cuda_daemon):
    """Two CUDA engines over a host pool: equal bytes and outputs, the pool
    registered once per attachment and unregistered at close, no copy from
    pageable memory, one 2D copy a run of blocks and layer, one wait a
    layer on load and one on save."""
    out = run_child(VLLM_CHILD, cuda_daemon)
    assert "ok: CUDA engines shared through the host pool" in out, out[-4000:]


def test_host_pool_sglang_backend_copies_host_to_host(cuda_daemon):
    pytest.importorskip("sglang_harness")
    out = run_child(SGLANG_CHILD, cuda_daemon)
    assert "ok: the SGLang backend copies host to host" in out, out[-4000:]


# Two mutants of the copy path, applied in the child before anything runs:
# the tests above must fail on each (their assertion is named).
MUTANTS = {
    # wait_for_layer_load no longer waits for the layer's event: the
    # engine reads its blocks before the copies landed.
    "dropped_event_wait": (textwrap.dedent(r'''
        from kvshare.blockcopy import BlockCopier as _B
        _B.wait = lambda self, layer: self._unwaited.discard(layer)
    '''), "AssertionError: NHD"),
    # The pool never pinned, one copy per block: every copy is pageable.
    "pageable_per_block": (textwrap.dedent(r'''
        from kvshare.blockcopy import BlockCopier as _B
        _orig = _B._async
        _B._register = lambda self, pool: None
        def _per_block(self, layer, pairs, to_engine):
            for p in pairs:
                _orig(self, layer, [p], to_engine)
        _B._async = _per_block
    '''), "host_registers"),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_host_pool_mutants_fail(cuda_daemon, mutant):
    patch, expect = MUTANTS[mutant]
    assert VLLM_CHILD.startswith(PRELUDE)
    script = PRELUDE + patch + VLLM_CHILD[len(PRELUDE):]
    env = os.environ.copy()
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", script, cuda_daemon.socket],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                       timeout=120, cwd=HERE)
    out = r.stdout.decode(errors="replace")
    assert r.returncode != 0, "mutant %s passed:\n%s" % (mutant, out[-2000:])
    assert expect in out, out[-2000:]


def test_host_pool_copy_bench_runs_on_the_stand_in(cuda_daemon, tmp_path):
    """The GPU bundle's copy bench (tools/kvbench/vllm_bench.py --device
    cuda) run on the stand-in, and its table (tools/gpu/gpu_table.py), so
    that neither rots before a GPU runs them: every row and both goals."""
    root = os.path.join(HERE, "..", "..")
    env = os.environ.copy()
    bench = subprocess.run([sys.executable, os.path.join(root, "tools", "kvbench",
                                                         "vllm_bench.py"),
                            "--device", "standin", "--blocks", "3", "--reps", "1"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                           timeout=120, cwd=HERE)
    out = bench.stdout.decode(errors="replace")
    if bench.returncode and "vLLM's peer files are not at" in out:
        pytest.skip(out.strip().splitlines()[-1])
    assert bench.returncode == 0, out[-4000:]
    copies = tmp_path / "copies.txt"
    copies.write_text(out)
    table = subprocess.run([sys.executable, os.path.join(root, "tools", "gpu",
                                                         "gpu_table.py"),
                            os.devnull, "", str(copies)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    text = table.stdout.decode(errors="replace")
    assert table.returncode == 0, text
    assert "engine copies (issue 25) on the CUDA driver stand-in" in text, text
    for what in ("load", "save", "pinned_h2d", "pinned_d2h", "pageable_h2d",
                 "pageable_d2h"):
        assert any(line.split()[:2] == ["copy", what] for line in text.splitlines()), \
            (what, text)
    for what in ("load", "save"):
        assert "connector %s >= 80%% of the pinned copy" % what in text, text
