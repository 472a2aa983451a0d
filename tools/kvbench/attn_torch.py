#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""attn_torch.py: the torch peer of `kvbench attn --gpu`.

Times torch.nn.functional.scaled_dot_product_attention (SDPA) decode on
contiguous K/V for the shapes of kvbench's GPU table, and prints a table in
kvbench's format so that the two can be put side by side:

    build/kvbench attn --gpu
    python3 tools/kvbench/attn_torch.py

What is the same as kvbench (tools/kvbench/bench_attn.c, read at run time
for the shapes and the pass size, so the two cannot drift apart):
  * bf16, head dim 128, 8 KV heads, 32 q heads, one query token per request,
    batch 1..128 x context 1k..32k, batches outer, contexts inner;
  * each shape gets as many layers as make one pass read >= PASS_BYTES
    (256 MiB, several times the H100's 50 MB or H200's 60 MB L2), and every
    pass walks all the layers: what is timed is HBM, not L2;
  * "TB/s" is K+V bytes of one layer (2 x B x 8 x ctx x 128 x 2 bytes) over
    the time per layer; "of copy" divides that by a device-to-device copy
    measured in the same run exactly as kvbench does: 20 cudaMemcpy-style
    copies between two 1 GiB buffers, alternating direction, after one
    untimed copy, host clock around the 20 with a sync after them, counting
    bytes read + bytes written (2 x 1 GiB per copy).
