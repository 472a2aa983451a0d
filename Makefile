# SPDX-License-Identifier: GPL-2.0
#
# kvshare top-level Makefile.
#
#   make            build everything: libkvcore (plain + ASan/UBSan), kvshare.ko,
#                   tools and tests (ALL_TARGETS)
#   make setup      install the Debian packages the build and tests need
#   make module     build kvshare.ko against the Debian 6.1 headers
#   make test       setup, build (-k), host suites, VM suites, one summary line
#   make unittest   host suites only        make vmtest    VM suites only
#   make bench      host benchmarks         make vmbench   benchmarks in the VM
#   make checkpatch kernel style check (informational)
#   make install    [DESTDIR=] [PREFIX=/usr/local] (dist/install.mk)   make uninstall
#   make clean
#
# ---------------------------------------------------------------------------
# Contract with the fragments.
#
# Every daemon/*.mk, libkv/*.mk, python/*.mk, tools/*/*.mk and tests/*/*.mk
# is included, in sorted order, then dist/*.mk; core/core.mk comes first
# (before the libkvcore rules below).  Today:
#
#   core/core.mk                the arbiter core's flags (libkvcore)
#   daemon/daemon.mk            kvshared; it includes daemon/remote/remote.mk
#                               (the Redis tier's sources)
#   libkv/libkv.mk              libkv: libkv/client/, libkv/cache/
#   libkv/attn.mk               paged attention (C reference, CUDA, stub)
#   python/python.mk            the Python extension and package
#   tools/kvctl/kvctl.mk        kvctl
#   tools/kvbench/kvbench.mk    kvbench; sglang.mk, vllm-bench.mk: the
#                               engines' benchmarks; vllm_engine.mk: real
#                               vLLM engines (make serve-vllm, make bench)
#   tools/kvserve/kvserve.mk    kvserve, the demo server
#   tools/gpu/gpu-bundle.mk     the GPU session's bundle
#   tests/NAME/NAME-tests.mk    one per suite folder: attn, core, daemon,
#                               docs, gpu (and gpu-guest.mk), install, libkv, pip,
#                               ptx, python, radix, remote, serve, simt,
#                               uapi, uring, vm-daemon; tests/engines/engines.mk:
#                               the real engines' suites
#   dist/install.mk             make install / make uninstall
#
# A fragment writes its own rules with paths relative to the repository root
# (make always runs here), uses the variables below and appends with += to
# the lists below.  The lists are read only after every fragment is
# included.  No -I in CFLAGS reaches into a part's private headers: a rule
# that includes the core's interface (core/core.h) adds -Icore itself, and
# only the core's hosts do (kmod/ through Kbuild, kvshared, the core's tests
# and kvbench's native target).
#
#   BUILD          build                    all outputs live under it
#   CFLAGS         common user-space flags  (use as is; add your own per rule)
#   SAN_FLAGS      ASan + UBSan             for sanitized builds
#   DEPFLAGS       -MMD -MP                 header dependencies (then -include the .d files)
#   KSFT_DIR       build/kselftest          holds kselftest_harness.h and kselftest.h;
#                                           a test depends on $(KSFT_HDRS) and adds -I$(KSFT_DIR)
#   LIBKVCORE      build/libkvcore.a        the arbiter core for user space
#   LIBKVCORE_SAN  build/san/libkvcore.a    the same, built with $(SAN_FLAGS) and the
#                                           core's lock assertions on (KVS_LOCKDEP)
#   LIBKVCORE_LDLIBS  -pthread              what linking either library needs
#
#   ALL_TARGETS += files (or phony targets) that `make` builds
#   HOST_TESTS  += host test executables; each prints kselftest TAP on stdout
#                  and exits non-zero on failure; results/<basename>.tap
#   GUEST_BINS  += statically linked (-static) binaries for the VM's /bin
#   GUEST_DYN_BINS += dynamically linked binaries for the VM's /bin, packed
#                  with the shared libraries ldd finds for them (keep them
#                  few: each library grows the initramfs)
#   GUEST_LIBS  += shared libraries that binaries dlopen() by name (the CUDA
#                  driver stand-in), for the VM's /lib/kvshare-test: every
#                  suite runs with LD_LIBRARY_PATH=/lib/kvshare-test
#   GUEST_TESTS += basenames of GUEST_BINS or GUEST_DYN_BINS that the VM runs
#                  as TAP suites; results/vm-<name>.tap (`make vmtest
#                  GUEST_TESTS="a b"` runs only those, everything still packed)
#   GUEST_BENCH += commands the VM runs for `make vmbench`, each ENDED BY ';'
#                  (e.g. "kvbench --mode=uring;"); PATH=/bin in the guest
#   BENCH_CMDS  += commands `make bench` runs on the host, each ended by ';'
#                  (e.g. "$(BUILD)/kvbench --quick;")
#
# Host test basenames must be unique; "build" and "vm-*" are taken.  In the
# guest a suite runs as root in /tmp with PATH=/bin (busybox), the module is
# /lib/modules/kvshare.ko, and a suite that unloads it must load it again:
# the guest ends with rmmod, which proves every reference was released.
# ---------------------------------------------------------------------------

