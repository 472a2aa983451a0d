# SPDX-License-Identifier: GPL-2.0
"""kvshare.sglang inside the installed SGLang's own HiCache classes (issue 26).

Runs in the engine environment (tests/engines/engines_test.sh;
python/requirements/sglang.txt); skipped where sglang is not installed.  What runs is SGLang's code
(sglang_engine.py says what, and what is not run because it needs a GPU):
its ServerArgs and runtime context, device pools, paged allocator, the
MHA and MLA host pools in every layout, the "dynamic" StorageBackendFactory
path and the HiCacheController's storage threads, against a real kvshared.
"""
import importlib.metadata
import os
import signal
import subprocess
import sys
import time

import pytest

try:
    SGLANG_VERSION = importlib.metadata.version("sglang")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("sglang is not installed here (the engine environment has it: "
                "python/requirements/sglang.txt)", allow_module_level=True)

torch = pytest.importorskip("torch")

import kvshare  # noqa: E402
import sglang_engine as E  # noqa: E402
from conftest import kvshared_binary  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ALL = [(False, lay) for lay in E.MHA_LAYOUTS] + [(True, lay) for lay in E.MLA_LAYOUTS]
_n = iter(range(1 << 30))


@pytest.fixture
def arbiter(daemon):
    with kvshare.Arbiter(daemon.socket) as a:
        yield a


@pytest.fixture(scope="module")
def published():
    """SGLang's configuration of a TP-1 scheduler, in this process."""
    return E.publish()


@pytest.fixture
def pool_name(arbiter):
    """A fresh pool name; the pool is checked (nothing held) and destroyed."""
    names = []

    def make():
        names.append("real%d" % next(_n))
        return names[-1]
    yield make
    for n in names:
        try:
            st = arbiter.stats(n, check=True)
        except kvshare.Error:
            continue
        assert st["n_held"] == 0 and st["n_owned"] == 0, st
        arbiter.destroy_pool(n)


def tokens_of(pages, base=500):
    return list(range(base, base + pages * E.PS))


