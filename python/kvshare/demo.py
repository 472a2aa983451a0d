# SPDX-License-Identifier: MIT
"""python3 -m kvshare.demo: the main job from Python and torch.

N worker processes serve prompts that share prefixes (one system prompt, a
few documents, a unique question each) with a small transformer in torch
(random weights, CPU), the way engine replicas on one host would, and share
prefix KV pages through kvshare:

  match    the prompt against the worker's PrefixCache (its radix tree, then
           the arbiter's LOOKUP of chained SHA-256 page keys);
  prefill  the uncached tokens, writing K and V straight into the pool's
           pages through a torch tensor over the shared memory, and reading
           every cached page (its own and other processes') in place;
  decode   a few tokens greedily;
  finish   cache_finished_req: PUBLISH the new full pages (or take another
           process's identical ones) and keep them for the next request.

Every --verify'th request of a worker is computed again from scratch in
private memory, and must be equal (torch.equal) in every K/V row of every
layer, every logit that chose a token, and every generated token.  The
model is cut-invariant by construction: a token's computation has the same
shapes whether its prefix came from the cache or not, so sharing must give
the very same bits.

Without --arbiter the demo starts its own kvshared on a private socket with
a host-memory pool (no module, no GPU), as `make serve` does.
"""
import argparse
import math
import os
import sys
import time

__all__ = ["main", "Model"]

POOL_SPEC = ("{name}:pages={pages},layers={layers},kv_heads={kv_heads},"
             "head_dim={head_dim},tokens_per_page={tpp},dtype=bf16,mode=0600,memory=host")


