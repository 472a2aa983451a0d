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