What differs (and is printed): K/V are contiguous [B, 8, ctx, 128] tensors,
not pages; a pass is timed with CUDA events (one CUDA graph of the whole
pass by default, so Python's per-call cost is not timed), and the median
pass is reported, where kvbench takes the mean of its passes by host clock
and launches from C without a graph: on the smallest shapes (a few us per
layer) kvbench can be bound by launches where the graph is not; --eager
times eager calls instead (then Python's per-call cost is in the time).

GQA (32 q heads over 8 KV heads) is done one of these ways (--gqa):
  flag    SDPA(q [B,32,1,128], k/v [B,8,ctx,128], enable_gqa=True)
  expand  k/v repeat_interleave'd to 32 heads outside the timed region
          (SDPA then reads 4x the bytes; TB/s still counts the cache's)
  fold    q viewed as [B, 8, 4, 128]: the 4 q heads of a KV head become
          4 query rows of one head (exact for decode, reads K/V once)
  math    explicit softmax(q k^T * scale) v with q folded as above
  auto    flag where this torch has enable_gqa (>= 2.5), else expand
Torch < 2.0 has no SDPA: every variant then runs the math path, labelled
so, and only with --device cpu (a smoke test, not a measurement).

--extend adds a prefill table on kvbench's extend shapes (ext_news x
ext_prefixes of bench_attn.c): one request of NEW query tokens over a cached
PREFIX, causal aligned to the end (causal_lower_right, or an explicit mask
on torch without it; is_causal when the prefix is 0), GQA as "flag" where
torch has it, else K/V expanded outside the timed region; TFLOP/s counts
FLOP = 4 x D x q heads x keys each new token sees, as kvbench does.

Exit status: 0 all rows measured and correct; 1 a row failed (error, or
its output differs from an fp32 reference beyond 1e-2 relative); 2 usage;
77 skipped: torch missing, no CUDA device, or no SDPA on a GPU run.
"""

import argparse
import contextlib
import math
import os
import re
import sys
import time

EXIT_SKIP = 77

# Defaults, used only when bench_attn.c cannot be read next to this file.
FALLBACK = {
    "batches": [1, 8, 32, 64, 128],
    "ctxs": [1024, 4096, 16384, 32768],
    "pass_bytes": 256 << 20,
    "dim": 128,
    "n_kv": 8,
    "n_q": 32,
    "ext_news": [1024, 4096, 8192],
    "ext_prefixes": [0, 8192, 32768],
}
QUICK = [(1, 4096), (8, 1024)]  # two rows of the GPU table
COPY_BYTES = 1 << 30
COPY_REPS = 20
TOL_BF16 = 1e-2  # tests/attn/attn_cuda_test.c's bf16 bound, same measure


def read_bench_attn():
    """Shapes and constants from bench_attn.c; (dict, where they came from)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_attn.c")
    try:
        with open(path, encoding="utf-8") as f:
            src = f.read()
    except OSError as e:
        return dict(FALLBACK), "built-in copy (cannot read %s: %s)" % (path, e.strerror)

    def ints(name):
        m = re.search(r"\b%s\[\]\s*=\s*\{([^}]*)\}" % name, src)
        return [int(x) for x in re.findall(r"\d+", m.group(1))] if m else None

    def define(name):
        m = re.search(r"^#define\s+%s\s+(\d+)\b" % name, src, re.M)
        return int(m.group(1)) if m else None

    got = {"batches": ints("gpu_batches"), "ctxs": ints("gpu_ctxs"),
           "dim": define("DIM"), "n_kv": define("N_KV"), "n_q": define("N_Q"),
           "ext_news": ints("ext_news"), "ext_prefixes": ints("ext_prefixes")}
    m = re.search(r"^#define\s+PASS_BYTES\s+\((\d+)ull\s*<<\s*(\d+)\)", src, re.M)
    got["pass_bytes"] = int(m.group(1)) << int(m.group(2)) if m else None
    missing = [k for k, v in got.items() if v is None or v == []]
    if missing:
        for k in missing:
            got[k] = FALLBACK[k]
        return got, "%s, with built-in %s (not found there)" % (path, ", ".join(missing))
    return got, "tools/kvbench/bench_attn.c (gpu_batches x gpu_ctxs, PASS_BYTES)"


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="attn_torch.py",
        description="torch SDPA decode on the shapes of `kvbench attn --gpu`, "
                    "printed as kvbench prints its GPU table.",
        epilog="Exit status: 0 ok; 1 a row failed; 2 usage; 77 skipped (no torch, "
               "no CUDA device, or no SDPA on a GPU run). Smoke test without a GPU: "
               "--device cpu --quick.")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="where to run (default cuda; cpu is a smoke test)")
    p.add_argument("--quick", action="store_true",
                   help="two shapes only: %s" % ", ".join("%dx%d" % s for s in QUICK))
    p.add_argument("--shapes", metavar="BxCTX,...",
                   help="these shapes instead, e.g. 1x32768,64x4096")
    p.add_argument("--gqa", default="auto",
                   help="comma list of auto, flag, expand, fold, math: one table each "
                        "(default auto)")
    p.add_argument("--backend", default="default",
                   choices=["default", "flash", "efficient", "cudnn", "math"],
                   help="force one SDPA backend (default: torch chooses; the choice "
                        "is printed per row)")
    p.add_argument("--eager", action="store_true",
                   help="time eager calls instead of a CUDA graph of each pass")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"],
                   help="element type (default bf16, as kvbench)")
    p.add_argument("--pass-mib", type=int, default=0,
                   help="KV MiB one pass reads at least (default: PASS_BYTES of "
                        "bench_attn.c on cuda, 32 on cpu)")
    p.add_argument("--min-passes", type=int, default=5,
                   help="timed passes per shape, at least (default 5)")
    p.add_argument("--min-time", type=float, default=0.2,
                   help="seconds of timed passes per shape, at least (default 0.2)")
    p.add_argument("--max-passes", type=int, default=200,
                   help="timed passes per shape, at most (default 200)")
    p.add_argument("--copy-mib", type=int, default=COPY_BYTES >> 20,
                   help="buffer size of the copy probe (default 1024, as kvbench)")
    p.add_argument("--no-check", action="store_true",
                   help="skip the fp32 reference check of request 0, layer 0")
    p.add_argument("--extend", action="store_true",
                   help="also time causal prefill over a cached prefix (TFLOP/s) on "
                        "kvbench's extend shapes")
    a = p.parse_args(argv)
    variants = [v.strip() for v in a.gqa.split(",") if v.strip()]
    for v in variants:
        if v not in ("auto", "flag", "expand", "fold", "math"):
            p.error("--gqa: unknown variant '%s'" % v)
    if not variants:
        p.error("--gqa: no variant")
    a.variants = variants
    if a.shapes:
        try:
            a.shape_list = [tuple(int(x) for x in s.lower().split("x"))
                            for s in a.shapes.split(",") if s]
            if any(len(s) != 2 or s[0] < 1 or s[1] < 1 for s in a.shape_list):
                raise ValueError
        except ValueError:
            p.error("--shapes: expected BATCHxCONTEXT,... e.g. 1x32768,64x4096")
    else:
        a.shape_list = None
    if a.min_passes < 1 or a.max_passes < a.min_passes:
        p.error("--min-passes must be >= 1 and <= --max-passes")
    return a


