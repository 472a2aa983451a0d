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

ALL_TARGETS += $(BUILD)/guest/kvshared $(BUILD)/guest/kvshared_module_test \
	       $(BUILD)/guest/kvsd_as
GUEST_BINS  += $(BUILD)/guest/kvshared $(BUILD)/guest/kvshared_module_test \
	       $(BUILD)/guest/kvsd_as
GUEST_TESTS += kvshared_module_test
