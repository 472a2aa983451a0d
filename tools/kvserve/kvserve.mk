# SPDX-License-Identifier: GPL-2.0
# kvserve: the reference multi-process serving run (the main job).
KVSERVE_OBJS := $(BUILD)/tools/kvserve/kvserve.o $(BUILD)/tools/kvserve/model.o

# -O3 for the model's projections: they are most of a prefill's work.
$(BUILD)/tools/kvserve/model.o: CFLAGS += -O3

$(BUILD)/tools/kvserve/%.o: tools/kvserve/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LIBKV_CFLAGS) $(DEPFLAGS) -c -o $@ $<

$(BUILD)/kvserve: $(KVSERVE_OBJS) $(LIBKV) $(LIBKV_ATTN)
	$(CC) $(CFLAGS) -o $@ $^ $(LIBKV_LDLIBS) $(LIBKV_ATTN_LDLIBS)

-include $(KVSERVE_OBJS:.o=.d)

ALL_TARGETS += $(BUILD)/kvserve

# The main job: install what is missing, build what it needs, run it.
.PHONY: serve
serve:
	@scripts/setup.sh
	@$(MAKE) --no-print-directory $(BUILD)/kvshared $(BUILD)/kvserve $(BUILD)/kvctl
	@BUILD=$(BUILD) tools/kvserve/run.sh $(SERVE_ARGS)

# Sharing vs --no-share at 1, 2, 4 and 8 workers: table and plot under
# $(BUILD); time to first token under a burst, with and without in-flight
# dedupe.
BENCH_CMDS += BUILD=$(BUILD) tools/kvserve/scale.sh;
BENCH_CMDS += BUILD=$(BUILD) tools/kvserve/burst.sh;

.PHONY: serve-scale
serve-scale:
	@$(MAKE) --no-print-directory $(BUILD)/kvshared $(BUILD)/kvserve $(BUILD)/kvctl
	@BUILD=$(BUILD) tools/kvserve/scale.sh $(SERVE_ARGS)
