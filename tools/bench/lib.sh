# lib.sh - what the benchmark scripts share: a work directory that is
# cleaned up at exit (the mount, the daemon, the files), waiting for a
# mount, the mount's counters, dropping the kernel's caches.
#   bench_init NAME      sets W (with W/mnt) and the exit trap; a script may
#                        define bench_cleanup_more for its own leftovers
#   EP_PID               the daemon started in the background, if any
#   need_torchvision WHO  installs Debian's torchvision when missing, or
#                        says WHO is skipped and exits 0
#   prep_dataset DIR N   part 5's ImageFolder dataset of N JPEGs in DIR
#                        (generated once; kept with a .files-N mark)
#   thrash_dataset DIR N part 3's dataset (100 classes, seed 7), generated
#                        once; sets SRC (its real path) and D (its bytes)
#   ep_start ARGS...     the daemon (epochfs -f ARGS... W/mnt, stderr to W/err)
#                        in the background, mounted; sets EP_PID
#   ep_stop              unmounts it and waits for it
BUILD=${BUILD:-build}
EP_PID=

bench_cleanup() {
	mountpoint -q "$W/mnt" 2>/dev/null && { fusermount3 -uz "$W/mnt" 2>/dev/null || umount -l "$W/mnt"; }
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
	# Why: the daemon's own words (ep_start and the parts' mount_ep log there).
	local f
	for f in "$W/err" "$W/daemon.err"; do
		[ -s "$f" ] && tail -5 "$f" | sed 's/^/  daemon: /' >&2
	done
	exit 1
}

stat_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$W/mnt/.epochfs/stats.json" "$1"; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

need_torchvision() {
	/usr/bin/python3 -c "import torchvision, numpy" 2>/dev/null && return 0
	EPOCHFS_DEPS_EXTRA="python3-torchvision python3-numpy python3-pil" bash tools/install-deps.sh ||
		{ echo "$1: needs python3-torchvision; skipped" >&2; exit 0; }
}

prep_dataset() {
	[ -f "$1/.files-$2" ] && return 0
	rm -rf "$1"
	"$BUILD/epochfs-gen" "$1" --files "$2" --classes 20 --seed 5
	touch "$1/.files-$2"
}

thrash_dataset() {
	if [ ! -f "$1/.files-$2" ]; then
		rm -rf "$1"
		"$BUILD/epochfs-gen" "$1" --files "$2" --classes 100 --seed 7
		touch "$1/.files-$2"
	fi
	SRC=$(realpath "$1")
	D=$(find "$SRC" -type f -name '*.jpg' -printf '%s\n' | awk '{s+=$1} END {print s}')
}

ep_start() {
	"$BUILD/epochfs" -f "$@" "$W/mnt" 2>>"$W/err" &
	EP_PID=$!
	wait_mount "$W/mnt"
}

ep_stop() {
	fusermount3 -u "$W/mnt"
	wait "$EP_PID" || true
	EP_PID=
}
