# SPDX-License-Identifier: GPL-2.0
# kvshared in module mode, in the VM guest.
$(BUILD)/guest/kvshared_module_test: tests/vm-daemon/kvshared_module_test.sh
	@mkdir -p $(@D)
	cp $< $@
	chmod +x $@

ALL_TARGETS += $(BUILD)/guest/kvshared $(BUILD)/guest/kvshared_module_test
GUEST_BINS  += $(BUILD)/guest/kvshared $(BUILD)/guest/kvshared_module_test
GUEST_TESTS += kvshared_module_test
