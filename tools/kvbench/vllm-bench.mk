# SPDX-License-Identifier: GPL-2.0
# make bench: the vLLM connector's (kvshare.vllm) load and save throughput
# at 32 layers x 8 kv heads x 128 x 16 tokens bf16, against a memcpy of
# the same bytes in the same run (tools/kvbench/vllm_bench.py).
BENCH_CMDS  += PYTHONPATH=$(PY_BUILD) $(PYTHON) tools/kvbench/vllm_bench.py;
