# SPDX-License-Identifier: GPL-2.0
"""A vLLM engine process in miniature, for the connector tests: vLLM's
scheduler and worker call sequences around kvshare.vllm.KVShareConnector
(research/engine-adapters.md, "Minimal faithful CPU harness"), with the
connector built by vLLM's real KVConnectorFactory from
kv_connector_module_path, vLLM's real SchedulerOutput / NewRequestData /
CachedRequestData, and a small torch decoder whose attention reads K/V from
the paged cache (so a wrong byte loaded changes the outputs).

What is replayed per step, as vllm/v1/core/sched/scheduler.py and the
worker's kv_connector_model_runner_mixin do:
  scheduler: get_num_new_matched_tokens(req, local_hit) for a waiting
  request, allocate blocks, update_state_after_alloc, then
  build_connector_meta(SchedulerOutput) once (new_block_ids_to_zero: the
  blocks allocated; the connector may take those it loads off), pickled to
  the worker;
  worker: handle_preemptions, zero new_block_ids_to_zero, bind_connector_metadata,
  start_load_kv, per layer
  wait_for_layer_load / attention / save_kv_layer, wait_for_save,
  get_finished, get_block_ids_with_load_errors, clear_connector_metadata;
  scheduler: update_connector_output(KVConnectorOutput), and with the
  recompute policy, requests with invalid blocks go back to the first
  invalid block; request_finished at the end.
Chunked prefill (a token budget per step), preemption (blocks freed and
scribbled over, the request resumed later) and a hook between the
scheduler and the worker of a step (to evict pages) are supported.

Run as a script (python3 vllm_engine.py JSON) it is a second engine
process: it serves the prompts and prints a JSON report."""
import hashlib
import json
import pickle
import sys
import types

import torch

import vllm_peers

NS = types.SimpleNamespace


class Request:
    """The fields of vllm.v1.request.Request a connector reads."""

    def __init__(self, req_id, prompt, cache_salt=None, lora_name=None):
        self.request_id = req_id
        self.prompt_token_ids = list(prompt)
        self.all_token_ids = list(prompt)
        self.num_tokens = len(prompt)
        self.num_computed_tokens = 0
        self.mm_features = []
        self.lora_request = NS(lora_name=lora_name) if lora_name else None
        self.cache_salt = cache_salt
        self.prompt_embeds = None
        self.block_ids = []
        self.resumed = False
        self.outputs = {}


class Blocks:
    """KVCacheBlocks.get_block_ids(): one list per KV cache group."""

    def __init__(self, ids):
        self.ids = ids

    def get_block_ids(self):
        return (list(self.ids),)


class TinyModel:
    """A decoder of a few layers whose attention reads every K/V from the
    paged cache, one query token at a time (same op shapes however the
    prompt is chunked, so outputs are bit-exact across runs).  MLA: one
    latent of head_size per token, K and V projected from it."""

    def __init__(self, layers, heads, dim, mla, vocab=97, seed=7):
        g = torch.Generator().manual_seed(seed)
        self.layers, self.heads, self.dim, self.mla = layers, heads, dim, mla
        self.width = heads * dim
        self.lat = 2 * dim
        r = lambda *s: torch.randn(*s, generator=g) / (s[0] ** 0.5)
        self.emb = r(vocab, self.width)
        self.w = [dict(q=r(self.width, self.width), k=r(self.width, self.width),
                       v=r(self.width, self.width), o=r(self.width, self.width),
                       c=r(self.width, self.lat), uk=r(self.lat, self.width),
                       uv=r(self.lat, self.width)) for _ in range(layers)]


