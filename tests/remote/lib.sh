# SPDX-License-Identifier: GPL-2.0
#
# Helpers of the remote tier's tests (remote_test.sh) and bench
# (remote_bench.sh): real redis-server and kvshared processes on
# 127.0.0.1 ports picked free at run time, each in $tmp, every one killed
# by the EXIT trap.  Sourced; expects $build.

tmp=$(mktemp -d)
pids=()
admin_pw=adminpw-$$
tier_pw=tierpw-$$

cleanup() {
	local p
	for p in "${pids[@]}"; do
		kill -9 "$p" 2>/dev/null
	done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

# N distinct free TCP ports on 127.0.0.1 (held open until all are picked).
free_ports() {
	/usr/bin/python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# A port's bus port (port + 10000) must be free too for a cluster node:
# pick ports below 55535 whose +10000 is free.
free_cluster_ports() {
	/usr/bin/python3 - "$1" <<'EOF'
import socket, sys
socks, ports = [], []
while len(ports) < int(sys.argv[1]):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    if p >= 55535:
        s.close()
        continue
    b = socket.socket()
    try:
        b.bind(("127.0.0.1", p + 10000))
    except OSError:
        s.close()
        continue
    socks += [s, b]
    ports.append(p)
print(" ".join(map(str, ports)))
EOF
}

# The ACL: "default" is the tests' admin; kvshared logs in as "kvshare",
# which may only GET and SET the tier's keys.
acl_args=(--user default on ">$admin_pw" '~*' '&*' '+@all'
	  --user kvshare on ">$tier_pw" '~kvs1:*' '+get' '+set' '+ping'
	  '+cluster|slots' '+asking' '+readonly')

rcli() {
	local port=$1
	shift
	redis-cli -p "$port" --user default --pass "$admin_pw" --no-auth-warning "$@"
}

# start_redis NAME PORT [redis-server args]: pid in redis_pid[NAME].
declare -A redis_pid
start_redis() {
	local name=$1 port=$2 i
	shift 2
	mkdir -p "$tmp/$name"
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$tmp/$name" --logfile "$tmp/$name/log" --masteruser default \
		--masterauth "$admin_pw" "${acl_args[@]}" "$@" &
	redis_pid[$name]=$!
	pids+=($!)
	for i in $(seq 50); do
		if [ "$port" = 0 ]; then	# TLS only: its log says when
			grep -q 'Ready to accept' "$tmp/$name/log" 2>/dev/null && return 0
		elif [ "$(rcli "$port" ping 2>/dev/null)" = PONG ]; then
			return 0
		fi
		sleep 0.1
	done
	echo "# redis $name did not start:"
	sed 's/^/#   /' "$tmp/$name/log"
	return 1
}

# start_kvshared NAME POOLSPEC: socket $tmp/NAME.sock, metrics
# $tmp/NAME.met, log $tmp/NAME.log; 0 once ready, else 1 (status in
# $tmp/NAME.status).  POOLSPEC "": no --pool; kvsd_args: more flags.
declare -A kvsd_pid
kvsd_args=()
start_kvshared() {
	local name=$1 spec=$2 i
	# A host started again under its name must not be taken for ready
	# by its predecessor's log.
	: >"$tmp/$name.log"
	rm -f "$tmp/$name.sock" "$tmp/$name.status"
	"${kvsd_bin:-$build/kvshared}" --mode socket --socket "$tmp/$name.sock" \
		--metrics "unix:$tmp/$name.met" ${spec:+--pool "$spec"} \
		"${kvsd_args[@]}" 2>"$tmp/$name.log" &
	kvsd_pid[$name]=$!
	pids+=($!)
	for i in $(seq 100); do
		grep -q '^kvshared: ready' "$tmp/$name.log" 2>/dev/null && return 0
		if ! kill -0 "${kvsd_pid[$name]}" 2>/dev/null; then
			wait "${kvsd_pid[$name]}"
			echo $? >"$tmp/$name.status"
			return 1
		fi
		sleep 0.1
	done
	return 1
}

# stop_kvshared NAME: its exit status; a non-zero one (an ASan report, a
# leak) is also counted in bad_exits.
bad_exits=0
n_exits=0
stop_kvshared() {
	local st
	kill -TERM "${kvsd_pid[$1]}" 2>/dev/null
	wait "${kvsd_pid[$1]}" 2>/dev/null
	st=$?
	n_exits=$((n_exits + 1))
	if [ "$st" != 0 ]; then
		bad_exits=$((bad_exits + 1))
		echo "# kvshared $1 exited with status $st:"
		sed 's/^/#   /' "$tmp/$1.log" | tail -30
	fi
	return "$st"
}

# metric NAME REGEX: the sum of the samples whose line matches REGEX.
metric() {
	curl -s --max-time 5 --unix-socket "$tmp/$1.met" http://kvshared/metrics |
		awk -v re="$2" '$0 !~ /^#/ && $0 ~ re { s += $NF } END { print s + 0 }'
}

# wait_until SECONDS COMMAND...: poll COMMAND every 0.1 s until it
# succeeds; 1 if it never did within SECONDS.
wait_until() {
	local tries=$(($1 * 10))
	shift
	until "$@"; do
		tries=$((tries - 1))
		[ "$tries" -gt 0 ] || return 1
		sleep 0.1
	done
}

# drained NAME: every page host NAME queued for Redis is written or
# failed (kvshared writes behind the publish: a kvserve that returned
# may have pages still on their way).
drained() { [ "$(metric "$1" '^kvshare_remote_write_pending')" = 0 ]; }

# serve_drained NAME OUT [kvserve args]: serve, then wait (10 s at most)
# until host NAME's writes are settled, so that another host can count
# on finding them.
serve_drained() {
	serve "$@"
	wait_until 10 drained "$1" || echo "# host $1: writes still pending after 10 s"
}

# serve NAME OUT [kvserve args]: kvserve on host NAME; its status in OUT.st.
serve() {
	local name=$1 out=$2
	shift 2
	KVSHARE_ARBITER=$tmp/$name.sock "$build/kvserve" --pool kvserve "$@" >"$out" 2>&1
	echo $? >"$out.st"
}

# Fields of a kvserve summary.
computed() { sed -n 's/^ *pages computed *\([0-9]*\) .*/\1/p' "$1"; }
digest() { sed -n 's/^ *outputs digest *\([0-9a-f]*\).*/\1/p' "$1"; }
verified() { grep -q 'equal to the bit' "$1" && [ "$(cat "$1.st")" = 0 ]; }

# A pool spec backed onto NODES ("H:P+H:P"), with more remote_* keys.
pool_spec() {
	local nodes=$1 more=${2:-} geom=${3:-dtype=bf16}
	echo "kvserve:pages=1024,layers=2,kv_heads=2,head_dim=64,tokens_per_page=16,$geom,mode=0600,memory=host,remote=$nodes,remote_user=kvshare,remote_password_file=$tmp/pw$more"
}

printf '%s\n' "$tier_pw" >"$tmp/pw"
chmod 600 "$tmp/pw"
