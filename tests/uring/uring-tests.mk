# SPDX-License-Identifier: GPL-2.0
#
# io_uring passthrough suite (kselftest harness), run in the test VM:
#
#   build/guest/uring_test   IORING_OP_URING_CMD on /dev/kvshare: parity with
#                            the ioctl path, uring-only errors, SQE races,
#                            io-wq, close and kill -9 with work submitted
#   build/guest/uring_wait_test  LOOKUP with KVS_LOOKUP_WAIT parked until the
#                            claim ends: publish, put, owner killed, claim
#                            timeout (reloads the module), deadline, EBUSY,
#                            the waiter exiting or its ring closed
#
#   build/guest/uring_wait_bench (make vmbench) how soon a waiter holds a
#                            published page: poll()+LOOKUP vs parked LOOKUP
#
# Statically linked against Debian's liburing 2.3 (liburing-dev) for the
# busybox initramfs.  Skips every test where /dev/kvshare is absent.

URING_TEST := $(BUILD)/guest/uring_test
URING_WAIT_TEST := $(BUILD)/guest/uring_wait_test
URING_WAIT_BENCH := $(BUILD)/guest/uring_wait_bench

$(URING_TEST): tests/uring/uring_test.c include/uapi/linux/kvshare.h $(KSFT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(KSFT_DIR) -static -pthread -o $@ tests/uring/uring_test.c -luring

$(URING_WAIT_TEST): tests/uring/uring_wait_test.c tests/uapi/kvs_test.h \
		include/uapi/linux/kvshare.h $(KSFT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(KSFT_DIR) -Itests/uapi -static -pthread -o $@ \
		tests/uring/uring_wait_test.c -luring

$(URING_WAIT_BENCH): tests/uring/uring_wait_bench.c include/uapi/linux/kvshare.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -static -pthread -o $@ tests/uring/uring_wait_bench.c -luring

.PHONY: uring-tests
uring-tests: $(URING_TEST) $(URING_WAIT_TEST) $(URING_WAIT_BENCH)

ALL_TARGETS += $(URING_TEST) $(URING_WAIT_TEST) $(URING_WAIT_BENCH)
GUEST_BINS  += $(URING_TEST) $(URING_WAIT_TEST) $(URING_WAIT_BENCH)
GUEST_TESTS += uring_test uring_wait_test
GUEST_BENCH += uring_wait_bench;
