# SPDX-License-Identifier: GPL-2.0
#
# The real engines (issue 26), in the engine environment that
# scripts/engine-env.sh builds (a venv outside the tree: torch 2.x, vLLM
# for the CPU, kvshare pip-installed from python/):
#   engines_test        tests/engines: real vLLM engine processes sharing
#                       prefixes through a real kvshared (test_real_*)
#   python_torch2_test  tests/python again, under the engine environment's
#                       interpreter and torch (the first run, python_test,
#                       is Debian's torch 1.13)
# Each wrapper brings the environment up to date first (seconds when it
# is), so a changed python/ is what the suites test.

ENGINE_ENV := scripts/engine-env.sh

$(BUILD)/tests/engines_test: tests/engines/engines_test.sh | $(BUILD)/kvshared python
	@mkdir -p $(@D)
	printf '#!/bin/sh\n# The engine suite of %s (generated).\nBUILD=$${BUILD:-%s} exec %s/tests/engines/engines_test.sh "$$@"\n' \
		'$(CURDIR)' '$(abspath $(BUILD))' '$(CURDIR)' > $@
	chmod +x $@

$(BUILD)/tests/python_torch2_test: tests/engines/engines_test.sh | python-test-deps
	@mkdir -p $(@D)
	printf '#!/bin/sh\n# tests/python under the engine environment, of %s (generated).\nBUILD=$${BUILD:-%s} exec %s/tests/engines/engines_test.sh --python-suite "$$@"\n' \
		'$(CURDIR)' '$(abspath $(BUILD))' '$(CURDIR)' > $@
	chmod +x $@

.PHONY: engine-env
engine-env:
	@$(ENGINE_ENV) >/dev/null

ALL_TARGETS += $(BUILD)/tests/engines_test $(BUILD)/tests/python_torch2_test
HOST_TESTS  += $(BUILD)/tests/python_torch2_test $(BUILD)/tests/engines_test
