# SPDX-License-Identifier: GPL-2.0
# make bench: kvshare as SGLang's HiCache storage backend against SGLang's
# HiCacheFile on tmpfs and a plain memcpy, side by side (issue 19).
BENCH_CMDS  += PYTHONPATH=$(PY_BUILD) $(PYTHON) tools/kvbench/sglang_bench.py;
