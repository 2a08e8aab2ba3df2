#!/usr/bin/env bash
# Shards at memory speed (docs/benchmarks.md, part 10; issue 33): kernel
# FUSE passthrough from the RAM cache against the copy through the daemon.
#
# Large files, side by side in one run: one reader reads a SHARD_SIZE file
#   tmpfs        from /dev/shm (the ceiling: a read from memory);
#   passthrough  through an epochfs mount whose RAM cache holds it whole,
#                --passthrough on (the kernel reads the cache's memfd);
#   copy         the same through a mount with --passthrough off (every
#                byte copied through the daemon).
# Both mounts run at once, each with a cache holding the file, warmed by two
# reads first (the second one through passthrough where it is on). Before
# each timed read the kernel's page cache of the file read is dropped, for
# that file only (POSIX_FADV_DONTNEED on it: never the machine's caches;
# tmpfs keeps its pages, which are the file). Runs are interleaved (tmpfs,
# passthrough, copy, tmpfs, ...), SHARD_RUNS of each; each case reports the
# median GB/s and CPU seconds per GB of the reader and the daemon together
# (their utime + stime from /proc/PID/stat), with the range.
#
# Small files, the question passthrough raises for them: it needs OPEN
# answered for every file (the no-open mode is the connection's), a round
# trip each. SHARD_SMALL_FILES files of about SHARD_SMALL_KB KB, cached
# whole, one reader thread, read in a fresh random order each epoch with
# the mount's page cache dropped before it (per file, outside the timing):
# files/s and daemon CPU per file with --passthrough on (forced) and off
# (the no-open mode), SHARD_RUNS interleaved epochs each, medians.
#
# Environment: SHARD_SIZE (1G), SHARD_RUNS (5), SHARD_SMALL_FILES (4000),
# SHARD_SMALL_KB (92), SHARD_DIR (build/bench-shard), BUILD (build).
# Needs root (CAP_SYS_ADMIN) and a kernel with FUSE passthrough; says why
# and stops where it has neither.
set -eu
cd "$(dirname "$0")/../.."
. tools/bench/lib.sh
SIZE=${SHARD_SIZE:-1G}
RUNS=${SHARD_RUNS:-5}
NSMALL=${SHARD_SMALL_FILES:-4000}
SMALL_KB=${SHARD_SMALL_KB:-92}
DATA=${SHARD_DIR:-build/bench-shard}
bench_init shard
mkdir -p "$W/m-pt" "$W/m-copy" "$W/m-spt" "$W/m-scopy"
PIDS=()
bench_cleanup_more() {
	local m
	for m in "$W"/m-*; do mountpoint -q "$m" 2>/dev/null && fusermount3 -uz "$m"; done
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -f "/dev/shm/epochfs-bench-shard.$$"
}
bytes=$(python3 -c '
import sys; s = sys.argv[1]; u = {"K": 10, "M": 20, "G": 30}
print(int(s[:-1]) << u[s[-1]] if s[-1] in u else int(s))' "$SIZE")
if [ ! -f "$DATA/.made-$bytes-$NSMALL-$SMALL_KB" ]; then
	rm -rf "$DATA"
	mkdir -p "$DATA/big" "$DATA/small"
	python3 - "$DATA" "$bytes" "$NSMALL" "$SMALL_KB" <<'PY'
import os, random, sys
root, size, n, kb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = random.Random(33)
block = r.randbytes(1 << 20)
with open(os.path.join(root, "big", "shard-000.tar"), "wb") as f:
    for i in range(0, size, 1 << 20):
        f.write(block[: min(1 << 20, size - i)])
for i in range(n):
    d = os.path.join(root, "small", "class_%02d" % (i % 20))
    os.makedirs(d, exist_ok=True)
    sz = max(1024, int(r.gauss(kb * 1000, kb * 250)))
    open(os.path.join(d, "%05d.jpg" % i), "wb").write(r.randbytes(sz))
PY
	touch "$DATA/.made-$bytes-$NSMALL-$SMALL_KB"
fi
SRC=$(realpath "$DATA")
TMPFS=/dev/shm/epochfs-bench-shard.$$
cp "$SRC/big/shard-000.tar" "$TMPFS"

# start NAME SOURCE ARGS...: a daemon on W/m-NAME, its pid in W/NAME.pid
start() {
	local name=$1 src=$2
	shift 2
	"$BUILD/epochfs" -f --no-persist "$@" "$src" "$W/m-$name" 2>>"$W/err" &
	PIDS+=($!)
	echo $! > "$W/$name.pid"
	wait_mount "$W/m-$name"
}
stat_in() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$W/m-$1/.epochfs/stats.json" "$2"; }

start pt "$SRC/big" --passthrough on --cache-size $((bytes + (64 << 20)))B
start copy "$SRC/big" --passthrough off --cache-size $((bytes + (64 << 20)))B
if [ "$(stat_in pt passthrough)" != on ]; then
	echo "== part 10: skipped: passthrough is $(stat_in pt passthrough)"
	exit 0
fi

echo "== part 10: a $SIZE shard read by one reader, the kernel's copy of it dropped before each read," \
	"$RUNS interleaved runs (medians, range)"
python3 - "$RUNS" "$TMPFS" "$W/m-pt/shard-000.tar" "$(cat "$W/pt.pid")" \
	"$W/m-copy/shard-000.tar" "$(cat "$W/copy.pid")" <<'PY'
import os, resource, statistics, sys, time
runs = int(sys.argv[1])
cases = [("tmpfs", sys.argv[2], None), ("passthrough", sys.argv[3], sys.argv[4]),
         ("copy (--passthrough off)", sys.argv[5], sys.argv[6])]
tick = os.sysconf("SC_CLK_TCK")
def daemon_cpu(pid):
    if pid is None:
        return 0.0
    f = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick     # utime, stime
buf = bytearray(4 << 20)
def read(path):
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    n = 0
    mv = memoryview(buf)
    while True:
        k = os.readv(fd, [mv])
        if not k:
            break
        n += k
    os.close(fd)
    return n
for _, path, _ in cases[1:]:     # fill the caches, then once more (passthrough from here)
    read(path); read(path)
rows = {c[0]: [] for c in cases}
for r in range(runs):
    for name, path, pid in cases:
        # The file's own pages go first; tmpfs keeps them (they are the file).
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        ru0, d0, t0 = resource.getrusage(resource.RUSAGE_SELF), daemon_cpu(pid), time.perf_counter()
        n = read(path)
        t1, d1, ru1 = time.perf_counter(), daemon_cpu(pid), resource.getrusage(resource.RUSAGE_SELF)
        cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime) + (d1 - d0)
        gb = n / 1e9
        rows[name].append((gb / (t1 - t0), cpu / gb))
