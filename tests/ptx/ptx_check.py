#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""ptx_check.py: the CUDA kernels' performance gates, checked without a GPU.

Issue 20, part 4.  For every kernel instantiation of libkv/attn/cuda_*.cu,
on sm_80 and sm_90, from what the compiler says (the build writes, per arch,
NAME.ptx with `nvcc -ptx` and NAME.ptxas.txt with `ptxas -v` on that PTX,
the Makefile's flags) and from the launches libkv's host code makes
(tests/ptx/launch_probe: the host code compiled for the CPU stand-in, its
launches recorded, nothing run):

  spills        ptxas: spill stores + spill loads = 0 bytes, for every kernel
  occupancy     NVIDIA's calculator (<cuda_occupancy.h>, tests/ptx/occupancy.cc)
                on registers, static + dynamic shared memory, block size and
                launch bounds: resident blocks and warps per SM.  Every kernel
                must fit (>= 1 block); a decode kernel needs >= 32 warps/SM if
                its K/V go through registers, >= 8 with an async (cp.async)
                pipeline
  bytes_ahead   decode: K/V bytes loaded ahead of use per SM, >= 32 KiB for
                H100 (h100) and >= 40 KiB for H200 (h200), on sm_90; see
                "bytes ahead" below
  instr_per_kib decode: main-loop warp-instructions per KiB of K/V <= 100
  int_div       decode and extend: no div/rem on integers in the main loop
  page_load     decode and extend: no K/V load whose address depends on a
                load from global memory in the same main-loop iteration (a
                page-table entry fetched per KV row)
  wave_eff      the decode split plan on the benchmark's grid (batch x
                context of tools/kvbench/bench_attn.c, 132 SMs):
                CTAs / (ceil(CTAs / slots) x slots) >= 0.85, slots = resident
                blocks per SM (occupancy above) x 132

