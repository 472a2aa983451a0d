# SPDX-License-Identifier: GPL-2.0
# kvshared in module mode, in the VM guest.
$(BUILD)/guest/kvshared_module_test: tests/vm-daemon/kvshared_module_test.sh
	@mkdir -p $(@D)
	cp $< $@
	chmod +x $@

# Runs a command as another uid (the guest's busybox cannot for any uid).
$(BUILD)/guest/kvsd_as: tests/vm-daemon/kvsd_as.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -static -o $@ $<

# A client's FUSE descriptor against kvshared's socket, with a FUSE server
# of the test's own that never answers a FLUSH: a hang there costs only the
# guest.  The guest kernel's fuse.ko goes along as /bin/fuse.ko (the test
# loads it), where this host has it.
FUSE_FD_TEST_SRCS := tests/vm-daemon/fuse_fd_test.c tests/vm-daemon/hostile_fuse.c
$(BUILD)/guest/fuse_fd_test: $(FUSE_FD_TEST_SRCS) tests/vm-daemon/hostile_fuse.h tests/send_fds.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -static -pthread -o $@ $(FUSE_FD_TEST_SRCS)

# The same binary: argv[0] picks the attack (fuse_fd_test.c).
$(BUILD)/guest/fuse_drop_test $(BUILD)/guest/fuse_drop_closed_test \
$(BUILD)/guest/fuse_drop_refused_test: $(BUILD)/guest/fuse_fd_test
	cp $< $@

GUEST_FUSE_KO := $(wildcard /lib/modules/$(KVER)/kernel/fs/fuse/fuse.ko)
$(BUILD)/guest/fuse.ko: $(GUEST_FUSE_KO)
	@mkdir -p $(@D)
	cp $< $@

ALL_TARGETS += $(BUILD)/guest/kvshared $(BUILD)/guest/kvshared_module_test \
	       $(BUILD)/guest/kvsd_as $(BUILD)/guest/fuse_fd_test \
	       $(BUILD)/guest/fuse_drop_test $(BUILD)/guest/fuse_drop_closed_test \
	       $(BUILD)/guest/fuse_drop_refused_test \
	       $(if $(GUEST_FUSE_KO),$(BUILD)/guest/fuse.ko)
GUEST_BINS  += $(BUILD)/guest/kvshared $(BUILD)/guest/kvshared_module_test \
	       $(BUILD)/guest/kvsd_as $(BUILD)/guest/fuse_fd_test \
	       $(BUILD)/guest/fuse_drop_test $(BUILD)/guest/fuse_drop_closed_test \
	       $(BUILD)/guest/fuse_drop_refused_test \
	       $(if $(GUEST_FUSE_KO),$(BUILD)/guest/fuse.ko)
GUEST_TESTS += kvshared_module_test fuse_fd_test fuse_drop_test fuse_drop_closed_test \
	       fuse_drop_refused_test

# Debian's redis-server and redis-cli in the guest, for the module-mode
# remote tier's tests: packed as GUEST_DYN_BINS (with the libraries ldd
# finds), copied under build/guest/redis first so that a host without them
# (make setup installs them) builds without them and the suites skip.
# /usr/bin/redis-server is a link to redis-check-rdb: cp -L copies the
# binary, and its name in the guest (argv[0]) makes it the server.
GUEST_REDIS_DIR  := $(BUILD)/guest/redis
GUEST_REDIS_SRCS := $(wildcard /usr/bin/redis-server /usr/bin/redis-cli)
GUEST_REDIS_BINS := $(GUEST_REDIS_SRCS:/usr/bin/%=$(GUEST_REDIS_DIR)/%)

$(GUEST_REDIS_BINS): $(GUEST_REDIS_DIR)/%: /usr/bin/%
	@mkdir -p $(@D)
	cp -L $< $@

$(BUILD)/guest/redis_guest_test: tests/vm-daemon/redis_guest_test.sh
	@mkdir -p $(@D)
	cp $< $@
	chmod +x $@

ALL_TARGETS    += $(GUEST_REDIS_BINS) $(BUILD)/guest/redis_guest_test
GUEST_BINS     += $(BUILD)/guest/redis_guest_test
GUEST_DYN_BINS += $(GUEST_REDIS_BINS)
GUEST_TESTS    += redis_guest_test

# The remote tier in module mode: two kvshared --mode module (the static
# /bin/kvshared, which carries the tier) stand for two hosts on the guest's
# redis-server; kvserve (dynamic, host memory, debug sections stripped:
# the initramfs stays small) is their clients' load on /dev/kvshare.
$(BUILD)/guest/kvserve: $(BUILD)/kvserve
	@mkdir -p $(@D)
	strip --strip-debug -o $@ $<

$(BUILD)/guest/remote_module_test: tests/vm-daemon/remote_module_test.sh
	@mkdir -p $(@D)
	cp $< $@
	chmod +x $@

ALL_TARGETS    += $(BUILD)/guest/kvserve $(BUILD)/guest/remote_module_test
GUEST_BINS     += $(BUILD)/guest/remote_module_test
GUEST_DYN_BINS += $(BUILD)/guest/kvserve
GUEST_TESTS    += remote_module_test

# The crash storm of the module-mode tier: kvshared itself (the static
# /bin/kvshared) killed -9 mid-fetch 1,000 times, its tier to the guest's
# redis-server through a relay of the test's own that holds the fetch.
$(BUILD)/guest/tier_storm_test: tests/vm-daemon/tier_storm_test.c tests/uapi/kvs_test.h \
		tests/uapi/kvs_chan.h $(KSFT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(DEPFLAGS) -I$(KSFT_DIR) -static -pthread -o $@ $<

-include $(BUILD)/guest/tier_storm_test.d

ALL_TARGETS += $(BUILD)/guest/tier_storm_test
GUEST_BINS  += $(BUILD)/guest/tier_storm_test
GUEST_TESTS += tier_storm_test
