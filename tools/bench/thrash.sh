#!/usr/bin/env bash
# The thrashing experiment (issue 3, docs/benchmarks.md part 3): does a cache
# that never evicts beat the kernel's LRU page cache under epoch-wise random
# reads, given the same memory?
#
# One generated dataset of D bytes (>= 400 MB), 4 epochs each in a fresh
# random order, caches dropped before each configuration:
#   (a) page cache: epochfs-bench directly on SOURCE in a memory cgroup of D/2;
#   (b) epochfs --cache-size D/2: daemon and reader in one memory cgroup of
#       D/2 plus the daemon's overhead (measured first, outside any cgroup);
#   the same two with reads throttled to 100 MB/s (blkio), for epoch times;
#   (c) epochfs with a cache of the whole dataset and no memory limit: epochs
#       with the kernel's caches dropped before each (every read is a hit in
#       the daemon's RAM cache), then warm epochs (the kernel's page cache).
# Per epoch: bytes pulled from the device (/proc/PID/io read_bytes of the
# reader in (a), of the daemon in (b)) and epochfs's own storage_read_bytes.
#
# Needs root, cgroup v1 memory and blkio controllers, and drop_caches.
# Environment: THRASH_FILES (4000), THRASH_EPOCHS (4), THRASH_BPS (104857600;
# 0 skips the throttled runs),
# THRASH_DIR (build/bench-thrash), BUILD (build).
set -eu
cd "$(dirname "$0")/../.."
FILES=${THRASH_FILES:-4000}
EPOCHS=${THRASH_EPOCHS:-4}
BPS=${THRASH_BPS:-104857600}
DATA=${THRASH_DIR:-build/bench-thrash}
MEMROOT=/sys/fs/cgroup/memory
BLKROOT=/sys/fs/cgroup/blkio
for d in $MEMROOT $BLKROOT; do
	[ -w "$d" ] || { echo "thrash: $d not writable (needs root and cgroup v1); skipped" >&2; exit 0; }
done

. tools/bench/lib.sh
MEMCG=$MEMROOT/epochfs-thrash-$$
BLKCG=$BLKROOT/epochfs-thrash-$$
bench_cleanup_more() {
	[ -n "$EP_PID" ] && wait "$EP_PID" 2>/dev/null
	# A cgroup stays busy for a moment after its last process exits.
	for _ in $(seq 50); do
		rmdir "$MEMCG" "$BLKCG" 2>/dev/null
		[ -d "$MEMCG" ] || [ -d "$BLKCG" ] || break
		sleep 0.1
	done
}
bench_init thrash
mkdir -p "$MEMCG" "$BLKCG"

thrash_dataset "$DATA" "$FILES"
HALF=$((D / 2))
dev=$(stat -c '%d' "$SRC")
DEVNO="$((dev >> 8)):$((dev & 255))"
# The block device itself (a partition's parent is what blkio throttles).
[ -e "/sys/dev/block/$DEVNO/partition" ] && DEVNO=$(cat "/sys/dev/block/$DEVNO/../dev")

io_read() { awk '/^read_bytes/ {print $2}' "/proc/$1/io"; }
# in_cg CMD...: runs CMD inside this run's memory and blkio cgroups.
in_cg() { sh -c 'echo $$ > "$1/cgroup.procs"; echo $$ > "$2/cgroup.procs"; shift 2; exec "$@"' sh "$MEMCG" "$BLKCG" "$@"; }
throttle() { echo "$DEVNO ${1:-0}" > "$BLKCG/blkio.throttle.read_bps_device"; }
mount_ep() { # mount_ep OPTIONS...: the daemon, inside the cgroups, in the foreground
	# exec all the way down, so that $! is the daemon itself
	(exec sh -c 'echo $$ > "$1/cgroup.procs"; echo $$ > "$2/cgroup.procs"; shift 2; exec "$@"' \
		sh "$MEMCG" "$BLKCG" "$BUILD/epochfs" -f --no-persist "$@" "$SRC" "$W/mnt" 2>>"$W/daemon.err") &
	EP_PID=$!
	wait_mount "$W/mnt"
}
umount_ep() { fusermount3 -u "$W/mnt"; wait "$EP_PID"; EP_PID=; }
wait_prefault() {
	local cap=$1
	for _ in $(seq 3000); do [ "$(stat_of cache_prefaulted_bytes)" -ge "$cap" ] && return 0; sleep 0.02; done
}