SHELL := /bin/bash
.DEFAULT_GOAL := all
.DELETE_ON_ERROR:

BUILD         := build
RESULTS       := $(BUILD)/results
CFLAGS        := -O2 -g -Wall -Wextra -Werror=implicit-function-declaration \
                 -Iinclude/uapi -D_GNU_SOURCE
SAN_FLAGS     := -fsanitize=address,undefined -fno-omit-frame-pointer \
                 -fno-sanitize-recover=all
DEPFLAGS      := -MMD -MP
KSFT_DIR      := $(BUILD)/kselftest
KSFT_HDRS     := $(KSFT_DIR)/kselftest_harness.h $(KSFT_DIR)/kselftest.h
LIBKVCORE     := $(BUILD)/libkvcore.a
LIBKVCORE_SAN := $(BUILD)/san/libkvcore.a
LIBKVCORE_LDLIBS := -pthread

ALL_TARGETS :=
HOST_TESTS  :=
GUEST_BINS  :=
GUEST_DYN_BINS :=
GUEST_LIBS  :=
GUEST_TESTS :=
GUEST_BENCH :=
BENCH_CMDS  :=

# Timeouts, seconds.  A whole host suite; the whole VM run; one suite in the VM.
HOST_TEST_TIMEOUT ?= 900
VM_TIMEOUT        ?= 1200
VM_SUITE_TIMEOUT  ?= 600

NPROC := $(shell nproc 2>/dev/null || echo 1)

# ---------------------------------------------------------------------------
# Kernel: the newest installed Debian 6.1 headers, and the kernel image of
# the same ABI for the VM.  Never `uname -r`: the host runs another kernel.
ifndef KDIR
KDIR := $(shell ls -d /usr/src/linux-headers-6.1.*-amd64 2>/dev/null | sort -V | tail -n 1)
endif
KVER    := $(patsubst linux-headers-%,%,$(notdir $(KDIR)))
VMLINUZ ?= /boot/vmlinuz-$(KVER)
# The module as built here; KO is what the VM loads (override it to boot
# another build of kvshare.ko without touching the module build).
KO_BUILT := kvshare.ko
KO       ?= $(KO_BUILT)
LINUX_SOURCE_TAR := /usr/src/linux-source-6.1.tar.xz

# The module's sources, read from Kbuild so the list lives in one place.
include Kbuild
KMOD_SRCS := $(kvshare-y:.o=.c)

# ---------------------------------------------------------------------------
# The arbiter core for user space: the same core_*.c as the module plus the
# user-space host, built twice (plain and sanitized) into static libraries.
# core/core.mk, when it exists, may adjust KVCORE_SRCS / KVCORE_CFLAGS, or set
# KVCORE_OWN_RULES := 1 and provide the two library rules itself.
KVCORE_SRCS   := core/core_pool.c core/core_arbiter.c core/core_table.c \
                 core/core_cmd.c core/core_user.c core/host_user.c
KVCORE_CFLAGS := -DKVS_USER -pthread
# The sanitized core (what the tests link) also checks its lock assertions:
# lockdep_assert_held() in host_user.h, as a CONFIG_LOCKDEP kernel does.
KVCORE_DEBUG_CFLAGS := -DKVS_LOCKDEP
-include core/core.mk

ifndef KVCORE_OWN_RULES
KVCORE_OBJS     := $(KVCORE_SRCS:%.c=$(BUILD)/kvcore/%.o)
KVCORE_SAN_OBJS := $(KVCORE_SRCS:%.c=$(BUILD)/san/kvcore/%.o)

$(BUILD)/kvcore/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(KVCORE_CFLAGS) $(DEPFLAGS) -c -o $@ $<

