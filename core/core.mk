# SPDX-License-Identifier: GPL-2.0
# The arbiter core in user space.  Kernel code leaves handler parameters
# unused by design (a table of handlers shares one signature), and the
# kernel itself builds without -Wunused-parameter; so does the core here.
KVCORE_CFLAGS += -Wno-unused-parameter
