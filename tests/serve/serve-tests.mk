# SPDX-License-Identifier: GPL-2.0
# The main job as a host test (needs kvshared, kvserve and kvctl built).
$(BUILD)/tests/kvserve_test: tests/serve/kvserve_test.sh $(BUILD)/kvshared $(BUILD)/kvserve $(BUILD)/kvctl
	@mkdir -p $(@D)
	cp $< $@
	chmod +x $@

ALL_TARGETS += $(BUILD)/tests/kvserve_test
HOST_TESTS  += $(BUILD)/tests/kvserve_test
