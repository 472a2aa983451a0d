# SPDX-License-Identifier: GPL-2.0
#
# tests/daemon: kvshared on the host, with several client processes
# (kselftest harness).  Each test starts its own build/san/kvshared on a
# private socket (tests/daemon/kvd_test.h) and fails if it does not stop
# cleanly (exit 0 after SIGTERM, socket removed, no sanitizer report).
#
#   build/tests/daemon/daemon_test   sharing, kill -9, garbage clients,
#                                    quotas, daemon crash and restart,
#                                    SIGTERM, metrics, and attacks from a
#                                    second uid (caps, stalls, log floods,
#                                    groups, per-user limits, PAGES/CHECK,
#                                    what one uid costs kvshared in RSS)
#   build/tests/daemon/ring_test     the shared ring (equal to the socket,
#                                    crash release, hostile ring clients
#                                    as a second uid) and libkv's call
#                                    deadlines against a SIGSTOPped daemon
#   build/tests/daemon/chan_test     the pool event channel on the socket
#                                    (records, PUT and PUBLISH on it, its
#                                    holder killed, EPERM as a second uid)
#   build/tests/daemon/wait_test     in-flight waits woken through the
#                                    daemon's wait pipe (publish, put,
#                                    owner killed), kv_lookup_wait() on it,
#                                    a stopped daemon, hostile pipe use
#
# tests/daemon/with-kvshared.sh runs any suite against a private daemon;
# tests/uapi/uapi-tests.mk uses it for the uapi suites' daemon variants.

DAEMON_TEST_DIR  := tests/daemon
DAEMON_TEST_BINS := $(BUILD)/tests/daemon/daemon_test $(BUILD)/tests/daemon/ring_test \
                    $(BUILD)/tests/daemon/chan_test \
                    $(BUILD)/tests/daemon/wait_test

$(DAEMON_TEST_BINS): $(BUILD)/tests/daemon/%: $(DAEMON_TEST_DIR)/%.c $(DAEMON_TEST_DIR)/kvd_test.h \
		$(DAEMON_TEST_DIR)/kvd_client.h \
		$(KSFT_HDRS) $(LIBKV) $(BUILD)/san/kvshared $(BUILD)/kvshared
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(SAN_FLAGS) $(LIBKV_CFLAGS) $(DEPFLAGS) -I$(KSFT_DIR) \
		-DKVD_KVSHARED_REL='"$(shell realpath -m --relative-to=$(@D) $(BUILD)/san/kvshared)"' \
		-DKVD_KVSHARED_PLAIN_REL='"$(shell realpath -m --relative-to=$(@D) $(BUILD)/kvshared)"' \
		-o $@ $< $(LIBKV) $(LIBKV_LDLIBS)

-include $(DAEMON_TEST_BINS:=.d)

HOST_TESTS  += $(DAEMON_TEST_BINS)
ALL_TARGETS += $(DAEMON_TEST_BINS)

.PHONY: daemon-tests
daemon-tests: $(DAEMON_TEST_BINS)