Kernel roles come from the names: "decode" (not "combine") gets every gate,
"extend" or "prefill" the spills, fits, int_div and page_load gates, any
other kernel spills and fits.  The counts are PTX, not SASS: this toolkit
has no cuobjdump/nvdisasm (ptxas's own figures are SASS-level).

The main loop.  A kernel marks its main loop's body with
    asm volatile("// kvshare:main-loop");
(KV_MAIN_LOOP() of libkv/attn/cuda_internal.cuh: nothing in the SASS, as
ptxas drops comments; nothing under the CPU stand-in, -DKV_SIMT).  The main
loop is then the innermost PTX loop (a label and the last branch back to
it) around that marker.  Every decode and extend kernel must carry it (the
main_loop check).  Without a marker (other kernels), the loop holding the
most K/V loads (16-byte global loads and cp.async; of equals the
outermost) is taken, and the table says "heur".
Counts are static: every instruction in the loop's basic blocks, once,
"mov" excluded (register copies, which ptxas mostly folds).
  instructions per KiB = (instructions per thread per iteration x threads / 32)
                         / (K/V bytes a thread loads per iteration x threads / 1024)
                       = instructions x 32 / K/V bytes per thread per iteration.

Bytes ahead.  What is in flight toward the SM before the code that needs it
waits for it, in the steady state of the main loop:
  cp.async: per thread, (cp.async bytes per iteration / commit groups per
    iteration) x N, N the smallest `cp.async.wait_group N` in the loop (0
    for wait_all): N groups stay in flight while the oldest is consumed;
  register loads: a 16-byte global load whose destination is not read in the
    rest of the iteration is a prefetch for the next one: its bytes count;
    a load consumed in the same iteration counts 0;
  per SM = per thread x block size x resident blocks per SM (occupancy).
cp.async.bulk (TMA) is not analysed (counts 0).

Known gaps.  Gates the code on main is known to fail are listed in
tests/ptx/known-gaps.txt, one a line:
    ARCH KERNEL CHECK LIMIT REASON...
ARCH and KERNEL are shell patterns (fnmatch) over "sm_90" and the short
kernel name (or "plan:B=1,ctx=1024"); LIMIT is the worst value accepted.
A plan point below 0.85 that some split could lift to it fails whatever
the list says; only points no split can fill (the checker prints the
arithmetic) may be listed.
A failing gate that an entry covers, within its limit, prints
"ok ... # SKIP known gap"; past its limit it fails (a regression inside a
known gap); an entry that covers no failing gate fails too, so the list
empties as the kernels improve (delete the line).

Output: a table of every number, then TAP (one line per instantiation x
check).  Exit status 1 if any line failed.
  --selftest: the gates on tests/ptx/gate_kernels.cu instead, each of which
  must fail on the kernel built to break it and pass on the good one.
"""

import argparse
import fnmatch
import math
import os
import re
import subprocess
import sys

MARKER = "kvshare:main-loop"
SMS = {80: 108, 90: 132}
AHEAD_GATES = [("h100", 32 << 10), ("h200", 40 << 10)]  # sm_90 only
INSTR_PER_KIB_MAX = 100
WAVE_EFF_MIN = 0.85
TILE_TOKENS = 16     # the finest split: one warp's 16 tokens of a KV tile
WARPS_MIN_SYNC, WARPS_MIN_ASYNC = 32, 8

# ---------------------------------------------------------------- ptxas -v


def parse_ptxas(text):
    """{mangled: {regs, stack, spill_st, spill_ld, smem}} from ptxas -v."""
    out, cur = {}, None
    for line in text.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?([\w$]+)'?",
                      line)
        if m:
            cur = out.setdefault(m.group(1), {"regs": 0, "stack": 0, "spill_st": 0,
                                              "spill_ld": 0, "smem": 0})
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, "
                      r"(\d+) bytes spill loads", line)
        if m:
            cur["stack"], cur["spill_st"], cur["spill_ld"] = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            cur["smem"] = int(s.group(1)) if s else 0
    return out


# ---------------------------------------------------------------- PTX


class Stmt:
    __slots__ = ("op", "args", "pred", "line")

    def __init__(self, op, args, pred, line):
        self.op, self.args, self.pred, self.line = op, args, pred, line


def split_args(s):
    """Operands at the top level (a {vector} or [address] is one)."""
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


REG = re.compile(r"%[a-zA-Z_][\w.]*")


class Func:
    def __init__(self, name):
        self.name = name
        self.maxntid = 0
        self.stmts = []      # Stmt
        self.labels = {}     # label -> statement index
        self.markers = []    # statement indexes of the main-loop marker


def parse_ptx(text):
    """{mangled: Func} for every .entry of a PTX file."""
    funcs, f = {}, None
    for raw in text.splitlines():
        if f is None:
            m = re.match(r"\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([\w$]+)", raw)
            if m:
                f = funcs[m.group(1)] = Func(m.group(1))
            continue
        if raw.startswith("}"):
            f = None
            continue
        if MARKER in raw:
            f.markers.append(len(f.stmts))
        m = re.match(r"\s*\.maxntid\s+(\d+)\s*,\s*(\d+)\s*,\s*(\d+)", raw)
        if m:
            f.maxntid = int(m.group(1)) * int(m.group(2)) * int(m.group(3))
            continue
        line = raw.split("//", 1)[0].strip()
        if not line:
            continue
        m = re.match(r"^([$\w]+):$", line)
        if m:
            f.labels[m.group(1)] = len(f.stmts)
            continue
        for part in line.split(";"):
            part = part.strip().strip("{}").strip()
            if not part or part.startswith("."):
                continue
            pred = None
            m = re.match(r"^@(!?%[\w]+)\s+(.*)$", part)
            if m:
                pred, part = m.group(1), m.group(2)
            toks = part.split(None, 1)
            f.stmts.append(Stmt(toks[0], split_args(toks[1]) if len(toks) > 1 else [],
                                pred, raw))
    return funcs


def loops(f):
    """[(start, end)]: a label and the last branch back to it (inclusive)."""
    back = {}
    for i, s in enumerate(f.stmts):
        if s.op.startswith("bra") and s.args:
            t = f.labels.get(s.args[0])
            if t is not None and t <= i:
                back[t] = max(back.get(t, i), i)
    return sorted(back.items())


GLD = re.compile(r"^ld\.global(?:\.[\w:]+)*?(?:\.v(\d))?\.([busf])(\d+)$")


def kv_load_bytes(s):
    """Bytes a K/V load moves (16-byte-class vector load or cp.async), else 0."""
    if s.op.startswith("cp.async.") and ".shared" in s.op and ".global" in s.op \
            and "bulk" not in s.op:
        try:
            return int(s.args[2])
        except (IndexError, ValueError):
            return 16
    m = GLD.match(s.op)
    if m and m.group(1):
        return int(m.group(1)) * int(m.group(3)) // 8
    return 0


def is_scalar_global_load(s):
    m = GLD.match(s.op)
    return bool(m) and not m.group(1)


def regs_of(arg):
    return REG.findall(arg)


NO_DEST = ("st.", "cp.async", "bar", "bra", "ret", "exit", "red.", "prefetch", "membar",
           "fence", "barrier", "mbarrier.arrive", "griddepcontrol", "wmma.store")


def dest_and_srcs(s):
    if not s.args or s.op.startswith(NO_DEST):
        return [], [r for a in s.args for r in regs_of(a)]
    return regs_of(s.args[0]), [r for a in s.args[1:] for r in regs_of(a)]


def address_regs(s):
    """Registers forming the global address of a K/V load."""
    args = s.args[1:2] if s.op.startswith("cp.async") else s.args[1:]
    return [r for a in args if a.startswith("[") for r in regs_of(a)]


def analyse_loop(f):
    """Main-loop figures of a function, or None when it has no K/V loop."""
    ls = loops(f)
    if not ls:
        return None
    method = "marker"
    inside = [(a, b) for a, b in ls if any(a <= m <= b for m in f.markers)]
    if inside:
        a, b = min(inside, key=lambda r: r[1] - r[0])
    else:
        method = "heuristic"
        # Most K/V loads; of equals, the outermost (a loop nested in the
        # main one holds some of its loads, never more).
        scored = [(sum(1 for s in f.stmts[x:y + 1] if kv_load_bytes(s)), y - x, x, y)
                  for x, y in ls]
        best = max(scored)
        if best[0] == 0:
            return None
        a, b = best[2], best[3]
    body = f.stmts[a:b + 1]
    nested = any(a <= x and y <= b and (x, y) != (a, b) for x, y in ls)
    r = {"method": method, "nested": nested, "instr": 0, "kv_bytes": 0, "async_bytes": 0, "commits": 0,
         "wait": None, "prefetch_bytes": 0, "int_div": 0, "scalar_gld": 0,
         "dep_kv_loads": 0, "kv_loads": 0, "shfl": 0, "ex2": 0, "mma": 0, "bra": 0}
    tainted = set()
    for i, s in enumerate(body):
        op = s.op
        if not op.startswith("mov"):
            r["instr"] += 1
        nb = kv_load_bytes(s)
        dest, srcs = dest_and_srcs(s)
        if nb:
            r["kv_bytes"] += nb
            r["kv_loads"] += 1
            if any(x in tainted for x in address_regs(s)):
                r["dep_kv_loads"] += 1
            if op.startswith("cp.async"):
                r["async_bytes"] += nb
            else:
                used = set()
                for t in body[i + 1:]:
                    if not t.op.startswith("mov"):
                        used.update(dest_and_srcs(t)[1])
                if not used.intersection(dest):
                    r["prefetch_bytes"] += nb
        if is_scalar_global_load(s):
            r["scalar_gld"] += 1
            tainted.update(dest)
        elif any(x in tainted for x in srcs):
            tainted.update(dest)
        if re.match(r"^(div|rem)(\.\w+)*\.[su](16|32|64)$", op):
            r["int_div"] += 1
        if op == "cp.async.commit_group":
            r["commits"] += 1
        if op.startswith("cp.async.wait_group"):
            n = int(s.args[0]) if s.args and s.args[0].isdigit() else 0
            r["wait"] = n if r["wait"] is None else min(r["wait"], n)
        if op.startswith("cp.async.wait_all"):
            r["wait"] = 0
        r["shfl"] += op.startswith("shfl")
        r["ex2"] += op.startswith("ex2")
        r["mma"] += op.startswith(("mma", "wgmma"))
        r["bra"] += op.startswith("bra")
    groups = max(r["commits"], 1)
    ahead = r["async_bytes"] * (r["wait"] or 0) / groups if r["wait"] is not None else 0
    r["ahead_thread"] = ahead + r["prefetch_bytes"]
    r["instr_per_kib"] = r["instr"] * 32 / r["kv_bytes"] if r["kv_bytes"] else math.inf
    return r


# ---------------------------------------------------------------- names


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                             text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return dict(zip(names, names))
    short = {}
    for n, d in zip(names, out):
        d = re.sub(r"^void ", "", d)
        d = re.sub(r"\(.*\)$", "", d)
        short[n] = d.replace(" ", "")
    return short


def role(short):
    s = short.lower()
    if "combine" in s:
        return "other"
    if "decode" in s:
        return "decode"
    if "extend" in s or "prefill" in s:
        return "extend"
    return "other"


# ---------------------------------------------------------------- probe


def read_bench(path):
    """The GPU table's grid and shape from bench_attn.c."""
    src = open(path, encoding="utf-8").read()

    def arr(name):
        m = re.search(name + r"\[\]\s*=\s*\{([^}]*)\}", src)
        return [int(x) for x in m.group(1).replace(" ", "").split(",") if x]

    def define(name):
        return int(re.search(r"#define\s+" + name + r"\s+(\d+)", src).group(1))

    return {"batches": arr("gpu_batches"), "ctxs": arr("gpu_ctxs"), "dim": define("DIM"),
            "n_kv": define("N_KV"), "n_q": define("N_Q"), "tpp": define("TPP")}


def probe_cases(bench):
    cases = []
    for dt in ("f16", "bf16"):
        for d in (64, 128, 256):
            for g in (1, 2, 4, 8):
                cases.append("decode cov-%s-%d-%d %s %d 2 %d 2 2048 16" % (dt, d, g, dt, d, 2 * g))
                cases.append("extend cov-x-%s-%d-%d %s %d 2 %d 1 256 64 16" % (dt, d, g, dt, d,
                                                                                2 * g))
    for b in bench["batches"]:
        for c in bench["ctxs"]:
            cases.append("decode plan:B=%d,ctx=%d bf16 %d %d %d %d %d %d" % (
                b, c, bench["dim"], bench["n_kv"], bench["n_q"], b, c, bench["tpp"]))
    return cases


def run_probe(probe, cases, resources):
    env = dict(os.environ, PTX_PROBE_RESOURCES=resources)
    p = subprocess.run([probe], input="\n".join(cases) + "\n", capture_output=True,
                       text=True, env=env, timeout=120)
    launches, rets, misses = [], {}, []
    for line in p.stdout.splitlines():
        t = line.split()
        if t[0] == "occupancy-miss":
            misses.append(t[2] if len(t) > 2 else "?")
        elif t[0] == "launch" and len(t) == 10:
            launches.append({"case": t[1], "kernel": t[2], "grid": tuple(map(int, t[3:6])),
                             "block": tuple(map(int, t[6:9])), "dyn": int(t[9])})
        elif t[0] == "ret":
            rets[t[1]] = int(t[2])
    if p.returncode:
        raise RuntimeError("launch_probe exit %d: %s" % (p.returncode, p.stderr.strip()))
    if misses:
        raise RuntimeError("the host code asked the occupancy of kernels ptxas did not "
                           "report: %s" % " ".join(sorted(set(misses))))
    return launches, rets


# ---------------------------------------------------------------- occupancy


def occupancy(occ_tool, queries):
    """[(blocks, warps, limit)] for [(sm, threads, regs, smem, dyn, maxntid)]."""
    if not queries:
        return []
    text = "\n".join(" ".join(map(str, q)) for q in queries) + "\n"
    p = subprocess.run([occ_tool, "--occupancy"], input=text, capture_output=True,
                       text=True, check=True)
    out = []
    for line in p.stdout.splitlines():
        b, w, lim = line.split(None, 2)
        out.append((int(b), int(w), lim))
    return out


def wave_eff(ctas, slots):
    if ctas <= 0 or slots <= 0:
        return 0.0
    return ctas / (math.ceil(ctas / slots) * slots)


# ---------------------------------------------------------------- gates


class Known:
    def __init__(self, path):
        self.entries = []
        if not path:
            return
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            t = line.split(None, 4)
            if len(t) < 4:
                raise SystemExit("%s:%d: want ARCH KERNEL CHECK LIMIT REASON" % (path, n))
            self.entries.append({"arch": t[0], "kernel": t[1], "check": t[2],
                                 "limit": float(t[3]), "why": t[4] if len(t) > 4 else "",
                                 "where": "%s:%d" % (os.path.basename(path), n), "used": 0})

    def find(self, arch, kernel, check):
        for e in self.entries:
            if e["check"] == check and fnmatch.fnmatchcase(arch, e["arch"]) \
                    and fnmatch.fnmatchcase(kernel, e["kernel"]):
                return e
        return None


class Tap:
    def __init__(self, known):
        self.lines, self.failed, self.known = [], 0, known

    def gate(self, arch, kernel, check, value, ok, want, higher_is_worse):
        """One result: value shown, ok per the gate, known gaps applied."""
        shown = fmt(value)
        desc = "%s %s %s: %s (%s)" % (arch, kernel, check, shown, want)
        if ok:
            self.lines.append(("ok", desc, ""))
            return
        e = self.known.find(arch, kernel, check) if self.known else None
        if e:
            e["used"] += 1
            worse = value > e["limit"] * 1.01 if higher_is_worse else value < e["limit"] * 0.99
            if not worse:
                self.lines.append(("ok", desc, " # SKIP known gap (%s: %s)" % (e["where"],
                                                                              e["why"])))
                return
            desc += "; worse than the known gap's %s (%s)" % (fmt(e["limit"]), e["where"])
        self.lines.append(("not ok", desc, ""))
        self.failed += 1

    def plain(self, ok, desc):
        self.lines.append(("ok" if ok else "not ok", desc, ""))
        self.failed += not ok

    def stale(self):
        for e in self.known.entries if self.known else []:
            if not e["used"]:
                self.plain(False, "known gap %s (%s %s %s) covers no failing gate: "
                           "delete it" % (e["where"], e["arch"], e["kernel"], e["check"]))

    def emit(self):
        print("TAP version 13")
        print("1..%d" % len(self.lines))
        for i, (st, d, extra) in enumerate(self.lines, 1):
            print("%s %d %s%s" % (st, i, d, extra))


def fmt(v):
    if isinstance(v, float):
        if math.isinf(v):
            return "inf"
        return "%.2f" % v if v < 10 else "%.0f" % v
    return str(v)


def gate_kernel(tap, arch, sm, short, rl, res, occ, loop):
    """Every check of one instantiation on one arch."""
    spill = res["spill_st"] + res["spill_ld"]
    tap.gate(arch, short, "spills", spill, spill == 0, "bytes, want 0", True)
    blocks, warps = occ[0], occ[1]
    tap.gate(arch, short, "fits", blocks, blocks >= 1, "blocks/SM, want >= 1", False)
    if rl == "other":
        return
    if rl == "decode":
        async_ = loop is not None and loop["async_bytes"] > 0
        need = WARPS_MIN_ASYNC if async_ else WARPS_MIN_SYNC
        tap.gate(arch, short, "warps_per_sm", warps, warps >= need,
                 "want >= %d %s" % (need, "with cp.async" if async_ else
                                    "with K/V through registers"), False)
    if loop is None:
        tap.plain(False, "%s %s main_loop: no K/V main loop found in the PTX" % (arch, short))
        return
    tap.plain(loop["method"] == "marker",
              "%s %s main_loop: found by its KV_MAIN_LOOP() marker (%s)" % (
                  arch, short, loop["method"]))
    tap.gate(arch, short, "int_div", loop["int_div"], loop["int_div"] == 0,
             "div/rem in the main loop, want 0", True)
    tap.gate(arch, short, "page_load", loop["dep_kv_loads"], loop["dep_kv_loads"] == 0,
             "K/V loads addressed through a global load of the same iteration, want 0", True)
    if rl != "decode":
        return
    ipk = loop["instr_per_kib"]
    tap.gate(arch, short, "instr_per_kib", ipk, ipk <= INSTR_PER_KIB_MAX,
             "warp-instr per KiB of K/V, want <= %d" % INSTR_PER_KIB_MAX, True)
    if sm == 90:
        ahead = loop["ahead_sm"]
        for card, need in AHEAD_GATES:
            tap.gate(arch, short, "bytes_ahead_" + card, ahead / 1024.0, ahead >= need,
                     "KiB/SM ahead of use, want >= %d for %s" % (need >> 10, card.upper()),
                     False)


# ---------------------------------------------------------------- main


def load_arch(ptx_dir, sm, srcs):
    ptxas, funcs = {}, {}
    for s in srcs:
        base = os.path.join(ptx_dir, "sm_%d" % sm, s)
        ptxas.update(parse_ptxas(open(base + ".ptxas.txt", encoding="utf-8").read()))
        funcs.update(parse_ptx(open(base + ".ptx", encoding="utf-8").read()))
    return ptxas, funcs


def check(args, tap):
    srcs = args.srcs.split(",")
    archs = [int(a) for a in args.arch.split(",")]
    data = {sm: load_arch(args.ptx_dir, sm, srcs) for sm in archs}
    names = sorted({n for sm in archs for n in data[sm][0]})
    short = demangle(names)

    launches, rets = [], {}
    bench = None
    if args.probe:
        bench = read_bench(args.bench)
        resf = os.path.join(args.ptx_dir, "resources-sm_90.txt")
        with open(resf, "w", encoding="utf-8") as f:
            for n, r in sorted(data[90][0].items() if 90 in data else []):
                mx = data[90][1][n].maxntid if n in data[90][1] else 0
                f.write("%s %d %d %d\n" % (n, r["regs"], r["smem"], mx))
        launches, rets = run_probe(args.probe, probe_cases(bench), resf)
        bad = [c for c, rc in rets.items() if rc != 0]
        tap.plain(not bad and bool(launches),
                  "probe: the host code launched %d kernels over %d cases%s" % (
                      len(launches), len(rets), ", failed: " + " ".join(bad[:5]) if bad else ""))
    cfg = {}
    for l in launches:
        cfg.setdefault(l["kernel"], (l["block"][0] * l["block"][1] * l["block"][2], l["dyn"]))

    rows, gated = [], []
    queries = []
    for sm in archs:
        ptxas, funcs = data[sm]
        for n in names:
            if n not in ptxas:
                continue
            f = funcs.get(n)
            threads, dyn = cfg.get(n, (f.maxntid if f and f.maxntid else 0, 0))
            queries.append((sm, threads or 1, ptxas[n]["regs"], ptxas[n]["smem"], dyn,
                            f.maxntid if f else 0))
            gated.append((sm, n, threads, dyn))
    occs = occupancy(args.occ, queries)
    occ_of = {}
    for (sm, n, threads, dyn), o in zip(gated, occs):
        ptxas, funcs = data[sm]
        res, f = ptxas[n], funcs.get(n)
        if not threads:
            o = (0, 0, "block size unknown (no launch, no .maxntid)")
        occ_of[(sm, n)] = o
        loop = analyse_loop(f) if f else None
        if loop:
            loop["ahead_sm"] = loop["ahead_thread"] * threads * o[0]
        rl = role(short[n])
        rows.append((sm, short[n], rl, res, threads, dyn, o, loop))
        gate_kernel(tap, "sm_%d" % sm, sm, short[n], rl, res, o, loop)

    print_table(rows)
    if bench:
        plan_rows = []
        for l in launches:
            if not l["case"].startswith("plan:") or role(short.get(l["kernel"], l["kernel"])) \
                    != "decode":
                continue
            ctas = l["grid"][0] * l["grid"][1] * l["grid"][2]
            blocks = occ_of.get((90, l["kernel"]), (0,))[0]
            slots = blocks * SMS[90]
            e = wave_eff(ctas, slots)
            plan_rows.append((l["case"], short.get(l["kernel"], l["kernel"]), ctas, blocks,
                              slots, e))
            why = ""
            if e < WAVE_EFF_MIN:
                why = "; " + best_split(l["case"], l["grid"][1], slots)
            if why.startswith("; possible"):
                # A split would do: the plan must, no known gap excuses it.
                tap.plain(False, "sm_90 %s wave_eff: %.2f (%d CTAs on %d slots%s)" % (
                    l["case"], e, ctas, slots, why))
                continue
            tap.gate("sm_90", l["case"], "wave_eff", e, e >= WAVE_EFF_MIN,
                     "%d CTAs on %d slots, want >= %.2f%s" % (ctas, slots, WAVE_EFF_MIN, why),
                     False)
        print_plan(plan_rows, bench)
        tap.plain(len(plan_rows) == len(bench["batches"]) * len(bench["ctxs"]),
                  "plan: one decode launch per grid point (%d of %d)" % (
                      len(plan_rows), len(bench["batches"]) * len(bench["ctxs"])))


def best_split(case, per_req, slots):
    """The best wave efficiency any split of a grid point could reach, as
    arithmetic: each request's per_req blocks (KV heads x q-head blocks)
    split into n chunks, n up to one 16-token tile (a warp's share) each."""
    m = re.match(r"plan:B=(\d+),ctx=(\d+)", case)
    b, ctx = int(m.group(1)), int(m.group(2))
    tiles = -(-ctx // TILE_TOKENS)
    most = b * per_req * tiles
    if most < WAVE_EFF_MIN * slots:
        return ("impossible: %d x %d blocks x %d tiles of %d tokens = %d CTAs at most "
                "< %.2f x %d slots = %d" % (b, per_req, tiles, TILE_TOKENS, most,
                                            WAVE_EFF_MIN, slots, WAVE_EFF_MIN * slots))
    best = max(range(1, tiles + 1), key=lambda n: wave_eff(b * per_req * n, slots))
    e = wave_eff(b * per_req * best, slots)
    return "%s: %d splits (%d CTAs) reach %.2f" % (
        "impossible" if e < WAVE_EFF_MIN else "possible", best, b * per_req * best, e)


def print_table(rows):
    print("# %-6s %-40s %-6s %4s %5s %6s %6s %4s %-13s %5s %-4s %6s %6s %8s %8s %3s %3s %4s %4s"
          % ("arch", "kernel", "role", "regs", "spill", "smem", "dyn", "thr", "blocks/SM",
             "warps", "loop", "instr", "KVB/th", "instr/KiB", "ahead/SM", "div", "pt",
             "shfl", "mma"))
    for sm, name, rl, res, thr, dyn, o, loop in rows:
        lp = loop or {}
        print("# sm_%-3d %-40s %-6s %4d %5d %6d %6d %4d %2d %-10s %5d %-4s %6s %6s %8s %8s %3s "
              "%3s %4s %4s" % (
                  sm, name[:40], rl, res["regs"], res["spill_st"] + res["spill_ld"], res["smem"],
                  dyn, thr, o[0], o[2][:10], o[1],
                  {"marker": "mark", "heuristic": "heur"}.get(lp.get("method"), "-") +
                  ("+" if lp.get("nested") else ""),
                  lp.get("instr", "-"), lp.get("kv_bytes", "-"),
                  fmt(lp["instr_per_kib"]) if loop else "-",
                  "%.1fK" % (lp["ahead_sm"] / 1024.0) if loop else "-",
                  lp.get("int_div", "-"),
                  "%s/%s" % (lp["dep_kv_loads"], lp["kv_loads"]) if loop else "-",
                  lp.get("shfl", "-"), lp.get("mma", "-")))
    print("# columns: smem static bytes, dyn dynamic bytes at launch, thr block size, "
          "instr per thread per main-loop iteration (no mov), KVB/th K/V bytes a thread loads "
          "per iteration, ahead/SM K/V bytes in flight ahead of use per SM, pt K/V loads "
          "addressed through a same-iteration global load / all K/V loads; loop: mark(er) "
          "or heur(istic), + when it holds inner loops (its static counts then take each "
          "inner loop's body once)")


def print_plan(rows, bench):
    print("# decode split plan on %d SMs (bf16, D %d, %d KV / %d q heads, page %d): "
          "CTAs / slots -> wave efficiency" % (SMS[90], bench["dim"], bench["n_kv"],
                                               bench["n_q"], bench["tpp"]))
    by = {r[0]: r for r in rows}
    print("# %7s " % "batch" + " ".join("%18s" % ("ctx %d" % c) for c in bench["ctxs"]))
    for b in bench["batches"]:
        cells = []
        for c in bench["ctxs"]:
            r = by.get("plan:B=%d,ctx=%d" % (b, c))
            cells.append("%18s" % ("%d/%d %.2f" % (r[2], r[4], r[5]) if r else "-"))
        print("# %7d " % b + " ".join(cells))


# ---------------------------------------------------------------- selftest

# Each gate kernel of tests/ptx/gate_kernels.cu, the checks that must fail on it
# (all others that apply must pass).
# (all others that apply must pass).  The bad decode kernels load K/V into
# registers and use them at once, so they fail bytes_ahead as well.
SYNC = {"bytes_ahead_h100", "bytes_ahead_h200"}
SELFTEST = {
    "ptxgate_decode_good": set(),
    "ptxgate_decode_prefetch": set(),
    "ptxgate_decode_div": {"int_div"} | SYNC,
    "ptxgate_decode_page": {"page_load"} | SYNC,
    "ptxgate_decode_sync": {"warps_per_sm"} | SYNC,
    "ptxgate_decode_slow": {"instr_per_kib"} | SYNC,
    "ptxgate_spill": {"spills"},
}


def selftest(args, tap):
    sm = 90
    ptxas = parse_ptxas(open(os.path.join(args.ptx_dir, "gate.ptxas.txt")).read())
    funcs = parse_ptx(open(os.path.join(args.ptx_dir, "gate.ptx")).read())
    short = demangle(sorted(ptxas))
    by_short = {v: k for k, v in short.items()}
    queries, order = [], []
    for want in SELFTEST:
        n = by_short.get(want)
        if n is None:
            tap.plain(False, "selftest: %s not in the gate kernels' PTX" % want)
            continue
        f = funcs[n]
        queries.append((sm, f.maxntid or 128, ptxas[n]["regs"], ptxas[n]["smem"], 0,
                        f.maxntid))
        order.append((want, n))
    for (want, n), o in zip(order, occupancy(args.occ, queries)):
        f, res = funcs[n], ptxas[n]
        loop = analyse_loop(f)
        if loop:
            loop["ahead_sm"] = loop["ahead_thread"] * (f.maxntid or 128) * o[0]
        sub = Tap(None)
        gate_kernel(sub, "sm_90", sm, want, role(want), res, o, loop)
        failed = {re.match(r"sm_90 \S+ (\w+)", d).group(1) for st, d, _ in sub.lines
                  if st == "not ok"}
        for st, d, _ in sub.lines:
            print("# %s: %s %s" % (want, st, d))
        ok = failed == SELFTEST[want]
        tap.plain(ok, "selftest: %s fails exactly %s (failed: %s)" % (
            want, sorted(SELFTEST[want]) or "nothing", sorted(failed) or "nothing"))
        if want == "ptxgate_decode_good" and loop:
            tap.plain(loop["method"] == "marker" and loop["async_bytes"] > 0,
                      "selftest: the marked cp.async loop is found (%s, %d B async/thread)"
                      % (loop["method"], loop["async_bytes"]))
        if want == "ptxgate_decode_prefetch" and loop:
            tap.plain(loop["prefetch_bytes"] == 64 and loop["async_bytes"] == 0,
                      "selftest: the register prefetch counts as ahead of use (%d B/thread)"
                      % loop["prefetch_bytes"])
    # The plan gate on numbers: 32 CTAs on 528 slots fails, 512 passes.
    tap.plain(wave_eff(32, 528) < WAVE_EFF_MIN <= wave_eff(512, 528)
              and abs(wave_eff(576, 528) - 576 / 1056) < 1e-9,
              "selftest: wave efficiency 32/528 = %.2f fails, 512/528 = %.2f passes, "
              "576/528 = %.2f (two waves)" % (wave_eff(32, 528), wave_eff(512, 528),
                                              wave_eff(576, 528)))
    # The proof of a known plan gap: B1/1k cannot fill 0.85 of 792 slots, B1/4k can.
    no, yes = best_split("plan:B=1,ctx=1024", 8, 792), best_split("plan:B=1,ctx=4096", 8, 792)
    tap.plain(no.startswith("impossible: 1 x 8 blocks x 64 tiles") and "= 512 CTAs" in no
              and yes.startswith("possible"),
              "selftest: best split of B1/1k: %s; of B1/4k: %s" % (no, yes))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ptx-dir", required=True, help="build/ptx")
    ap.add_argument("--srcs", default="cuda_common,cuda_decode,cuda_extend")
    ap.add_argument("--arch", default="80,90")
    ap.add_argument("--occ", required=True, help="the occupancy tool (launch_probe)")
    ap.add_argument("--probe", help="tests/ptx/launch_probe binary")
    ap.add_argument("--bench", default="tools/kvbench/bench_attn.c")
    ap.add_argument("--known", help="tests/ptx/known-gaps.txt")
    ap.add_argument("--selftest", action="store_true")
    args = ap.parse_args()
    tap = Tap(None if args.selftest else Known(args.known))
    try:
        if args.selftest:
            selftest(args, tap)
        else:
            check(args, tap)
            tap.stale()
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        tap.plain(False, "ptx_check: %s" % e)
    tap.emit()
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())