$(BUILD)/san/kvcore/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(SAN_FLAGS) $(KVCORE_CFLAGS) $(KVCORE_DEBUG_CFLAGS) $(DEPFLAGS) -c -o $@ $<

$(LIBKVCORE): $(KVCORE_OBJS)
	@rm -f $@
	$(AR) rcs $@ $^

$(LIBKVCORE_SAN): $(KVCORE_SAN_OBJS)
	@rm -f $@
	$(AR) rcs $@ $^

-include $(KVCORE_OBJS:.o=.d) $(KVCORE_SAN_OBJS:.o=.d)
endif

ALL_TARGETS += $(LIBKVCORE) $(LIBKVCORE_SAN) module

# ---------------------------------------------------------------------------
# kselftest harness, extracted from Debian's linux-source-6.1 tarball (never
# committed).  One xz pass (~10 s) gives both headers; tar -m stamps them now
# so they are newer than the tarball and are not extracted again.
$(KSFT_HDRS) &: $(wildcard $(LINUX_SOURCE_TAR))
	@test -f $(LINUX_SOURCE_TAR) || { echo "error: $(LINUX_SOURCE_TAR) missing: run 'make setup' (package linux-source-6.1)" >&2; exit 1; }
	@mkdir -p $(KSFT_DIR).tmp
	tar -xmJf $(LINUX_SOURCE_TAR) --strip-components=4 -C $(KSFT_DIR).tmp \
		linux-source-6.1/tools/testing/selftests/kselftest_harness.h \
		linux-source-6.1/tools/testing/selftests/kselftest.h
	@mkdir -p $(KSFT_DIR)
	@mv -f $(KSFT_DIR).tmp/kselftest_harness.h $(KSFT_DIR).tmp/kselftest.h $(KSFT_DIR)/
	@rmdir $(KSFT_DIR).tmp

.PHONY: kselftest-headers
kselftest-headers: $(KSFT_HDRS)

# ---------------------------------------------------------------------------
# Fragments (see the contract at the top).
FRAGMENTS := $(sort $(wildcard daemon/*.mk libkv/*.mk python/*.mk tools/*/*.mk tests/*/*.mk))
include $(FRAGMENTS)
# Packaging last: `make install` / `make uninstall` install what the
# fragments above build (dist/install.mk).
include $(wildcard dist/*.mk)

# ---------------------------------------------------------------------------
.PHONY: all setup module test test-run unittest vmtest bench vmbench \
        checkpatch clean help

all: $(ALL_TARGETS)

setup:
	@scripts/setup.sh

# Kbuild does its own dependency tracking, so always ask it; it relinks
# kvshare.ko only when something changed.
module:
	@if [ -z "$(KDIR)" ] || [ ! -d "$(KDIR)" ]; then \
		echo "error: no /usr/src/linux-headers-6.1.*-amd64: run 'make setup'" >&2; exit 1; fi
	@missing=$$(for f in $(KMOD_SRCS); do [ -f "$$f" ] || echo -n " $$f"; done); \
	if [ -n "$$missing" ]; then \
		echo "error: module sources missing:$$missing (see Kbuild)" >&2; exit 1; fi
	$(MAKE) -C $(KDIR) M=$(CURDIR) modules

# Host suites: one TAP file each, stdout mirrored to the terminal, exit
# status appended for tap-summary.sh.  A suite that was not built still gets
# a failing result, so a broken build cannot pass as "fewer tests".
define run-host-tests
mkdir -p $(RESULTS); \
export UBSAN_OPTIONS=$${UBSAN_OPTIONS:-print_stacktrace=1}; \
for t in $(HOST_TESTS); do \
	name=$$(basename "$$t"); out=$(RESULTS)/$$name.tap; \
	case "$$t" in */*) ;; *) t=./$$t ;; esac; \
	echo "=== host suite $$name"; \
	if [ ! -x "$$t" ]; then \
		echo "error: $$t was not built"; \
		printf 'TAP version 13\n1..1\nnot ok 1 %s # was not built\n' "$$name" > "$$out"; \
		continue; \
	fi; \
	timeout --kill-after=10 $(HOST_TEST_TIMEOUT) "$$t" | tee "$$out"; \
	st=$${PIPESTATUS[0]}; \
	echo "# exit status: $$st" >> "$$out"; \
	if [ "$$st" = 124 ] || [ "$$st" = 137 ]; then \
		echo "# $$name timed out after $(HOST_TEST_TIMEOUT) s" | tee -a "$$out"; fi; \
