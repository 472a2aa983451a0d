# SPDX-License-Identifier: GPL-2.0
#
# tests/gpu in the VM guest: GPU pools in module mode, where kvshare.ko
# carries the driver's handle (issue 12).  Dynamically linked, because the
# daemon and libkv dlopen() the CUDA driver, here the stand-in:
#
#   build/guest/gpu/gpu_pool_test   tests/gpu/gpu_pool_test.c without the
#                                   sanitizers (the guest is slow enough);
#                                   both fixtures run, socket and module mode
#   build/guest/gpu/kvshared_cuda   build/kvshared (dynamic) under a name of
#                                   its own: the guest's /bin/kvshared is the
#                                   static build, which cannot dlopen()
#   build/tests/gpu/libcuda.so.1    the driver stand-in (gpu-tests.mk), in the
#                                   guest's LD_LIBRARY_PATH (GUEST_LIBS)
#   build/guest/gpu/kvserve-simt    build/tests/gpu/kvserve-simt (kvserve
#                                   with the kernels on tests/simt) without
#                                   its debug sections: 0.85 MB less in the
#                                   initramfs; .symtab, which the race
#                                   checker reads, stays
#   build/guest/gpu/kvserve_gpu_vm  tests/gpu/kvserve_gpu_vm.sh: kvserve
#                                   --memory cuda on kvshared_cuda's pool,
#                                   served by kvshare.ko
#
# (This file is included before gpu-tests.mk and tools/kvserve/kvserve.mk:
# the stand-in's and kvserve-simt's paths are spelled out rather than taken
# from their variables.)

GPU_GUEST_DIR   := $(BUILD)/guest/gpu
GPU_GUEST_TEST  := $(GPU_GUEST_DIR)/gpu_pool_test
GPU_GUEST_KVSD  := $(GPU_GUEST_DIR)/kvshared_cuda
GPU_GUEST_STUB  := $(BUILD)/tests/gpu/libcuda.so.1
GPU_GUEST_SERVE := $(GPU_GUEST_DIR)/kvserve-simt
GPU_GUEST_SERVE_TEST := $(GPU_GUEST_DIR)/kvserve_gpu_vm

$(GPU_GUEST_TEST): tests/gpu/gpu_pool_test.c tests/daemon/kvd_test.h $(KSFT_HDRS) $(LIBKV)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LIBKV_CFLAGS) -isystem $(GPU_CUDA_INC) $(DEPFLAGS) \
		-I$(KSFT_DIR) -Wno-sign-compare \
		-DKVD_KVSHARED='"/bin/$(notdir $(GPU_GUEST_KVSD))"' \
		-o $@ $< $(LIBKV) $(LIBKV_LDLIBS)

$(GPU_GUEST_KVSD): $(BUILD)/kvshared
	@mkdir -p $(@D)
	cp $< $@

$(GPU_GUEST_SERVE): $(BUILD)/tests/gpu/kvserve-simt
	@mkdir -p $(@D)
	strip --strip-debug -o $@ $<

$(GPU_GUEST_SERVE_TEST): tests/gpu/kvserve_gpu_vm.sh
	@mkdir -p $(@D)
	cp $< $@
	chmod +x $@

-include $(GPU_GUEST_TEST).d

ALL_TARGETS    += $(GPU_GUEST_TEST) $(GPU_GUEST_KVSD) $(GPU_GUEST_SERVE) \
		  $(GPU_GUEST_SERVE_TEST)
GUEST_BINS     += $(GPU_GUEST_SERVE_TEST)
GUEST_DYN_BINS += $(GPU_GUEST_TEST) $(GPU_GUEST_KVSD) $(GPU_GUEST_SERVE)
GUEST_LIBS     += $(GPU_GUEST_STUB)
GUEST_TESTS    += gpu_pool_test kvserve_gpu_vm
