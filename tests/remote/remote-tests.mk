# SPDX-License-Identifier: GPL-2.0
# The remote tier end to end: real redis-server processes (one server, a
# 3-master cluster with replicas, a TLS server) and two kvshared hosts.
$(BUILD)/tests/remote_test: tests/remote/remote_test.sh tests/remote/lib.sh \
		$(BUILD)/kvshared $(BUILD)/kvctl $(BUILD)/kvserve $(BUILD)/tests/remote_lookup_storm
	@mkdir -p $(@D)
	cp $< $@
	chmod +x $@

ALL_TARGETS += $(BUILD)/tests/remote_test
HOST_TESTS  += $(BUILD)/tests/remote_test

# make bench: the tier's fetches and writes beside a plain pipelined
# hiredis loop of the same values (tier_bench); a 256-page chain against
# the local arbiter and recomputing; two hosts' prefill with and without
# the tier.
BENCH_CMDS  += BUILD=$(BUILD) tests/remote/remote_bench.sh;

$(BUILD)/tests/remote_tier_bench: tests/remote/tier_bench.c $(LIBKV)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LIBKV_CFLAGS) -o $@ $^ -lhiredis $(LIBKV_LDLIBS)

ALL_TARGETS += $(BUILD)/tests/remote_tier_bench

# The page format and the key slot, without servers.
REMOTE_UNIT_OBJS := $(BUILD)/daemon/remote/page.o $(BUILD)/daemon/remote/cluster.o \
		    $(BUILD)/daemon/remote/conn.o $(BUILD)/daemon/remote/resp.o \
		    $(BUILD)/daemon/remote/mac.o
$(BUILD)/tests/remote_unit_test: tests/remote/remote_unit_test.c $(REMOTE_UNIT_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Idaemon/remote -o $@ $^ $(KVSD_REMOTE_LDLIBS) -pthread

ALL_TARGETS += $(BUILD)/tests/remote_unit_test
HOST_TESTS  += $(BUILD)/tests/remote_unit_test

# A client that misses everything, for the per-uid fetch cap.
$(BUILD)/tests/remote_lookup_storm: tests/remote/lookup_storm.c $(LIBKV)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LIBKV_CFLAGS) -o $@ $^ $(LIBKV_LDLIBS)

ALL_TARGETS += $(BUILD)/tests/remote_lookup_storm

# Remote fetches charged to the uid whose miss started them (daemon/user.h).
$(BUILD)/tests/remote_charge_test: tests/remote/charge_test.sh tests/remote/lib.sh \
		$(BUILD)/san/kvshared $(BUILD)/kvshared $(BUILD)/kvserve \
		$(BUILD)/tests/remote_lookup_storm
	@mkdir -p $(@D)
	cp $< $@
	chmod +x $@

ALL_TARGETS += $(BUILD)/tests/remote_charge_test
HOST_TESTS  += $(BUILD)/tests/remote_charge_test

# Named tiers turned on at run time by a pool's owner (KVS_SOCK_REMOTE_TIER).
$(BUILD)/tests/remote_tier_test: tests/remote/tier_test.sh tests/remote/lib.sh \
		tests/remote/tier_req.py $(BUILD)/san/kvshared $(BUILD)/kvctl \
		$(BUILD)/kvserve
	@mkdir -p $(@D)
	cp $< $@
	chmod +x $@

ALL_TARGETS += $(BUILD)/tests/remote_tier_test
HOST_TESTS  += $(BUILD)/tests/remote_tier_test

# The tier's RESP reader against the hostile-Redis corpus (tests/remote/corpus).
$(BUILD)/tests/remote_resp_test: tests/remote/resp_test.c $(BUILD)/daemon/remote/resp.o
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Idaemon/remote -o $@ $^

ALL_TARGETS += $(BUILD)/tests/remote_resp_test
HOST_TESTS  += $(BUILD)/tests/remote_resp_test

# A hostile or slow store never hurts a host: the corpus from a fake Redis,
# a slow honest one, a MOVED storm, a port that wraps, escaped words.
$(BUILD)/tests/remote_hostile_test: tests/remote/hostile_test.sh tests/remote/lib.sh \
		tests/remote/hostile_redis.py $(wildcard tests/remote/corpus/*) \
		$(BUILD)/tests/remote_tier_bench \
		$(BUILD)/kvshared $(BUILD)/san/kvshared $(BUILD)/kvserve
	@mkdir -p $(@D)
	cp $< $@
	chmod +x $@

ALL_TARGETS += $(BUILD)/tests/remote_hostile_test
HOST_TESTS  += $(BUILD)/tests/remote_hostile_test

# make bench: the page MAC's cost beside the checksum alone (mac.h).
$(BUILD)/tests/remote_mac_bench: tests/remote/mac_bench.c $(BUILD)/daemon/remote/page.o \
		$(BUILD)/daemon/remote/mac.o
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Idaemon/remote -o $@ $^ $(KVSD_REMOTE_LDLIBS) -pthread

ALL_TARGETS += $(BUILD)/tests/remote_mac_bench
BENCH_CMDS  += $(BUILD)/tests/remote_mac_bench;

# A Redis writer with the tier's password but not its MAC key.
$(BUILD)/tests/remote_forge: tests/remote/forge.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ -lhiredis -lxxhash

ALL_TARGETS += $(BUILD)/tests/remote_forge

# Pages a Redis writer cannot forge (remote_mac_key_file), and key rotation.
$(BUILD)/tests/remote_mac_test: tests/remote/mac_test.sh tests/remote/lib.sh \
		$(BUILD)/san/kvshared $(BUILD)/kvshared $(BUILD)/kvserve \
		$(BUILD)/tests/remote_forge
	@mkdir -p $(@D)
	cp $< $@
	chmod +x $@

ALL_TARGETS += $(BUILD)/tests/remote_mac_test
HOST_TESTS  += $(BUILD)/tests/remote_mac_test

# Run-time tiers remembered across a restart (state_dir).
$(BUILD)/tests/remote_state_test: tests/remote/state_test.sh tests/remote/lib.sh \
		$(BUILD)/san/kvshared $(BUILD)/kvshared $(BUILD)/kvctl $(BUILD)/kvserve
	@mkdir -p $(@D)
	cp $< $@
	chmod +x $@

ALL_TARGETS += $(BUILD)/tests/remote_state_test
HOST_TESTS  += $(BUILD)/tests/remote_state_test
