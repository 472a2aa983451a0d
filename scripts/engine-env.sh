#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# The engine environment: a Python virtual environment, outside the tree,
# holding the real inference engines (vLLM for the CPU, SGLang) on torch
# 2.x, and kvshare itself pip-installed from python/.  The engine suites
# (tests/engines), tests/python's second run and the engine benchmarks use
# its interpreter.
#
#   scripts/engine-env.sh            build it if missing or stale; print its python
#   scripts/engine-env.sh --path     print the python it would use, build nothing
#   scripts/engine-env.sh --check    exit 0 if it is complete, 1 if not
#   scripts/engine-env.sh --packages exit 0 if its packages are (kvshare may be stale)
#
# Where: $KVSHARE_ENGINE_ENV, else
#   /var/cache/kvshare/engine-env-<first 16 hex of sha256 of the requirement files>
# so a second run (and another work tree of the same requirements) reuses
# it, and changed pins get a new one beside it.  Wheels are downloaded once
# into $KVSHARE_WHEEL_CACHE (default /var/cache/kvshare/wheels; ~3 GB, most
# of it torch's CUDA libraries) and installed from there, offline.
#
# Steps: a venv of Debian's /usr/bin/python3 (python3-venv); every pin of
# python/requirements/vllm.txt, --no-deps --require-hashes (see there why
# --no-deps); python/requirements/sglang.txt, --no-deps, if it has any
# requirement; then kvshare from python/ (--no-build-isolation: its C
# extension is built against the venv's numpy).  Two stamps in the venv: the
# requirements hash (the packages are complete) and a hash of python/'s
# files (kvshare is current; it is reinstalled, in seconds, when they
# change).  A run that finds both current costs one sha256 of a few files.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/venv-lib.sh
. "$root/scripts/venv-lib.sh"
req_vllm=$root/python/requirements/vllm.txt
req_sglang=$root/python/requirements/sglang.txt
base_python=${KVSHARE_ENGINE_BASE_PYTHON:-/usr/bin/python3}
cache=/var/cache/kvshare
wheels=${KVSHARE_WHEEL_CACHE:-$cache/wheels}

venv_mode "${1:-}" --path --check --packages

reqs_hash=$(cat "$req_vllm" $( [ -f "$req_sglang" ] && echo "$req_sglang") \
	| sha256sum | cut -c1-16)
env_dir=${KVSHARE_ENGINE_ENV:-$cache/engine-env-$reqs_hash}
py=$env_dir/bin/python

# kvshare's own sources: every file under python/ that pip would build from
# (untracked build outputs excluded by git).
kvshare_hash() {
	(cd "$root" && { git ls-files -co --exclude-standard python libkv include 2>/dev/null ||
		find python libkv include -type f; } | LC_ALL=C sort | xargs sha256sum) |
		sha256sum | cut -c1-16
}

complete() {
	[ -x "$py" ] && [ "$(cat "$env_dir/.kvshare-reqs" 2>/dev/null)" = "$reqs_hash" ]
}
current() {
	complete && [ "$(cat "$env_dir/.kvshare-pkg" 2>/dev/null)" = "$(kvshare_hash)" ]
}

case $mode in
path) echo "$py"; exit 0 ;;
check) current; exit ;;
packages) complete; exit ;;
esac

if current; then
	echo "$py"
	exit 0
fi

venv_pip_isolate
venv_lock
if current; then echo "$py"; exit 0; fi

log() { echo "engine-env: $*" >&2; }
t0=$(date +%s)

if ! complete; then
	log "building $env_dir (requirements $reqs_hash)"
	rm -rf "$env_dir"
	"$base_python" -m venv "$env_dir" || {
		log "error: '$base_python -m venv' failed: install python3-venv (make setup)"; exit 1; }
	pip=("$py" -m pip --disable-pip-version-check --no-input)
	log "downloading wheels into $wheels (files already there are reused)"
	venv_pip_pinned "$py" "$req_vllm"
	if [ -f "$req_sglang" ] && grep -qv '^[[:space:]]*\(#.*\)\?$' "$req_sglang"; then
		"${pip[@]}" download --no-deps -d "$wheels" -r "$req_sglang" >&2
		"${pip[@]}" install --no-index --find-links "$wheels" --no-deps \
			-r "$req_sglang" >&2
	fi
	"$py" -c 'import torch, vllm.platforms as p; assert p.current_platform.is_cpu(), p.current_platform' \
		>&2 || { log "error: vLLM does not select its CPU platform in $env_dir"; exit 1; }
	echo "$reqs_hash" > "$env_dir/.kvshare-reqs"
fi

log "installing kvshare from $root/python"
pkg_hash=$(kvshare_hash)
"$py" -m pip --disable-pip-version-check --no-input install --no-index --no-deps \
	--no-build-isolation --force-reinstall "$root/python" >&2
echo "$pkg_hash" > "$env_dir/.kvshare-pkg"
log "ready in $(( $(date +%s) - t0 )) s: $(du -sh "$env_dir" | cut -f1) in $env_dir"
echo "$py"