tm = statistics.median(g for g, _ in rows["tmpfs"])
tc = statistics.median(c for _, c in rows["tmpfs"])
print("%-26s %18s %26s %10s %10s" % ("", "GB/s", "CPU s/GB (reader+daemon)", "x tmpfs", "CPU x"))
for name, _, _ in cases:
    g = sorted(x for x, _ in rows[name]); c = sorted(y for _, y in rows[name])
    mg, mc = statistics.median(g), statistics.median(c)
    print("%-26s %6.2f (%5.2f-%5.2f) %12.3f (%5.3f-%5.3f) %10.2f %10.2f" %
          (name, mg, g[0], g[-1], mc, c[0], c[-1], mg / tm, mc / tc if tc else float("nan")))
PY
pto=$(stat_in pt passthrough_opens)
crb=$(stat_in copy read_bytes)
echo "passthrough mount: $pto passthrough opens, $(stat_in pt read_bytes) bytes through the daemon;" \
	"copy mount: $crb bytes through the daemon"
for n in pt copy; do fusermount3 -u "$W/m-$n"; done

start spt "$SRC/small" --passthrough on --cache-size 2G
start scopy "$SRC/small" --passthrough off --cache-size 2G
echo "== part 10: $NSMALL files of ~$SMALL_KB KB, cached, one reader, the mount's page cache dropped" \
	"before each epoch, $RUNS interleaved epochs (medians)"
python3 - "$RUNS" "$W/m-spt" "$(cat "$W/spt.pid")" "$W/m-scopy" "$(cat "$W/scopy.pid")" <<'PY'
import os, random, statistics, sys, time
runs = int(sys.argv[1])
cases = [("passthrough on (OPEN answered)", sys.argv[2], sys.argv[3]),
         ("passthrough off (no-open mode)", sys.argv[4], sys.argv[5])]
tick = os.sysconf("SC_CLK_TCK")
def daemon_cpu(pid):
    f = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick
def files(root):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) if ".epochfs" not in d for f in fs)
def drop(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
def epoch(paths):
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass
lists = {name: files(root) for name, root, _ in cases}
for name, _, _ in cases:        # fill the caches
    epoch(lists[name])
rows = {c[0]: [] for c in cases}
rng = random.Random(5)
for r in range(runs):
    order = list(range(len(lists[cases[0][0]])))
    rng.shuffle(order)
    for name, root, pid in cases:
        paths = [lists[name][i] for i in order]
        drop(paths)
        d0, t0 = daemon_cpu(pid), time.perf_counter()
        epoch(paths)
        t1, d1 = time.perf_counter(), daemon_cpu(pid)
        rows[name].append((len(paths) / (t1 - t0), (d1 - d0) / len(paths) * 1e6))
print("%-32s %24s %22s" % ("", "files/s", "daemon CPU us/file"))
for name, _, _ in cases:
    f = sorted(x for x, _ in rows[name]); c = sorted(y for _, y in rows[name])
    print("%-32s %8.0f (%6.0f-%6.0f) %8.1f (%5.1f-%5.1f)" % (name, statistics.median(f), f[0], f[-1],
          statistics.median(c), c[0], c[-1]))
PY
echo "small files: $(stat_in spt opens) opens answered with passthrough on, $(stat_in scopy opens) with it off"
for n in spt scopy; do fusermount3 -u "$W/m-$n"; done
wait