done
endef

# VM suites: pack the initramfs, boot, split the console log into
# results/vm-*.tap.  Failures are recorded in the TAP files (the exit status
# is ignored by the callers, which judge by tap-summary.sh).
VM_DIR := $(BUILD)/vm
guest-pack-args = $(foreach b,$(GUEST_BINS),-b $(b)) $(foreach b,$(GUEST_DYN_BINS),-d $(b)) \
	$(foreach l,$(GUEST_LIBS),-L $(l))
define run-vm-tests
mkdir -p $(RESULTS) $(VM_DIR); \
if [ ! -f "$(KO)" ]; then \
	echo "error: $(KO) is missing (did 'make module' fail?); VM suites not run" >&2; \
	printf 'TAP version 13\n1..1\nnot ok 1 vm: %s missing, VM suites not run\n' "$(KO)" \
		> $(RESULTS)/vm-kernel-log.tap; \
	false; \
elif ! tools/vm/mkinitramfs.sh -o $(VM_DIR)/initramfs-test.cpio.gz -k $(KO) -m test \
		-t $(VM_SUITE_TIMEOUT) $(guest-pack-args) \
		$(foreach t,$(GUEST_TESTS),-s $(t)$$'\t'/bin/$(t)); then \
	printf 'TAP version 13\n1..1\nnot ok 1 vm: building the initramfs failed\n' \
		> $(RESULTS)/vm-kernel-log.tap; \
	false; \
else \
	tools/vm/run-vm.sh -K $(VMLINUZ) -i $(VM_DIR)/initramfs-test.cpio.gz \
		-l $(VM_DIR)/console.log -d $(RESULTS) -m test -T $(VM_TIMEOUT) \
		-s "$(GUEST_TESTS)"; \
fi
endef

# Build flags for the nested `make all` in `make test`: keep going past a
# broken part (-k) so everything else is still tested, and use every core
# unless the caller already chose a -j.
define submake-jobs
$$(case "$$MAKEFLAGS" in *-j*|*jobserver*) ;; *) echo -j$(NPROC) ;; esac)
endef

# `make test` = setup, then a fresh make (so KDIR and friends are evaluated
# after setup installed the headers on a new machine).  The engine
# environment (scripts/engine-env.sh: a venv outside the tree, seconds when
# it is complete) is built here too; if it cannot be, the suites that need
# it fail on their own and everything else still runs.
test:
	@scripts/setup.sh
	@scripts/engine-env.sh >/dev/null || \
		echo "warning: scripts/engine-env.sh failed: the engine suites will fail" >&2
	@$(MAKE) --no-print-directory test-run

