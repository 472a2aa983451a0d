# SPDX-License-Identifier: GPL-2.0
#
# tests/install: `make install DESTDIR=...` / `make uninstall` as a host
# suite (dist/install.mk, dist/install.sh).  Needs what install installs
# built; the module's part runs when kvshare.ko exists (make module) and is
# skipped otherwise.  KVS_TEST_DKMS_BUILD=1 also builds the DKMS tree.
$(BUILD)/tests/install_test: tests/install/install_test.sh $(BUILD)/kvshared $(BUILD)/kvctl $(LIBKV)
	@mkdir -p $(@D)
	cp $< $@
	chmod +x $@

ALL_TARGETS += $(BUILD)/tests/install_test
HOST_TESTS  += $(BUILD)/tests/install_test
