#!/usr/bin/env bash
# make demo: generate a small dataset, mount it with a RAM cache of half its
# size, read three shuffled epochs through the mount, show what the cache did
# each epoch, unmount. Leaves nothing mounted.
set -eu
BUILD=${BUILD:-build}
D=$(mktemp -d /tmp/epochfs-demo.XXXXXX)
cleanup() { mountpoint -q "$D/mnt" 2>/dev/null && fusermount3 -u "$D/mnt"; rm -rf "$D"; }
trap cleanup EXIT
echo "== generating 2000 images into $D/src"
"$BUILD/epochfs-gen" "$D/src" --files 2000 --classes 20
size=$(du -sb --apparent-size "$D/src" | cut -f1)
mkdir -p "$D/mnt"
echo "== mounting with a cache for half the dataset: $BUILD/epochfs --cache-size $((size / 2)) $D/src $D/mnt"
"$BUILD/epochfs" -o auto_unmount --cache-size $((size / 2)) "$D/src" "$D/mnt"
stat() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join(str(d[k]) for k in sys.argv[2:]))' \
	"$D/mnt/.epochfs/stats.json" "$@"; }
echo "== 3 epochs in a fresh random order each; the kernel's page cache is dropped before"
echo "   each one, so every read reaches the daemon and its cache (epoch 0 fills it)"
for e in 0 1 2; do
	echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
	read -r h0 m0 s0 <<< "$(stat cache_hit_bytes cache_miss_bytes storage_read_bytes)"
	"$BUILD/epochfs-bench" "$D/mnt" --epochs 1 --seed $((e + 1)) | sed "s/^epoch 0/epoch $e/"
	read -r h1 m1 s1 used cap items <<< "$(stat cache_hit_bytes cache_miss_bytes storage_read_bytes \
		cache_used_bytes cache_capacity_bytes cache_items)"
	awk -v h=$((h1 - h0)) -v m=$((m1 - m0)) -v s=$((s1 - s0)) -v u="$used" -v c="$cap" -v i="$items" 'BEGIN {
		printf "         cache: %.1f%% of the bytes hit, %.1f MB read from storage; %d items, %.1f of %.1f MB\n",
		       100 * h / (h + m), s / 1e6, i, u / 1e6, c / 1e6 }'
done
echo "== what the cache did, as epochfs-stat shows it (averages since the mount):"
"$BUILD/epochfs-stat" "$D/mnt" --count 1
echo "== all counters: $D/mnt/.epochfs/stats.json"
python3 -m json.tool "$D/mnt/.epochfs/stats.json" 2>/dev/null || cat "$D/mnt/.epochfs/stats.json"
fusermount3 -u "$D/mnt"
echo "== unmounted"
