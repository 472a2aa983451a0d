# SPDX-License-Identifier: GPL-2.0
#
# io_uring passthrough suite (kselftest harness), run in the test VM:
#
#   build/guest/uring_test   IORING_OP_URING_CMD on /dev/kvshare: parity with
#                            the ioctl path, uring-only errors, SQE races,
#                            io-wq, close and kill -9 with work submitted
#
# Statically linked against Debian's liburing 2.3 (liburing-dev) for the
# busybox initramfs.  Skips every test where /dev/kvshare is absent.

URING_TEST := $(BUILD)/guest/uring_test

$(URING_TEST): tests/uring/uring_test.c include/uapi/linux/kvshare.h $(KSFT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(KSFT_DIR) -static -pthread -o $@ tests/uring/uring_test.c -luring

.PHONY: uring-tests
uring-tests: $(URING_TEST)

ALL_TARGETS += $(URING_TEST)
GUEST_BINS  += $(URING_TEST)
GUEST_TESTS += uring_test
