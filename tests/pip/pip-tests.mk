# SPDX-License-Identifier: GPL-2.0
#
# kvshare installed with pip into a virtual environment (issue 22):
# tests/pip/venv_test.sh builds a wheel of python/ with the venv's pip,
# installs it offline and runs the Python suite against that copy (TAP,
# results/python_venv_test.tap).  It needs what the build-tree suite needs
# (kvshared, kvpy_ref, the CUDA stand-in); the package itself it builds.

$(BUILD)/tests/python_venv_test: tests/pip/venv_test.sh | python-test-deps
	@mkdir -p $(@D)
	printf '#!/bin/sh\n# The pip/venv suite of %s (generated).\nBUILD=$${BUILD:-%s} exec %s/tests/pip/venv_test.sh "$$@"\n' \
		'$(CURDIR)' '$(abspath $(BUILD))' '$(CURDIR)' > $@
	chmod +x $@

ALL_TARGETS += $(BUILD)/tests/python_venv_test
HOST_TESTS  += $(BUILD)/tests/python_venv_test
