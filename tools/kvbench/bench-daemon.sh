#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# kvbench daemon against a kvshared of its own, through its socket beside
# the native core.  Usage: tools/kvbench/bench-daemon.sh [kvbench options...]
set -euo pipefail

build=${BUILD:-build}
exec "$(dirname "$0")/../kvshared-session.sh" \
	-- bash -c '"$1/kvbench" daemon --device "$KVSHARE_ARBITER" "${@:2}"' _ "$build" "$@"
