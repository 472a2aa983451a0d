#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""gpu_table.py: the GPU run's one table (tools/gpu/gpu-checks.sh prints it last).

Joins `kvbench attn --gpu` (our kernels, the read-only reference kernel, the
device copy) and tools/kvbench/attn_torch.py (torch SDPA on the same shapes,
decode on contiguous K/V and, with --extend, causal prefill) into one table
of decode and extend figures, then the goals of issue 20, met or not:

  decode >= 85% of the read kernel at batch >= 32
  decode >= torch SDPA at every batch x context (its best GQA variant)
  decode at batch 1, 32k context >= 60% of the read kernel
  extend >= 50% of torch SDPA's TFLOP/s on every shape

and beside them the engine copy paths of issue 25 (tools/kvbench/vllm_bench.py
--device cuda): the vLLM connector's load and save between a host pool and
CUDA kv_caches against a pinned copy of the same bytes and torch's pageable
copy_, with the goal

  connector load and save >= 80% of the pinned copy

Usage: gpu_table.py KVBENCH_OUTPUT [ATTN_TORCH_OUTPUT [COPY_OUTPUT]]
(an empty path skips one).  Figures only: the exit status is 0 whenever
kvbench's or the copy bench's output has rows (2 otherwise); the goals are
printed, not asserted.
"""

import re
import sys

NUM = r"([0-9.]+)"


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def parse_kvbench(text):
    k = {"decode": {}, "extend": {}, "read": None, "copy": None, "gpu": "?"}
    m = re.search(r"CUDA decode on (.*?), bf16", text)
    if m:
        k["gpu"] = m.group(1)
    m = re.search(r"read-only kernel.*?: %s TB/s" % NUM, text)
    if m:
        k["read"] = float(m.group(1))
    m = re.search(r"device-to-device cudaMemcpy.*?: %s TB/s" % NUM, text)
    if m:
        k["copy"] = float(m.group(1))
    for line in text.splitlines():
        t = line.split()
        if len(t) >= 7 and t[0] == "decode" and t[1].isdigit():
            k["decode"][(int(t[1]), int(t[2]))] = float(t[6])
        elif len(t) >= 5 and t[0] == "extend" and t[1].isdigit():
            k["extend"][(int(t[1]), int(t[2]))] = float(t[4])
    return k


def parse_torch(text):
    """Best TB/s per decode shape over the GQA variants; TFLOP/s per extend shape."""
    dec, ext, variant = {}, {}, "?"
    for line in text.splitlines():
        m = re.match(r"# gqa (\S+):", line)
        if m:
            variant = m.group(1)
            continue
        t = line.split()
        if len(t) >= 6 and t[0] == "extend" and t[1].isdigit():
            try:
                ext[(int(t[1]), int(t[2]))] = float(t[4])
            except ValueError:
                pass
        elif len(t) >= 6 and t[0].isdigit() and t[1].isdigit() and "WRONG" not in line:
            try:
                bw = float(t[5])
            except ValueError:
                continue
            key = (int(t[0]), int(t[1]))
            if key not in dec or bw > dec[key][0]:
                dec[key] = (bw, variant)
    return dec, ext


def parse_copies(text):
    """vllm_bench.py --device: {what: (ms, GB/s)} and the header's words."""
    rows, where = {}, None
    m = re.search(r"host pool <-> CUDA engine on (.*?): (.*?), median", text)
    if m:
        where = "%s, %s" % (m.group(1), m.group(2))
    for line in text.splitlines():
        t = line.split()
        if len(t) >= 5 and t[0] == "copy" and t[3] == "ms" and t[5:6] == ["GB/s"]:
            try:
                rows[t[1]] = (float(t[2]), float(t[4]))
            except ValueError:
                pass
    return rows, where


def copy_table(rows, where):
    """The engine copy paths and their goal; True when there were rows."""
    if not rows:
        return False
    print("== engine copies (issue 25) on %s" % (where or "?"))
    print("copy  what          ms        GB/s   of pinned")
    for what, base in (("load", "pinned_h2d"), ("save", "pinned_d2h"),
                       ("pinned_h2d", None), ("pinned_d2h", None),
                       ("pageable_h2d", "pinned_h2d"), ("pageable_d2h", "pinned_d2h")):
        if what not in rows:
            continue
        ms, gbs = rows[what]
        ref = rows.get(base) if base else None
        print("copy  %-12s %8.3f  %8.2f  %9s" % (
            what, ms, gbs, "%.0f%%" % (100 * gbs / ref[1]) if ref and ref[1] else "-"))
    return True


