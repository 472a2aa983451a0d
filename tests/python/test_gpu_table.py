# SPDX-License-Identifier: GPL-2.0
"""tools/gpu/gpu_table.py joins what kvbench and attn_torch.py print.

No GPU here: the rows are made with the printf formats read from
tools/kvbench/bench_attn.c and with attn_torch.py's own fmt_row(), so a
change of either output that the joiner no longer reads fails this test.
"""

import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "kvbench"))

import attn_torch  # noqa: E402


def c_format(name):
    """The printf format of bench_attn.c whose text starts with @name."""
    src = open(os.path.join(ROOT, "tools", "kvbench", "bench_attn.c")).read()
    m = re.search(r'printf\("(%s [^"]*)\\n"' % name, src)
    assert m, "no printf(\"%s ...\") in bench_attn.c" % name
    return m.group(1)


def run_table(tmp_path, kvbench, torch):
    a, b = tmp_path / "kvbench.txt", tmp_path / "torch.txt"
    a.write_text(kvbench)
    b.write_text(torch)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gpu", "gpu_table.py"),
                        str(a), str(b)], capture_output=True, text=True)
    return p.returncode, p.stdout


def kvbench_output(decode, extend):
    dec, ext = c_format("decode"), c_format("extend")
    lines = ["# kvbench attn --gpu: CUDA decode on TestGPU (sm_90, 132 SMs), bf16, page 16",
             "# read-only kernel (16-byte loads, folded; the reference): 4.000 TB/s read",
             "# device-to-device cudaMemcpy (read + write): 3.800 TB/s"]
    for (b, c), tbs in decode.items():
        lines.append(dec % (b, c, 2, 128.0, 10.0, tbs, 100 * tbs / 4.0, 100 * tbs / 3.8))
    for (n, p), tf in extend.items():
        lines.append(ext % (n, p, 1000.0, tf))
    return "\n".join(lines) + "\n"


def torch_output(decode, extend):
    lines = ["# gqa fold: SDPA(...)",
             "batch  context  layers  KV MiB/L   us/layer      TB/s   of copy   rel err  backend"]
    for (b, c), tbs in decode.items():
        lines.append(attn_torch.fmt_row({"batch": b, "ctx": c, "layers": 2, "mib": 128.0,
                                         "ns": 1e4, "bw": tbs * 1e12, "of_copy": 0.5,
                                         "err": 1e-3, "backend": "cudnn"}, True))
    for (n, p), tf in extend.items():
        lines.append("extend %5u  %7u  %10.1f  %8.2f  %s" % (n, p, 10.0, tf, "enable_gqa"))
    return "\n".join(lines) + "\n"


def test_goals_met_and_not_met(tmp_path):
    ours = {(32, 4096): 3.6, (128, 4096): 3.9, (1, 32768): 2.5}
    torch = {(32, 4096): 3.5, (128, 4096): 3.8, (1, 32768): 0.3}
    rc, out = run_table(tmp_path, kvbench_output(ours, {(1024, 0): 300.0}),
                        torch_output(torch, {(1024, 0): 500.0}))
    assert rc == 0, out
    # 3.6 / 4.0 = 90% of the read kernel at batch 32: met; 2.5 / 4.0 = 62% at B1/32k: met.
    assert re.search(r"85% of the read kernel at batch >= 32\s+met\s+lowest 90%", out), out
    assert re.search(r"batch 1, 32k context >= 60% of the read kernel\s+met\s+62%", out), out
    assert re.search(r"torch SDPA at every batch x context\s+met", out), out
    assert re.search(r"extend >= 50% of torch SDPA's prefill TFLOP/s\s+met\s+lowest 0.60x", out)
    # The extend row joined ours and torch's.
    assert re.search(r"extend\s+1024\s+0\s+300.00\s+500.00\s+0.60", out), out

    ours[(64, 1024)] = 1.0      # 25% of read, and below torch's 2.0
    torch[(64, 1024)] = 2.0
    rc, out = run_table(tmp_path, kvbench_output(ours, {(1024, 0): 200.0}),
                        torch_output(torch, {(1024, 0): 500.0}))
    assert re.search(r"batch >= 32\s+NOT met\s+lowest 25% \(batch 64, context 1024\)", out), out
    assert re.search(r"every batch x context\s+NOT met\s+lowest 0.50x \(batch 64", out), out
    assert re.search(r"prefill TFLOP/s\s+NOT met\s+lowest 0.40x", out), out


def test_no_torch_figures(tmp_path):
    rc, out = run_table(tmp_path, kvbench_output({(32, 1024): 3.0}, {}), "")
    assert rc == 0
    assert re.search(r"every batch x context\s+n/a\s+no torch figures", out), out
    rc, out = run_table(tmp_path, "# nothing measured\n", "")
    assert rc == 2
