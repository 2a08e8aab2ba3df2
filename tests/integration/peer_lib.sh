# peer_lib.sh - several epochfs nodes for the peer tests: each with its own
# mountpoint, port and stderr file, over one SOURCE. Needs lib.sh first.
#   start_node R [env...] -- [options]: node R (NODE_WRAP, if set, prefixes
#                        the command: nsenter into a host's network; NODE_SRC,
#                        if set, is its SOURCE instead of $T/src)
#   stop_node R: unmount and expect exit 0;  kill_node R: SIGKILL, lazy unmount
#   total KEY: the sum of a stats.json value over the live nodes
#   epoch_all SEED WHAT: all three nodes read every file, checked, settled
NODE_PID=()
NODE_UP=()

peer_cleanup() {
	local r
	for r in "${!NODE_PID[@]}"; do
		mountpoint -q "$T/m$r" 2>/dev/null && fusermount3 -uz "$T/m$r"
		disown "${NODE_PID[$r]}" 2>/dev/null
		kill -9 "${NODE_PID[$r]}" 2>/dev/null
	done
	drop_states
	rm -rf "$T"
}
trap peer_cleanup EXIT

# free_ports N: N TCP ports nobody listens on now.
free_ports() {
	python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

start_node() {
	local r=$1 envs=()
	shift
	while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
	[ "${1:-}" = -- ] && shift
	mkdir -p "$T/m$r"
	env "${envs[@]}" ${NODE_WRAP:-} "$EPOCHFS" -f --rank "$r" "$@" "${NODE_SRC:-$T/src}" "$T/m$r" 2>"$T/err$r" &
	NODE_PID[$r]=$!
	NODE_UP[$r]=1
	local i
	for i in $(seq 1000); do
		mountpoint -q "$T/m$r" && return 0
		kill -0 "${NODE_PID[$r]}" 2>/dev/null || { cat "$T/err$r"; fail "node $r exited before mounting"; }
		sleep 0.02
	done
	fail "node $r did not mount within 20 s"
}

stop_node() {
	local r=$1 rc=0
	fusermount3 -u "$T/m$r" || fail "fusermount3 -u node $r"
	wait "${NODE_PID[$r]}" || rc=$?
	unset "NODE_PID[$r]"
	NODE_UP[$r]=0
	[ "$rc" = 0 ] || { cat "$T/err$r"; fail "node $r exited with $rc"; }
}

kill_node() {
	local r=$1 pid=${NODE_PID[$1]}
	disown "$pid" 2>/dev/null       # no "Killed" line from the shell
	kill -9 "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
	fusermount3 -uz "$T/m$r" 2>/dev/null
	unset "NODE_PID[$r]"
	NODE_UP[$r]=0
}

total() {
	local r sum=0
	for r in "${!NODE_UP[@]}"; do
		[ "${NODE_UP[$r]}" = 1 ] && sum=$((sum + $(stat_of "$T/m$r" "$1")))
	done
	echo $sum
}

# read_all R [SEED]: cats every file of node R's mount in a shuffled order,
# checking each against SOURCE. Prints the number of files that differ.
read_all() {
	python3 - "$T/src" "$T/m$1" "${2:-$1}" <<'PY'
import os, random, sys
src, mnt, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = sorted(os.path.relpath(os.path.join(d, f), src)
               for d, _, fs in os.walk(src) for f in fs)
random.Random(seed).shuffle(files)
bad = 0
for rel in files:
    with open(os.path.join(src, rel), "rb") as a, open(os.path.join(mnt, rel), "rb") as b:
        if a.read() != b.read():
            bad += 1
print(bad)
PY
}

# epoch_all SEED WHAT: nodes 0, 1 and 2 read every file at once, each in
# its own order (SEED + rank); fails naming WHAT if any byte differs.
epoch_all() {
	local r pids=""
	for r in 0 1 2; do read_all "$r" $(($1 + r)) > "$T/bad$r" & pids="$pids $!"; done
	wait $pids
	for r in 0 1 2; do
		[ "$(cat "$T/bad$r")" = 0 ] || fail "$2, node $r: $(cat "$T/bad$r") files differ from SOURCE"
	done
	settle
}

# settle: waits until no node's storage or peer byte counts move for 0.3 s:
# the kernel's readahead may still be answering after a reader returned.
settle() {
	local a b i
	b="$(total storage_read_bytes) $(total peer_read_bytes) $(total tier_admitted)"
	for i in $(seq 100); do
		sleep 0.3
		a=$b
		b="$(total storage_read_bytes) $(total peer_read_bytes) $(total tier_admitted)"
		[ "$a" = "$b" ] && return 0
	done
	fail "the counters never settled"
}

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