# epochs NAME DIR [drop]: EPOCHS epochs, one bench process each (seed 100+e),
# the reader in the cgroups; with "drop", the kernel's caches are dropped
# before each epoch after the first. Appends "NAME e seconds files/s device
# storage" to the rows.
epochs() {
	local name=$1 dir=$2 e
	for e in $(seq 0 $((EPOCHS - 1))); do
		local d0= d1=
		[ "${3:-}" = drop ] && [ "$e" -gt 0 ] && drop
		[ -n "$EP_PID" ] && d0=$(io_read "$EP_PID")
		in_cg "$BUILD/epochfs-bench" "$dir" --epochs 1 --seed $((100 + e)) --json > "$W/e.json"
		[ -n "$EP_PID" ] && d1=$(io_read "$EP_PID")
		python3 - "$W/e.json" "$name" "$e" "${d0:-}" "${d1:-}" >> "$W/rows" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["errors"] == 0, r
dev = int(sys.argv[5]) - int(sys.argv[4]) if sys.argv[4] else r["dev_read_bytes"]
print(sys.argv[2], sys.argv[3], r["seconds"], r["files_per_s"], dev, r["storage_read_bytes"])
PY
	done
}

echo "== part 3: the thrashing experiment: $FILES files, D = $((D / 1000000)) MB, $EPOCHS epochs, memory for D/2, device $DEVNO"
: > "$W/rows"

# The daemon's own memory beside its cache: index, threads, buffers.
"$BUILD/epochfs" -f --no-persist --cache-size "$HALF"B "$SRC" "$W/mnt" 2>>"$W/daemon.err" & EP_PID=$!
wait_mount "$W/mnt"
wait_prefault "$HALF"
rss=$(awk '/^VmRSS/ {print $2 * 1024}' "/proc/$EP_PID/status")
OVER=$((rss - $(stat_of cache_prefaulted_bytes)))
umount_ep
# Room beside the arena for the reader (two 1 MiB buffers, stacks), reads in
# flight and file metadata. With 8 MiB the kernel reclaimed pages mid-read and
# the daemon pulled 1.39 D from the device in epoch 0 (for 1.00 D served) and
# 1.06-1.09x in later epochs; from 16 MiB on the two agree within 2%.
SLACK=$((${THRASH_SLACK_MB:-16} * 1048576))
LIMIT_B=$((HALF + OVER + SLACK))
echo "daemon overhead beside its cache: $((OVER / 1048576)) MiB; cgroup (b) = D/2 + overhead + $((SLACK / 1048576)) MiB = $((LIMIT_B / 1048576)) MiB"

for bps in 0 $([ "$BPS" != 0 ] && echo "$BPS"); do
	throttle "$bps"
	tag=$([ "$bps" = 0 ] && echo "" || echo "@$((bps / 1048576))MBps")
	echo "$HALF" > "$MEMCG/memory.limit_in_bytes"
	drop
	epochs "pagecache$tag" "$SRC"

	echo "$LIMIT_B" > "$MEMCG/memory.limit_in_bytes"
	drop
	mount_ep --cache-size "$HALF"B
	wait_prefault "$HALF"
	epochs "epochfs$tag" "$W/mnt"
	echo "$(stat_of cache_used_bytes) $(stat_of cache_items)" > "$W/cache$tag"
	grep -E "^(VmRSS|VmHWM)" "/proc/$EP_PID/status" | tr -s ' \t' ' ' | tr '\n' ' ' > "$W/rss$tag"
	awk '/^(total_cache|total_rss) / {printf "%s %d MiB ", $1, $2 / 1048576}' "$MEMCG/memory.stat" >> "$W/rss$tag"
	umount_ep
done
throttle 0

