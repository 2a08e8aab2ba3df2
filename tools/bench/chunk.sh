#!/usr/bin/env bash
# Chooses --cache-chunk from a measurement (docs/benchmarks.md, part 4).
#
# Large files are cached in chunk-sized items. A larger chunk means fewer,
# larger storage reads when a shard is first read, but a small random read
# into an uncached chunk must wait for the whole chunk. For each chunk size,
# on generated shard files (epochfs-gen --shards) with a cache that holds
# them all:
#   fill  sequential 1 MiB reads of every shard, cold: device -> cache;
#   hit   the same with only the kernel's caches dropped: from the RAM cache;
#   rand  300 random 128 KiB O_DIRECT reads, one at a time, cold (the
#         record reads of LMDB/HDF5-style loaders): mean and p99 latency,
#         which include loading the whole chunk on a first touch.
# Each figure is the median of CHUNK_ROUNDS rounds.
# Environment: CHUNK_SIZES ("128K 256K 1M 4M 16M"), CHUNK_SHARDS (3), CHUNK_ROUNDS (3),
# CHUNK_DIR (build/bench-shards), BUILD (build).
set -eu
cd "$(dirname "$0")/../.."
SIZES=${CHUNK_SIZES:-128K 256K 1M 4M 16M}
SHARDS=${CHUNK_SHARDS:-3}
ROUNDS=${CHUNK_ROUNDS:-3}
DATA=${CHUNK_DIR:-build/bench-shards}
command -v fio >/dev/null || { echo "chunk: fio not installed; skipped" >&2; exit 0; }
. tools/bench/lib.sh
bench_init chunk
if [ ! -f "$DATA/.shards-$SHARDS" ]; then
	rm -rf "$DATA"
	"$BUILD/epochfs-gen" "$DATA" --files 1 --classes 1 --shards "$SHARDS" --seed 11
	touch "$DATA/.shards-$SHARDS"
fi
SRC=$(realpath "$DATA")
D=$(du -sb --apparent-size "$SRC/shards" | cut -f1)
mount_ep() {
	"$BUILD/epochfs" -f --no-persist --cache-chunk "$1" --cache-size $((D + D / 8))B "$SRC" "$W/mnt" 2>>"$W/err" &
	EP_PID=$!
	wait_mount "$W/mnt"
	for _ in $(seq 3000); do [ "$(stat_of cache_prefaulted_bytes)" -ge "$D" ] && break; sleep 0.02; done
}
umount_ep() { fusermount3 -u "$W/mnt"; wait "$EP_PID"; EP_PID=; }
seqread() { # MB/s of fio's sequential 1 MiB reads over every shard
	fio --readonly --name=seq --opendir="$W/mnt/shards" --rw=read --bs=1m --ioengine=io_uring \
		--iodepth=4 --output-format=json 2>/dev/null | sed -n '/^{/,$p' |
		python3 -c 'import json,sys; print("%.0f" % (json.load(sys.stdin)["jobs"][0]["read"]["bw_bytes"] / 1e6))'
}

echo "== part 4: cache chunk size, $SHARDS shards, $((D / 1000000)) MB, medians of $ROUNDS rounds"
: > "$W/rows"
for r in $(seq "$ROUNDS"); do
	for c in $SIZES; do
		drop
		mount_ep "$c"
		fill=$(seqread)
		drop
		hit=$(seqread)
		umount_ep
		drop
		mount_ep "$c"
		lat=$(fio --readonly --name=rand --opendir="$W/mnt/shards" --rw=randread --bs=128k \
			--direct=1 --ioengine=psync --number_ios=300 --randseed=$r --output-format=json 2>/dev/null |
			sed -n '/^{/,$p' | python3 -c 'import json,sys; r=json.load(sys.stdin)["jobs"][0]["read"]["clat_ns"]; print("%.3f %.3f" % (r["mean"] / 1e6, r["percentile"]["99.000000"] / 1e6))')
		umount_ep
		echo "$c $fill $hit $lat" >> "$W/rows"
	done
done
python3 - "$W/rows" "$SIZES" <<'PY'
import statistics, sys
rows = {}
for l in open(sys.argv[1]):
    c, *v = l.split()
    rows.setdefault(c, []).append([float(x) for x in v])
print("%-6s %11s %11s %16s %15s" % ("chunk", "fill MB/s", "hit MB/s", "rand128k mean ms", "rand128k p99 ms"))
for c in sys.argv[2].split():
    m = [statistics.median(col) for col in zip(*rows[c])]
    print("%-6s %11.0f %11.0f %16.2f %15.2f" % (c, *m))
PY
grep -E "warning|error" "$W/err" >&2 || true
