# SPDX-License-Identifier: GPL-2.0
#
# The docs' links as a host test: tests/docs/doc_links_test.py checks that
# every relative link (and #heading) in the tracked Markdown resolves and
# that nothing outside tests/ names ../shared.  One TAP result per file,
# results/doc_links_test.tap.

$(BUILD)/tests/doc_links_test: tests/docs/doc_links_test.py
	@mkdir -p $(@D)
	printf '#!/bin/sh\n# The docs link check of %s (generated).\nexec /usr/bin/python3 %s/tests/docs/doc_links_test.py %s "$$@"\n' \
		'$(CURDIR)' '$(CURDIR)' '$(CURDIR)' > $@
	chmod +x $@

ALL_TARGETS += $(BUILD)/tests/doc_links_test
HOST_TESTS  += $(BUILD)/tests/doc_links_test
