#!/usr/bin/env bash
# make demo: generate a small dataset, mount it with a RAM cache of half its
# size, read three shuffled epochs through the mount, show what the cache did
# each epoch, restart the daemon (the cache survives it) and read one more,
# unmount. Leaves nothing mounted and no cache state behind.
set -eu
BUILD=${BUILD:-build}
D=$(mktemp -d /tmp/epochfs-demo.XXXXXX)
S=/dev/shm/epochfs-demo.$$
cleanup() { mountpoint -q "$D/mnt" 2>/dev/null && fusermount3 -u "$D/mnt"; rm -rf "$D" "$S"; }
trap cleanup EXIT
echo "== generating 2000 images into $D/src"
"$BUILD/epochfs-gen" "$D/src" --files 2000 --classes 20
size=$(du -sb --apparent-size "$D/src" | cut -f1)
mkdir -p "$D/mnt"
MOUNT=("$BUILD/epochfs" -o auto_unmount --cache-size $((size / 2))B --state-dir "$S" "$D/src" "$D/mnt")
echo "== mounting with a cache for half the dataset: ${MOUNT[*]}"
"${MOUNT[@]}"
stat() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join(str(d[k]) for k in sys.argv[2:]))' \
	"$D/mnt/.epochfs/stats.json" "$@"; }
echo "== 3 epochs in a fresh random order each; the kernel's page cache is dropped before"
echo "   each one, so every read reaches the daemon and its cache (epoch 0 fills it)"
epoch() {
	local e=$1
	echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
	read -r h0 m0 s0 <<< "$(stat cache_hit_bytes cache_miss_bytes storage_read_bytes)"
	"$BUILD/epochfs-bench" "$D/mnt" --epochs 1 --seed $((e + 1)) | sed "s/^epoch 0/epoch $e/"
	read -r h1 m1 s1 used cap items <<< "$(stat cache_hit_bytes cache_miss_bytes storage_read_bytes \
		cache_used_bytes cache_capacity_bytes cache_items)"
	awk -v h=$((h1 - h0)) -v m=$((m1 - m0)) -v s=$((s1 - s0)) -v u="$used" -v c="$cap" -v i="$items" 'BEGIN {
		printf "         cache: %.1f%% of the bytes hit, %.1f MB read from storage; %d items, %.1f of %.1f MB\n",
		       100 * h / (h + m), s / 1e6, i, u / 1e6, c / 1e6 }'
}
for e in 0 1 2; do epoch $e; done
echo "== restarting the daemon: its cache lives in $S (tmpfs) and the next one adopts it"
fusermount3 -u "$D/mnt"
for _ in $(seq 100); do mountpoint -q "$D/mnt" || break; sleep 0.05; done
"${MOUNT[@]}"
echo "   adopted $(stat persist_adopted) items ($(stat persist_adopted_bytes) bytes) in $(stat persist_adopt_seconds) s," \
     "each re-checked against SOURCE and its checksum"
epoch 3
echo "== what the cache did, as epochfs-stat shows it (averages since the mount):"
"$BUILD/epochfs-stat" "$D/mnt" --count 1
echo "== all counters: $D/mnt/.epochfs/stats.json"
python3 -m json.tool "$D/mnt/.epochfs/stats.json" 2>/dev/null || cat "$D/mnt/.epochfs/stats.json"
fusermount3 -u "$D/mnt"
echo "== unmounted"
