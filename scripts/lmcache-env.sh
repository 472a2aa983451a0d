#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The LMCache environment: the engine environment (scripts/engine-env.sh)
# plus LMCache (python/requirements/lmcache.txt), as a venv of its own,
# because lmcache's pins would downgrade the engine environment's numpy,
# protobuf and others.  Only the bench's row (iv) uses it (an LMCache MP
# server and vLLM engines with LMCacheMPConnector); `make bench` builds it,
# `make test` does not need it.
#
#   scripts/lmcache-env.sh            build it if missing or stale; print its python
#   scripts/lmcache-env.sh --path     print the python it would use, build nothing
#   scripts/lmcache-env.sh --check    exit 0 if it is complete, 1 if not
#
# Where: $KVSHARE_LMCACHE_ENV, else
#   /var/cache/kvshare/lmcache-env-<first 16 hex of sha256 of vllm.txt,
#   sglang.txt and lmcache.txt>.
# Steps: the engine environment's packages (built first if missing); a copy of it
# with hard links (`cp -al`: seconds and almost no disk; a plain copy where
# links cannot be made), whose scripts are pointed at the copy's python; then
# lmcache.txt, --no-deps --require-hashes, from the wheel cache
# ($KVSHARE_WHEEL_CACHE, default /var/cache/kvshare/wheels).  pip replaces
# files (unlink, write anew) and never writes into one in place, so the
# engine environment never sees what is installed into the copy.  The stamp
# .kvshare-lmcache holds the requirements hash.  The kvshare package copied
# along is not used there (the LMCache engines do not import it).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/venv-lib.sh
. "$root/scripts/venv-lib.sh"
req_dir=$root/python/requirements
req_lmcache=$req_dir/lmcache.txt
cache=/var/cache/kvshare
wheels=${KVSHARE_WHEEL_CACHE:-$cache/wheels}

venv_mode "${1:-}" --path --check

reqs_hash=$(cat "$req_dir/vllm.txt" $( [ -f "$req_dir/sglang.txt" ] && echo "$req_dir/sglang.txt") \
	"$req_lmcache" | sha256sum | cut -c1-16)
env_dir=${KVSHARE_LMCACHE_ENV:-$cache/lmcache-env-$reqs_hash}
py=$env_dir/bin/python

complete() {
	[ -x "$py" ] && [ "$(cat "$env_dir/.kvshare-lmcache" 2>/dev/null)" = "$reqs_hash" ]
}

case $mode in
path) echo "$py"; exit 0 ;;
check) complete; exit ;;
esac

if complete; then
	echo "$py"
	exit 0
fi

venv_pip_isolate

log() { echo "lmcache-env: $*" >&2; }

# Only the engine environment's packages are needed (a stale kvshare in it
# is not reinstalled from this tree: it may be another tree's, and it is
# not used here).
if ! "$root/scripts/engine-env.sh" --packages; then
	"$root/scripts/engine-env.sh" >/dev/null || {
		log "error: the engine environment (scripts/engine-env.sh) could not be built"
		exit 1; }
fi
base_py=$("$root/scripts/engine-env.sh" --path)
base_dir=$(dirname "$(dirname "$base_py")")

venv_lock
if complete; then echo "$py"; exit 0; fi
t0=$(date +%s)

log "building $env_dir from $base_dir (requirements $reqs_hash)"
rm -rf "$env_dir"
cp -al "$base_dir" "$env_dir" 2>/dev/null || { rm -rf "$env_dir"; cp -a "$base_dir" "$env_dir"; }
rm -f "$env_dir"/.kvshare-*
# The venv's own paths: console scripts' #! lines, activate, pyvenv.cfg
# (sed -i writes a new file, so the engine environment's stays as it is).
for f in "$env_dir"/bin/* "$env_dir/pyvenv.cfg"; do
	[ -f "$f" ] && [ ! -L "$f" ] && grep -qF "$base_dir" "$f" 2>/dev/null || continue
	sed -i "s|$base_dir|$env_dir|g" "$f"
done

venv_pip_pinned "$py" "$req_lmcache"
# What the bench runs: LMCache's MP server and vLLM's connector for it.
LMCACHE_DISABLE_BANNER=1 LMCACHE_TRACK_USAGE=false "$py" -c '
import lmcache.v1.multiprocess.server, lmcache.integration.vllm.lmcache_mp_connector
import vllm.distributed.kv_transfer.kv_connector.v1.lmcache_mp_connector' >&2 || {
	log "error: LMCache's MP server or connector does not import in $env_dir"; exit 1; }
echo "$reqs_hash" > "$env_dir/.kvshare-lmcache"
log "ready in $(( $(date +%s) - t0 )) s: $env_dir takes $(du -sh "$base_dir" "$env_dir" | tail -1 | cut -f1) beside $base_dir"
echo "$py"
