#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""kvbench python: what the Python binding adds to libkv's calls.

  match_prefix   RadixCache.match_prefix of a 32k-token prompt fully cached
                 (1M tokens in the tree), against kv_radix_match_prefix()
                 called from C in the same process, on the same tree;
  lookup+put     Pool.lookup + Pool.put of a 256-page chain, against
                 kv_lookup() + kv_put() from C on the same handle;
  contains       Pool.contains (KVS_LOOKUP_PEEK) of 128 cached keys, as
                 SGLang's batch_exists asks, against the Pool.lookup +
                 Pool.put it replaced, interleaved;
  tensor view    Pool.tensor() of 1 page .. the whole pool: the time does
                 not grow with the size, and data_ptr is the mapping's
                 address (no copy).

Ratios are taken within one run, medians of --reps repetitions, C and
Python interleaved.  Goal: Python <= 2x C.  Without --arbiter a private
kvshared is started (the embedded default); run with PYTHONPATH=build/python.
"""
import argparse
import statistics
import sys
import time

import numpy as np

import kvshare
from kvshare.session import Daemon


def median_ns(fn, iters, reps):
    out = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        for _ in range(iters):
            fn()
        out.append((time.perf_counter_ns() - t0) / iters)
    return statistics.median(out)


def bench_match(reps, quick):
    tpp, prompt_len = 16, 32768
    n_prompts = 8 if quick else 32             # 32 x 32k = 1M cached tokens
    rng = np.random.default_rng(1)
    tree = kvshare.RadixCache(tpp)
    prompts = [rng.integers(0, 128000, size=prompt_len).astype(np.uint32)
               for _ in range(n_prompts)]
    page = 0
    for p in prompts:
        tree.insert(p, np.arange(page, page + prompt_len // tpp, dtype=np.uint32))
        page += prompt_len // tpp
    q = prompts[n_prompts // 2]
    m = tree.match_prefix(q)                   # splits nothing, warms up
    assert m.length == prompt_len
    iters = 200
    py, c = [], []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        for _ in range(iters):
            tree.match_prefix(q)
        py.append((time.perf_counter_ns() - t0) / iters)
        c.append(kvshare._kvshare._bench_match_prefix(tree, q, iters) / iters)
    return statistics.median(py), statistics.median(c), n_prompts * prompt_len


def bench_lookup_put(pool, reps):
    h = kvshare.BlockHasher(pool.tokens_per_page, "bench")
    keys = h.hash(np.arange(256 * pool.tokens_per_page, dtype=np.uint32))
    pages = pool.alloc(256)
    res, _ = pool.publish(pages, keys)
    iters = 50

    def once():
        pool.put(pool.lookup(keys))

    py, c = [], []
    for _ in range(reps):
        py.append(median_ns(once, iters, 1))
        c.append(kvshare._kvshare._bench_lookup_put(pool, keys, iters) / iters)
    pool.put(res)
    return statistics.median(py), statistics.median(c)


def bench_contains(pool, reps):
    h = kvshare.BlockHasher(pool.tokens_per_page, "bench-contains")
    keys = h.hash(np.arange(128 * pool.tokens_per_page, dtype=np.uint32))
    res, _ = pool.publish(pool.alloc(128), keys)
    pool.put(res)                       # CACHED, as stored pages mostly are

    def lookup_put():
        pool.put(pool.lookup(keys))

    assert pool.contains(keys) == 128
    peek, lp = [], []
    for _ in range(reps):
        peek.append(median_ns(lambda: pool.contains(keys), 100, 1))
        lp.append(median_ns(lookup_put, 100, 1))
    return statistics.median(peek), statistics.median(lp)


def bench_views(pool, reps):
    import torch  # noqa: F401 - imported before timing
    rows = []
    n = pool.n_pages
    sizes = sorted({1, 16, 256, n // 4, n})
    for count in sizes:
        ns = median_ns(lambda: pool.tensor(0, count), 200, reps)
        t = pool.tensor(0, count)
        same = t.data_ptr() == pool.address
        rows.append((count, count * pool.page_bytes, ns, same))
        del t
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=31)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, 256k tokens")
    ap.add_argument("--arbiter", help="an arbiter to use (default: a private kvshared)")
    o = ap.parse_args()
    if o.quick:
        o.reps = min(o.reps, 7)
    print("# kvbench python: the binding's cost over libkv's C calls, same process, "
          "median of %d" % o.reps)
    py, c, cached = bench_match(o.reps, o.quick)
    print("%-42s %10s %10s %7s" % ("# call", "python us", "C us", "ratio"))
    print("%-42s %10.2f %10.2f %6.2fx" % ("match_prefix 32k tokens (%dk cached)"
                                          % (cached // 1024), py / 1e3, c / 1e3, py / c))
    ratios = [py / c]
    daemon = None
    arbiter = o.arbiter
    if arbiter is None:
        daemon = Daemon(pools=["bench:pages=4096,layers=2,kv_heads=2,head_dim=64,"
                               "tokens_per_page=16,dtype=bf16,mode=0600,memory=host",
                               "big:pages=256,layers=32,kv_heads=8,head_dim=128,"
                               "tokens_per_page=16,dtype=bf16,mode=0600,memory=host"])
        arbiter = daemon.start().socket
    try:
        with kvshare.Pool("bench", arbiter) as pool:
            py, c = bench_lookup_put(pool, o.reps)
            where = "daemon socket" if pool.is_daemon else "module"
            print("%-42s %10.2f %10.2f %6.2fx" % ("lookup+put 256 pages (%s)" % where,
                                                  py / 1e3, c / 1e3, py / c))
            ratios.append(py / c)
            peek, lp = bench_contains(pool, o.reps)
            print("%-42s %10.2f %10s %7s" % ("contains 128 keys (%s)" % where, peek / 1e3,
                                             "", ""))
            print("%-42s %10.2f %10s %6.2fx" % ("  lookup+put of the same, it replaced", lp / 1e3,
                                                "", lp / peek))
            print("\n# torch view over pool memory (Pool.tensor): time vs size, "
                  "data_ptr == mapping")
            print("%-12s %14s %10s %8s" % ("# pages", "bytes", "us", "no copy"))
            rows = bench_views(pool, o.reps)
        with kvshare.Pool("big", arbiter) as big:
            rows_big = bench_views(big, o.reps)
        # Within one pool the geometry is the same: only the size changes.
        flat = max(max(r[2] for r in rs) / min(r[2] for r in rs) for rs in (rows, rows_big))
        rows += rows_big
        for count, nbytes, ns, same in rows:
            print("%-12d %14d %10.2f %8s" % (count, nbytes, ns / 1e3, "yes" if same else "NO"))
        print("\n# goal: Python <= 2x C: match_prefix %.2fx, lookup+put %.2fx (%s); "
              "views: no copy at any size (%s, time %.2fx from 1 page to the whole pool, up to %d MiB)"
              % (ratios[0], ratios[1], "met" if max(ratios) <= 2 else "MISSED",
                 "met" if all(r[3] for r in rows) and flat < 2 else "MISSED", flat,
                 max(r[1] for r in rows) >> 20))
    finally:
        if daemon:
            daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
