# SPDX-License-Identifier: GPL-2.0
# The CPU stand-in for the GPU, kernel half (issue 12; test-only, never
# installed): libkv/attn/cuda_*.cu compiled a second time, as host C++,
# against tests/simt/simt.h, and run by tests/simt/simt.cc's fibers with the
# shared-memory checker.  The kernel units get -fsanitize=thread for its
# instrumentation only: simt.cc defines the hooks, libtsan is not linked.
# The checker finds the kernels' __shared__ arrays in the executable's
# symbol table: never strip these binaries.
#
#   build/tests/simt_selftest           the stand-in's own tests (host suite)
#   build/tests/attn_simt_test          tests/attn/attn_cuda_test.c on the stand-in
#   build/tests/attn_simt_test-drop_barrier, -bad_shuffle
#                                       the same with cuda_extend.cu broken on
#                                       purpose (KV_SIMT_DROP_BARRIER, KV_SIMT_BAD_SHUFFLE)
#   build/tests/attn_simt_test-mutate1 .. -mutate5
#                                       the same with the tensor-core kernels
#                                       broken on purpose (KV_MUTATE=n, see
#                                       libkv/attn/cuda_{decode,extend}_tc.cuh):
#                                       a barrier dropped, a wait_group one
#                                       short, wrong fragment registers
#   build/tests/attn_simt               the host suite: the test under several
#                                       scheduling seeds, then the broken builds,
#                                       which must fail (tests/simt/attn-simt.sh)
#   make simt-full                      also the suite's four heavy cases (~10 min)

SIMT_DIR      := $(BUILD)/simt
SIMT_CXXFLAGS := -std=c++17 -O2 -g -DKV_SIMT -Itests/simt/include -Iinclude -Iinclude/uapi \
                 -Wall -Wextra -Wno-unknown-pragmas
SIMT_KFLAGS   := -fsanitize=thread
SIMT_KOBJS    := $(ATTN_CU_SRCS:libkv/attn/%.cu=$(SIMT_DIR)/%.o)
SIMT_CORE     := $(SIMT_DIR)/simt.o $(SIMT_DIR)/simt_runtime.o
SIMT_TEST_OBJS := $(SIMT_DIR)/attn_simt_test.o $(SIMT_CORE)
SIMT_LDLIBS   := $(LIBKV_ATTN_LDLIBS) -ldl

$(SIMT_DIR)/%.o: libkv/attn/%.cu
	@mkdir -p $(@D)
	$(CXX) $(SIMT_CXXFLAGS) $(SIMT_KFLAGS) $(DEPFLAGS) -x c++ -c -o $@ $<

$(SIMT_DIR)/drop_barrier/cuda_extend.o: libkv/attn/cuda_extend.cu
	@mkdir -p $(@D)
	$(CXX) $(SIMT_CXXFLAGS) $(SIMT_KFLAGS) -DKV_SIMT_DROP_BARRIER $(DEPFLAGS) -x c++ -c -o $@ $<

$(SIMT_DIR)/bad_shuffle/cuda_extend.o: libkv/attn/cuda_extend.cu
	@mkdir -p $(@D)
	$(CXX) $(SIMT_CXXFLAGS) $(SIMT_KFLAGS) -DKV_SIMT_BAD_SHUFFLE $(DEPFLAGS) -x c++ -c -o $@ $<

SIMT_MUTANTS := 1 2 3 4 5

# Both kernel units get the number; each acts only on its own.
$(SIMT_DIR)/mutate%/cuda_decode.o: libkv/attn/cuda_decode.cu
	@mkdir -p $(@D)
	$(CXX) $(SIMT_CXXFLAGS) $(SIMT_KFLAGS) -DKV_MUTATE=$* $(DEPFLAGS) -x c++ -c -o $@ $<

$(SIMT_DIR)/mutate%/cuda_extend.o: libkv/attn/cuda_extend.cu
	@mkdir -p $(@D)
	$(CXX) $(SIMT_CXXFLAGS) $(SIMT_KFLAGS) -DKV_MUTATE=$* $(DEPFLAGS) -x c++ -c -o $@ $<

