# SPDX-License-Identifier: GPL-2.0
"""kvshare.vllm.KVShareConnector against vLLM's real interface files
(../shared/peers/vllm: base.py, factory.py, sched/output.py, loaded as
vLLM imports them; tests/python/vllm_peers.py) and a real kvshared: both
roles built by KVConnectorFactory.create_connector from
kv_connector_module_path="kvshare.vllm", vLLM's call sequences replayed by
tests/python/vllm_engine.py around a small torch decoder whose attention
reads the paged cache.

Two engine processes share prompt prefixes (NHD, HND, MLA): the second
loads exactly the bytes the first saved and its outputs are torch.equal to
a recomputation from scratch; chunked prefill, a preempted and resumed
request, a page evicted between the scheduler's lookup and the worker's
load (reported, recomputed); bad input: wrong geometry, a missing pool, a
stopped kvshared (deadline, serving on by recomputing), a foreign owner's
pool."""
import errno
import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

import kvshare
import vllm_engine
import vllm_peers
from vllm_engine import Engine, Request

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS, HEADS, DIM, BS = 3, 2, 8, 4

try:
    PEERS = vllm_peers.load()
except FileNotFoundError as e:          # pragma: no cover
    pytest.skip(str(e), allow_module_level=True)


def geometry(layout):
    if layout == "MLA":     # head_size 2*DIM, stored as kv_heads=1, head_dim=DIM
        return dict(layers=LAYERS, kv_heads=1, head_dim=DIM, tokens_per_page=BS)
    return dict(layers=LAYERS, kv_heads=HEADS, head_dim=DIM, tokens_per_page=BS)


def prompts(seed, n=3, shared=18):
    """n prompts sharing a system prefix of `shared` tokens, unaligned
    lengths, one much longer than a step's token budget."""
    g = torch.Generator().manual_seed(seed)
    sys_p = torch.randint(0, 97, (shared,), generator=g).tolist()
    lens = [13, 31, 45][:n]
    return [sys_p + torch.randint(0, 97, (k,), generator=g).tolist() for k in lens]


def serve(eng, ps, budget=24, prefix="r"):
    reqs = [Request("%s%d" % (prefix, i), p) for i, p in enumerate(ps)]
    for r in reqs:
        eng.add(r)
    eng.run(budget)
    return reqs


def last(r):
    return r.outputs[len(r.prompt_token_ids) - 1]


def scratch(socket, mkpool, layout, ps, budget=24):
    """The same prompts on an engine with a pool of its own (nothing to
    load): every token computed."""
    eng = Engine(socket, mkpool(**geometry(layout)), layout)
    eng.hook = lambda e, meta: meta.reqs.clear()     # no load, no save
    reqs = serve(eng, ps, budget, "s")
    assert eng.worker.stats["loaded_blocks"] == eng.worker.stats["saved_blocks"] == 0
    assert eng.computed_tokens == sum(len(p) for p in ps)
    eng.close()
    return reqs


