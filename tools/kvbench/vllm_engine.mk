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

# Row (iv) runs in the LMCache environment (scripts/lmcache-env.sh), built
# here; without it the bench says why (iv) is not run.
BENCH_CMDS += scripts/lmcache-env.sh >/dev/null || \
	echo "warning: scripts/lmcache-env.sh failed: no LMCache row (iv)" >&2;
BENCH_CMDS += $(VLLM_ENGINE_BENCH) --throughput;