# The shorter stem makes this rule win over attn_simt_test-% for these names.
$(BUILD)/tests/attn_simt_test-mutate%: $(SIMT_TEST_OBJS) $(SIMT_DIR)/mutate%/cuda_decode.o \
		$(SIMT_DIR)/mutate%/cuda_extend.o $(SIMT_DIR)/cuda_common.o $(LIBKV_ATTN)
	@mkdir -p $(@D)
	$(CXX) -o $@ $(filter %.o,$^) $(LIBKV_ATTN) $(SIMT_LDLIBS)

# The stand-in itself is not instrumented: its hooks would call themselves.
$(SIMT_DIR)/simt.o $(SIMT_DIR)/simt_runtime.o: $(SIMT_DIR)/%.o: tests/simt/%.cc
	@mkdir -p $(@D)
	$(CXX) $(SIMT_CXXFLAGS) $(DEPFLAGS) -c -o $@ $<

$(SIMT_DIR)/simt_selftest.o: tests/simt/simt_selftest.cc
	@mkdir -p $(@D)
	$(CXX) $(SIMT_CXXFLAGS) $(SIMT_KFLAGS) $(DEPFLAGS) -c -o $@ $<

$(BUILD)/tests/simt_selftest: $(SIMT_DIR)/simt_selftest.o $(SIMT_CORE)
	@mkdir -p $(@D)
	$(CXX) -o $@ $^ -lm -ldl

$(SIMT_DIR)/attn_simt_test.o: tests/simt/attn_simt_test.c $(KSFT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(ATTN_TEST_CFLAGS) -Itests/attn $(DEPFLAGS) -c -o $@ $<

$(BUILD)/tests/attn_simt_test: $(SIMT_TEST_OBJS) $(SIMT_KOBJS) $(LIBKV_ATTN)
	@mkdir -p $(@D)
	$(CXX) -o $@ $(SIMT_TEST_OBJS) $(SIMT_KOBJS) $(LIBKV_ATTN) $(SIMT_LDLIBS)

$(BUILD)/tests/attn_simt_test-%: $(SIMT_TEST_OBJS) $(SIMT_DIR)/%/cuda_extend.o \
		$(filter-out %/cuda_extend.o,$(SIMT_KOBJS)) $(LIBKV_ATTN)
	@mkdir -p $(@D)
	$(CXX) -o $@ $(filter %.o,$^) $(LIBKV_ATTN) $(SIMT_LDLIBS)

SIMT_BINS := $(BUILD)/tests/attn_simt_test $(BUILD)/tests/attn_simt_test-drop_barrier \
             $(BUILD)/tests/attn_simt_test-bad_shuffle \
             $(SIMT_MUTANTS:%=$(BUILD)/tests/attn_simt_test-mutate%)

# The suite is a script next to the binaries it runs.
$(BUILD)/tests/attn_simt: tests/simt/attn-simt.sh $(SIMT_BINS)
	@mkdir -p $(@D)
	cp $< $@
	chmod +x $@

.PHONY: simt-full
simt-full: $(BUILD)/tests/attn_simt_test
	KV_SIMT_FULL=1 KV_SIMT_SEED=$${KV_SIMT_SEED:-1} $(BUILD)/tests/attn_simt_test

-include $(SIMT_KOBJS:.o=.d) $(SIMT_TEST_OBJS:.o=.d) $(SIMT_DIR)/simt_selftest.d \
	$(SIMT_DIR)/drop_barrier/cuda_extend.d $(SIMT_DIR)/bad_shuffle/cuda_extend.d \
	$(SIMT_MUTANTS:%=$(SIMT_DIR)/mutate%/cuda_decode.d) \
	$(SIMT_MUTANTS:%=$(SIMT_DIR)/mutate%/cuda_extend.d)

# The fibers' context switch is x86-64 assembly.
ifeq ($(shell uname -m),x86_64)
ALL_TARGETS += $(BUILD)/tests/simt_selftest $(SIMT_BINS) $(BUILD)/tests/attn_simt
HOST_TESTS  += $(BUILD)/tests/simt_selftest $(BUILD)/tests/attn_simt
endif