class Engine:
    def __init__(self, socket, pool, layout="NHD", layers=3, heads=2, dim=8,
                 block_size=4, num_blocks=48, dtype=torch.bfloat16, extra=None,
                 model="tiny-test", kv_caches=None):
        self.peers = vllm_peers.load()
        self.bs = block_size
        self.mla = layout == "MLA"
        self.layout = layout
        self.model = TinyModel(layers, heads, dim, self.mla)
        cfg = dict(pool=pool, arbiter=socket, timeout_ms=2000, retry_s=0.2)
        if not self.mla:
            cfg["kv_layout"] = layout
        cfg.update(extra or {})
        kvt = self.peers.KVTransferConfig(
            kv_connector="KVShareConnector", kv_role="kv_both",
            kv_connector_module_path="kvshare.vllm",
            kv_connector_extra_config=cfg, kv_load_failure_policy="recompute")
        self.vllm_config = NS(
            kv_transfer_config=kvt, cache_config=NS(block_size=block_size),
            model_config=NS(model=model, use_mla=self.mla),
            parallel_config=NS(tensor_parallel_size=1, pipeline_parallel_size=1),
            scheduler_config=NS(disable_hybrid_kv_cache_manager=True))
        create = self.peers.factory.KVConnectorFactory.create_connector
        role = self.peers.base.KVConnectorRole
        self.names = ["model.layers.%d.self_attn.attn" % i for i in range(layers)]
        self.kv = kv_caches or [self.new_cache(num_blocks, heads, dim, dtype)
                                for _ in range(layers)]
        # As vLLM: the workers build theirs and register the caches first,
        # EngineCore's scheduler is created after.
        self.worker = create(self.vllm_config, role.WORKER, None)
        self.worker.register_kv_caches(dict(zip(self.names, self.kv)))
        self.sched = create(self.vllm_config, role.SCHEDULER, None)
        self.free = list(range(num_blocks))
        self.waiting, self.running, self.done = [], [], []
        self.hook = None            # hook(engine, meta) between scheduler and worker
        self.zeroing = []           # per step: (blocks to zero, kept by the connector, loaded)
        self._new_blocks = []
        self.steps = 0
        self.computed_tokens = 0

    def new_cache(self, nb, heads, dim, dtype):
        bs = self.bs
        if self.mla:
            return torch.full((nb, bs, 2 * dim), float("nan"), dtype=dtype)
        if self.layout == "NHD":
            t = torch.full((nb, bs, heads, 2 * dim), float("nan"), dtype=dtype)
            return t.permute(0, 2, 1, 3)        # logical (nb, H, bs, 2D)
        return torch.full((nb, heads, bs, 2 * dim), float("nan"), dtype=dtype)

    # ---- cache access by token slot ----

    def _slot(self, req, pos):
        return req.block_ids[pos // self.bs], pos % self.bs

    def write_kv(self, layer, req, pos, k, v):
        b, off = self._slot(req, pos)
        t = self.kv[layer]
        if self.mla:
            t[b, off] = k           # the latent
        else:
            t[b, :, off] = torch.cat([k.view(self.model.heads, -1),
                                      v.view(self.model.heads, -1)], dim=1).to(t.dtype)

    def read_kv(self, layer, req, upto):
        """K, V of positions [0, upto) as float (upto, width)."""
        m = self.model
        ks, vs = [], []
        for pos in range(upto):
            b, off = self._slot(req, pos)
            t = self.kv[layer]
            if self.mla:
                c = t[b, off].float()
                ks.append(c @ m.w[layer]["uk"])
                vs.append(c @ m.w[layer]["uv"])
            else:
                row = t[b, :, off].float()
                ks.append(row[:, :m.dim].reshape(-1))
                vs.append(row[:, m.dim:].reshape(-1))
        return torch.stack(ks), torch.stack(vs)

    # ---- the forward of one request's scheduled tokens, layer by layer ----

    def _layer(self, layer, req, start, end, x):
        m, w = self.model, self.model.w[layer]
        for i, pos in enumerate(range(start, end)):
            h = x[i]
            if self.mla:
                c = (h @ w["c"]).to(self.kv[layer].dtype)
                self.write_kv(layer, req, pos, c, None)
            else:
                self.write_kv(layer, req, pos, h @ w["k"], h @ w["v"])
        out = []
        for i, pos in enumerate(range(start, end)):
            k, v = self.read_kv(layer, req, pos + 1)
            q = (x[i] @ w["q"]).view(m.heads, m.dim)
            kk, vv = k.view(-1, m.heads, m.dim), v.view(-1, m.heads, m.dim)
            att = torch.softmax(torch.einsum("hd,thd->ht", q, kk) / m.dim ** 0.5, -1)
            o = torch.einsum("ht,thd->hd", att, vv).reshape(-1)
            out.append(x[i] + o @ w["o"])
        return torch.stack(out)

    # ---- the scheduler ----

    def add(self, req):
        self.waiting.append(req)

    def preempt(self, req):
        """As the scheduler under memory pressure: free the blocks (and
        scribble on them), back to waiting, computed tokens forgotten."""
        self.running.remove(req)
        for b in req.block_ids:
            for t in self.kv:
                t[b] = -7.0
        self.free.extend(req.block_ids)
        req.block_ids, req.num_computed_tokens, req.resumed = [], 0, True
        self.waiting.insert(0, req)

    def _alloc(self, req, ntokens):
        need = -(-ntokens // self.bs) - len(req.block_ids)
        new = [self.free.pop(0) for _ in range(max(0, need))]
        req.block_ids += new
        self._new_blocks += new
        return new

    def step(self, budget=24):
        """One engine step; returns the load errors the worker reported."""
        out = self.peers.output
        so = out.SchedulerOutput.make_empty()
        self._new_blocks = []
        sched = {}
        cached = out.CachedRequestData.make_empty()
        for req in list(self.running):
            n = min(budget - sum(sched.values()), req.num_tokens - req.num_computed_tokens)
            if n <= 0:
                continue
            new = self._alloc(req, req.num_computed_tokens + n)
            cached.req_ids.append(req.request_id)
            cached.new_block_ids.append((new,) if new else None)
            cached.num_computed_tokens.append(req.num_computed_tokens)
            cached.num_output_tokens.append(0)
            sched[req.request_id] = n
        for req in list(self.waiting):
            left = budget - sum(sched.values())
            if left <= 0:
                break
            local = 0           # this engine's own prefix cache is off
            ext, is_async = self.sched.get_num_new_matched_tokens(req, local)
            assert is_async is False and ext >= 0
            assert (local + ext) % self.bs == 0 and local + ext < req.num_tokens
            n = min(left, req.num_tokens - local - ext)
            self._alloc(req, local + ext + n)
            self.sched.update_state_after_alloc(req, Blocks(req.block_ids), ext)
            req.num_computed_tokens = local + ext
            self.waiting.remove(req)
            self.running.append(req)
            if req.resumed:
                cached.req_ids.append(req.request_id)
                cached.resumed_req_ids.add(req.request_id)
                cached.new_block_ids.append((list(req.block_ids),))
                cached.num_computed_tokens.append(req.num_computed_tokens)
                cached.num_output_tokens.append(0)
            else:
                so.scheduled_new_reqs.append(out.NewRequestData(
                    req_id=req.request_id, prompt_token_ids=req.prompt_token_ids,
                    mm_features=[], sampling_params=None, pooling_params=None,
                    block_ids=(list(req.block_ids),),
                    num_computed_tokens=req.num_computed_tokens, lora_request=None))
            sched[req.request_id] = n
        so.scheduled_cached_reqs = cached
        so.num_scheduled_tokens = sched
        so.total_num_scheduled_tokens = sum(sched.values())
        # As vLLM 0.32: every block allocated this step is zeroed by the
        # worker before the forward, but for those a synchronous load
        # connector took off the list (base.py allows it for blocks it
        # overwrites whole this step).
        zero = list(self._new_blocks)
        so.new_block_ids_to_zero = zero or None
        before = pickle.dumps(so)
        meta = self.sched.build_connector_meta(so)
        kept = so.new_block_ids_to_zero
        so.new_block_ids_to_zero = zero or None
        assert pickle.dumps(so) == before, "build_connector_meta changed its argument"
        loads = {b for r in meta.reqs for b in r["block_ids"][r["load"][0]:r["load"][1]]}
        assert set(kept or []) <= set(zero) and set(zero) - set(kept or []) <= loads, \
            "build_connector_meta took blocks it does not load off the zeroing"
        self.zeroing.append((zero, list(kept or []), loads))
        so.kv_connector_metadata = meta
        meta = pickle.loads(pickle.dumps(meta))     # to the worker process
        if self.hook:
            self.hook(self, meta)
        errors = self._worker_step(meta, sched, kept or [])
        self.sched.update_connector_output(
            self.peers.KVConnectorOutput(invalid_block_ids=set(errors)))
        for req in list(self.running):
            bad = [i for i, b in enumerate(req.block_ids) if b in errors]
            if bad:     # recompute from the first invalid block
                req.num_computed_tokens = min(req.num_computed_tokens, bad[0] * self.bs)
            if req.num_computed_tokens >= req.num_tokens:
                self.running.remove(req)
                self.done.append(req)
                self.sched.request_finished(req, req.block_ids)
        self.steps += 1
        return errors

    def _worker_step(self, meta, sched, zero):
        w = self.worker
        w.handle_preemptions(meta)  # vLLM 0.32: first in execute_model
        for b in zero:              # the CPU model runner's _zero_block_ids
            for t in self.kv:
                t[b].zero_()
        fc = NS(attn_metadata={n: object() for n in self.names},
                no_compile_layers={n: NS(kv_cache=t) for n, t in zip(self.names, self.kv)})
        w.bind_connector_metadata(meta)
        w.start_load_kv(fc)
        work = [(r, r.num_computed_tokens, r.num_computed_tokens + sched[r.request_id])
                for r in self.running if r.request_id in sched]
        xs = {r.request_id: self.model.emb[torch.tensor(r.prompt_token_ids[s:e])]
              for r, s, e in work}
        for layer, name in enumerate(self.names):
            w.wait_for_layer_load(name)
            for r, s, e in work:
                xs[r.request_id] = self._layer(layer, r, s, e, xs[r.request_id])
            w.save_kv_layer(name, self.kv[layer], fc.attn_metadata[name])
        w.wait_for_save()
        assert w.get_finished(set()) == (None, None)
        errors = w.get_block_ids_with_load_errors()
        w.clear_connector_metadata()
        for r, s, e in work:
            r.num_computed_tokens = e
            self.computed_tokens += e - s
            for i, pos in enumerate(range(s, e)):
                r.outputs[pos] = xs[r.request_id][i]
        return errors

    def run(self, budget=24, max_steps=200):
        while (self.waiting or self.running) and self.steps < max_steps:
            self.step(budget)
        assert not self.waiting and not self.running, "engine did not finish"

    def block_digest(self, req, nblocks):
        """sha256 of each of the first nblocks blocks, all layers."""
        return [hashlib.sha256(b"".join(
            t[b].contiguous().view(torch.uint8).numpy().tobytes() for t in self.kv)
        ).hexdigest() for b in req.block_ids[:nblocks]]

    def close(self):
        self.worker.shutdown()
        self.sched.shutdown()


def main(spec):
    eng = Engine(spec["socket"], spec["pool"], spec.get("layout", "NHD"),
                 extra=spec.get("extra"))
    reqs = [Request("a%d" % i, p) for i, p in enumerate(spec["prompts"])]
    for r in reqs:
        eng.add(r)
    eng.run(spec.get("budget", 24))
    report = dict(stats=eng.worker.stats, sched=eng.sched.stats,
                  computed=eng.computed_tokens,
                  digests=[eng.block_digest(r, len(r.prompt_token_ids) // eng.bs)
                           for r in reqs],
                  last=[r.outputs[len(r.prompt_token_ids) - 1].tolist() for r in reqs])
    eng.close()
    print(json.dumps(report))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