# Internal: the body of `make test`.  Every step runs even when an earlier
# one failed; the verdict is tap-summary.sh's, whose line comes last.
test-run:
	@rm -rf $(RESULTS); mkdir -p $(RESULTS)
	@# A kvshare.ko left from an earlier build must not stand in for one
	@# that fails to build now; relinking it costs Kbuild a second.
	@rm -f $(KO_BUILT)
	@echo "=== build (make -k all)"; \
	if $(MAKE) --no-print-directory -k $(submake-jobs) all; then \
		printf 'TAP version 13\n1..1\nok 1 build: make all\n' > $(RESULTS)/build.tap; \
	else \
		echo "error: the build failed; testing what was built" >&2; \
		printf 'TAP version 13\n1..1\nnot ok 1 build: make all failed (see the log)\n' > $(RESULTS)/build.tap; \
	fi
	@$(run-host-tests)
	@echo "=== VM suites"; $(run-vm-tests) || true
	@echo "=== summary"; scripts/tap-summary.sh $(RESULTS)/*.tap

unittest: $(HOST_TESTS)
	@rm -f $(foreach t,$(HOST_TESTS),$(RESULTS)/$(notdir $(t)).tap)
	@$(run-host-tests)
	@scripts/tap-summary.sh $(foreach t,$(HOST_TESTS),$(RESULTS)/$(notdir $(t)).tap)

# The module is rebuilt only when it is the one the VM loads.
VM_KO_DEP := $(if $(filter $(KO_BUILT),$(KO)),module)

vmtest: $(VM_KO_DEP) $(GUEST_BINS) $(GUEST_DYN_BINS) $(GUEST_LIBS)
	@test -f "$(KO)" || { echo "error: $(KO) is missing: build it with 'make module'" >&2; exit 1; }
	@rm -f $(RESULTS)/vm-*.tap
	@$(run-vm-tests) || true
	@scripts/tap-summary.sh $(RESULTS)/vm-*.tap

# Benchmarks.  Commands are ';'-separated; each runs on its own (a failing
# one is reported and the rest still run) under its own header.
define run-cmds
status=0; IFS=';' read -ra cmds <<< '$(subst ','\'',$(1))'; \
for c in "$${cmds[@]}"; do \
	[[ "$$c" =~ [^[:space:]] ]] || continue; \
	echo "=== bench:$$c"; \
	bash -c "$$c" || { echo "=== bench FAILED (status $$?):$$c"; status=1; }; \
done; exit $$status
endef

# The benchmarks build what they can (-k): one broken test binary elsewhere
# must not stop a timing run; a command whose binary is missing fails on its
# own.
# (The two phony groups have an empty recipe so that make does not list
# every up-to-date file.)
.PHONY: user-targets guest-bins
user-targets: $(filter-out module,$(ALL_TARGETS))
	@:
guest-bins: $(GUEST_BINS) $(GUEST_DYN_BINS) $(GUEST_LIBS)
	@:

bench:
	@$(MAKE) --no-print-directory -k user-targets || \
		echo "warning: some targets failed to build; benchmarking what was built" >&2
	@$(call run-cmds,$(BENCH_CMDS))

vmbench: $(VM_KO_DEP)
	@$(MAKE) --no-print-directory -k guest-bins || \
		echo "warning: some guest binaries failed to build; benchmarking what was built" >&2
	@test -f "$(KO)" || { echo "error: $(KO) is missing: build it with 'make module'" >&2; exit 1; }
	@mkdir -p $(VM_DIR) $(BUILD)/bench
	tools/vm/mkinitramfs.sh -o $(VM_DIR)/initramfs-bench.cpio.gz -k $(KO) -m bench \
		-t $(VM_SUITE_TIMEOUT) $(guest-pack-args) \
		-B '$(subst ','\'',$(GUEST_BENCH))'
	tools/vm/run-vm.sh -K $(VMLINUZ) -i $(VM_DIR)/initramfs-bench.cpio.gz \
		-l $(VM_DIR)/console-bench.log -d $(BUILD)/bench -m bench -T $(VM_TIMEOUT) \
		-s "$$(cat $(VM_DIR)/initramfs-bench.cpio.gz.suites)"

# ---------------------------------------------------------------------------
# checkpatch.pl ships only in the linux-source tarball; extract it (with the
# data files it reads from its own directory) once.
CHECKPATCH := $(BUILD)/checkpatch/scripts/checkpatch.pl
$(CHECKPATCH): $(wildcard $(LINUX_SOURCE_TAR))
	@test -f $(LINUX_SOURCE_TAR) || { echo "error: $(LINUX_SOURCE_TAR) missing: run 'make setup'" >&2; exit 1; }
	@mkdir -p $(BUILD)/checkpatch
	tar -xmJf $(LINUX_SOURCE_TAR) --strip-components=1 -C $(BUILD)/checkpatch \
		linux-source-6.1/scripts/checkpatch.pl \
		linux-source-6.1/scripts/spelling.txt \
		linux-source-6.1/scripts/const_structs.checkpatch

checkpatch: $(CHECKPATCH)
	@perl $(CHECKPATCH) --no-tree -f --terse \
		$(wildcard core/*.c core/*.h kmod/*.c kmod/*.h) include/uapi/linux/kvshare.h || \
		echo "checkpatch: see the findings above (informational, not a failure)"

# ---------------------------------------------------------------------------
# Kernel objects live next to their sources; everything else under build/.
clean:
	rm -rf $(BUILD)
	rm -f kvshare.ko kvshare.o kvshare.mod kvshare.mod.c kvshare.mod.o \
	      modules.order Module.symvers .*.cmd \
	      kmod/*.o kmod/.*.cmd kmod/.*.d kmod/*.mod \
	      core/*.o core/.*.cmd core/.*.d core/*.mod
	rm -rf .tmp_versions

help:
	@sed -n '3,15p' Makefile | sed 's/^# \{0,1\}//'
	@echo "kernel headers: $(or $(KDIR),(none: run make setup))  VM kernel: $(VMLINUZ)"
