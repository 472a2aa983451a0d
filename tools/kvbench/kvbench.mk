# SPDX-License-Identifier: GPL-2.0
#
# kvbench: arbiter timings, natively against $(LIBKVCORE) on the host and,
# in the VM guest (-static), through /dev/kvshare beside the core.
# Included by the top Makefile.

KVBENCH_SRCS := tools/kvbench/kvbench.c tools/kvbench/bench_run.c \
                tools/kvbench/bench_util.c tools/kvbench/bench_report.c \
                tools/kvbench/target_core.c tools/kvbench/target_ioctl.c \
                tools/kvbench/target_libkv.c
# Objects under build/tools/: build/kvbench is the binary's own path.
KVBENCH_OBJS := $(KVBENCH_SRCS:%.c=$(BUILD)/%.o)

$(BUILD)/tools/kvbench/%.o: tools/kvbench/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LIBKV_CFLAGS) $(DEPFLAGS) -c -o $@ $<

$(BUILD)/kvbench: $(KVBENCH_OBJS) $(LIBKVCORE) $(LIBKV)
	$(CC) $(CFLAGS) -o $@ $(KVBENCH_OBJS) $(LIBKV) $(LIBKVCORE) $(LIBKV_LDLIBS) $(LIBKVCORE_LDLIBS)

$(BUILD)/guest/kvbench: $(KVBENCH_OBJS) $(LIBKVCORE) $(LIBKV)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -static -o $@ $(KVBENCH_OBJS) $(LIBKV) $(LIBKVCORE) $(LIBKV_LDLIBS) $(LIBKVCORE_LDLIBS)

-include $(KVBENCH_OBJS:.o=.d)

ALL_TARGETS += $(BUILD)/kvbench $(BUILD)/guest/kvbench
GUEST_BINS  += $(BUILD)/guest/kvbench
BENCH_CMDS  += $(BUILD)/kvbench arbiter;
BENCH_CMDS  += BUILD=$(BUILD) tools/kvbench/bench-daemon.sh;
GUEST_BENCH += kvbench ioctl;