# (c) a cache for the whole dataset, no memory limit.
echo -1 > "$MEMCG/memory.limit_in_bytes"
drop
mount_ep --cache-size $((D + D / 16))B
wait_prefault "$D"
epochs "epochfs-full" "$W/mnt" drop
epochs "epochfs-full-warm" "$W/mnt"
umount_ep
grep -E "warning|error" "$W/daemon.err" >&2 || true

python3 - "$W/rows" "$D" "$W" <<'PY'
import os, statistics, sys
D = int(sys.argv[2]); w = sys.argv[3]
rows = {}
for l in open(sys.argv[1]):
    n, e, sec, fps, dev, st = l.split()
    rows.setdefault(n, []).append((int(e), float(sec), float(fps), int(dev), int(st)))
print("%-22s %5s %8s %9s %11s %6s %14s %6s" % ("", "epoch", "seconds", "files/s", "device MB", "/D", "epochfs stor MB", "/D"))
for n, rs in rows.items():
    for e, sec, fps, dev, st in rs:
        s = "%14.1f %6.3f" % (st / 1e6, st / D) if st >= 0 else "%14s %6s" % ("-", "-")
        print("%-22s %5d %8.2f %9.0f %11.1f %6.3f %s" % (n, e, sec, fps, dev / 1e6, dev / D, s))
def later(n, i): return [r[i] for r in rows[n][1:]]
pc = statistics.median(later("pagecache", 3)) / D
ep = statistics.median(later("epochfs", 3)) / D
st = statistics.median(later("epochfs", 4)) / D
agree = max(abs(a - b) / max(b, 1) for a, b in zip(later("epochfs", 3), later("epochfs", 4)))
print()
print("epochs >= 1, medians:")
print("  page cache, memory D/2:   %.3f D from the device per epoch, hit rate %4.1f%%" % (pc, 100 * (1 - pc)))
print("  epochfs --cache-size D/2: %.3f D from the device per epoch, hit rate %4.1f%%   (target <= 0.52 D)" % (ep, 100 * (1 - ep)))
print("  hit rate epochfs / page cache: %.2fx   (target >= 3x)" % ((1 - ep) / max(1 - pc, 1e-9)))
hp = [1 - x / D for x in later("pagecache", 3)]; he = [1 - x / D for x in later("epochfs", 3)]
print("  by epoch: page cache %s, epochfs %s, ratio %s   (the page cache improves as its active"
      % ("/".join("%.1f%%" % (100 * x) for x in hp), "/".join("%.1f%%" % (100 * x) for x in he),
         "/".join("%.1fx" % (b / max(a, 1e-9)) for a, b in zip(hp, he))))
print("  list protects pages read twice; epochfs holds its share from epoch 1)")
print("  epochfs device bytes vs its storage_read_bytes (%.3f D): differ by %.1f%% at most   (target <= 5%%)" % (st, 100 * agree))
for tag in ("", "@%dMBps" % (int(os.environ.get("THRASH_BPS", 104857600)) // 1048576)):
    f = os.path.join(w, "rss" + tag)
    if os.path.exists(f):
        print("  memory at the end of epochfs%s: %s" % (tag or " (unthrottled)", open(f).read().strip()))
t = [k for k in rows if k.startswith("pagecache@")]
if t:
    tp, te = t[0], "epochfs" + t[0][len("pagecache"):]
    sp = statistics.median(later(tp, 1)); se = statistics.median(later(te, 1))
    bp = statistics.median(later(tp, 3)); be = statistics.median(later(te, 3))
    print("throttled to %s, epochs >= 1: page cache %.2f s, epochfs %.2f s: time ratio %.2f, device-byte ratio %.2f"
          % (tp.split("@")[1], sp, se, se / sp, be / bp))
full = later("epochfs-full", 4)
print("cache >= D: epochs >= 1 read %s bytes from storage; %.0f files/s served by the daemon's RAM cache "
      "(kernel caches dropped before each epoch), %.0f files/s warm (kernel page cache)"
      % ("/".join(str(x) for x in full), statistics.median(later("epochfs-full", 2)),
         statistics.median(later("epochfs-full-warm", 2))))
PY
