#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Two kvshared builds side by side in one run, alternated round by round
# (A B, B A, ...) so that the machine's other load falls on both alike:
#
#   1. tools/kvbench/bench-daemon.sh (every placement: unpinned, kvshared
#      pinned apart from kvbench, both on CPU 0) against each: the median
#      over the rounds of LOOKUP+PUT through the ring, ns a page and the
#      ratio to the core, at each chain length;
#   2. kvserve shared (tools/kvserve/run.sh --verify 0 --inflight-wait
#      2000, as tools/kvserve/scale.sh runs it) at $WORKERS workers
#      against each: requests/s and the CPU time kvshared spent in the
#      run (its serving thread's, when told to stop), medians, and the B/A
#      ratios taken within each round, then their median.
#
# Only kvshared differs: kvbench, kvserve and kvctl come from $BUILD.
#
# Usage: [ROUNDS=5] [WORKERS=4] [BUILD=build] tools/kvbench/ab-daemon.sh A_KVSHARED B_KVSHARED
#   e.g. cp build/kvshared /tmp/kvshared.old (before a change), rebuild, then
#        tools/kvbench/ab-daemon.sh /tmp/kvshared.old build/kvshared
set -euo pipefail

if [ $# -ne 2 ] || [ ! -x "$1" ] || [ ! -x "$2" ]; then
	echo "usage: $0 A_KVSHARED B_KVSHARED (two kvshared executables)" >&2
	exit 2
fi
build=$(cd "${BUILD:-build}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
rounds=${ROUNDS:-5}
workers=${WORKERS:-4}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A build directory per arm: the shared binaries, and a kvshared that runs
# the arm's as its child and, when stopped, first logs the CPU time of
# that child's thread that serves (the only busy one) in ns to $tmp/ARM.cpu;
# its exit status is the child's (bash keeps it for the second wait).
arm() {
	local dir=$tmp/$1 b

	mkdir -p "$dir"
	cp "$2" "$dir/kvshared.real"
	for b in kvbench kvserve kvctl; do
		ln -s "$build/$b" "$dir/$b"
	done
	cat >"$dir/kvshared" <<-EOF
	#!/usr/bin/env bash
	"$dir/kvshared.real" "\$@" &
	p=\$!
	trap 'cut -d" " -f1 /proc/\$p/schedstat >>"$tmp/$1.cpu"; kill -TERM \$p' TERM INT
	wait \$p
	wait \$p
	EOF
	chmod +x "$dir/kvshared"
}
arm A "$1"
arm B "$2"

fail() {
	echo "ab-daemon.sh: failed:" >&2
	cat "$1" >&2
	exit 1
}
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# A: $1"
echo "# B: $2"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
	order="A B"
	[ $((r % 2)) = 1 ] || order="B A"
	for a in $order; do
		BUILD=$tmp/$a "$here/bench-daemon.sh" >"$tmp/bench.$a.$r" 2>&1 ||
			fail "$tmp/bench.$a.$r"
		BUILD=$tmp/$a "$here/../kvserve/run.sh" --verify 0 --inflight-wait 2000 \
			--workers "$workers" >"$tmp/serve.$a.$r" 2>&1 || fail "$tmp/serve.$a.$r"
		rps=$(awk '/^  throughput/ { print $2 }' "$tmp/serve.$a.$r")
		cpu=$(tail -n 1 "$tmp/$a.cpu")
		echo "$r $a ${rps:-0} $((cpu / 1000000))" >>"$tmp/serve"
	done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

echo "# kvbench daemon LOOKUP+PUT through the ring, medians of $rounds rounds"
printf '%-9s %5s %6s %10s %10s %8s %8s\n' placement pool chain A_ns/page B_ns/page A/core B/core
for p in 1 2 3; do
	name=$(echo unpinned split cpu0 | cut -d' ' -f"$p")
	for key in "1k 16" "1k 256" "64k 16" "64k 256" "64k 4096"; do
		read -r pool chain <<<"$key"
		cols=()
		for a in A B; do
			cat "$tmp"/bench.$a.* | awk -v p="$p" -v pool="$pool" -v chain="$chain" '
				/^# kvbench daemon/ { s = s % 3 + 1 }
				s == p && $1 == pool && $2 == "lookup+put" && $3 == chain { print $5, $7 }' \
				>"$tmp/rows.$a"
			cols+=("$(cut -d' ' -f1 "$tmp/rows.$a" | median)")
			cols+=("$(cut -d' ' -f2 "$tmp/rows.$a" | median)")
		done
		printf '%-9s %5s %6s %10s %10s %8s %8s\n' "$name" "$pool" "$chain" \
			"${cols[0]}" "${cols[2]}" "${cols[1]}" "${cols[3]}"
	done
done

echo "# kvserve shared, $workers workers, medians of $rounds rounds"
for a in A B; do
	echo "$a: requests/s $(awk -v a=$a '$2 == a { print $3 }' "$tmp/serve" | median)," \
	     "kvshared CPU ms $(awk -v a=$a '$2 == a { print $4 }' "$tmp/serve" | median)"
done
awk '{ v[$1, $2] = $3; c[$1, $2] = $4; n = $1 > n ? $1 : n }
     END { for (r = 1; r <= n; r++) print v[r, "B"] / v[r, "A"], (c[r, "A"] ? c[r, "B"] / c[r, "A"] : 0) }' \
	"$tmp/serve" >"$tmp/ratios"
printf 'B/A within a round: requests/s %.3f, kvshared CPU %.3f ' \
	"$(cut -d' ' -f1 "$tmp/ratios" | median)" "$(cut -d' ' -f2 "$tmp/ratios" | median)"
echo \
     "(requests/s each round: $(cut -d' ' -f1 "$tmp/ratios" | xargs printf '%.2f '))"
