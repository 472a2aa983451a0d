# SPDX-License-Identifier: GPL-2.0
# The Python package kvshare: a CPython extension over libkv (issue 13).
#
# Built for Debian's /usr/bin/python3 (not a pyenv python3 on PATH) into
# build/python/kvshare/, next to a copy of the package's .py files, so that
#   PYTHONPATH=build/python /usr/bin/python3 -c 'import kvshare'
# works from the build tree.  Nothing is compiled at import time.  libkv is
# linked statically; the extension is a shared object, so its sources are
# built again with -fPIC here (libkv.mk's objects are not PIC).
PYTHON          ?= /usr/bin/python3
PY_BUILD        := $(BUILD)/python
PY_PKG_DIR      := $(PY_BUILD)/kvshare
PY_EXT_SUFFIX    = $(shell $(PYTHON)-config --extension-suffix 2>/dev/null || echo .so)
PY_INCLUDES      = $(shell $(PYTHON)-config --includes) \
                   -I$(shell $(PYTHON) -c 'import numpy; print(numpy.get_include())')
PY_EXT           = $(PY_PKG_DIR)/_kvshare$(PY_EXT_SUFFIX)
PY_SRCS         := $(wildcard python/kvshare/*.py)
PY_COPIES       := $(PY_SRCS:python/%=$(PY_BUILD)/%)
PY_C_SRCS       := $(wildcard python/kvshare/*.c)
PY_C_OBJS       := $(PY_C_SRCS:python/kvshare/%.c=$(PY_BUILD)/%.o)

LIBKV_PIC_OBJS  := $(LIBKV_SRCS:%.c=$(BUILD)/pic/libkv/%.o)
LIBKV_PIC       := $(BUILD)/pic/libkv.a

$(BUILD)/pic/libkv/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fPIC $(LIBKV_CFLAGS) $(DEPFLAGS) -c -o $@ $<

# As libkv.mk's own rule: device pools need cuda.h (the driver is dlopen'ed).
$(BUILD)/pic/libkv/libkv/client/pool_cuda.o: LIBKV_CFLAGS += -isystem $(LIBKV_CUDA_INC)

$(LIBKV_PIC): $(LIBKV_PIC_OBJS)
	@rm -f $@
	$(AR) rcs $@ $^

# The extension's C files, one per type (python/kvshare/module.c readies them).
$(PY_C_OBJS): $(PY_BUILD)/%.o: python/kvshare/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fPIC -fvisibility=hidden -Wno-unused-parameter -Wno-missing-field-initializers \
		$(LIBKV_CFLAGS) $(PY_INCLUDES) $(DEPFLAGS) -c -o $@ $<

# kvshare.__version__ is dist/VERSION, as for kvshare.pc, the DKMS tree and
# python/setup.py (pip).
$(PY_BUILD)/module.o: dist/VERSION
$(PY_BUILD)/module.o: CFLAGS += -DKVSHARE_VERSION='"$(strip $(file <dist/VERSION))"'

# Device-to-device copies (devcopy.c) call the dlopen'ed driver: cuda.h.
$(PY_BUILD)/devcopy.o: LIBKV_CFLAGS += -isystem $(LIBKV_CUDA_INC)

# The symbol the interpreter looks up is the only one exported.
$(PY_EXT): $(PY_C_OBJS) $(LIBKV_PIC)
	@mkdir -p $(@D)
	$(CC) -shared -o $@ $^ $(LIBKV_LDLIBS) -Wl,--exclude-libs,ALL

$(PY_BUILD)/kvshare/%.py: python/kvshare/%.py
	@mkdir -p $(@D)
	cp $< $@

.PHONY: python
python: $(PY_EXT) $(PY_COPIES)

-include $(LIBKV_PIC_OBJS:.o=.d) $(PY_C_OBJS:.o=.d)

ALL_TARGETS += python

# make bench: the binding's overhead as a ratio to the C calls (same run).
BENCH_CMDS  += PYTHONPATH=$(PY_BUILD) $(PYTHON) tools/kvbench/py_bench.py;

# The demo from the build tree: python3 -m kvshare.demo on the embedded
# default (a private kvshared on host memory).  PYDEMO_ARGS= passes options.
.PHONY: pydemo
pydemo:
	@scripts/setup.sh
	@$(MAKE) --no-print-directory python $(BUILD)/kvshared
	@PYTHONPATH=$(PY_BUILD) $(PYTHON) -m kvshare.demo $(PYDEMO_ARGS)
