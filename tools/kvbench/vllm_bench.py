#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""kvbench vllm: the vLLM connector's load and save throughput.

At a realistic geometry (32 layers, 8 KV heads, head dim 128, bf16,
16-token blocks: one block = one 2 MiB pool page), the worker side of
kvshare.vllm.KVShareConnector moves --blocks blocks per step:

  save   bind metadata, save_kv_layer for each of the 32 layers (the K and V
         halves of every block copied into freshly allocated pages), then
         wait_for_save (PUBLISH); the engine cache is vLLM's NHD layout;
  load   bind metadata, start_load_kv (LOOKUP), wait_for_layer_load for
         each layer (pages copied into the blocks), wait_for_save (PUT);
  memcpy one memmove of the same number of bytes between two contiguous
         host buffers: the bound a copy can reach on this machine.

Each repetition saves a new prompt (the previous one's pages are evicted
to make room, as in a full pool) and loads it back; medians of --reps,
memcpy interleaved, GB/s = 1e9 bytes/s.  Host pool, CPU copies (Debian's
torch has no CUDA).  The connector is built by vLLM's real
KVConnectorFactory from ../shared/peers (tests/python/vllm_peers.py).
Run with PYTHONPATH=build/python; without --arbiter a private kvshared is
started.
"""
import argparse
import ctypes
import os
import statistics
import sys
import time
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python"))
import vllm_peers  # noqa: E402  (vLLM's real interface files, by path)

import kvshare  # noqa: E402
from kvshare.session import Daemon  # noqa: E402

NS = types.SimpleNamespace
LAYERS, HEADS, DIM, BS = 32, 8, 128, 16


def connectors(peers, sock, pool, nblocks):
    kvt = peers.KVTransferConfig(
        kv_connector="KVShareConnector", kv_role="kv_both",
        kv_connector_module_path="kvshare.vllm",
        kv_connector_extra_config=dict(pool=pool, socket=sock, kv_layout="NHD"),
        kv_load_failure_policy="recompute")
    cfg = NS(kv_transfer_config=kvt, cache_config=NS(block_size=BS),
             model_config=NS(model="bench", use_mla=False),
             parallel_config=NS(tensor_parallel_size=1, pipeline_parallel_size=1),
             scheduler_config=NS(disable_hybrid_kv_cache_manager=True))
    create = peers.factory.KVConnectorFactory.create_connector
    role = peers.base.KVConnectorRole
    names = ["model.layers.%d.self_attn.attn" % i for i in range(LAYERS)]
    kv = [torch.randn(nblocks, BS, HEADS, 2 * DIM).to(torch.bfloat16).permute(0, 2, 1, 3)
          for _ in names]
    worker = create(cfg, role.WORKER, None)
    worker.register_kv_caches(dict(zip(names, kv)))
    sched = create(cfg, role.SCHEDULER, None)
    return sched, worker, names, kv


def step(worker, names, meta):
    fc = NS(attn_metadata={n: object() for n in names}, no_compile_layers={})
    t0 = time.perf_counter()
    worker.bind_connector_metadata(meta)
    worker.start_load_kv(fc)
    for layer, name in enumerate(names):
        worker.wait_for_layer_load(name)
        worker.save_kv_layer(name, None, fc.attn_metadata[name])
    worker.wait_for_save()
    worker.clear_connector_metadata()
    dt = time.perf_counter() - t0
    assert not worker.get_block_ids_with_load_errors()
    return dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", type=int, default=64)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--arbiter", help="kvshared socket (default: a private one)")
    args = ap.parse_args()
    n = args.blocks
    peers = vllm_peers.load()
    import logging
    logging.getLogger("vllm").setLevel(logging.ERROR)
    daemon = None
    sock = args.arbiter
    if not sock:
        daemon = Daemon().start()
        sock = daemon.socket
    pool = "vllmbench%d" % os.getpid()
    with kvshare.Arbiter(sock) as arb:
        arb.create_pool(pool, pages=n + n // 4, layers=LAYERS, kv_heads=HEADS,
                        head_dim=DIM, tokens_per_page=BS, dtype="bf16")
    try:
        sched, worker, names, kv = connectors(peers, sock, pool, n)
        Meta = type(sched.build_connector_meta(peers.output.SchedulerOutput.make_empty()))
        nbytes = n * worker._pool.page_bytes
        src = torch.empty(nbytes, dtype=torch.uint8).fill_(1)
        dst = torch.empty(nbytes, dtype=torch.uint8).fill_(2)
        g = torch.Generator().manual_seed(5)
        times = dict(save=[], load=[], memcpy=[])
        for rep in range(args.reps + 1):           # rep 0 warms up
            prompt = torch.randint(0, 32000, (n * BS + 1,), generator=g).tolist()
            keys = sched._request_keys(NS(prompt_token_ids=prompt))
            blocks = list(range(n))
            save = Meta([dict(req_id="s", block_ids=blocks, keys=keys, load=[0, 0],
                              save=[0, n])])
            load = Meta([dict(req_id="l", block_ids=blocks, keys=keys, load=[0, n],
                              save=[0, 0])])
            t0 = time.perf_counter()
            ctypes.memmove(dst.data_ptr(), src.data_ptr(), nbytes)
            t_memcpy = time.perf_counter() - t0
            saved = worker.stats["saved_blocks"]
            t_save = step(worker, names, save)
            assert worker.stats["saved_blocks"] - saved == n, "the save did not publish"
            loaded = worker.stats["loaded_blocks"]
            t_load = step(worker, names, load)
            assert worker.stats["loaded_blocks"] - loaded == n, "the load missed pages"
            if rep:
                times["memcpy"].append(t_memcpy)
                times["save"].append(t_save)
                times["load"].append(t_load)
        med = {k: statistics.median(v) for k, v in times.items()}
        gbs = {k: nbytes / v / 1e9 for k, v in med.items()}
        print("vllm connector: %d blocks of %d layers x %d kv heads x %d x %d tokens bf16 "
              "(%.1f MiB a block, %d MiB a step), host pool, CPU copies, median of %d"
              % (n, LAYERS, HEADS, DIM, BS, worker._pool.page_bytes / 2**20,
                 nbytes >> 20, args.reps))
        for k in ("memcpy", "save", "load"):
            print("  %-7s %8.1f ms  %6.2f GB/s  %5.0f%% of memcpy"
                  % (k, med[k] * 1e3, gbs[k], 100 * gbs[k] / gbs["memcpy"]))
        worker.shutdown()
        sched.shutdown()
    finally:
        with kvshare.Arbiter(sock) as arb:
            arb.destroy_pool(pool)
        if daemon:
            daemon.stop()


if __name__ == "__main__":
    main()
