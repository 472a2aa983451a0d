# SPDX-License-Identifier: GPL-2.0
#
# kvshared: the daemon, plain (build/kvshared) and with ASan/UBSan
# (build/san/kvshared, for the daemon's tests).  Included by the top
# Makefile.  The CUDA provider is always compiled against cuda.h and loads
# libcuda.so.1 at run time, so neither build needs a GPU or a driver.

CUDA_INC  ?= /usr/local/cuda/include
# The remote tier (daemon/remote/) lists its own sources and libraries.
include daemon/remote/remote.mk

KVSD_SRCS := daemon/main.c daemon/config.c daemon/server.c daemon/sock_cmd.c \
             daemon/conn.c daemon/accept.c daemon/user.c daemon/pools.c \
             daemon/mem.c daemon/mem_cuda.c daemon/metrics.c daemon/log.c \
             daemon/loop.c daemon/bell.c daemon/closer.c daemon/ring.c \
             daemon/listen.c daemon/chan.c $(KVSD_REMOTE_SRCS)
KVSD_OBJS     := $(KVSD_SRCS:daemon/%.c=$(BUILD)/daemon/%.o)
KVSD_SAN_OBJS := $(KVSD_SRCS:daemon/%.c=$(BUILD)/san/daemon/%.o)
KVSD_LDLIBS   := -ldl $(KVSD_REMOTE_LDLIBS) $(LIBKVCORE_LDLIBS)
# libkv's public headers (kv_layout.h: element sizes) and, of its library,
# only the pool memory creator (kv_pool_memfd(): the linker takes that one
# object); the arbiter core's interface (core/core.h), which kvshared hosts.
KVSD_CFLAGS   := -Iinclude -Icore
# libkv.mk is included after this file: its path, not $(LIBKV), here.
KVSD_LIBKV    := $(BUILD)/libkv.a

# cuda.h is a system header: its own warnings are not ours.
$(BUILD)/daemon/mem_cuda.o $(BUILD)/san/daemon/mem_cuda.o: KVSD_CFLAGS += -isystem $(CUDA_INC)

$(BUILD)/daemon/%.o: daemon/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(KVSD_CFLAGS) $(DEPFLAGS) -c -o $@ $<

$(BUILD)/san/daemon/%.o: daemon/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(SAN_FLAGS) $(KVSD_CFLAGS) $(DEPFLAGS) -c -o $@ $<

$(BUILD)/kvshared: $(KVSD_OBJS) $(LIBKVCORE) $(KVSD_LIBKV)
	$(CC) $(CFLAGS) -o $@ $^ $(KVSD_LDLIBS)

$(BUILD)/san/kvshared: $(KVSD_SAN_OBJS) $(LIBKVCORE_SAN) $(KVSD_LIBKV)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(SAN_FLAGS) -o $@ $^ $(KVSD_LDLIBS)

# A static build for the test VM, where kvshared can run in module mode.
# Not in GUEST_BINS until a VM suite uses it.  (Static glibc warns that
# dlopen and getpwnam need shared libraries at run time: the guest has no
# CUDA anyway, and uid=/gid= there take numbers.)
$(BUILD)/guest/kvshared: $(KVSD_OBJS) $(LIBKVCORE) $(KVSD_LIBKV)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -static -o $@ $^ $(KVSD_LDLIBS)

-include $(KVSD_OBJS:.o=.d) $(KVSD_SAN_OBJS:.o=.d)

ALL_TARGETS += $(BUILD)/kvshared $(BUILD)/san/kvshared