class Model:
    """A small decoder: token + position embeddings, then per layer RMSNorm,
    grouped-query attention over paged KV, a ReLU MLP; tied-free output head.
    step() computes one token at one position, reading and writing K/V in
    the pages of a (pages, layers, 2, tokens_per_page, kv_heads, head_dim)
    tensor -- the pool's, or a private one."""

    def __init__(self, torch, seed, layers, kv_heads, head_dim, q_heads, vocab,
                 max_pos, tpp):
        g = torch.Generator().manual_seed(seed)
        self.t = torch
        self.L, self.H, self.D, self.Q, self.T = layers, kv_heads, head_dim, q_heads, tpp
        d = q_heads * head_dim
        self.d = d

        def w(*shape, scale=1.0):
            return torch.randn(*shape, generator=g) * (scale / math.sqrt(shape[0]))

        self.emb = torch.randn(vocab, d, generator=g)
        self.pos = torch.randn(max_pos, d, generator=g) * 0.1
        self.wqkv = [w(d, d + 2 * kv_heads * head_dim) for _ in range(layers)]
        self.wo = [w(d, d) for _ in range(layers)]
        self.w1 = [w(d, 2 * d) for _ in range(layers)]
        self.w2 = [w(2 * d, d) for _ in range(layers)]
        self.out = w(d, vocab)
        self.scale = 1.0 / math.sqrt(head_dim)

    def _norm(self, x):
        return x * self.t.rsqrt((x * x).mean() + 1e-5)

    def step(self, kv, pages, tok, pos):
        """Logits after token tok at position pos; K/V of pos written to
        kv[pages[pos // T], :, :, pos % T]."""
        t, L, H, D, Q, T = self.t, self.L, self.H, self.D, self.Q, self.T
        page, slot = int(pages[pos // T]), pos % T
        n_pages = pos // T + 1
        idx = pages[:n_pages]
        x = self.emb[tok] + self.pos[pos]
        for l in range(L):
            qkv = self._norm(x) @ self.wqkv[l]
            q = qkv[:self.d].view(H, Q // H, D)            # query heads by KV head
            kv[page, l, 0, slot] = qkv[self.d:self.d + H * D].view(H, D)
            kv[page, l, 1, slot] = qkv[self.d + H * D:].view(H, D)
            # The attention reads the pages in place: gather this layer's
            # K and V of positions 0..pos from wherever the pages are.
            blk = kv[idx, l]                               # (pages, 2, T, H, D)
            k = blk[:, 0].reshape(n_pages * T, H, D)[:pos + 1].float().permute(1, 2, 0)
            v = blk[:, 1].reshape(n_pages * T, H, D)[:pos + 1].float().permute(1, 0, 2)
            p = t.softmax((q @ k) * self.scale, dim=-1)   # (H, Q // H, n)
            x = x + (p @ v).reshape(self.d) @ self.wo[l]
            x = x + t.relu(self._norm(x) @ self.w1[l]) @ self.w2[l]
        return self._norm(x) @ self.out


def _text(rng_seed, n, vocab):
    import numpy as np
    return np.random.default_rng(rng_seed).integers(0, vocab, size=n).astype(np.uint32)


def _prompt(o, worker, r):
    import numpy as np
    pick = np.random.default_rng([o.seed, worker, r]).integers(0, o.docs)
    return np.concatenate([
        _text([o.seed, 0], o.system_tokens, o.vocab),
        _text([o.seed, 1, int(pick)], o.doc_tokens, o.vocab),
        _text([o.seed, 2, worker, r], o.question_tokens, o.vocab)])


def _serve(o, worker, pool, pc, model, kv, queue, torch):
    """One worker's requests; returns its tally."""
    import numpy as np
    tpp = pool.tokens_per_page
    n_prompt = o.system_tokens + o.doc_tokens + o.question_tokens
    n_kv = n_prompt + o.gen_tokens - 1
    tal = dict(requests=0, prompt_pages=0, hit_pages=0, prefill_tokens=0,
               prefill_s=0.0, decode_s=0.0, verified=0, verified_rows=0,
               mismatches=0, scratch_s=0.0, prompt_tokens=0)
    for r in range(o.requests):
        tokens = _prompt(o, worker, r)
        req = pc.match(tokens, n_prompt - 1)
        matched = req.cached_len
        pc.reserve(req, n_kv)
        pages = torch.from_numpy(req.pages.astype(np.int64))
        t0 = time.perf_counter()
        with torch.no_grad():
            for pos in range(matched, n_prompt):
                logits = model.step(kv, pages, int(tokens[pos]), pos)
        t1 = time.perf_counter()
        out_logits, gen = [logits], []
        with torch.no_grad():
            for pos in range(n_prompt, n_kv + 1):
                nxt = int(torch.argmax(out_logits[-1]))
                gen.append(nxt)
                if pos < n_kv:
                    out_logits.append(model.step(kv, pages, nxt, pos))
        tal["decode_s"] += time.perf_counter() - t1
        tal["prefill_s"] += t1 - t0
        tal["prefill_tokens"] += n_prompt - matched
        tal["prompt_tokens"] += n_prompt
        tal["hit_pages"] += matched // tpp
        tal["prompt_pages"] += n_prompt // tpp
        all_tokens = np.concatenate([tokens, np.array(gen[:-1], dtype=np.uint32)])
        if o.verify and r % o.verify == 0:
            ok, rows, dt = _verify(o, model, kv, pages, all_tokens, n_prompt, n_kv,
                                   out_logits, gen, torch)
            tal["verified"] += 1
            tal["verified_rows"] += rows
            tal["scratch_s"] += dt
            if not ok:
                tal["mismatches"] += 1
                print("kvshare.demo: worker %d: request %d differs from the run without "
                      "sharing (%d of %d prompt tokens were cached)"
                      % (worker, r, matched, n_prompt), file=sys.stderr)
        if o.corrupt and worker == 0 and r == 0:
            # Test hook: damage a page once it is verified; any later request
            # that shares it must fail its verification.
            kv[int(pages[0]), o.layers - 1, 1, 0] += 1
        pc.cache_finished_req(req, all_tokens)
        tal["requests"] += 1
        queue.put(("progress", worker, 1))
    return tal


def _verify(o, model, kv, pages, tokens, n_prompt, n_kv, served_logits, gen, torch):
    """The same request from scratch in private memory (pages in reverse
    order, filled with NaN first): equal K/V rows, logits and tokens?"""
    n_pages = len(pages)
    priv = torch.full((n_pages,) + tuple(kv.shape[1:]), float("nan"), dtype=kv.dtype)
    ppages = torch.arange(n_pages - 1, -1, -1)
    t0 = time.perf_counter()
    with torch.no_grad():
        for pos in range(n_prompt):
            logits = model.step(priv, ppages, int(tokens[pos]), pos)
    dt = time.perf_counter() - t0
    ok = torch.equal(logits, served_logits[0])
    with torch.no_grad():
        for i, pos in enumerate(range(n_prompt, n_kv + 1)):
            nxt = int(torch.argmax(logits))
            ok = ok and nxt == gen[i]
            if pos < n_kv:
                logits = model.step(priv, ppages, nxt, pos)
                ok = ok and torch.equal(logits, served_logits[i + 1])
    # Every K and V row of every layer, of every token with KV.
    T = o.tokens_per_page
    shared = kv[pages].reshape(n_pages, o.layers, 2, T, -1)
    mine = priv[ppages].reshape(n_pages, o.layers, 2, T, -1)
    full, part = divmod(n_kv, T)
    ok = ok and torch.equal(shared[:full], mine[:full])
    if part:
        ok = ok and torch.equal(shared[full, :, :, :part], mine[full, :, :, :part])
    return ok, n_kv * o.layers * 2, dt


def _worker(o, worker, arbiter, queue):
    try:
        import torch
        import kvshare
        torch.set_num_threads(1)     # the same reduction order in every process
        with kvshare.Pool(o.pool, arbiter) as pool:
            model = Model(torch, o.model_seed, o.layers, o.kv_heads, o.head_dim, o.q_heads,
                          o.vocab, o.system_tokens + o.doc_tokens + o.question_tokens
                          + o.gen_tokens, pool.tokens_per_page)
            kv = pool.tensor()
            with kvshare.PrefixCache(pool, salt="kvshare.demo:seed=%d,q=%d"
                                     % (o.model_seed, o.q_heads)) as pc:
                tal = _serve(o, worker, pool, pc, model, kv, queue, torch)
                tal["pc"] = pc.stats
            del kv
        queue.put(("done", worker, tal))
    except BaseException as e:       # noqa: BLE001 - reported to the parent
        import traceback
        queue.put(("error", worker, "".join(traceback.format_exception(e))))


def _bar(done, total, t0):
    width = 30
    fill = width * done // max(total, 1)
    el = time.monotonic() - t0
    sys.stderr.write("\r  [%s%s] %d/%d requests, %.1f s" % ("#" * fill, "." * (width - fill),
                                                           done, total, el))
    sys.stderr.flush()


def run(o, arbiter):
    import multiprocessing as mp
    import queue as queue_mod
    import kvshare
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(o, w, arbiter, q)) for w in range(o.workers)]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    total = o.workers * o.requests
    show = o.progress if o.progress is not None else (total >= 32 and sys.stderr.isatty())
    done, tallies, errors = 0, {}, []
    while len(tallies) + len(errors) < o.workers:
        try:
            kind, w, val = q.get(timeout=1.0)
        except queue_mod.Empty:
            if not any(p.is_alive() for p in procs) and q.empty():
                errors.append("a worker died without a report")
                break
            continue
        if kind == "progress":
            done += val
            if show:
                _bar(done, total, t0)
        elif kind == "done":
            tallies[w] = val
        else:
            errors.append("worker %d: %s" % (w, val))
    for p in procs:
        p.join()
    if show:
        sys.stderr.write("\n")
    wall = time.monotonic() - t0
    for e in errors:
        print("kvshare.demo: " + e, file=sys.stderr)
    with kvshare.Arbiter(arbiter) as a:
        st = a.stats(o.pool, check=True)
    return tallies, errors, st, wall


def report(o, tallies, st, wall):
    s = {k: sum(t[k] for t in tallies.values()) for k in next(iter(tallies.values()))
         if k != "pc"}
    pcs = {k: sum(t["pc"][k] for t in tallies.values()) for k in
           next(iter(tallies.values()))["pc"]}
    n_prompt = o.system_tokens + o.doc_tokens + o.question_tokens
    print("kvshare.demo: %d workers x %d requests, prompts of %d tokens (%d system + %d of %d "
          "documents + %d unique), %d generated" % (o.workers, o.requests, n_prompt,
                                                   o.system_tokens, o.doc_tokens, o.docs,
                                                   o.question_tokens, o.gen_tokens))
    print("  model                  torch %d layers, %d q heads over %d KV heads of dim %d, "
          "bf16 pages of %d tokens in a shared pool" % (o.layers, o.q_heads, o.kv_heads,
                                                         o.head_dim, o.tokens_per_page))
    hit = 100.0 * s["hit_pages"] / max(s["prompt_pages"], 1)
    print("  requests served        %d in %.2f s" % (s["requests"], wall))
    print("  hit rate               %.1f%% of full prompt pages from the cache: %d from the "
          "worker's own tree, %d shared by another process"
          % (hit, pcs["local_hit_pages"], pcs["remote_hit_pages"]))
    print("  pages shared           %d found through the arbiter; %d published, %d of them "
          "duplicates another process had first" % (pcs["remote_hit_pages"],
                                                     pcs["published"], pcs["dup_published"]))
    pre = s["prefill_s"] / max(s["requests"], 1)
    print("  prefill                %d of %d prompt tokens computed (%.1f%%), %.1f ms a "
          "request" % (s["prefill_tokens"], s["prompt_tokens"],
                       100.0 * s["prefill_tokens"] / max(s["prompt_tokens"], 1), pre * 1e3))
    if s["verified"]:
        scratch = s["scratch_s"] / s["verified"]
        saved = scratch * s["requests"] - s["prefill_s"]
        print("  prefill time saved     %.2f s: from scratch %.1f ms a request, %.1fx the "
              "served prefill's time" % (saved, scratch * 1e3, scratch / max(pre, 1e-9)))
        if not s["mismatches"]:
            print("  verified               %d requests recomputed without sharing: equal "
                  "(torch.equal) in every K/V row (%d rows), logit and token"
                  % (s["verified"], s["verified_rows"]))
        else:
            print("  verified               %d requests recomputed without sharing: "
                  "%d MISMATCH(ES)" % (s["verified"], s["mismatches"]))
    print("  pool                   %d pages: %d free, %d cached, %d shared, %d held; "
          "invariants checked" % (st["n_pages"], st["n_free"], st["n_cached"],
                                  st["n_shared"], st["n_held"]))
    return s["mismatches"]


def parse(argv):
    ap = argparse.ArgumentParser(prog="python3 -m kvshare.demo", description=(
        "Worker processes serve prompts with shared prefixes through a small torch "
        "transformer, storing K/V in a kvshare pool and sharing prefix pages; every "
        "--verify'th request is recomputed without sharing and must be equal."))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--requests", type=int, default=4, help="requests per worker")
    ap.add_argument("--system-tokens", type=int, default=192)
    ap.add_argument("--doc-tokens", type=int, default=128)
    ap.add_argument("--docs", type=int, default=2)
    ap.add_argument("--question-tokens", type=int, default=24)
    ap.add_argument("--gen-tokens", type=int, default=4)
    ap.add_argument("--verify", type=int, default=2,
                    help="recompute every V'th request of a worker (0: none)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--q-heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=16)
    ap.add_argument("--tokens-per-page", type=int, default=16)
    ap.add_argument("--pages", type=int, default=2048, help="pool size (embedded daemon)")
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1, help="picks the texts")
    ap.add_argument("--model-seed", type=int, default=1, help="picks the weights")
    ap.add_argument("--arbiter", help="an existing arbiter (module device or kvshared "
                    "socket); default: start a private kvshared")
    ap.add_argument("--pool", default="pydemo", help="pool name (created if missing)")
    ap.add_argument("--kvshared", help="the kvshared binary to start")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--progress", dest="progress", action="store_true", default=None)
    g.add_argument("--no-progress", dest="progress", action="store_false")
    ap.add_argument("--corrupt", action="store_true", help=argparse.SUPPRESS)
    o = ap.parse_args(argv)
    for k in ("workers", "requests", "system_tokens", "docs", "question_tokens",
              "gen_tokens", "layers", "q_heads", "kv_heads", "head_dim", "tokens_per_page",
              "pages", "vocab"):
        if getattr(o, k) < 1:
            ap.error("--%s must be at least 1" % k.replace("_", "-"))
    if o.doc_tokens < 0 or o.verify < 0:
        ap.error("--doc-tokens and --verify must not be negative")
    if o.q_heads % o.kv_heads:
        ap.error("--q-heads must be a multiple of --kv-heads")
    return o


def main(argv=None):
    o = parse(sys.argv[1:] if argv is None else argv)
    import kvshare
    from kvshare.session import Daemon
    daemon = None
    arbiter = o.arbiter
    if arbiter is None:
        daemon = Daemon(pools=[POOL_SPEC.format(
            name=o.pool, pages=o.pages, layers=o.layers, kv_heads=o.kv_heads,
            head_dim=o.head_dim, tpp=o.tokens_per_page)], kvshared=o.kvshared)
        daemon.start()
        arbiter = daemon.socket
    try:
        with kvshare.Arbiter(arbiter) as a:
            if not any(p["name"] == o.pool for p in a.pools()):
                a.create_pool(o.pool, pages=o.pages, layers=o.layers, kv_heads=o.kv_heads,
                              head_dim=o.head_dim, tokens_per_page=o.tokens_per_page,
                              dtype="bf16")
        with kvshare.Pool(o.pool, arbiter) as p:
            g = p.geometry
            o.layers, o.kv_heads, o.head_dim = g["n_layers"], g["n_kv_heads"], g["head_dim"]
            o.tokens_per_page = g["tokens_per_page"]
            if o.q_heads % o.kv_heads or p.dtype not in ("bfloat16", "float16", "float32"):
                print("kvshare.demo: pool '%s' (%s, %d KV heads) does not fit the model"
                      % (o.pool, p.dtype, o.kv_heads), file=sys.stderr)
                return 2
        tallies, errors, st, wall = run(o, arbiter)
        if errors or len(tallies) != o.workers:
            return 1
        bad = report(o, tallies, st, wall)
        return 1 if bad or st["n_held"] else 0
    finally:
        if daemon:
            daemon.stop()


if __name__ == "__main__":
    sys.exit(main())