def copy_goals(rows):
    for what, base in (("load", "pinned_h2d"), ("save", "pinned_d2h")):
        a, b = rows.get(what), rows.get(base)
        goal("connector %s >= 80%% of the pinned copy (issue 25)" % what,
             None if not a or not b or not b[1] else a[1] / b[1] >= 0.80,
             "%.0f%% (%.2f of %.2f GB/s)" % (100 * a[1] / b[1], a[1], b[1])
             if a and b and b[1] else "no copy figures")


def goal(name, ok, detail):
    state = "n/a" if ok is None else ("met" if ok else "NOT met")
    print("  %-58s %-8s %s" % (name, state, detail))


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    k = parse_kvbench(read(argv[1]))
    tdec, text_ = parse_torch(read(argv[2])) if len(argv) > 2 and argv[2] else ({}, {})
    copies, where = parse_copies(read(argv[3])) if len(argv) > 3 and argv[3] else ({}, None)
    if not k["decode"]:
        print("gpu_table: no decode rows in %s" % argv[1])
        if not copy_table(copies, where):
            return 2
        print("== goals")
        copy_goals(copies)
        return 0
    rd, cp = k["read"], k["copy"]
    print("== GPU figures on %s: read-only kernel %s TB/s, device copy %s TB/s (read + write)"
          % (k["gpu"], rd or "?", cp or "?"))
    print("decode  batch  context  ours TB/s  of read  of copy  torch TB/s  ours/torch  (torch variant)")
    worst_read, worst_torch = None, None
    for (b, c), bw in sorted(k["decode"].items()):
        tb = tdec.get((b, c))
        ratio = bw / tb[0] if tb and tb[0] > 0 else None
        print("decode %6u  %7u  %9.3f  %6s  %6s  %10s  %10s  %s" % (
            b, c, bw, "%.0f%%" % (100 * bw / rd) if rd else "-",
            "%.0f%%" % (100 * bw / cp) if cp else "-",
            "%.3f" % tb[0] if tb else "-", "%.2f" % ratio if ratio else "-",
            tb[1] if tb else ""))
        if rd and b >= 32 and (worst_read is None or bw / rd < worst_read[0]):
            worst_read = (bw / rd, b, c)
        if ratio is not None and (worst_torch is None or ratio < worst_torch[0]):
            worst_torch = (ratio, b, c)
    print("extend    new   prefix  ours TFLOP/s  torch TFLOP/s  ours/torch")
    worst_ext = None
    for (n, p), tf in sorted(k["extend"].items()):
        tt = text_.get((n, p))
        ratio = tf / tt if tt else None
        print("extend %6u  %7u  %12.2f  %13s  %10s" % (
            n, p, tf, "%.2f" % tt if tt else "-", "%.2f" % ratio if ratio else "-"))
        if ratio is not None and (worst_ext is None or ratio < worst_ext[0]):
            worst_ext = (ratio, n, p)
    copy_table(copies, where)
    print("== goals (issue 20)")
    goal("decode >= 85% of the read kernel at batch >= 32",
         None if worst_read is None else worst_read[0] >= 0.85,
         "lowest %.0f%% (batch %d, context %d)" % (100 * worst_read[0], worst_read[1],
                                                   worst_read[2]) if worst_read else "")
    goal("decode >= torch SDPA at every batch x context",
         None if worst_torch is None else worst_torch[0] >= 1.0,
         "lowest %.2fx (batch %d, context %d)" % worst_torch if worst_torch else
         "no torch figures")
    b1 = k["decode"].get((1, 32768))
    goal("decode at batch 1, 32k context >= 60% of the read kernel",
         None if b1 is None or not rd else b1 / rd >= 0.60,
         "%.0f%%" % (100 * b1 / rd) if b1 and rd else "")
    goal("extend >= 50% of torch SDPA's prefill TFLOP/s",
         None if worst_ext is None else worst_ext[0] >= 0.50,
         "lowest %.2fx (%d new over %d)" % worst_ext if worst_ext else "no torch figures")
    if copies:
        copy_goals(copies)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
