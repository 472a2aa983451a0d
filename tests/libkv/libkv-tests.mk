# SPDX-License-Identifier: GPL-2.0
# libkv's client against the module, in the guest (static, with liburing).
$(BUILD)/guest/libkv_client_test: tests/libkv/libkv_client_test.c $(LIBKV) $(KSFT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LIBKV_CFLAGS) -I$(KSFT_DIR) -Wno-sign-compare -Wno-unused-parameter -static \
		-o $@ $< $(LIBKV) $(LIBKV_LDLIBS)

ALL_TARGETS += $(BUILD)/guest/libkv_client_test
GUEST_BINS  += $(BUILD)/guest/libkv_client_test
GUEST_TESTS += libkv_client_test

# Block hashing, on the host.
$(BUILD)/tests/blockhash_test: tests/libkv/blockhash_test.c $(LIBKV) $(KSFT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(SAN_FLAGS) $(LIBKV_CFLAGS) -I$(KSFT_DIR) -Wno-sign-compare \
		-Wno-unused-parameter -o $@ $< $(LIBKV) $(LIBKV_LDLIBS)

ALL_TARGETS += $(BUILD)/tests/blockhash_test
HOST_TESTS  += $(BUILD)/tests/blockhash_test

# Which owner libkv attaches by default, and its checks of pool memory
# before mapping, against a fake kvshared (host; needs root, else skips).
$(BUILD)/tests/libkv_owner_test: tests/libkv/libkv_owner_test.c $(LIBKV) $(KSFT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(SAN_FLAGS) $(LIBKV_CFLAGS) -I$(KSFT_DIR) -Wno-sign-compare \
		-Wno-unused-parameter -o $@ $< $(LIBKV) $(LIBKV_LDLIBS)

ALL_TARGETS += $(BUILD)/tests/libkv_owner_test
HOST_TESTS  += $(BUILD)/tests/libkv_owner_test
