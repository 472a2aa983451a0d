# SPDX-License-Identifier: GPL-2.0
#
# tests/uapi: kselftest-harness suites of the /dev/kvshare ioctl ABI.
# Included by the top Makefile (see its contract).  Each suite is one
# statically linked binary for the VM's /bin; on a machine without
# /dev/kvshare every test reports SKIP and the suite exits 0.
#
# unload_test unloads and reloads kvshare.ko, so it is listed last.

UAPI_TEST_DIR   := tests/uapi
UAPI_TEST_NAMES := arbiter_test bad_input_test proc_test unload_test
UAPI_TEST_BINS  := $(addprefix $(BUILD)/guest/,$(UAPI_TEST_NAMES))

$(UAPI_TEST_BINS): $(BUILD)/guest/%: $(UAPI_TEST_DIR)/%.c $(KSFT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(DEPFLAGS) -I$(KSFT_DIR) -static -pthread -o $@ $< -pthread

-include $(UAPI_TEST_BINS:=.d)

GUEST_BINS  += $(UAPI_TEST_BINS)
GUEST_TESTS += $(UAPI_TEST_NAMES)
ALL_TARGETS += $(UAPI_TEST_BINS)

.PHONY: uapi-tests
uapi-tests: $(UAPI_TEST_BINS)
