# SPDX-License-Identifier: GPL-2.0
# shellcheck shell=bash disable=SC2154  # env_dir, wheels: the caller's
#
# Sourced (never run) by scripts/engine-env.sh and scripts/lmcache-env.sh:
# what both venvs do the same way.  The caller sets $env_dir (the venv),
# $wheels (the wheel cache) and log().

# PyPI and the pins only: no pip configuration, find-links or index of
# this machine, no user site.
venv_pip_isolate() {
	unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_REQUIRE_VIRTUALENV
	export PIP_CONFIG_FILE=/dev/null PYTHONNOUSERSITE=1
}

# One builder at a time (several work trees may share the cache): the lock
# is held on fd 9 until the script exits.
venv_lock() {
	mkdir -p "$(dirname "$env_dir")" "$wheels"
	exec 9>"$env_dir.lock"
	flock 9
}

# venv_pip_pinned PYTHON REQFILE: every pin of REQFILE, --no-deps
# --require-hashes, its wheels downloaded into $wheels once (files already
# there are reused) and installed from there, offline.
venv_pip_pinned() {
	local pip=("$1" -m pip --disable-pip-version-check --no-input)

	"${pip[@]}" download --no-deps --require-hashes --only-binary=:all: \
		-d "$wheels" -r "$2" >&2
	"${pip[@]}" install --no-index --find-links "$wheels" --no-deps --require-hashes \
		-r "$2" >&2
}

# venv_mode ARG OPTION...: $mode from the script's argument, one of the
# OPTIONs without its dashes (--path: path), or build when there is none;
# anything else is a usage error.
venv_mode() {
	local arg=$1 opt

	shift
	mode=build
	[ -z "$arg" ] && return
	for opt; do
		[ "$arg" = "$opt" ] && { mode=${opt#--}; return; }
	done
	echo "usage: $0 [$(IFS='|'; echo "$*")]" >&2
	exit 2
}
