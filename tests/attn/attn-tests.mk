# SPDX-License-Identifier: GPL-2.0
# Paged attention: the C reference against a naive dense attention (ASan +
# UBSan), and the CUDA kernels against the C reference (skips with no GPU).

ATTN_TEST_CFLAGS := -Iinclude -I$(KSFT_DIR) -Wno-sign-compare -Wno-unused-parameter

$(BUILD)/tests/attn_ref_test: tests/attn/attn_ref_test.c tests/attn/attn_test.h \
		$(LIBKV_ATTN_SAN) $(KSFT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(SAN_FLAGS) $(ATTN_TEST_CFLAGS) -o $@ $< $(LIBKV_ATTN_SAN) \
		$(LIBKV_ATTN_LDLIBS)

# No sanitizers: ASan and the CUDA runtime do not mix.
$(BUILD)/tests/attn_cuda_test: tests/attn/attn_cuda_test.c tests/attn/attn_test.h \
		$(LIBKV_CUDA) $(LIBKV_ATTN) $(KSFT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(ATTN_TEST_CFLAGS) -o $@ $< $(LIBKV_CUDA) $(LIBKV_ATTN) \
		$(LIBKV_CUDA_LDLIBS) $(LIBKV_ATTN_LDLIBS)

ALL_TARGETS += $(BUILD)/tests/attn_ref_test $(BUILD)/tests/attn_cuda_test
HOST_TESTS  += $(BUILD)/tests/attn_ref_test $(BUILD)/tests/attn_cuda_test