def round_trip(ctl, host, tokens, rid):
    """Back @tokens' pages up and prefetch them into fresh host pages
    through controller @ctl: (tokens stored, tokens loaded, bad pages)."""
    keys = E.storage_keys(tokens)
    idx = host.alloc(len(tokens))
    E.fill(host, idx, keys)
    stored = E.backup(ctl, tokens, idx)
    loaded, idx2 = E.prefetch(ctl, rid, tokens)
    assert not set(idx.tolist()) & set(idx2.tolist())
    return stored, loaded, E.bad_pages(host, idx2, keys[:loaded // E.PS])


@pytest.mark.parametrize("mla,layout", ALL, ids=["%s-%s" % ("mla" if m else "mha", l)
                                                  for m, l in ALL])
@pytest.mark.parametrize("v1", [1, 0], ids=["zero_copy", "generic"])
def test_real_controller_round_trip(daemon, published, pool_name, mla, layout, v1):
    """SGLang's controller backs 300 pages up (three 128-page batches) and
    prefetches them back, through the zero-copy calls (interface_v1) or
    the generic ones; every page arrives as it was."""
    dev, alloc = E.device_pool(mla, tokens=4096)
    host = E.host_pool(dev, layout, ratio=3.0)
    ctl = E.controller(alloc, host, extra=E.kvshare_extra(
        pool_name(), arbiter=daemon.socket, create=True, interface_v1=v1))
    try:
        want = "_page_get_zero_copy" if v1 else "_generic_page_get"
        assert ctl.page_get_func.__name__ == want
        assert type(ctl.storage_backend).__name__ == "KVShareStorage"
        tokens = tokens_of(300)
        assert round_trip(ctl, host, tokens, "r") == (len(tokens), len(tokens), 0)
        st = ctl.storage_backend.stats()
        assert st["errors"] == 0 and st["set_pages"] == 300, st
        if v1:   # one backup call a 128-page batch, nothing stored twice
            assert st["set_calls"] == 3 and st["get_calls"] == 3, st
    finally:
        ctl.detach_storage_backend()


def test_real_hicache_file_agrees(daemon, published, pool_name, tmp_path, monkeypatch):
    """SGLang's own HiCacheFile, under the same controller, host pool and
    pages, loads what kvshare loads."""
    monkeypatch.setenv("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", str(tmp_path))
    dev, alloc = E.device_pool(False)
    host = E.host_pool(dev, "page_first")
    tokens = tokens_of(20, base=9000)
    got = {}
    for name, backend, extra in (
            ("file", "file", None),
            ("kvshare", "dynamic", E.kvshare_extra(pool_name(), arbiter=daemon.socket,
                                                   create=True))):
        ctl = E.controller(alloc, host, backend=backend, extra=extra)
        try:
            keys = E.storage_keys(tokens)
            idx = host.alloc(len(tokens))
            E.fill(host, idx, keys)
            assert E.backup(ctl, tokens, idx) == len(tokens)
            n, idx2 = E.prefetch(ctl, name, tokens)
            got[name] = (n, [host.get_data_page(int(i)).contiguous().view(torch.uint8).clone()
                             for i in idx2[::E.PS]])
        finally:
            ctl.detach_storage_backend()
    assert got["file"][0] == got["kvshare"][0] == len(tokens)
    assert all(torch.equal(a, b) for a, b in zip(got["file"][1], got["kvshare"][1]))


def test_real_page_unified_is_refused(daemon, published, pool_name):
    """SGLang's page_unified host layout has no storage page format
    (get_page_buffer_meta raises for it): attaching says so."""
    dev, alloc = E.device_pool(False)
    host = E.host_pool(dev, "page_unified")
    with pytest.raises(ValueError, match="page_unified"):
        E.controller(alloc, host, extra=E.kvshare_extra(pool_name(),
                                                        arbiter=daemon.socket, create=True))


def test_real_two_processes_share_pages(daemon, arbiter):
    """One SGLang process backs three requests up, as TP ranks 0 and 1 of
    2, for every layout; another prefetches them: every page is the one
    its rank stored (MLA: rank 0's, for both), another model hits nothing,
    float16 pages are refused by a bfloat16 pool."""
    prefix = "two%d" % next(_n)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [HERE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    out = {}
    for mode in ("write", "read"):
        p = subprocess.run([sys.executable, os.path.join(HERE, "sglang_real_proc.py"), mode,
                            daemon.socket, prefix], env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        out[mode] = __import__("json").loads(p.stdout.strip().splitlines()[-1])
    tokens = 3 * 12 * E.PS
    for key, w in out["write"].items():
        r = out["read"][key]
        mla, rank = key.startswith("mla"), key.endswith("/1")
        assert w["backend"] == r["backend"] == "KVShareStorage"
        assert w["tokens"] == (0 if mla and rank else tokens), (key, w)
        assert (r["tokens"], r["bad"], r["other_model"]) == (tokens, 0, 0), (key, r)
        assert "does not fit the engine's pages" in r["other_dtype"], (key, r)
        assert w["errors"] == r["errors"] == 0, (key, w, r)
    for name in {"%s-%s" % (prefix, k.rsplit("/", 1)[0].replace("/", "-"))
                 for k in out["write"]}:
        st = arbiter.stats(name, check=True)
        assert st["n_held"] == 0 and st["n_owned"] == 0, (name, st)
        arbiter.destroy_pool(name)


def _kvshared_at(binary, socket):
    """kvshared serving @socket (the path a killed one served)."""
    log = socket + ".log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([binary, "--mode", "socket", "--socket", socket],
                                stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while b"kvshared: ready" not in open(log, "rb").read():
        assert proc.poll() is None and time.monotonic() < deadline, open(log).read()
        time.sleep(0.02)
    return proc


def test_real_controller_survives_kvshared_kill(published, pool_name):
    """kvshared is SIGKILLed under a running controller: prefetch finds
    nothing and backup stores nothing, no exception reaches SGLang's
    threads, and they keep running; a new kvshared on the same socket is
    attached again after retry_s, and pages flow again."""
    from kvshare.session import Daemon
    d = Daemon(kvshared=kvshared_binary()).start()
    dev, alloc = E.device_pool(False)
    host = E.host_pool(dev, "page_first")
    ctl = E.controller(alloc, host, extra=E.kvshare_extra(
        pool_name(), arbiter=d.socket, create=True, retry_s=0.5, timeout_ms=2000))
    second = None
    try:
        tokens = tokens_of(10, base=20000)
        assert round_trip(ctl, host, tokens, "before")[:2] == (len(tokens), len(tokens))
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait()
        assert E.prefetch(ctl, "dead", tokens)[0] == 0
        other = tokens_of(4, base=30000)
        idx = host.alloc(len(other))
        assert E.backup(ctl, other, idx) == 0
        threads = (ctl.prefetch_thread, ctl.prefetch_io_aux_thread, ctl.backup_thread,
                   ctl.prefetch_sync_thread)
        assert all(t.is_alive() for t in threads)
        second = _kvshared_at(d.binary, d.socket)
        time.sleep(0.6)
        assert round_trip(ctl, host, other, "after")[:2] == (len(other), len(other))
        assert ctl.storage_backend.stats()["broken"] >= 1
    finally:
        ctl.detach_storage_backend()
        if second is not None:
            second.send_signal(signal.SIGTERM)
            assert second.wait(10) == 0
        d.proc = None
        d.stop()
