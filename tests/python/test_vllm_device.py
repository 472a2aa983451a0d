# SPDX-License-Identifier: GPL-2.0
"""kvshare.vllm on GPU pools (kvshared memory=cuda), on the CUDA driver
stand-in (tests/gpu/cudastub): blocks move device to device with
cuMemcpy2DAsync on a stream (kvshare._kvshare.cuda_copy2d), whose
arguments are checked before any copy, and whose addresses the driver
(here the stand-in, as the real one) checks against the mapped device
allocations.

"Device" memory of the stand-in is host memory the CPU may read, so the
engine's KV caches are CPU tensors over a second memory=cuda pool's
mapping: what the copies read and write is device memory to the driver,
and the test can still compare bytes.  As in test_device.py, everything
runs in a child python started with the stand-in first in
LD_LIBRARY_PATH (libkv dlopens the driver)."""
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import cuda_daemon_serving

HERE = os.path.dirname(os.path.abspath(__file__))
GEO = "layers=3,kv_heads=2,head_dim=8,tokens_per_page=4,dtype=bf16,mode=0600,memory=cuda"
POOLS = ["vgpu:pages=128," + GEO, "veng:pages=512," + GEO]

CHILD = textwrap.dedent(r'''
    import ctypes, errno, json, sys
    import torch
    import kvshare
    from kvshare import _kvshare
    import vllm_engine
    from vllm_engine import Engine, Request

    sock = sys.argv[1]
    copy2d = _kvshare.cuda_copy2d

    def refused(exc, f, *words):
        try:
            f()
        except exc as e:
            for w in words:
                assert w in str(e), (w, str(e))
            return e
        raise AssertionError("not refused: %s" % (words,))

    # Arguments are checked before the driver is reached.
    refused(TypeError, lambda: copy2d(5, [1], 8, 8, 8, 1), "sequence")
    refused(TypeError, lambda: copy2d(["x"], [1], 8, 8, 8, 1), "dsts[0]")
    refused(ValueError, lambda: copy2d([1, 2], [1], 8, 8, 8, 1), "2 dsts but 1 srcs")
    refused(ValueError, lambda: copy2d([1], [1], 8, 8, 0, 1), "positive")
    refused(ValueError, lambda: copy2d([1], [1], 4, 8, 8, 2), "at least width")
    refused(ValueError, lambda: copy2d([0], [1], 8, 8, 8, 1), "null address")
    refused(OverflowError, lambda: copy2d([-1], [1], 8, 8, 8, 1), "64-bit")
    refused(OverflowError, lambda: copy2d([2**64 - 8], [1], 8, 8, 8, 2), "wraps")

    gpu = kvshare.Pool("vgpu", sock)
    engmem = kvshare.Pool("veng", sock)
    assert gpu.is_device and engmem.is_device
    base, size = engmem.address, engmem.n_pages * engmem.page_bytes
    raw = torch.frombuffer((ctypes.c_char * size).from_address(base), dtype=torch.uint8)

    # The driver checks the ranges: device memory works, host memory and
    # a box running past the mapping are refused, as is an unknown stream.
    raw[:64] = torch.arange(64, dtype=torch.uint8)
    copy2d([base + 4096], [base], 16, 16, 16, 4)
    _kvshare.cuda_synchronize()
    assert torch.equal(raw[4096:4160], raw[:64])
    host = torch.zeros(64, dtype=torch.uint8)
    e = refused(kvshare.Error, lambda: copy2d([base], [host.data_ptr()], 16, 16, 16, 4),
                "CUDA_ERROR_INVALID_VALUE", "copy 0 of 1")
    assert e.errno == errno.EINVAL
    stub = ctypes.CDLL("libcuda.so.1")
    mbase, msize = ctypes.c_size_t(), ctypes.c_size_t()
    assert stub.kvs_cudastub_mapping(ctypes.c_void_p(base), ctypes.byref(mbase),
                                     ctypes.byref(msize))
    end = mbase.value + msize.value             # the mapping's end, not the pool's
    copy2d([end - 64], [base], 16, 16, 16, 4)
    refused(kvshare.Error, lambda: copy2d([end - 32], [base], 16, 16, 16, 4),
            "CUDA_ERROR_INVALID_VALUE")
    refused(kvshare.Error, lambda: copy2d([base + 4096], [base], 16, 16, 16, 1,
                                          stream=0xdead0), "CUDA_ERROR_INVALID_HANDLE")
    refused(kvshare.Error, lambda: _kvshare.cuda_synchronize(0xdead0),
            "CUDA_ERROR_INVALID_HANDLE")

    # Two engines, their KV caches in device memory, share through vgpu.
    def caches(region, layout, nb=48, heads=2, dim=8, bs=4):
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

    g = torch.Generator().manual_seed(3)
    sys_p = torch.randint(0, 97, (18,), generator=g).tolist()
    ps = [sys_p + torch.randint(0, 97, (k,), generator=g).tolist() for k in (13, 31)]
    for i, layout in enumerate(("NHD", "HND")):
        runs = []
        for who in range(2):
            eng = Engine(sock, "vgpu", layout, kv_caches=caches(2 * i + who, layout))
            assert eng.worker._copier.device
            reqs = [Request("r%d" % j, p) for j, p in enumerate(ps)]
            for r in reqs:
                eng.add(r)
            eng.run(24)
            runs.append((eng, reqs))
        (a, ra), (b, rb) = runs
        assert a.worker.stats["saved_blocks"] > 0
        # Within A, the second prompt loads the 4 blocks of the system
        # prompt; no more: the NHD pages are keyed apart from the HND ones.
        assert a.worker.stats["loaded_blocks"] == 4, (layout, a.worker.stats)
        assert b.worker.stats["loaded_blocks"] == sum((len(p) - 1) // 4 for p in ps)
        assert b.worker.stats["load_errors"] == 0
        for x, y in zip(ra, rb):
            n = (len(x.prompt_token_ids) - 1) // 4
            assert a.block_digest(x, n) == b.block_digest(y, n), layout
            assert torch.equal(x.outputs[len(x.prompt_token_ids) - 1],
                               y.outputs[len(y.prompt_token_ids) - 1]), layout
        for eng, _ in runs:
            eng.close()
        if layout == "NHD":
            with open(sys.argv[2], "w") as f:
                json.dump([x.outputs[len(x.prompt_token_ids) - 1].tolist() for x in ra], f)
    st = kvshare.Arbiter(sock).stats("vgpu", check=True)
    assert st["n_held"] == 0, st
    del raw
    print("ok: device copies and GPU-pool sharing checked")
''')