def cuda_times(t, fn, n, sync):
    """n calls of fn, each between a pair of CUDA events: the ms of each."""
    ev = [(t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True))
          for _ in range(n)]
    for e0, e1 in ev:
        e0.record()
        fn()
        e1.record()
    sync()
    return [e0.elapsed_time(e1) for e0, e1 in ev]


def version_tuple(v):
    m = re.match(r"(\d+)\.(\d+)", v)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


class Bench:
    def __init__(self, torch, args, consts):
        self.torch = torch
        self.F = torch.nn.functional
        self.args = args
        self.c = consts
        self.dev = torch.device(args.device)
        self.cuda = args.device == "cuda"
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16,
                      "fp32": torch.float32}[args.dtype]
        self.esize = {"bf16": 2, "fp16": 2, "fp32": 4}[args.dtype]
        self.has_sdpa = hasattr(self.F, "scaled_dot_product_attention")
        self.has_gqa_flag = self.has_sdpa and self._probe_gqa_flag()
        self.group = consts["n_q"] // consts["n_kv"]
        self.scale = 1.0 / math.sqrt(consts["dim"])

    # ---- capabilities ----

    def _probe_gqa_flag(self):
        t = self.torch
        try:
            q = t.zeros(1, 4, 1, 8, device=self.dev)
            k = t.zeros(1, 2, 3, 8, device=self.dev)
            self.F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
            return True
        except TypeError:
            return False
        except RuntimeError:
            # Known argument, refused for these tiny tensors: the flag exists.
            return True

    def resolve(self, variant):
        """(variant actually run, label)."""
        if not self.has_sdpa:
            return "math", ("math: explicit softmax(q k^T * scale) v, q folded to [B, %d, %d, %d] "
                            "(torch %s has no scaled_dot_product_attention; smoke test only)"
                            % (self.c["n_kv"], self.group, self.c["dim"], self.torch.__version__))
        if variant == "auto":
            variant = "flag" if self.has_gqa_flag else "expand"
        if variant == "flag" and not self.has_gqa_flag:
            return None, "flag: this torch (%s) has no enable_gqa" % self.torch.__version__
        d, kv, g, nq = self.c["dim"], self.c["n_kv"], self.group, self.c["n_q"]
        return variant, {
            "flag": "SDPA(q [B,%d,1,%d], k/v [B,%d,ctx,%d], enable_gqa=True)" % (nq, d, kv, d),
            "expand": ("SDPA(q [B,%d,1,%d], k/v repeat_interleave'd to [B,%d,ctx,%d] outside "
                       "the timed region%s; it reads %dx the bytes the table counts)"
                       % (nq, d, nq, d, "" if self.has_gqa_flag else ": no enable_gqa in torch "
                          + self.torch.__version__, g)),
            "fold": ("SDPA(q viewed as [B,%d,%d,%d], k/v [B,%d,ctx,%d]): the %d q heads of a KV "
                     "head as %d query rows" % (kv, g, d, kv, d, g, g)),
            "math": ("math: explicit softmax(q k^T * scale) v in torch ops, q folded to "
                     "[B,%d,%d,%d], softmax in fp32" % (kv, g, d)),
        }[variant]

    def backend_ctx(self):
        name = self.args.backend
        if name == "default" or not self.has_sdpa:
            return contextlib.nullcontext()
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            return sdpa_kernel(getattr(SDPBackend, {
                "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                "cudnn": "CUDNN_ATTENTION", "math": "MATH"}[name]))
        except (ImportError, AttributeError):
            if name == "cudnn":
                raise RuntimeError("--backend cudnn needs torch >= 2.3")
            return self.torch.backends.cuda.sdp_kernel(
                enable_flash=name == "flash", enable_mem_efficient=name == "efficient",
                enable_math=name == "math")

    def chosen_backend(self, variant, q, k, v):
        """The backend SDPA's default dispatch picks for these tensors, or '?'."""
        if variant == "math" or not self.has_sdpa:
            return "math(ops)"
        if self.args.backend != "default":
            return self.args.backend + "(forced)"
        fn = getattr(self.torch, "_fused_sdp_choice", None)
        if fn is None:
            return "?"
        try:
            try:
                r = fn(q, k, v, enable_gqa=variant == "flag")
            except TypeError:
                r = fn(q, k, v)
        except Exception:  # a private API: never fail a row over it
            return "?"
        try:
            from torch.nn.attention import SDPBackend
            return SDPBackend(r).name.lower().replace("_attention", "")
        except Exception:
            return {0: "math", 1: "flash", 2: "efficient", 3: "cudnn",
                    4: "overrideable"}.get(int(r), str(r))

    # ---- pieces ----

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def randn(self, shape):
        t = self.torch
        try:
            return t.randn(shape, device=self.dev, dtype=self.dtype)
        except RuntimeError:
            return t.randn(shape, device=self.dev).to(self.dtype)

    def copy_bw(self):
        """kvbench's gpu_copy_bw(): bytes read + written per second."""
        t = self.torch
        n = self.args.copy_mib << 20
        a = t.empty(n, dtype=t.uint8, device=self.dev)
        b = t.empty(n, dtype=t.uint8, device=self.dev)
        a.fill_(1)
        b.copy_(a)
        self.sync()
        t0 = time.perf_counter_ns()
        for i in range(COPY_REPS):
            dst, src = (a, b) if i % 2 else (b, a)
            dst.copy_(src)
        self.sync()
        ns = time.perf_counter_ns() - t0
        del a, b
        return 2.0 * n * COPY_REPS / ns * 1e9

    def math_attn(self, qf, k, v):
        """softmax(q k^T * scale) v, q already folded to [B, kv, group, D]."""
        t = self.torch
        s = t.matmul(qf, k.transpose(-1, -2)).float() * self.scale
        p = t.softmax(s, dim=-1).to(v.dtype)
        return t.matmul(p, v)

    def ref_request0(self, q, k, v):
        """fp32 reference for request 0: [n_q, D]."""
        d, kv, g = self.c["dim"], self.c["n_kv"], self.group
        qf = q[0].float().reshape(kv, g, d)
        s = self.torch.matmul(qf, k[0].float().transpose(-1, -2)) * self.scale
        o = self.torch.matmul(self.torch.softmax(s, dim=-1), v[0].float())
        return o.reshape(kv * g, d)

    # ---- one row ----

    def row(self, variant, batch, ctx, copy):
        t = self.torch
        d, nkv, nq, g = self.c["dim"], self.c["n_kv"], self.c["n_q"], self.group
        layer_bytes = 2 * nkv * d * self.esize * ctx * batch
        pass_bytes = (self.args.pass_mib << 20) if self.args.pass_mib else \
            (self.c["pass_bytes"] if self.cuda else 32 << 20)
        n_layers = (pass_bytes + layer_bytes - 1) // layer_bytes
        res = {"batch": batch, "ctx": ctx, "layers": n_layers,
               "mib": layer_bytes / 1048576.0}
        q = self.randn((batch, nq, 1, d))
        ks, vs, check = [], [], None

        def kv_tensor(keep):
            # expand: repeat_interleave outside the timed region, one tensor at
            # a time so that only one unexpanded copy is alive at any moment.
            x = self.randn((batch, nkv, ctx, d))
            if keep is not None:
                keep.append(x[:1].clone())
            return x.repeat_interleave(g, dim=1) if variant == "expand" else x

        for layer in range(n_layers):
            keep = [] if layer == 0 and not self.args.no_check else None
            ks.append(kv_tensor(keep))
            vs.append(kv_tensor(keep))
            if keep:
                check = (q.clone(), keep[0], keep[1])
        qin = q.view(batch, nkv, g, d) if variant in ("fold", "math") else q
        F = self.F

        if variant == "math":
            def one(l):
                return self.math_attn(qin, ks[l], vs[l])
        elif variant == "flag":
            def one(l):
                return F.scaled_dot_product_attention(qin, ks[l], vs[l], enable_gqa=True)
        else:
            def one(l):
                return F.scaled_dot_product_attention(qin, ks[l], vs[l])

        def run_pass():
            o = None
            for l in range(n_layers):
                o = one(l)
            return o

        res["backend"] = self.chosen_backend(variant, qin, ks[0], vs[0])
        with self.backend_ctx():
            out0 = one(0)
            self.sync()
            if check is not None:
                ref = self.ref_request0(*check)
                got = out0[0].float().reshape(nq, d)
                res["err"] = float((got - ref).norm() / ref.norm())
            del out0
            run_pass()          # warm up: kernels, workspaces, allocator
            self.sync()
            graph = None
            res["mode"] = "eager"
            if self.cuda and not self.args.eager:
                try:
                    s = t.cuda.Stream()
                    s.wait_stream(t.cuda.current_stream())
                    with t.cuda.stream(s):
                        run_pass()
                    t.cuda.current_stream().wait_stream(s)
                    graph = t.cuda.CUDAGraph()
                    with t.cuda.graph(graph):
                        run_pass()
                    self.sync()
                    res["mode"] = "graph"
                except Exception as e:  # capture refused: time eager calls
                    graph = None
                    res["mode"] = "eager (graph capture failed: %s)" % str(e).splitlines()[0][:60]
                    self.sync()
            step = graph.replay if graph is not None else run_pass
            # One timed pass sizes the loop: >= min-time, min..max passes.
            t0 = time.perf_counter_ns()
            step()
            self.sync()
            est = max(time.perf_counter_ns() - t0, 1) / 1e9
            n = int(min(self.args.max_passes,
                        max(self.args.min_passes, math.ceil(self.args.min_time / est))))
            samples = []
            if self.cuda:
                samples = [ms * 1e6 for ms in cuda_times(t, step, n, self.sync)]  # ns
            else:
                for _ in range(n):
                    t0 = time.perf_counter_ns()
                    step()
                    samples.append(time.perf_counter_ns() - t0)
        samples.sort()
        med = samples[n // 2] if n % 2 else (samples[n // 2 - 1] + samples[n // 2]) / 2
        res["passes"] = n
        res["ns"] = med / n_layers
        res["bw"] = layer_bytes / res["ns"] * 1e9
        res["of_copy"] = res["bw"] / copy
        del graph, ks, vs, q, qin, check
        return res


def ext_flop(c, n_new, prefix):
    """kvbench's ext_flop(): 4 x D x q heads x keys seen, summed over new tokens."""
    return 4.0 * c["dim"] * c["n_q"] * (n_new * prefix + n_new * (n_new + 1) / 2)


def extend_row(b, n_new, prefix):
    """Causal prefill of n_new tokens over prefix cached ones: (us, TFLOP/s, how)."""
    t, F, c = b.torch, b.F, b.c
    d, nkv, nq, g = c["dim"], c["n_kv"], c["n_q"], b.group
    total = prefix + n_new
    q = b.randn((1, nq, n_new, d))
    k = b.randn((1, nkv, total, d))
    v = b.randn((1, nkv, total, d))
    kw, how = {}, []
    if b.has_gqa_flag:
        kw["enable_gqa"] = True
        how.append("enable_gqa")
    else:
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)
        how.append("K/V expanded")
    if prefix == 0:
        kw["is_causal"] = True
        how.append("is_causal")
    else:
        try:
            from torch.nn.attention.bias import causal_lower_right
            kw["attn_mask"] = causal_lower_right(n_new, total)
            how.append("causal_lower_right")
        except ImportError:
            kw["attn_mask"] = None      # set below, once bool_mask() exists
            how.append("bool mask")

    def one():
        return F.scaled_dot_product_attention(q, k, v, **kw)

    def bool_mask():
        i = t.arange(n_new, device=b.dev).unsqueeze(1)
        j = t.arange(total, device=b.dev).unsqueeze(0)
        return j <= i + prefix

    if how[-1] == "bool mask":
        kw["attn_mask"] = bool_mask()

    with b.backend_ctx():
        try:
            one()
        except (TypeError, RuntimeError):
            if how[-1] != "causal_lower_right":
                raise
            kw["attn_mask"] = bool_mask()   # this torch's CausalBias refused the call
            how[-1] = "bool mask"
            one()
        b.sync()
        t0 = time.perf_counter_ns()
        one()
        b.sync()
        est = max(time.perf_counter_ns() - t0, 1) / 1e9
        n = int(min(b.args.max_passes, max(3, math.ceil(b.args.min_time / est))))
        ms = sorted(cuda_times(t, one, n, b.sync))[n // 2]
    del q, k, v, kw
    return ms * 1e3, ext_flop(c, n_new, prefix) / (ms * 1e-3) / 1e12, ", ".join(how)


def extend_table(b, consts):
    """The prefill table; the number of rows that failed."""
    print("#")
    print("# extend: one request, NEW tokens over a cached PREFIX, causal (end-aligned), "
          "eager calls, CUDA events, median; FLOP = 4 x D x q heads x keys seen")
    print("         new   prefix    us/call   TFLOP/s  how")
    failed = 0
    for n_new in consts["ext_news"]:
        for prefix in consts["ext_prefixes"]:
            try:
                us, tf, how = extend_row(b, n_new, prefix)
            except Exception as e:  # one row's failure must not hide the others
                oom = "out of memory" in str(e).lower()
                print("extend %5u  %7u  %s: %s" % (n_new, prefix, "skipped, out of memory"
                                                   if oom else "FAILED",
                                                   str(e).splitlines()[0][:150]))
                failed += 0 if oom else 1
            else:
                print("extend %5u  %7u  %10.1f  %8.2f  %s" % (n_new, prefix, us, tf, how))
            finally:
                b.torch.cuda.empty_cache()
            sys.stdout.flush()
    return failed


def fmt_row(r, cuda):
    bw = r["bw"] / (1e12 if cuda else 1e9)
    err = "%8.1e" % r["err"] if "err" in r else "       -"
    return "%5u  %7u  %6u  %9.1f  %9.1f  %8.3f  %7.0f%%  %s  %s" % (
        r["batch"], r["ctx"], r["layers"], r["mib"], r["ns"] / 1e3, bw,
        100 * r["of_copy"], err, r["backend"])


def main(argv):
    args = parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print("# attn_torch: skipped: cannot import torch (%s)" % e)
        return EXIT_SKIP
    consts, where = read_bench_attn()
    if args.device == "cuda" and not torch.cuda.is_available():
        why = "torch %s built without CUDA" % torch.__version__ \
            if not torch.version.cuda else "torch.cuda.is_available() is False"
        print("# attn_torch: skipped: no CUDA device (%s); exit %d. "
              "A CPU smoke test: --device cpu --quick" % (why, EXIT_SKIP))
        return EXIT_SKIP
    b = Bench(torch, args, consts)
    if not b.has_sdpa and b.cuda:
        print("# attn_torch: skipped: torch %s has no scaled_dot_product_attention "
              "(needs >= 2.0); its math fallback is for --device cpu smoke tests only; "
              "exit %d" % (torch.__version__, EXIT_SKIP))
        return EXIT_SKIP
    if args.shape_list:
        shapes = args.shape_list
    elif args.quick:
        shapes = QUICK
    else:
        shapes = [(bb, cc) for bb in consts["batches"] for cc in consts["ctxs"]]

    if b.cuda:
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        l2 = getattr(p, "L2_cache_size", 0)
        where_run = "%s (sm_%d%d, %d SMs%s)" % (
            p.name, p.major, p.minor, p.multi_processor_count,
            ", %d MB L2" % (l2 // 1000000) if l2 else "")
        unit = "TB/s"
    else:
        where_run = "CPU (%d torch threads)" % torch.get_num_threads()
        unit = "GB/s"
    print("# attn_torch: torch %s%s %s decode on %s, %s, head dim %d, %d KV heads, "
          "%d q heads; contiguous K/V [B, %d, ctx, %d]"
          % (torch.__version__, " (CUDA %s)" % torch.version.cuda if b.cuda else "",
             "SDPA" if b.has_sdpa else "math-path",
             where_run, args.dtype, consts["dim"], consts["n_kv"], consts["n_q"],
             consts["n_kv"], consts["dim"]))
    if not b.has_sdpa:
        print("# NOTE: torch %s has no torch.nn.functional.scaled_dot_product_attention "
              "(added in 2.0): every row runs the explicit math path; smoke test only"
              % torch.__version__)
    pass_bytes = (args.pass_mib << 20) if args.pass_mib else \
        (consts["pass_bytes"] if b.cuda else 32 << 20)
    if args.shape_list:
        what = "shapes from --shapes (%d); constants from %s" % (len(shapes), where)
    else:
        what = "shapes from %s%s" % (where, "; --quick: 2 of them" if args.quick else "")
    print("# %s; a pass reads >= %d MiB (every layer once)" % (what, pass_bytes >> 20))
    print("# timing: %s, %s; median of >= %d passes and >= %g s per shape, / layers"
          % ("CUDA events around each pass" if b.cuda else "host clock around each pass",
             "one CUDA graph per pass" if b.cuda and not args.eager else "eager calls",
             args.min_passes, args.min_time))
    try:
        copy = b.copy_bw()
    except RuntimeError as e:
        print("attn_torch: copy probe failed: %s" % e, file=sys.stderr)
        return 1
    kind = "device" if b.cuda else "host"
    print("# copy: %s-to-%s copy of %d MiB, %d times alternating after one untimed, host "
          "clock with a sync (as kvbench), read + write bytes: %.3f %s"
          % (kind, kind, args.copy_mib, COPY_REPS, copy / (1e12 if b.cuda else 1e9), unit))
    print("# decode %s: K+V bytes of one layer / median time per layer; \"of copy\" = that / "
          "copy; rel err: request 0 of layer 0 vs fp32 (fail > %.0e)" % (unit, TOL_BF16))
    failed = 0
    for variant in args.variants:
        run_as, label = b.resolve(variant)
        print("#")
        print("# gqa %s: %s" % (variant, label))
        if run_as is None:
            print("# (not run)")
            failed += 1
            continue
        print("batch  context  layers  KV MiB/L   us/layer  %8s   of copy   rel err  backend"
              % unit)
        modes = set()
        for bb, cc in shapes:
            try:
                r = b.row(run_as, bb, cc, copy)
            except Exception as e:  # one row's failure must not hide the others
                oom = "out of memory" in str(e).lower()
                print("%5u  %7u  %s: %s" % (bb, cc, "skipped, out of memory" if oom
                                            else "FAILED", str(e).splitlines()[0][:150]))
                failed += 0 if oom else 1
            else:
                bad = r.get("err", 0.0) > TOL_BF16 or r.get("err", 0.0) != r.get("err", 0.0)
                print(fmt_row(r, b.cuda) + ("  WRONG" if bad else ""))
                modes.add(r["mode"])
                failed += 1 if bad else 0
            finally:
                if b.cuda:
                    torch.cuda.empty_cache()
            sys.stdout.flush()
        print("# timed as: %s" % ", ".join(sorted(modes)) if modes else "# no row timed")
    if args.extend and b.cuda and b.has_sdpa:
        failed += extend_table(b, consts)
    elif args.extend:
        print("# extend: not run (needs a CUDA device and SDPA)")
    if failed:
        print("# attn_torch: %d row(s) failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
