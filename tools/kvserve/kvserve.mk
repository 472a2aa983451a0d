# SPDX-License-Identifier: GPL-2.0
# kvserve: the reference multi-process serving run (the main job).
#
#   build/kvserve              the CUDA entry points stubbed (libkv_cuda_stub):
#                              --memory cuda says it has no kernels
#   build/kvserve-cuda         with the CUDA kernels (libkv_cuda.a, nvcc): built
#                              and in ALL_TARGETS only where nvcc is
#   build/tests/gpu/kvserve-simt  TEST-ONLY, never installed: the kernels as the
#                              CPU stand-in compiles them (tests/simt, race and
#                              illegal-address checks on), for
#                              tests/gpu/kvserve_gpu_test.sh; never strip it
KVSERVE_OBJS := $(BUILD)/tools/kvserve/kvserve.o $(BUILD)/tools/kvserve/worker.o \
                $(BUILD)/tools/kvserve/cache.o \
                $(BUILD)/tools/kvserve/verify.o \
                $(BUILD)/tools/kvserve/report.o $(BUILD)/tools/kvserve/model.o \
                $(BUILD)/tools/kvserve/model_cuda.o $(BUILD)/tools/kvserve/tolerance.o

# -O3 for the model's projections: they are most of a prefill's work.
$(BUILD)/tools/kvserve/model.o: CFLAGS += -O3

$(BUILD)/tools/kvserve/%.o: tools/kvserve/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LIBKV_CFLAGS) $(DEPFLAGS) -c -o $@ $<

$(BUILD)/kvserve: $(KVSERVE_OBJS) $(LIBKV) $(LIBKV_ATTN) $(LIBKV_CUDA_STUB)
	$(CC) $(CFLAGS) -o $@ $^ $(LIBKV_LDLIBS) $(LIBKV_ATTN_LDLIBS)

$(BUILD)/kvserve-cuda: $(KVSERVE_OBJS) $(LIBKV) $(LIBKV_ATTN) $(LIBKV_CUDA)
	$(CC) $(CFLAGS) -o $@ $^ $(LIBKV_LDLIBS) $(LIBKV_ATTN_LDLIBS) $(LIBKV_CUDA_LDLIBS)

ifneq ($(wildcard $(NVCC)),)
ALL_TARGETS += $(BUILD)/kvserve-cuda
endif

# Here rather than in tests/gpu/gpu-tests.mk: it needs the objects of
# tests/simt/simt-tests.mk and of this file, included after that one.
# kvserve-simt-mutate5: the same with the extend kernel kvserve runs (the
# tensor-core one) broken on purpose (KV_MUTATE=5 in tests/simt/simt-tests.mk:
# two 8x8 blocks of a V fragment swapped), which the test must catch.
$(BUILD)/tests/gpu/kvserve-simt: $(KVSERVE_OBJS) $(SIMT_KOBJS) $(SIMT_CORE) $(LIBKV) \
		$(LIBKV_ATTN)
	@mkdir -p $(@D)
	$(CXX) -o $@ $^ $(LIBKV_LDLIBS) $(SIMT_LDLIBS)

$(BUILD)/tests/gpu/kvserve-simt-%: $(KVSERVE_OBJS) $(SIMT_DIR)/%/cuda_extend.o \
		$(filter-out %/cuda_extend.o,$(SIMT_KOBJS)) $(SIMT_CORE) $(LIBKV) $(LIBKV_ATTN)
	@mkdir -p $(@D)
	$(CXX) -o $@ $^ $(LIBKV_LDLIBS) $(SIMT_LDLIBS)

-include $(KVSERVE_OBJS:.o=.d)

ALL_TARGETS += $(BUILD)/kvserve

# The main job: install what is missing, build what it needs, run it.
.PHONY: serve
serve:
	@scripts/setup.sh
	@$(MAKE) --no-print-directory $(BUILD)/kvshared $(BUILD)/kvserve $(BUILD)/kvctl
	@BUILD=$(BUILD) tools/kvserve/run.sh $(SERVE_ARGS)

# Sharing vs --no-share at 1, 2, 4 and 8 workers: table and plot under
# $(BUILD); time to first token under a burst, with and without in-flight
# dedupe.
BENCH_CMDS += BUILD=$(BUILD) tools/kvserve/scale.sh;
BENCH_CMDS += BUILD=$(BUILD) tools/kvserve/burst.sh;

.PHONY: serve-scale
serve-scale:
	@$(MAKE) --no-print-directory $(BUILD)/kvshared $(BUILD)/kvserve $(BUILD)/kvctl
	@BUILD=$(BUILD) tools/kvserve/scale.sh $(SERVE_ARGS)
