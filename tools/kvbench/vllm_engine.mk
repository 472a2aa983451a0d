# SPDX-License-Identifier: GPL-2.0
#
# Real vLLM engines (issue 26), in the engine environment
# (scripts/engine-env.sh):
#   make serve-vllm   the cross-process demo: TTFT of a prompt whose 2k-token
#                     prefix another engine process computed, with and
#                     without kvshare
#   make bench        also runs vllm_engine_bench.py: TTFT recomputed, from
#                     vLLM's own prefix cache, through kvshare, at 2k and 8k

VLLM_ENGINE_BENCH = KVS_BUILD=$(abspath $(BUILD)) "$$(scripts/engine-env.sh)" \
	tools/kvbench/vllm_engine_bench.py

.PHONY: serve-vllm
serve-vllm: $(BUILD)/kvshared
	@$(VLLM_ENGINE_BENCH) --demo --lengths 2048

BENCH_CMDS += $(VLLM_ENGINE_BENCH) --throughput;