# A third engine process whose first device copy fails (the stand-in's
# KVS_CUDASTUB_FAIL): the blocks of that step are reported, recomputed, and
# the outputs are still those of the first run; nothing reaches the engine.
FAIL_CHILD = textwrap.dedent(r'''
    import ctypes, json, sys
    import torch
    import kvshare
    from vllm_engine import Engine, Request

    sock, ref = sys.argv[1], json.load(open(sys.argv[2]))
    engmem = kvshare.Pool("veng", sock)
    raw = torch.frombuffer((ctypes.c_char * (engmem.n_pages * engmem.page_bytes))
                           .from_address(engmem.address), dtype=torch.uint8)
    nb, per = 48, 48 * 4 * 2 * 16 * 2
    kv = []
    for l in range(3):
        t = raw[65536 + l * per:65536 + (l + 1) * per].view(torch.bfloat16)
        t.fill_(float("nan"))
        kv.append(t.view(nb, 4, 2, 16).permute(0, 2, 1, 3))
    g = torch.Generator().manual_seed(3)
    sys_p = torch.randint(0, 97, (18,), generator=g).tolist()
    ps = [sys_p + torch.randint(0, 97, (k,), generator=g).tolist() for k in (13, 31)]
    eng = Engine(sock, "vgpu", "NHD", kv_caches=kv)
    reqs = [Request("f%d" % j, p) for j, p in enumerate(ps)]
    for r in reqs:
        eng.add(r)
    eng.run(24)
    st = eng.worker.stats
    assert st["load_errors"] > 0 and st["failures"] >= 1, st
    for r, out in zip(reqs, ref):
        assert torch.equal(r.outputs[len(r.prompt_token_ids) - 1], torch.tensor(out))
    eng.close()
    del raw, kv
    print("ok: a failed device copy was recomputed")
''')


@pytest.fixture
def cuda_daemon(monkeypatch):
    yield from cuda_daemon_serving(monkeypatch, POOLS)


def run_child(script, env, *args):
    r = subprocess.run([sys.executable, "-c", script] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                       timeout=120, cwd=HERE)
    out = r.stdout.decode(errors="replace")
    assert r.returncode == 0, out[-4000:]
    return out


def test_vllm_connector_on_gpu_pools(cuda_daemon, tmp_path):
    env = os.environ.copy()
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    ref = str(tmp_path / "outputs.json")
    out = run_child(CHILD, env, cuda_daemon.socket, ref)
    assert "ok: device copies and GPU-pool sharing checked" in out, out[-4000:]
    env["KVS_CUDASTUB_FAIL"] = "cuMemcpy2DAsync:1"
    out = run_child(FAIL_CHILD, env, cuda_daemon.socket, ref)
    assert "ok: a failed device copy was recomputed" in out, out[-4000:]
