# SPDX-License-Identifier: GPL-2.0
# libkv: the runtime engines link.  Public headers live in include/kvshare/.
LIBKV        := $(BUILD)/libkv.a
LIBKV_SRCS   := libkv/arbiter.c libkv/arbiter_dev.c libkv/arbiter_sock.c libkv/pool.c \
                libkv/pool_cuda.c libkv/blockhash.c
# The radix tree, its arbiter wiring and request-to-token tables (issue 5).
LIBKV_SRCS   += libkv/radix.c libkv/radix_print.c libkv/prefix.c libkv/req_table.c
LIBKV_OBJS   := $(LIBKV_SRCS:%.c=$(BUILD)/libkv/%.o)
LIBKV_CFLAGS := -Iinclude
LIBKV_LDLIBS := -luring -lcrypto -lxxhash -ldl -pthread

# Device pools load the CUDA driver at run time (dlopen): cuda.h only.
LIBKV_CUDA_INC ?= /usr/local/cuda/include
$(BUILD)/libkv/libkv/pool_cuda.o: LIBKV_CFLAGS += -isystem $(LIBKV_CUDA_INC)

$(BUILD)/libkv/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LIBKV_CFLAGS) $(DEPFLAGS) -c -o $@ $<

$(LIBKV): $(LIBKV_OBJS)
	@rm -f $@
	$(AR) rcs $@ $^

-include $(LIBKV_OBJS:.o=.d)

ALL_TARGETS += $(LIBKV)