def other_process(socket, pool, layout, ps, budget=24):
    """An engine in a process of its own (python3 vllm_engine.py)."""
    spec = dict(socket=socket, pool=pool, layout=layout, prompts=ps, budget=budget)
    r = subprocess.run([sys.executable, os.path.join(HERE, "vllm_engine.py"),
                        json.dumps(spec)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=os.environ.copy(), timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    return json.loads(r.stdout)


# ---- the interface ----

def test_factory_builds_both_roles(daemon, mkpool):
    eng = Engine(daemon.socket, mkpool(**geometry("NHD")), "NHD")
    base = PEERS.base
    assert isinstance(eng.sched, base.KVConnectorBase_V1)
    assert isinstance(eng.worker, base.KVConnectorBase_V1)
    assert eng.sched.role == base.KVConnectorRole.SCHEDULER
    assert eng.worker.role == base.KVConnectorRole.WORKER
    cls = PEERS.factory.KVConnectorFactory.get_connector_class(
        eng.vllm_config.kv_transfer_config)
    assert cls.get_required_kvcache_layout(eng.vllm_config) == "NHD"
    eng.close()


def test_shutdown_gives_the_pool_back(daemon, mkpool, arbiter):
    """After serving, both roles hold the pool; once both have shut down the
    arbiter counts no file of theirs (the handles really closed, with every
    page they held)."""
    name = mkpool(**geometry("NHD"))
    eng = Engine(daemon.socket, name, "NHD")
    serve(eng, prompts(12))
    assert eng.worker.stats["saved_blocks"] > 0
    assert arbiter.stats(name)["n_files"] >= 2
    eng.close()
    st = arbiter.stats(name)
    assert st["n_files"] == 0 and st["n_held"] == 0, st


def test_metadata_is_plain_data(daemon, mkpool):
    """build_connector_meta's result pickles and holds only plain types."""
    eng = Engine(daemon.socket, mkpool(**geometry("NHD")), "NHD")
    seen = []
    eng.hook = lambda e, meta: seen.append(meta)
    serve(eng, prompts(1, n=2))
    eng.close()
    reqs = [r for m in seen for r in m.reqs]
    assert reqs, "no step planned a transfer"
    for r in reqs:
        assert set(r) - {"zero_unloaded"} == {"req_id", "block_ids", "keys", "load", "save"}
        assert r.get("zero_unloaded", True) is True
        assert type(r["req_id"]) is str and type(r["keys"]) is bytes
        assert all(type(b) is int for b in r["block_ids"] + r["load"] + r["save"])
        assert len(r["keys"]) == 32 * len(r["block_ids"])
    m = seen[0]
    assert pickle.loads(pickle.dumps(m)).reqs == m.reqs
    assert type(m).__module__ == "kvshare.vllm"


def test_lookup_has_no_side_effects(daemon, mkpool, arbiter):
    name = mkpool(**geometry("NHD"))
    eng = Engine(daemon.socket, name, "NHD")
    serve(eng, prompts(2, n=1))
    r = Request("q", prompts(2, n=1)[0])
    hit = (len(r.prompt_token_ids) - 1) // BS * BS
    before = arbiter.stats(name)
    for _ in range(3):
        assert eng.sched.get_num_new_matched_tokens(r, 0) == (hit, False)
    assert eng.sched.get_num_new_matched_tokens(r, BS) == (hit - BS, False)
    assert eng.sched.get_num_new_matched_tokens(r, hit) == (0, False)
    after = arbiter.stats(name)
    assert after["n_refs"] == before["n_refs"] == 0
    assert after["n_held"] == 0 and eng.sched._reqs == {}
    # A peek: not counted as lookups or hits, no page revived from CACHED.
    for k in ("lookups", "hits", "n_cached", "n_evictable"):
        assert after[k] == before[k], k
    eng.close()


def test_namespaces_do_not_hit(daemon, mkpool):
    """Another model, cache_salt, LoRA or namespace never hits."""
    name = mkpool(**geometry("NHD"))
    p = prompts(3, n=1)[0]
    eng = Engine(daemon.socket, name, "NHD")
    serve(eng, [p])
    assert eng.sched.get_num_new_matched_tokens(Request("x", p), 0)[0] == (
        (len(p) - 1) // BS * BS)
    for req in (Request("s", p, cache_salt="tenant-b"), Request("l", p, lora_name="ad")):
        assert eng.sched.get_num_new_matched_tokens(req, 0) == (0, False)
    eng.close()
    for kw in (dict(model="another-model"), dict(extra=dict(namespace="t2"))):
        other = Engine(daemon.socket, name, "NHD", **kw)
        assert other.sched.get_num_new_matched_tokens(Request("y", p), 0) == (0, False)
        other.close()


# ---- sharing between engine processes ----

@pytest.mark.parametrize("layout", ["NHD", "HND", "MLA"])
def test_second_process_loads_what_the_first_saved(daemon, mkpool, layout):
    name = mkpool(**geometry(layout))
    ps = prompts(10)
    first = other_process(daemon.socket, name, layout, ps)
    assert first["stats"]["saved_blocks"] > 0
    eng = Engine(daemon.socket, name, layout)
    if layout == "HND":
        eng.free.reverse()      # blocks not consecutive: the per-block copies
    reqs = serve(eng, ps)
    # Every prompt block but the one holding the last token was loaded.
    loadable = sum((len(p) - 1) // BS for p in ps)
    assert eng.worker.stats["loaded_blocks"] == loadable
    assert eng.computed_tokens == sum(len(p) for p in ps) - loadable * BS
    assert eng.worker.stats["load_errors"] == 0
    # vLLM's zeroing of fresh blocks skips those loaded (overwritten
    # whole), and only those.
    loading = [(set(z), set(k), ld) for z, k, ld in eng.zeroing if ld]
    assert loading and all(ld <= z and k == z - ld for z, k, ld in loading)
    for r, dig, out in zip(reqs, first["digests"], first["last"]):
        n = (len(r.prompt_token_ids) - 1) // BS
        assert eng.block_digest(r, n) == dig[:n], "loaded bytes differ from the saved"
        assert torch.equal(last(r), torch.tensor(out))
    eng.close()
    for r, s in zip(reqs, scratch(daemon.socket, mkpool, layout, ps)):
        for pos in range(len(r.prompt_token_ids)):
            if pos in r.outputs:
                assert torch.equal(r.outputs[pos], s.outputs[pos]), (layout, pos)
        assert torch.equal(last(r), last(s))


def test_chunked_prefill_and_preemption(daemon, mkpool, arbiter):
    """A budget of 6 tokens a step: blocks are saved as steps complete
    them; a request preempted mid-prefill (its blocks scribbled over) is
    resumed by loading back what it had saved."""
    name = mkpool(**geometry("NHD"))
    ps = prompts(20, n=2)
    eng = Engine(daemon.socket, name, "NHD")
    reqs = [Request("c%d" % i, p) for i, p in enumerate(ps)]
    for r in reqs:
        eng.add(r)
    while reqs[1].num_computed_tokens < 22:
        eng.step(budget=6)
    assert eng.worker.stats["saved_blocks"] >= 5
    victim = reqs[1]
    eng.preempt(victim)
    loaded = eng.worker.stats["loaded_blocks"]
    eng.run(budget=6)
    assert eng.worker.stats["loaded_blocks"] - loaded >= 5, "the resume did not load"
    assert eng.worker.stats["load_errors"] == 0
    assert eng.steps > 10
    eng.close()
    for r, s in zip(reqs, scratch(daemon.socket, mkpool, "NHD", ps, budget=6)):
        assert torch.equal(last(r), last(s))
    assert arbiter.stats(name)["n_held"] == 0


def test_page_missing_a_layer_is_never_published(daemon, mkpool, arbiter):
    """A step whose save_kv_layer did not come for every layer publishes
    nothing and gives its pages back: only complete pages become visible."""
    name = mkpool(**geometry("NHD"))
    eng = Engine(daemon.socket, name, "NHD")
    real = eng.worker.save_kv_layer
    eng.worker.save_kv_layer = lambda n, *a, **k: None if n == eng.names[1] else real(
        n, *a, **k)
    serve(eng, prompts(60, n=1))
    st = arbiter.stats(name)
    assert eng.worker.stats["saved_blocks"] == 0
    assert st["publishes"] == 0 and st["n_cached"] == 0 and st["n_owned"] == 0, st
    assert st["allocs"] > 0, "no save was even attempted"
    eng.close()


def evict_all(socket, name):
    """Another handle ALLOCs the whole pool, which evicts every cached page,
    then gives the pages back FREE."""
    with kvshare.Pool(name, socket) as p:
        p.put(p.alloc(p.n_pages))


def test_page_evicted_before_load_is_recomputed(daemon, mkpool):
    name = mkpool(**geometry("NHD"))
    ps = prompts(30)
    other_process(daemon.socket, name, "NHD", ps)
    eng = Engine(daemon.socket, name, "NHD")
    planned, reported = [], []

    def hook(e, meta):
        loads = [r for r in meta.reqs if r["load"][0] < r["load"][1]]
        if loads and not planned:
            planned.extend(b for r in loads for b in r["block_ids"][r["load"][0]:
                                                                   r["load"][1]])
            evict_all(daemon.socket, name)
    eng.hook = hook
    orig = eng.worker.get_block_ids_with_load_errors

    def spy():
        errs = orig()
        reported.append(set(errs))
        return errs
    eng.worker.get_block_ids_with_load_errors = spy
    # The blocks it could not load were taken off vLLM's zeroing: the
    # worker zeros them before the forward (the caches start as NaN).
    start, zeroed = eng.worker.start_load_kv, []

    def start_spy(fc):
        start(fc)
        if planned and not zeroed:
            zeroed.append(all(bool((t[b] == 0).all()) for b in planned for t in eng.kv))
    eng.worker.start_load_kv = start_spy
    reqs = serve(eng, ps)
    assert planned and set(planned) in reported, "evicted blocks not reported"
    assert zeroed == [True], "blocks the worker could not load are not zeroed"
    assert eng.worker.stats["load_errors"] == len(planned)
    eng.close()
    for r, s in zip(reqs, scratch(daemon.socket, mkpool, "NHD", ps)):
        assert torch.equal(last(r), last(s))


def test_host_loads_overlap_the_step_and_are_waited_for(daemon, mkpool):
    """A host engine's loads begin at handle_preemptions (vLLM 0.32: first
    in execute_model), on the copy thread, and the first layer waits for
    them.  The copy is held back 0.2 s: handle_preemptions returns before
    it is done, and the outputs are still those of a recomputation (the
    caches start as NaN: a layer that read a block before its copy would
    change them)."""
    name = mkpool(**geometry("NHD"))
    ps = prompts(40)
    other_process(daemon.socket, name, "NHD", ps)
    eng = Engine(daemon.socket, name, "NHD")
    w, copies, returned = eng.worker, [], []
    load_all = w._copier.load_all

    def slow_load_all(pairs):
        time.sleep(0.2)
        load_all(pairs)
        copies.append((threading.current_thread().name, time.monotonic()))
    w._copier.load_all = slow_load_all
    handle = w.handle_preemptions

    def handle_spy(meta):
        handle(meta)
        if any(r["load"][0] < r["load"][1] for r in meta.reqs):
            returned.append(time.monotonic())
    w.handle_preemptions = handle_spy
    reqs = serve(eng, ps)
    assert copies and len(copies) == len(returned)
    assert all(n.startswith("kvshare-load") for n, _ in copies), copies
    assert all(t > r for (_, t), r in zip(copies, returned)), "the copy did not overlap"
    assert w.stats["loaded_blocks"] == sum((len(p) - 1) // BS for p in ps)
    assert w.stats["load_errors"] == 0
    eng.close()
    for r, s in zip(reqs, scratch(daemon.socket, mkpool, "NHD", ps)):
        assert torch.equal(last(r), last(s))


def test_host_copy_failing_on_the_copy_thread_is_recomputed(daemon, mkpool, arbiter):
    """The copy thread's failure reaches the step: its blocks are reported
    (vLLM recomputes them), the references its LOOKUP took are put back,
    the connector serves on, and the outputs are those of a recomputation."""
    name = mkpool(**geometry("NHD"))
    ps = prompts(50)
    other_process(daemon.socket, name, "NHD", ps)
    eng = Engine(daemon.socket, name, "NHD")
    w = eng.worker

    def broken(pairs):
        raise ValueError("load_all: injected")
    w._copier.load_all = broken
    reqs = serve(eng, ps)
    assert w.stats["load_errors"] > 0 and w.stats["failures"] > 0
    assert arbiter.stats(name)["n_held"] == 0, "a failed load kept its pages"
    eng.close()
    for r, s in zip(reqs, scratch(daemon.socket, mkpool, "NHD", ps)):
        assert torch.equal(last(r), last(s))


# ---- bad input ----

def test_wrong_geometry_is_refused(daemon, mkpool, arbiter):
    for layout, geo in (("NHD", dict(geometry("NHD"), head_dim=16)),
                        ("NHD", dict(geometry("NHD"), kv_heads=1)),
                        ("HND", dict(geometry("HND"), layers=4)),
                        ("MLA", dict(geometry("MLA"), kv_heads=2)),
                        ("NHD", dict(geometry("NHD"), dtype="f16"))):
        name = mkpool(**geo)
        with pytest.raises(ValueError) as ei:
            Engine(daemon.socket, name, layout)
        msg = str(ei.value)
        assert "does not fit" in msg and "the pool has" in msg and "the engine has" in msg
        assert arbiter.stats(name)["n_files"] == 0, "the refused pool stayed attached"
    name = mkpool(**dict(geometry("NHD"), tokens_per_page=8))
    with pytest.raises(ValueError, match="8 tokens a page"):
        Engine(daemon.socket, name, "NHD")


def test_layout_mismatch_is_refused(daemon, mkpool):
    with pytest.raises(ValueError, match="caches are HND but .* as NHD"):
        Engine(daemon.socket, mkpool(**geometry("NHD")), "HND",
               extra=dict(kv_layout="NHD"))


def test_bad_options_are_refused(daemon, mkpool):
    name = mkpool(**geometry("NHD"))
    for extra, what in ((dict(pol="x"), "unknown"), (dict(timeout_ms="5"), "timeout_ms"),
                        (dict(kv_layout="NDH"), "kv_layout"),
                        (dict(create_pages=-1), "create_pages"),
                        (dict(create=True), "create needs pages"),
                        (dict(mode="rw"), "octal"),
                        (dict(socket="/a", arbiter="/b"), "both 'socket'")):
        with pytest.raises(ValueError, match=what):
            Engine(daemon.socket, name, "NHD", extra=extra)


def test_missing_pool(daemon, arbiter):
    name = "vllm-missing-%d" % os.getpid()
    with pytest.raises(kvshare.Error) as ei:
        Engine(daemon.socket, name, "NHD")
    assert ei.value.errno == errno.ENOENT and '"create": true' in str(ei.value)
    assert name not in [p["name"] for p in arbiter.pools()]
    # create: the worker creates it with the engine's geometry.
    eng = Engine(daemon.socket, name, "MLA", extra=dict(create=True, pages=64))
    try:
        info = [p for p in arbiter.pools() if p["name"] == name][0]
        g = info["geometry"]
        assert (g["n_layers"], g["n_kv_heads"], g["head_dim"], g["tokens_per_page"],
                g["dtype"]) == (LAYERS, 1, DIM, BS, "bfloat16")
        assert info["n_pages"] == 64 and info["mode"] == 0o600
        assert info["uid"] == os.getuid()
        serve(eng, prompts(5, n=1))
        assert eng.worker.stats["saved_blocks"] > 0
    finally:
        eng.close()
        arbiter.destroy_pool(name)


def test_stopped_kvshared_keeps_serving(own_daemon, daemon, mkpool):
    """A SIGSTOPped kvshared: calls end at the deadline, the engine serves
    on by recomputing (the scheduler counts no hits, the worker reports the
    blocks it could not load), then shares again once kvshared is back."""
    sock = own_daemon.socket
    with kvshare.Arbiter(sock) as a:
        a.create_pool("st", pages=128, **geometry("NHD"))
    ps = prompts(40)
    other_process(sock, "st", "NHD", ps)
    eng = Engine(sock, "st", "NHD", extra=dict(timeout_ms=300, retry_s=0.5))
    stopped = []

    def hook(e, meta):      # stop it between the scheduler's lookup and the load
        if not stopped and any(r["load"][0] < r["load"][1] for r in meta.reqs):
            own_daemon.proc.send_signal(signal.SIGSTOP)
            stopped.append(time.monotonic())
    eng.hook = hook
    t0 = time.monotonic()
    reqs = serve(eng, ps)
    took = time.monotonic() - t0
    assert stopped, "no load was planned"
    assert eng.worker.stats["load_errors"] > 0 and eng.worker.stats["failures"] >= 1
    assert took < 10, "the engine waited %.1f s on a stopped kvshared" % took
    for r, s in zip(reqs, scratch(daemon.socket, mkpool, "NHD", ps)):
        assert torch.equal(last(r), last(s))
    # New requests while it is still stopped: the scheduler times out, no hit.
    r = Request("late", ps[0])
    time.sleep(0.6)
    assert eng.sched.get_num_new_matched_tokens(r, 0) == (0, False)
    assert eng.sched.stats["failures"] >= 1
    own_daemon.proc.send_signal(signal.SIGCONT)
    time.sleep(0.6)                     # retry_s: the pool is reopened
    assert eng.sched.get_num_new_matched_tokens(r, 0)[0] > 0
    eng.close()


NOBODY = 65534


def as_nobody(fn):
    """Run fn() in a child process as uid/gid 65534; its result or exception text."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = "ok: %s" % (fn(),)
        except BaseException as e:      # noqa: B902 -- reported to the parent
            out = "error: %r" % (e,)
        os.write(w, out.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a second uid")
def test_foreign_owners_pool_is_never_used(daemon, arbiter):
    """An attacker (another uid) creates a pool of the name the engines use,
    open to all, and fills it with pages under the right keys: the engine,
    which attaches only pools of its own uid, never reads them; and the
    attacker cannot attach the engine's own pool."""
    name = "vllm-owned-%d" % os.getpid()
    ps = prompts(50, n=1)

    def poison():
        with kvshare.Arbiter(daemon.socket) as a:
            a.create_pool(name, pages=64, mode=0o666, **geometry("NHD"))
        with kvshare.Pool(name, daemon.socket, owner=NOBODY) as p:
            h = kvshare.BlockHasher(BS, _salt_for(p))
            keys = h.hash(ps[0][:40])
            pages = p.alloc(len(keys))
            p.tensor()[torch.from_numpy(pages.astype("int64"))] = 1000.0
            res, _ = p.publish(pages, keys)
            # Leave them cached: close() drops the references.
            p.put(res)
        return "poisoned"
    assert as_nobody(poison) == "ok: poisoned"
    with pytest.raises(kvshare.Error) as ei:
        Engine(daemon.socket, name, "NHD")
    assert ei.value.errno == errno.ENOENT
    eng = Engine(daemon.socket, name, "NHD", extra=dict(create_pages=64))
    try:
        assert eng.worker._pool.owner == os.getuid()
        reqs = serve(eng, ps)
        assert eng.worker.stats["loaded_blocks"] == 0
        assert torch.isfinite(last(reqs[0])).all() and last(reqs[0]).abs().max() < 100
        me = os.getuid()
        out = as_nobody(lambda: kvshare.Pool(name, daemon.socket, owner=me))
        assert out.startswith("error: Error(13,") and "mode forbids" in out, out
    finally:
        eng.close()
        arbiter.destroy_pool(name)
        arbiter.destroy_pool(name, owner=NOBODY)


def _salt_for(pool):
    """The salt the connector uses for this pool (what an attacker can
    compute too: keys are not secrets)."""
    return ("kvshare.vllm/2|model=tiny-test|namespace=|layout=NHD|layers=%d|"
            "kv_heads=%d|head_dim=%d|block=%d|dtype=%s|cache_dtype=|model_dtype=" % (
                pool.n_layers, pool.n_kv_heads, pool.head_dim, pool.tokens_per_page,
                pool.dtype))
