# SPDX-License-Identifier: GPL-2.0
#
# make install / make uninstall (dist/install.sh does the work).
#
#   make && make module && sudo make install
#   make install DESTDIR=/tmp/stage prefix=/usr      (packaging)
#   sudo make uninstall                               (same variables)
#
# Installs kvshared (sbindir) with its systemd unit and, if none exists,
# $(sysconfdir)/kvshare/kvshared.conf; kvctl (bindir); libkv.a (libdir),
# the headers <kvshare/*.h> and <linux/kvshare.h> (includedir) and
# kvshare.pc; the udev rule and the sysusers.d entry of group kvshare; the
# DKMS source tree in $(dkmsdir); kvshare.ko in $(moduledir) when it was
# built (KVS_INSTALL_MODULE=no leaves it to DKMS).  The directories follow
# the GNU names; the udev, systemd and sysusers.d ones are under
# $(prefix)/lib, which systemd and udev read for /usr and /usr/local alike.
# sysconfdir is /etc, where the unit and kvshared look.  Uninstall
# removes what the manifest $(datadir)/kvshare/install-manifest lists.

# The version, in one place (the DKMS tree's name and kvshare.pc).
KVS_VERSION := $(shell cat dist/VERSION)

PREFIX         ?= /usr/local
prefix         ?= $(PREFIX)
exec_prefix    ?= $(prefix)
bindir         ?= $(exec_prefix)/bin
sbindir        ?= $(exec_prefix)/sbin
libdir         ?= $(exec_prefix)/lib
includedir     ?= $(prefix)/include
datarootdir    ?= $(prefix)/share
datadir        ?= $(datarootdir)
docdir         ?= $(datarootdir)/doc/kvshare
sysconfdir     ?= /etc
pkgconfigdir   ?= $(libdir)/pkgconfig
udevrulesdir   ?= $(prefix)/lib/udev/rules.d
systemdunitdir ?= $(prefix)/lib/systemd/system
sysusersdir    ?= $(prefix)/lib/sysusers.d
# DKMS reads /usr/src whatever the prefix.
dkmsdir        ?= /usr/src/kvshare-$(KVS_VERSION)
# KVER: the kernel the module was built for (the top Makefile's KDIR).
moduledir      ?= /lib/modules/$(KVER)/updates
KVS_INSTALL_MODULE ?= auto
# Debian's python3 reads /usr/lib/python3/dist-packages for packages of the
# system and /usr/local/lib/python3.X/dist-packages for local ones.
PY_VER_SHORT    = $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
pythondir      ?= $(if $(filter /usr,$(prefix)),/usr/lib/python3/dist-packages,$(prefix)/lib/python$(PY_VER_SHORT)/dist-packages)

KVS_INSTALL_ENV = DESTDIR='$(DESTDIR)' KVS_VERSION='$(KVS_VERSION)' \
	prefix='$(prefix)' bindir='$(bindir)' sbindir='$(sbindir)' \
	libdir='$(libdir)' includedir='$(includedir)' datadir='$(datadir)' \
	docdir='$(docdir)' sysconfdir='$(sysconfdir)' pkgconfigdir='$(pkgconfigdir)' \
	udevrulesdir='$(udevrulesdir)' systemdunitdir='$(systemdunitdir)' \
	sysusersdir='$(sysusersdir)' dkmsdir='$(dkmsdir)' moduledir='$(moduledir)' \
	KVER='$(KVER)' KO='$(KO_BUILT)' KMOD_SRCS='$(KMOD_SRCS)' \
	KVS_INSTALL_MODULE='$(KVS_INSTALL_MODULE)' \
	KVSHARED='$(BUILD)/kvshared' KVCTL='$(BUILD)/kvctl' LIBKV='$(LIBKV)' \
	LIBKV_LDLIBS='$(LIBKV_LDLIBS)' pythondir='$(pythondir)' PY_EXT='$(PY_EXT)'

# The user-space parts are built if needed; the module only by
# `make module` (it needs the kernel headers), and installed if present.
.PHONY: install uninstall
install: $(BUILD)/kvshared $(BUILD)/kvctl $(LIBKV) python
	@$(KVS_INSTALL_ENV) dist/install.sh install

uninstall:
	@$(KVS_INSTALL_ENV) dist/install.sh uninstall
