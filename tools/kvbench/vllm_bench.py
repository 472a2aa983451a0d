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

--device cuda (the GPU bundle, tools/gpu/gpu-checks.sh): the engine is a
CUDA engine, its kv_caches torch CUDA tensors, over the same host pool:
the connector's host pool <-> CUDA engine path (pinned pool, batched
cuMemcpy2DAsync on the engine's stream, one event wait a layer, one sync
a save).  Beside it, in the same run: a pinned copy of the same bytes as
one contiguous cuMemcpy2DAsync from registered memory (what a cudaMemcpy
from pinned memory does), and torch's copy_ from and to pageable memory.
The lines "copy <what> <ms> <GB/s>" are what tools/gpu/gpu_table.py reads;
the goal (issue 25): load and save at least 80% of the pinned copy.
--device standin: the same on the CUDA driver stand-in (tests/gpu/cudastub,
first in LD_LIBRARY_PATH): the caches in its "device memory" (a
memory=cuda pool's mapping), torch's pageable copy replaced by the
driver's; the figures mean nothing, the run proves the bench works (make
test runs it so that it cannot rot).
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


def connectors(peers, sock, pool, nblocks, kv=None):
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
    if kv is None:
        kv = [torch.randn(nblocks, BS, HEADS, 2 * DIM).to(torch.bfloat16)
              .permute(0, 2, 1, 3) for _ in names]
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


DEVPOOL = "vllmbenchdev"       # --device standin: the caches' "device memory"


def save_and_load(sched, Meta, g, n):
    """A fresh prompt of n blocks (+1 token): the step metadata that saves
    its blocks 0..n-1, and the one that loads them back."""
    prompt = torch.randint(0, 32000, (n * BS + 1,), generator=g).tolist()
    keys = sched._request_keys(NS(prompt_token_ids=prompt))
    blocks = list(range(n))
    save = Meta([dict(req_id="s", block_ids=blocks, keys=keys, load=[0, 0], save=[0, n])])
    load = Meta([dict(req_id="l", block_ids=blocks, keys=keys, load=[0, n], save=[0, 0])])
    return save, load


def device_caches(kind, n, sock):
    """NHD KV caches of n blocks a layer in device memory: torch CUDA
    tensors, or tensors over the stand-in's device memory."""
    shape = (n, BS, HEADS, 2 * DIM)
    if kind == "cuda":
        return [torch.empty(shape, dtype=torch.bfloat16, device="cuda").normal_()
                .permute(0, 2, 1, 3) for _ in range(LAYERS)], None
    # DEVPOOL has 2n pages: the caches, then the reference copies' side.
    mem = kvshare.Pool(DEVPOOL, sock)
    per = n * BS * HEADS * 2 * DIM * 2
    raw = torch.frombuffer((ctypes.c_char * (LAYERS * per)).from_address(mem.address),
                           dtype=torch.uint8)
    g = torch.Generator().manual_seed(4)
    kv = []
    for l in range(LAYERS):
        t = raw[l * per:(l + 1) * per].view(torch.bfloat16).view(shape)
        t.copy_(torch.randn(shape, generator=g).to(torch.bfloat16))
        kv.append(t.permute(0, 2, 1, 3))
    return kv, mem


class Reference:
    """The copies the connector is measured against, of the same bytes,
    in the same run: pinned (one contiguous cuMemcpy2DAsync from or to
    registered host memory, what cudaMemcpy from pinned memory does) and
    pageable (torch's copy_ with a CUDA torch; the driver's copy from
    unregistered memory on the stand-in)."""

    def __init__(self, kind, nbytes, mem, stream):
        from kvshare import _kvshare
        self.k, self.kind, self.n, self.stream = _kvshare, kind, nbytes, stream
        self.pinned = torch.empty(nbytes, dtype=torch.uint8).fill_(3)
        self.pageable = torch.empty(nbytes, dtype=torch.uint8).fill_(4)
        if kind == "cuda":
            self.gpu = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            self.dev = self.gpu.data_ptr()
        else:
            self.dev = mem.address + nbytes         # past the caches
        self.k.cuda_host_register(self.pinned.data_ptr(), nbytes)

    def _copy(self, host, to_device):
        k, n = self.k, self.n
        t0 = time.perf_counter()
        if to_device:
            k.cuda_copy2d([self.dev], [host], n, n, n, 1, self.stream(), src_host=True)
        else:
            k.cuda_copy2d([host], [self.dev], n, n, n, 1, self.stream(), dst_host=True)
        k.cuda_synchronize(self.stream())
        return time.perf_counter() - t0

    def pinned_h2d(self):
        return self._copy(self.pinned.data_ptr(), True)

    def pinned_d2h(self):
        return self._copy(self.pinned.data_ptr(), False)

    def _pageable(self, to_device):
        """A pageable copy: libkv's on the stand-in, torch's on a GPU."""
        if self.kind != "cuda":
            return self._copy(self.pageable.data_ptr(), to_device)
        dst, src = (self.gpu, self.pageable) if to_device else (self.pageable, self.gpu)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    def pageable_h2d(self):
        return self._pageable(True)

    def pageable_d2h(self):
        return self._pageable(False)

    def close(self):
        self.k.cuda_host_unregister(self.pinned.data_ptr())


