#!/usr/bin/env bash
# make bench - the mount benchmark (docs/benchmarks.md).
#
# Part 1, warm epochs side by side on one generated dataset (>=10k files of
# ~110 KB): native SOURCE, epochfs, and libfuse's passthrough_ll example with
# -o cache=always (built from the libfuse3-dev examples), plus epochfs --open
# (the daemon answers open) to show what skipping OPEN is worth. Each runs
# EPOCHS epochs with 2 reader threads; epoch 0 warms the caches, the median
# of the rest is reported, and ratios are taken within this one run.
#
# Part 2, the mount-time scan of a 1M-file tree (empty files): entries/s of
# a warm scan and index bytes per file, from the daemon's own stats.json.
#
# Part 3, the thrashing experiment of the MinIO cache (tools/bench/thrash.sh):
# page cache vs epochfs with the same memory, bytes from the device per epoch.
#
# Part 4, the cache chunk size (tools/bench/chunk.sh): fill, hit and cold
# random-read latency of shard files for --cache-chunk 128K..16M.
#
# Part 5, coordinated prep against torchvision 0.14 (tools/bench/prep.sh):
# images per CPU-second, CPU of k jobs sharing a group, consumer GB/s; then
# end to end (tools/bench/hpsearch.sh): K jobs of a hyperparameter search,
# wall time with one shared group (float32 and uint8) against K torchvision
# pipelines, K = 2, 4, 8.
#
# Part 6, partitioned peers (tools/bench/peers.sh): three nodes on loopback,
# storage bytes per epoch with and without peers, peer latency and GB/s.
#
# Part 7, data stalls end to end (tools/bench/stalls.sh): an unmodified
# torchvision job natively, on epochfs, under epochfs-run, and from RAM, in a
# memory cgroup on a throttled disk: seconds per epoch and the stall removed;
# then three DDP-style ranks on three peer nodes against the same from RAM
# (tools/bench/stalls_peers.sh).
#
# Part 8, epochfs-analyze's predictions (tools/bench/whatif.sh): one
# analyze run of part 7's job predicts epochs at other cache sizes, worker
# counts and disk speeds, which are then measured.
#
# Part 9, restarts (tools/bench/restart.sh): one epoch after a clean stop,
# a kill -9 and --no-persist at a D/2 cache (storage bytes against D), the
# adoption speed of a multi-GB cache, and memory against the budget; cache
# tiers (tools/bench/tiers.sh): RAM D/4 with and without an SSD tier, the
# tier alone (O_DIRECT and buffered), all in RAM, and SOURCE read natively.
# Part 10, shards at memory speed (tools/bench/shard.sh; issue 33): a 1 GB
# file read by one reader from tmpfs, through kernel passthrough from the
# RAM cache and copied through the daemon (GB/s, CPU s per GB, interleaved
# runs); small files with passthrough forced on against the no-open mode.
# Part gpu (not in the default list: BENCH_PARTS=gpu), the GPU path on a
# machine with an NVIDIA GPU (tools/bench/gpu.sh): the ingestion probe, the
# GPU consumer against the CPU reader in C and through PyTorch, and
# epochfs-analyze on a job training on the GPU; one "skipped" line without.
#
# Environment: BENCH_PARTS ("1 2 3 4 5 6 7 8 9 10"), BENCH_FILES (12000), BENCH_EPOCHS (5),
# BENCH_SCAN_FILES (1000000; 0 skips part 2), BENCH_DIR (build/bench-data);
# parts 3 to 10 take THRASH_*, CHUNK_*, PREPB_*, HP_*, PEERB_*, STALL_*, WHATIF_* and SHARD_* (see their scripts).
set -eu
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
FILES=${BENCH_FILES:-12000}
EPOCHS=${BENCH_EPOCHS:-5}
SCAN_FILES=${BENCH_SCAN_FILES:-1000000}
DATA=${BENCH_DIR:-build/bench-data}
PARTS=${BENCH_PARTS:-1 2 3 4 5 6 7 8 9 10}
part() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
W=$(mktemp -d /tmp/epochfs-bench.XXXXXX)
PIDS=""
cleanup() {
	for m in "$W"/m-*; do mountpoint -q "$m" 2>/dev/null && fusermount3 -uz "$m"; done
	for p in $PIDS; do kill "$p" 2>/dev/null || true; done
	rm -rf "$W"
}
trap cleanup EXIT

PLL=$BUILD/passthrough_ll
if [ ! -x "$PLL" ]; then
	cc -O2 -o "$PLL" /usr/share/doc/libfuse3-dev/examples/passthrough_ll.c \
		$(pkg-config --cflags --libs fuse3) || { echo "bench: cannot build passthrough_ll" >&2; exit 1; }
fi
if [ ! -f "$DATA/.files-$FILES" ]; then
	rm -rf "$DATA"
	"$BUILD/epochfs-gen" "$DATA" --files "$FILES" --classes 100 --seed 42
	touch "$DATA/.files-$FILES"
fi
SRC=$(realpath "$DATA")

wait_mount() {
	local i
	for i in $(seq 1000); do mountpoint -q "$1" && return 0; sleep 0.02; done
	echo "bench: $1 did not mount" >&2; exit 1
}

# run NAME DIR: EPOCHS epochs, prints the median files/s and MB/s of epochs 1..
run() {
	"$BUILD/epochfs-bench" "$2" --epochs "$EPOCHS" --threads 2 --json > "$W/$1.json"
	python3 - "$W/$1.json" "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
warm = rows[1:]
fps = statistics.median(r["files_per_s"] for r in warm)
mbs = statistics.median(r["mb_per_s"] for r in warm)
print("%s %.1f %.1f %s" % (sys.argv[2], fps, mbs, " ".join("%.0f" % r["files_per_s"] for r in rows)))
PY
}

