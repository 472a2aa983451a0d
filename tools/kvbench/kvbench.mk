# SPDX-License-Identifier: GPL-2.0
#
# kvbench: arbiter timings, natively against $(LIBKVCORE) on the host and,
# in the VM guest (-static), through /dev/kvshare beside the core.
# Included by the top Makefile.

KVBENCH_SRCS := tools/kvbench/kvbench.c tools/kvbench/bench_run.c \
                tools/kvbench/bench_util.c tools/kvbench/bench_report.c \
                tools/kvbench/target_core.c tools/kvbench/target_ioctl.c \
                tools/kvbench/target_libkv.c tools/kvbench/bench_attn.c
KVBENCH_SRCS += tools/kvbench/bench_radix.c
# Objects under build/tools/: build/kvbench is the binary's own path.
KVBENCH_OBJS := $(KVBENCH_SRCS:%.c=$(BUILD)/%.o)

$(BUILD)/tools/kvbench/%.o: tools/kvbench/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LIBKV_CFLAGS) $(DEPFLAGS) -c -o $@ $<

# The native target links the arbiter core and includes its interface.
$(BUILD)/tools/kvbench/target_core.o: LIBKV_CFLAGS += -Icore

# attn --gpu's read-only reference kernel (nvcc, the kernels' flags), and
# its stub for the guest, which has no CUDA.
$(BUILD)/tools/kvbench/bench_read.o: tools/kvbench/bench_read.cu tools/kvbench/bench_read.h
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -MMD -MP -c -o $@ $<

# attn: the C reference, and CUDA (static cudart) on the host, its stub in the guest.
$(BUILD)/kvbench: $(KVBENCH_OBJS) $(BUILD)/tools/kvbench/bench_read.o $(LIBKVCORE) $(LIBKV) \
		$(LIBKV_ATTN) $(LIBKV_CUDA)
	$(CC) $(CFLAGS) -o $@ $(KVBENCH_OBJS) $(BUILD)/tools/kvbench/bench_read.o $(LIBKV) \
		$(LIBKVCORE) $(LIBKV_ATTN) $(LIBKV_CUDA) \
		$(LIBKV_LDLIBS) $(LIBKVCORE_LDLIBS) $(LIBKV_CUDA_LDLIBS) $(LIBKV_ATTN_LDLIBS)

$(BUILD)/guest/kvbench: $(KVBENCH_OBJS) $(BUILD)/tools/kvbench/bench_read_stub.o $(LIBKVCORE) \
		$(LIBKV) $(LIBKV_ATTN) $(LIBKV_CUDA_STUB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -static -o $@ $(KVBENCH_OBJS) $(BUILD)/tools/kvbench/bench_read_stub.o \
		$(LIBKV) $(LIBKVCORE) $(LIBKV_ATTN) \
		$(LIBKV_CUDA_STUB) $(LIBKV_LDLIBS) $(LIBKVCORE_LDLIBS) $(LIBKV_ATTN_LDLIBS)

-include $(KVBENCH_OBJS:.o=.d) $(BUILD)/tools/kvbench/bench_read.d \
	$(BUILD)/tools/kvbench/bench_read_stub.d

ALL_TARGETS += $(BUILD)/kvbench $(BUILD)/guest/kvbench
GUEST_BINS  += $(BUILD)/guest/kvbench
BENCH_CMDS  += $(BUILD)/kvbench arbiter;
BENCH_CMDS  += $(BUILD)/kvbench attn;
BENCH_CMDS  += $(BUILD)/kvbench radix;
BENCH_CMDS  += BUILD=$(BUILD) tools/kvbench/bench-daemon.sh;
GUEST_BENCH += kvbench ioctl;
