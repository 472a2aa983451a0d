# SPDX-License-Identifier: GPL-2.0
"""A GPU pool (kvshared memory=cuda) from Python, on the CUDA driver
stand-in (tests/gpu/cudastub): the pool is exported as kDLCUDA DLPack only;
the buffer protocol and numpy refuse it (the CPU must not read device
memory), and tensor() refuses it when torch has no CUDA.

libkv finds the driver with dlopen("libcuda.so.1"), which reads
LD_LIBRARY_PATH as the process started, so the pool is opened in a child
python with the stand-in's directory first in it, as tests/gpu's wrappers do."""
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import cuda_daemon_serving

SPEC = ("gpy:pages=64,layers=2,kv_heads=2,head_dim=8,tokens_per_page=4,"
        "dtype=bf16,mode=0600,memory=cuda")

# Runs in the child: exit 0 when every check passed, 77 to skip (the reason
# on stdout), else an assertion's traceback.
CHILD = textwrap.dedent(r'''
    import sys, types
    import kvshare

    sock = sys.argv[1]
    try:
        p = kvshare.Pool("gpy", sock)
    except kvshare.Error as e:
        print("cannot open the device pool: %s" % e)
        sys.exit(77)
    with p:
        assert p.is_device
        v = p.view()
        # The stand-in has one device, ordinal 0 (kv_pool_device()).
        assert v.__dlpack_device__() == (2, 0), v.__dlpack_device__()
        assert p.page(3).__dlpack_device__() == (2, 0)
        for what, f in (("memoryview", lambda: memoryview(v)),
                        ("numpy", lambda: p.numpy()),
                        ("numpy view", lambda: p.numpy(2, 3))):
            try:
                f()
            except BufferError as e:
                msg = str(e)
                assert "GPU device memory" in msg and "gpy" in msg, msg
                assert "DLPack" in msg, msg
            else:
                raise AssertionError("%s of a device pool was not refused" % what)
        try:
            import torch
            has_cuda = torch.cuda.is_available()
        except ImportError:
            has_cuda = False
            # No torch here: a CPU-only stand-in of it, enough for tensor().
            torch = types.ModuleType("torch")
            torch.cuda = types.SimpleNamespace(is_available=lambda: False)
            torch.utils = types.ModuleType("torch.utils")
            torch.utils.dlpack = types.ModuleType("torch.utils.dlpack")
            def _from_dlpack(x):
                raise AssertionError("from_dlpack reached with a CPU-only torch")
            torch.utils.dlpack.from_dlpack = _from_dlpack
            sys.modules.update({"torch": torch, "torch.utils": torch.utils,
                                "torch.utils.dlpack": torch.utils.dlpack})
        if not has_cuda:
            for f in (lambda: p.tensor(), lambda: p.page_tensor(1)):
                try:
                    f()
                except RuntimeError as e:
                    msg = str(e)
                    assert "no CUDA" in msg and "torch.cuda.is_available()" in msg, msg
                    assert "gpy" in msg, msg
                else:
                    raise AssertionError("tensor() of a device pool with a "
                                         "CPU-only torch was not refused")
        del v
    print("ok: device pool checks passed (torch has CUDA: %s)" % has_cuda)
''')


@pytest.fixture
def cuda_daemon(monkeypatch):
    yield from cuda_daemon_serving(monkeypatch, [SPEC])


def test_device_pool_is_cuda_dlpack_only(cuda_daemon):
    r = subprocess.run([sys.executable, "-c", CHILD, cuda_daemon.socket],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       env=os.environ.copy(), timeout=60)
    out = r.stdout.decode(errors="replace")
    if r.returncode == 77:
        pytest.skip(out.strip())
    assert r.returncode == 0, out
    assert "ok: device pool checks passed" in out, out