if part 1; then
echo "== part 1: warm epochs, $FILES files ($(du -sh "$SRC" | cut -f1)), $EPOCHS epochs (epoch 0 warms), 2 threads"
sync; echo 3 > /proc/sys/vm/drop_caches
: > "$W/results"
run native "$SRC" >> "$W/results"

mkdir -p "$W/m-epochfs"
"$BUILD/epochfs" -f --no-persist "$SRC" "$W/m-epochfs" 2>"$W/epochfs.err" & PIDS="$PIDS $!"
wait_mount "$W/m-epochfs"
run epochfs "$W/m-epochfs" >> "$W/results"
fusermount3 -u "$W/m-epochfs"

mkdir -p "$W/m-open"
"$BUILD/epochfs" -f --no-persist --open "$SRC" "$W/m-open" 2>"$W/open.err" & PIDS="$PIDS $!"
wait_mount "$W/m-open"
run epochfs-open "$W/m-open" >> "$W/results"
fusermount3 -u "$W/m-open"

mkdir -p "$W/m-pll"
"$PLL" -f -o source="$SRC",cache=always "$W/m-pll" 2>"$W/pll.err" & PIDS="$PIDS $!"
wait_mount "$W/m-pll"
run passthrough_ll "$W/m-pll" >> "$W/results"
fusermount3 -u "$W/m-pll"
wait

python3 - "$W/results" <<'PY'
import sys
r = {}
for line in open(sys.argv[1]):
    n, fps, mbs, *per = line.split()
    r[n] = (float(fps), float(mbs), per)
print("%-16s %12s %10s   %s" % ("", "files/s", "MB/s", "per epoch files/s (epoch 0 first)"))
for n, (fps, mbs, per) in r.items():
    print("%-16s %12.0f %10.1f   %s" % (n, fps, mbs, " ".join(per)))
e, nat, pll, op = r["epochfs"][0], r["native"][0], r["passthrough_ll"][0], r["epochfs-open"][0]
print("ratio epochfs / passthrough_ll (cache=always): %.2fx   (target >= 2.0)" % (e / pll))
print("ratio epochfs / native:                        %.2fx   (target >= 0.5)" % (e / nat))
print("ratio epochfs --open / passthrough_ll:         %.2fx" % (op / pll))
print("ratio passthrough_ll / native:                 %.2fx" % (pll / nat))
PY
fi

if part 2 && [ "$SCAN_FILES" -gt 0 ]; then
	T1M=$BUILD/bench-scan-$SCAN_FILES
	if [ ! -f "$T1M/.done" ]; then
		echo "== creating $SCAN_FILES empty files in $T1M"
		rm -rf "$T1M"
		python3 - "$T1M" "$SCAN_FILES" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
per = 1000
for d in range((n + per - 1) // per):
    p = os.path.join(root, "class_%05d" % d)
    os.makedirs(p, exist_ok=True)
    for i in range(min(per, n - d * per)):
        os.close(os.open(os.path.join(p, "%08d.jpg" % (d * per + i)), os.O_CREAT | os.O_WRONLY, 0o644))
PY
		touch "$T1M/.done"
	fi
	echo "== part 2: mount-time scan of $SCAN_FILES files (warm: a first mount warms the dentry cache)"
	for pass in cold-ish warm; do
		mkdir -p "$W/m-scan"
		"$BUILD/epochfs" -f --no-persist --no-watch "$T1M" "$W/m-scan" 2>"$W/scan.err" & pid=$!
		wait_mount "$W/m-scan"
		python3 - "$W/m-scan/.epochfs/stats.json" "$pid" "$pass" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
rss = int([l for l in open("/proc/%s/status" % sys.argv[2]) if l.startswith("VmRSS")][0].split()[1]) * 1024
n = s["files"] + s["dirs"] + s["symlinks"]
print("%-8s scan: %d entries in %.2f s = %.0f entries/s (target >= 100k/s); index %.1f bytes/file "
      "(target <= 150); daemon RSS %.1f MB" % (sys.argv[3], n, s["scan_seconds"], n / s["scan_seconds"],
      s["index_bytes"] / s["files"], rss / 1e6))
PY
		fusermount3 -u "$W/m-scan"
		wait "$pid"
	done
fi

if part 3; then
	BUILD=$BUILD bash tools/bench/thrash.sh
fi

if part 4; then
	BUILD=$BUILD bash tools/bench/chunk.sh
fi

if part 5; then
	BUILD=$BUILD bash tools/bench/prep.sh
	BUILD=$BUILD bash tools/bench/hpsearch.sh
fi

if part 6; then
	BUILD=$BUILD bash tools/bench/peers.sh
fi

if part 7; then
	BUILD=$BUILD bash tools/bench/stalls.sh
	BUILD=$BUILD bash tools/bench/stalls_peers.sh
fi

if part 8; then
	BUILD=$BUILD bash tools/bench/whatif.sh
fi

if part 9; then
	BUILD=$BUILD bash tools/bench/restart.sh
	BUILD=$BUILD bash tools/bench/tiers.sh
fi

if part 10; then
	BUILD=$BUILD bash tools/bench/shard.sh
fi

if part gpu; then
	BUILD=$BUILD bash tools/bench/gpu.sh
fi
