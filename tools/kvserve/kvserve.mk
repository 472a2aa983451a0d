# SPDX-License-Identifier: GPL-2.0
# kvserve: the reference multi-process serving run (the main job).
$(BUILD)/tools/kvserve/%.o: tools/kvserve/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LIBKV_CFLAGS) $(DEPFLAGS) -c -o $@ $<

$(BUILD)/kvserve: $(BUILD)/tools/kvserve/kvserve.o $(LIBKV)
	$(CC) $(CFLAGS) -o $@ $^ $(LIBKV_LDLIBS)

-include $(BUILD)/tools/kvserve/kvserve.d

ALL_TARGETS += $(BUILD)/kvserve

# The main job: install what is missing, build what it needs, run it.
.PHONY: serve
serve:
	@scripts/setup.sh
	@$(MAKE) --no-print-directory $(BUILD)/kvshared $(BUILD)/kvserve $(BUILD)/kvctl
	@BUILD=$(BUILD) tools/kvserve/run.sh $(SERVE_ARGS)