def device_main(args, peers, sock, pool):
    """--device cuda|standin: a CUDA engine over the host pool."""
    n = args.blocks
    kv, mem = device_caches(args.device, n, sock)
    sched, worker, names, kv = connectors(peers, sock, pool, n, kv)
    copier = worker._copier
    assert copier.direction == "host-cuda", copier.direction
    Meta = type(sched.build_connector_meta(peers.output.SchedulerOutput.make_empty()))
    nbytes = n * worker._pool.page_bytes
    ref = Reference(args.device, nbytes, mem, copier.stream)
    g = torch.Generator().manual_seed(5)
    names_t = ("load", "save", "pinned_h2d", "pinned_d2h", "pageable_h2d",
               "pageable_d2h")
    times = {k: [] for k in names_t}
    try:
        for rep in range(args.reps + 1):           # rep 0 warms up
            save, load = save_and_load(sched, Meta, g, n)
            t = dict(pinned_h2d=ref.pinned_h2d(), pageable_h2d=ref.pageable_h2d())
            saved = worker.stats["saved_blocks"]
            t["save"] = step(worker, names, save)
            assert worker.stats["saved_blocks"] - saved == n, "the save did not publish"
            t["pinned_d2h"] = ref.pinned_d2h()
            t["pageable_d2h"] = ref.pageable_d2h()
            loaded = worker.stats["loaded_blocks"]
            t["load"] = step(worker, names, load)
            assert worker.stats["loaded_blocks"] - loaded == n, "the load missed pages"
            if rep:
                for k in names_t:
                    times[k].append(t[k])
        med = {k: statistics.median(v) for k, v in times.items()}
        gbs = {k: nbytes / v / 1e9 for k, v in med.items()}
        where = ("CUDA (%s)" % torch.cuda.get_device_name() if args.device == "cuda"
                 else "the CUDA driver stand-in (no GPU; the figures mean nothing)")
        print("vllm connector, host pool <-> CUDA engine on %s: %d blocks of %d layers x "
              "%d kv heads x %d x %d tokens bf16 (%.1f MiB a block, %d MiB a step), "
              "median of %d" % (where, n, LAYERS, HEADS, DIM, BS,
                                worker._pool.page_bytes / 2**20, nbytes >> 20, args.reps))
        for k in names_t:
            base = "pinned_h2d" if k in ("load", "pageable_h2d") else "pinned_d2h"
            print("copy %-13s %9.3f ms %8.2f GB/s%s"
                  % (k, med[k] * 1e3, gbs[k], "" if k.startswith("pinned") else
                     "  %4.0f%% of %s" % (100 * gbs[k] / gbs[base], base)))
        for k, base in (("load", "pinned_h2d"), ("save", "pinned_d2h")):
            r = gbs[k] / gbs[base]
            print("goal copy %s >= 80%% of %s: %.0f%% (%s)"
                  % (k, base, 100 * r, "met" if r >= 0.8 else "NOT met"))
    finally:
        ref.close()
        worker.shutdown()
        sched.shutdown()
        del kv
        if mem is not None:
            mem.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", type=int, default=64)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--arbiter", help="kvshared socket (default: a private one)")
    ap.add_argument("--device", choices=("cpu", "cuda", "standin"), default="cpu",
                    help="where the engine's KV caches are (see above)")
    args = ap.parse_args()
    if args.blocks < 1 or args.reps < 1:
        ap.error("--blocks and --reps must be at least 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch has no CUDA here")
    if args.device == "standin" and args.arbiter:
        ap.error("--device standin starts its own kvshared (with a memory=cuda pool)")
    n = args.blocks
    peers = vllm_peers.load()
    import logging
    logging.getLogger("vllm").setLevel(logging.ERROR)
    daemon = None
    sock = args.arbiter
    if not sock:
        pools = []
        if args.device == "standin":
            pools = ["%s:pages=%d,layers=%d,kv_heads=%d,head_dim=%d,tokens_per_page=%d,"
                     "dtype=bf16,mode=0600,memory=cuda" % (DEVPOOL, 2 * n, LAYERS, HEADS,
                                                           DIM, BS)]
        daemon = Daemon(pools=pools).start()
        sock = daemon.socket
    if args.device != "cpu":
        pool = "vllmbench%d" % os.getpid()
        with kvshare.Arbiter(sock) as arb:
            arb.create_pool(pool, pages=n + n // 4, layers=LAYERS, kv_heads=HEADS,
                            head_dim=DIM, tokens_per_page=BS, dtype="bf16")
        try:
            device_main(args, peers, sock, pool)
        finally:
            with kvshare.Arbiter(sock) as arb:
                arb.destroy_pool(pool)
            if daemon:
                daemon.stop()
        return
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
            save, load = save_and_load(sched, Meta, g, n)
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
