# SPDX-License-Identifier: GPL-2.0
#
# The remote tier of kvshared (remote.h): pools backed onto Redis.
# Included by daemon/daemon.mk, whose rules build these sources into
# kvshared; the tier's libraries: OpenSSL for TLS and the page MAC, XXH3.
# RESP is its own (resp.c: bounded against a hostile Redis), not hiredis.
KVSD_REMOTE_SRCS   := daemon/remote/tier.c daemon/remote/chan.c daemon/remote/thread.c \
                      daemon/remote/metrics.c daemon/remote/cluster.c \
                      daemon/remote/config.c daemon/remote/conn.c \
                      daemon/remote/page.c daemon/remote/ctl.c \
                      daemon/remote/mac.c daemon/remote/state.c \
                      daemon/remote/resp.c
KVSD_REMOTE_LDLIBS := -lssl -lcrypto -lxxhash
