# SPDX-License-Identifier: GPL-2.0
#
# The radix tree, its arbiter wiring, request tables and block hashing
# (issue 5), on the host under ASan/UBSan.  libkv's sources are built once
# more with $(SAN_FLAGS) into $(RADIX_LIBKV_SAN), so the sanitizers see the
# library code and not only the tests.  prefix_test starts its own
# $(BUILD)/san/kvshared per test (socket mode).

RADIX_SAN_SRCS  := $(LIBKV_SRCS)
RADIX_SAN_OBJS  := $(RADIX_SAN_SRCS:%.c=$(BUILD)/san/radix/%.o)
RADIX_LIBKV_SAN := $(BUILD)/san/radix/libkv.a
RADIX_TEST_CFLAGS := $(CFLAGS) $(SAN_FLAGS) $(LIBKV_CFLAGS) -I$(KSFT_DIR) \
                     -Wno-sign-compare -Wno-unused-parameter

$(BUILD)/san/radix/libkv/client/pool_cuda.o: LIBKV_CFLAGS += -isystem $(LIBKV_CUDA_INC)

$(BUILD)/san/radix/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(SAN_FLAGS) $(LIBKV_CFLAGS) $(DEPFLAGS) -c -o $@ $<

$(RADIX_LIBKV_SAN): $(RADIX_SAN_OBJS)
	@rm -f $@
	$(AR) rcs $@ $^

RADIX_TESTS := radix_test radix_model_test blockhash_fast_test prefix_test

$(RADIX_TESTS:%=$(BUILD)/tests/%): $(BUILD)/tests/%: tests/radix/%.c $(RADIX_LIBKV_SAN) $(KSFT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(RADIX_TEST_CFLAGS) $(DEPFLAGS) -o $@ $< $(RADIX_LIBKV_SAN) $(LIBKV_LDLIBS)

# The multi-process suite needs the daemon it starts.
$(BUILD)/tests/prefix_test: | $(BUILD)/san/kvshared

-include $(RADIX_SAN_OBJS:.o=.d) $(RADIX_TESTS:%=$(BUILD)/tests/%.d)

ALL_TARGETS += $(RADIX_TESTS:%=$(BUILD)/tests/%)
HOST_TESTS  += $(RADIX_TESTS:%=$(BUILD)/tests/%)
