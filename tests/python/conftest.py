# SPDX-License-Identifier: GPL-2.0
"""Fixtures of the Python suite: one private kvshared for the session (the
ASan build when it exists), a fresh pool per test, the C reference, and a
kvshared of a test's own for the tests that stop it."""
import itertools
import os
import signal

import pytest

import kvshare
from kvshare.session import Daemon

BUILD = os.environ.get("KVS_BUILD") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build")
KVPY_REF = os.path.join(BUILD, "tests", "kvpy_ref")
STUB_DIR = os.path.abspath(os.path.join(BUILD, "tests", "gpu"))
_ids = itertools.count()


def _kvshared():
    for c in (os.environ.get("KVSHARED"), os.path.join(BUILD, "san", "kvshared"),
              os.path.join(BUILD, "kvshared")):
        if c and os.access(c, os.X_OK):
            return c
    pytest.skip("kvshared is not built")


@pytest.fixture(scope="session")
def daemon():
    d = Daemon(kvshared=_kvshared(), args=["--max-pools", "256"])
    d.start()
    os.environ["KVSHARE_ARBITER"] = d.socket
    yield d
    st = d.stop()
    assert st == 0, "kvshared exited with status %s" % st


@pytest.fixture
def own_daemon():
    """A kvshared for this test alone, which it may SIGSTOP: whatever the
    test does, the daemon is continued, then stopped, and must exit 0."""
    d = Daemon(kvshared=_kvshared())
    d.start()
    try:
        yield d
    finally:
        if d.proc is not None and d.proc.poll() is None:
            d.proc.send_signal(signal.SIGCONT)
        st = d.stop()
    assert st == 0, "the test's own kvshared exited with status %s" % st


def cuda_daemon_serving(monkeypatch, pools):
    """A kvshared serving @pools (memory=cuda specs) on the CUDA driver
    stand-in, for a fixture to ``yield from``: skips when the stand-in is
    not built or cannot hold the pools; must exit 0 at the end."""
    if not os.path.exists(os.path.join(STUB_DIR, "libcuda.so.1")):
        pytest.skip("the CUDA driver stand-in is not built (%s/libcuda.so.1)" % STUB_DIR)
    old = os.environ.get("LD_LIBRARY_PATH")
    monkeypatch.setenv("LD_LIBRARY_PATH", STUB_DIR + (":" + old if old else ""))
    d = Daemon(pools=pools, kvshared=_kvshared())
    try:
        d.start()
    except RuntimeError as e:
        pytest.skip("kvshared cannot create a memory=cuda pool on the stand-in: %s" % e)
    yield d
    st = d.stop()
    assert st == 0, "kvshared exited with status %s" % st


@pytest.fixture
def arbiter(daemon):
    with kvshare.Arbiter(daemon.socket) as a:
        yield a


class PoolMaker:
    """make(**geometry) -> pool name; every pool is checked and destroyed
    at the end of the test."""

    def __init__(self, arb):
        self.arb = arb
        self.names = []

    def __call__(self, pages=64, layers=2, kv_heads=2, head_dim=8,
                 tokens_per_page=4, dtype="bf16", **kw):
        name = "py%d" % next(_ids)
        self.arb.create_pool(name, pages=pages, layers=layers, kv_heads=kv_heads,
                             head_dim=head_dim, tokens_per_page=tokens_per_page,
                             dtype=dtype, **kw)
        self.names.append(name)
        return name

    def check(self, name):
        """The arbiter's own invariant check passes."""
        return self.arb.stats(name, check=True)


@pytest.fixture
def mkpool(arbiter):
    m = PoolMaker(arbiter)
    yield m
    for n in m.names:
        m.check(n)
        arbiter.destroy_pool(n)


@pytest.fixture
def kvpy_ref():
    if not os.access(KVPY_REF, os.X_OK):
        pytest.fail("%s is not built (make %s)" % (KVPY_REF, KVPY_REF))
    return KVPY_REF
