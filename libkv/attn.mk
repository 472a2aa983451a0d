# SPDX-License-Identifier: GPL-2.0
#
# Paged attention (issue 6).  Included by the top Makefile (before
# libkv/libkv.mk, so nothing here reads LIBKV_* at parse time).
#
#   build/libkv_attn.a        C reference: CPU backend and test oracle
#   build/san/libkv_attn.a    the same with ASan/UBSan, for its tests
#   build/libkv_cuda.a        CUDA kernels (nvcc, sm_80 + sm_90); link with
#                             $(LIBKV_CUDA_LDLIBS) (static cudart: no .so needed)
#   build/libkv_cuda_stub.a   the CUDA entry points without CUDA (-ENODEV),
#                             for binaries that must not need it (static guest)
#
# The reference is built for any x86-64 (plain -O3), with its inner loops
# built twice more, for AVX2+FMA+F16C and for AVX-512F, and picked at run
# time by CPUID: no -march=native, so a build runs on any CI machine.

LIBKV_ATTN        := $(BUILD)/libkv_attn.a
LIBKV_ATTN_SAN    := $(BUILD)/san/libkv_attn.a
LIBKV_ATTN_LDLIBS := -pthread -lm
ATTN_SRCS := libkv/attn/attn_ref.c libkv/attn/attn_workers.c \
             libkv/attn/ref_kern_base.c
ifeq ($(shell uname -m),x86_64)
ATTN_SRCS += libkv/attn/ref_kern_avx2.c libkv/attn/ref_kern_avx512.c
endif
ATTN_OBJS     := $(ATTN_SRCS:libkv/attn/%.c=$(BUILD)/attn/%.o)
ATTN_SAN_OBJS := $(ATTN_SRCS:libkv/attn/%.c=$(BUILD)/san/attn/%.o)
ATTN_CFLAGS   := -Iinclude -O3

# Per instruction set (target-specific, so plain and sanitized builds get them).
$(BUILD)/attn/ref_kern_avx2.o $(BUILD)/san/attn/ref_kern_avx2.o: \
	ATTN_CFLAGS += -mavx2 -mfma -mf16c
$(BUILD)/attn/ref_kern_avx512.o $(BUILD)/san/attn/ref_kern_avx512.o: \
	ATTN_CFLAGS += -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c \
	-mprefer-vector-width=512

$(BUILD)/attn/%.o: libkv/attn/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(ATTN_CFLAGS) $(DEPFLAGS) -c -o $@ $<

# The inner loops are vector code UBSan does not look into, and its checks
# on their unrolled index arithmetic cost a minute of CI compile time: ASan
# only there (every out-of-bounds read of pool memory is still caught).
ATTN_SAN_FLAGS = $(SAN_FLAGS)
$(BUILD)/san/attn/ref_kern_%.o: ATTN_SAN_FLAGS = -fsanitize=address -fno-omit-frame-pointer \
	-fno-sanitize-recover=all

$(BUILD)/san/attn/%.o: libkv/attn/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(ATTN_SAN_FLAGS) $(ATTN_CFLAGS) $(DEPFLAGS) -c -o $@ $<

$(LIBKV_ATTN): $(ATTN_OBJS)
	@rm -f $@
	$(AR) rcs $@ $^

$(LIBKV_ATTN_SAN): $(ATTN_SAN_OBJS)
	@mkdir -p $(@D)
	@rm -f $@
	$(AR) rcs $@ $^

# ---- CUDA ----
CUDA_HOME   ?= /usr/local/cuda
NVCC        ?= $(CUDA_HOME)/bin/nvcc
NVCC_ARCHS  := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
NVCC_FLAGS  := -O3 -std=c++17 $(NVCC_ARCHS) -lineinfo -Iinclude -Iinclude/uapi \
               -Xcompiler -Wall,-Wextra
LIBKV_CUDA  := $(BUILD)/libkv_cuda.a
LIBKV_CUDA_STUB := $(BUILD)/libkv_cuda_stub.a
LIBKV_CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -pthread -lstdc++
ATTN_CU_SRCS := libkv/attn/cuda_common.cu libkv/attn/cuda_decode.cu \
                libkv/attn/cuda_extend.cu
ATTN_CU_OBJS := $(ATTN_CU_SRCS:libkv/attn/%.cu=$(BUILD)/attn/cuda/%.o)

$(BUILD)/attn/cuda/%.o: libkv/attn/%.cu
	@test -x "$(NVCC)" || { echo "error: nvcc not found at $(NVCC): install the CUDA toolkit" \
		"(NVIDIA's cuda-toolkit-13-0 package, /usr/local/cuda; Debian's nvidia-cuda-toolkit)" \
		"or set NVCC=/path/to/nvcc (CUDA_HOME=...)" >&2; exit 1; }
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -MMD -MP -c -o $@ $<

$(LIBKV_CUDA): $(ATTN_CU_OBJS)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/attn/cuda_stub.o: libkv/attn/cuda_stub.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Iinclude $(DEPFLAGS) -c -o $@ $<

$(LIBKV_CUDA_STUB): $(BUILD)/attn/cuda_stub.o
	@rm -f $@
	$(AR) rcs $@ $^

-include $(ATTN_OBJS:.o=.d) $(ATTN_SAN_OBJS:.o=.d) $(ATTN_CU_OBJS:.o=.d) \
	$(BUILD)/attn/cuda_stub.d

ALL_TARGETS += $(LIBKV_ATTN) $(LIBKV_ATTN_SAN) $(LIBKV_CUDA) $(LIBKV_CUDA_STUB)
