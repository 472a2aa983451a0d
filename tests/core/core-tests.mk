# SPDX-License-Identifier: GPL-2.0
#
# Unit tests of the arbiter core (kselftest harness), run in-process on the
# host against the ASan+UBSan build of the core ($(LIBKVCORE_SAN)).
#
#   build/tests/core_cmd_test       pools, permissions, INFO/LIST/STATS/PAGES
#   build/tests/core_page_test      page life cycle, duplicates, eviction, quotas
#   build/tests/core_badinput_test  bad input on every command, EFAULT rollback
#   build/tests/core_user_test      per-user limits, USER_LIMITS, CHECK/PAGES
#                                   rights, undo of CREATE/ATTACH, pool memory
#   build/tests/core_model_test     random traces against a reference model
#   build/tests/core_stress_test    threads racing on one prefix chain
#   build/tests/core_stress_tsan    the same stress, core and test under TSan
#   build/tests/core_peek_test      KVS_LOOKUP_PEEK counts and changes nothing
#   build/tests/core_chan_test      the pool event channel (KVS_IOC_CHAN_OPEN)
#
# Knobs (environment, read by the tests): KVS_MODEL_SEED, KVS_MODEL_STEPS,
# KVS_STRESS_MS, KVS_STRESS_THREADS.

CORE_TESTS_DIR  := tests/core
CORE_TEST_NAMES := core_cmd_test core_page_test core_badinput_test \
                   core_model_test core_stress_test core_user_test \
                   core_inflight_test core_peek_test core_chan_test
CORE_TEST_BINS  := $(addprefix $(BUILD)/tests/,$(CORE_TEST_NAMES))
CORE_TEST_HDRS  := $(CORE_TESTS_DIR)/kt.h tests/open_fds.h include/uapi/linux/kvshare.h core/core.h
# The harness compares int literals with unsigned fields and leaves
# parameters unused: silence those two -Wextra warnings for the tests.
CORE_TEST_CFLAGS = $(CFLAGS) $(SAN_FLAGS) -Wno-sign-compare -Wno-unused-parameter -I$(KSFT_DIR) -I$(CORE_TESTS_DIR) -Icore

$(CORE_TEST_BINS): $(BUILD)/tests/%: $(CORE_TESTS_DIR)/%.c $(CORE_TEST_HDRS) \
		$(KSFT_DIR)/kselftest_harness.h $(KSFT_DIR)/kselftest.h $(LIBKVCORE_SAN)
	@mkdir -p $(@D)
	$(CC) $(CORE_TEST_CFLAGS) -o $@ $< $(LIBKVCORE_SAN) -pthread

# ThreadSanitizer: the stress test and the core compiled together from the
# same sources, in one step (a TSan core cannot share objects with ASan).
CORE_TSAN_BIN    := $(BUILD)/tests/core_stress_tsan
CORE_TSAN_CFLAGS  = $(filter-out -O2,$(CFLAGS)) -O1 $(KVCORE_CFLAGS) $(KVCORE_DEBUG_CFLAGS) -DKVS_USER \
                    -Wno-sign-compare -Wno-unused-parameter \
                    -fsanitize=thread -fno-omit-frame-pointer \
                    -I$(KSFT_DIR) -I$(CORE_TESTS_DIR) -Icore

$(CORE_TSAN_BIN): $(CORE_TESTS_DIR)/core_stress_test.c $(CORE_TEST_HDRS) $(KVCORE_SRCS) \
		$(wildcard core/*.h) $(KSFT_DIR)/kselftest_harness.h $(KSFT_DIR)/kselftest.h
	@mkdir -p $(@D)
	$(CC) $(CORE_TSAN_CFLAGS) -o $@ $(CORE_TESTS_DIR)/core_stress_test.c $(KVCORE_SRCS) -pthread

.PHONY: core-tests
core-tests: $(CORE_TEST_BINS) $(CORE_TSAN_BIN)

HOST_TESTS  += $(CORE_TEST_BINS) $(CORE_TSAN_BIN)
ALL_TARGETS += $(CORE_TEST_BINS) $(CORE_TSAN_BIN)
