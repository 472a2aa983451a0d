# SPDX-License-Identifier: GPL-2.0
#
# kvctl: the CLI (through libkv: the module or the daemon), for the host (dynamic) and the VM guest (-static),
# and its guest test script.  Included by the top Makefile.

KVCTL_SRCS := tools/kvctl/kvctl.c tools/kvctl/kvctl_args.c \
              tools/kvctl/kvctl_pool.c tools/kvctl/kvctl_pages.c \
              tools/kvctl/kvctl_json.c tools/kvctl/kvctl_user.c
# Objects under build/tools/: build/kvctl is the binary's own path.
KVCTL_OBJS := $(KVCTL_SRCS:%.c=$(BUILD)/%.o)

$(BUILD)/tools/kvctl/%.o: tools/kvctl/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LIBKV_CFLAGS) $(DEPFLAGS) -c -o $@ $<

$(BUILD)/kvctl: $(KVCTL_OBJS) $(LIBKV)
	$(CC) $(CFLAGS) -o $@ $^ $(LIBKV_LDLIBS)

$(BUILD)/guest/kvctl: $(KVCTL_OBJS) $(LIBKV)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -static -o $@ $^ $(LIBKV_LDLIBS)

# The guest runs it as /bin/kvctl_test under busybox sh.
$(BUILD)/guest/kvctl_test: tools/kvctl/kvctl_test.sh
	@mkdir -p $(@D)
	cp $< $@
	chmod +x $@

-include $(KVCTL_OBJS:.o=.d)

ALL_TARGETS += $(BUILD)/kvctl $(BUILD)/guest/kvctl $(BUILD)/guest/kvctl_test
GUEST_BINS  += $(BUILD)/guest/kvctl $(BUILD)/guest/kvctl_test
GUEST_TESTS += kvctl_test
