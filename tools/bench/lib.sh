# lib.sh - what the benchmark scripts share: a work directory that is
# cleaned up at exit (the mount, the daemon, the files), waiting for a
# mount, the mount's counters, dropping the kernel's caches.
#   bench_init NAME      sets W (with W/mnt) and the exit trap; a script may
#                        define bench_cleanup_more for its own leftovers
#   EP_PID               the daemon started in the background, if any
BUILD=${BUILD:-build}
EP_PID=

bench_cleanup() {
	mountpoint -q "$W/mnt" 2>/dev/null && fusermount3 -uz "$W/mnt"
	[ -n "$EP_PID" ] && kill "$EP_PID" 2>/dev/null || true
	declare -F bench_cleanup_more > /dev/null && bench_cleanup_more
	rm -rf "$W"
	return 0
}

bench_init() {
	W=$(mktemp -d "/tmp/epochfs-$1.XXXXXX")
	mkdir -p "$W/mnt"
	trap bench_cleanup EXIT
}

wait_mount() {
	local i
	for i in $(seq 1000); do mountpoint -q "$1" && return 0; sleep 0.02; done
	echo "bench: $1 did not mount" >&2
	exit 1
}

stat_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$W/mnt/.epochfs/stats.json" "$1"; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
