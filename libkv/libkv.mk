# SPDX-License-Identifier: GPL-2.0
# libkv: the runtime engines link.  Public headers live in include/kvshare/.
#
#   libkv/client/  the arbiter client and its transports, and pools
#                  (<kvshare/arbiter.h>; arbiter_internal.h is private)
#   libkv/cache/   the cache structures over it: the radix tree
#                  (<kvshare/radix.h>), the arbiter-backed prefix cache
#                  (<kvshare/prefix.h>), request-to-token tables
#                  (<kvshare/req_table.h>) and block keys (<kvshare/blockhash.h>)
#   libkv/attn/    paged attention, its own libraries (libkv/attn.mk)
#
# python/setup.py reads LIBKV_SRCS, LIBKV_LDLIBS and LIBKV_CUDA_INC from
# this file: keep them plain assignments.
LIBKV        := $(BUILD)/libkv.a
LIBKV_SRCS   := libkv/client/arbiter.c libkv/client/arbiter_dev.c \
                libkv/client/arbiter_sock.c libkv/client/pool.c \
                libkv/client/pool_cuda.c libkv/client/memfd.c
LIBKV_SRCS   += libkv/cache/radix.c libkv/cache/radix_print.c libkv/cache/prefix.c \
                libkv/cache/req_table.c libkv/cache/blockhash.c
LIBKV_OBJS   := $(LIBKV_SRCS:%.c=$(BUILD)/libkv/%.o)
LIBKV_CFLAGS := -Iinclude
LIBKV_LDLIBS := -luring -lcrypto -lxxhash -ldl -pthread

# Device pools load the CUDA driver at run time (dlopen): cuda.h only.
LIBKV_CUDA_INC ?= /usr/local/cuda/include
$(BUILD)/libkv/libkv/client/pool_cuda.o: LIBKV_CFLAGS += -isystem $(LIBKV_CUDA_INC)

$(BUILD)/libkv/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LIBKV_CFLAGS) $(DEPFLAGS) -c -o $@ $<

$(LIBKV): $(LIBKV_OBJS)
	@rm -f $@
	$(AR) rcs $@ $^

-include $(LIBKV_OBJS:.o=.d)

ALL_TARGETS += $(LIBKV)
