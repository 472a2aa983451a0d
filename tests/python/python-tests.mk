# SPDX-License-Identifier: GPL-2.0
#
# The Python binding's suite (issue 13): pytest under Debian's
# /usr/bin/python3 against a private kvshared, reported as kselftest TAP,
# one line per pytest test (tests/python/tap_plugin.py).  kvpy_ref drives
# libkv from C with the same inputs, for the equality tests.

$(BUILD)/tests/kvpy_ref: tests/python/kvpy_ref.c $(LIBKV)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LIBKV_CFLAGS) -Wno-unused-parameter $(DEPFLAGS) -o $@ $< $(LIBKV) \
		$(LIBKV_LDLIBS)

-include $(BUILD)/tests/kvpy_ref.d

# What the suite runs: the package, the C reference, the daemon, the CUDA
# driver stand-in (test_device.py).
.PHONY: python-test-deps
python-test-deps: python $(BUILD)/tests/kvpy_ref $(BUILD)/kvshared $(BUILD)/san/kvshared \
	$(CUDASTUB)

# The suite as make test runs it (results/python_test.tap): a wrapper that
# exists only when everything the suite needs was built, so a failed build
# is a failed suite, as for the C suites.
$(BUILD)/tests/python_test: tests/python/python_test.sh | python-test-deps
	@mkdir -p $(@D)
	printf '#!/bin/sh\n# The Python suite of %s (generated).\nBUILD=$${BUILD:-%s} exec %s/tests/python/python_test.sh "$$@"\n' \
		'$(CURDIR)' '$(abspath $(BUILD))' '$(CURDIR)' > $@
	chmod +x $@

ALL_TARGETS += $(BUILD)/tests/kvpy_ref $(BUILD)/tests/python_test
HOST_TESTS  += $(BUILD)/tests/python_test
