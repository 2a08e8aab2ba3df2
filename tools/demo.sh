#!/usr/bin/env bash
# make demo: generate a small dataset, mount it, read three epochs through the
# mount, show what the daemon did, unmount. Leaves nothing mounted.
set -eu
BUILD=${BUILD:-build}
D=$(mktemp -d /tmp/epochfs-demo.XXXXXX)
cleanup() { mountpoint -q "$D/mnt" 2>/dev/null && fusermount3 -u "$D/mnt"; rm -rf "$D"; }
trap cleanup EXIT
echo "== generating 2000 images into $D/src"
"$BUILD/epochfs-gen" "$D/src" --files 2000 --classes 20
mkdir -p "$D/mnt"
echo "== mounting: $BUILD/epochfs $D/src $D/mnt"
"$BUILD/epochfs" -o auto_unmount "$D/src" "$D/mnt"
echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
echo "== reading 3 epochs in random order (epoch 0 cold, then the kernel page cache)"
"$BUILD/epochfs-bench" "$D/mnt" --epochs 3
echo "== $D/mnt/.epochfs/stats.json"
python3 -m json.tool "$D/mnt/.epochfs/stats.json" 2>/dev/null || cat "$D/mnt/.epochfs/stats.json"
fusermount3 -u "$D/mnt"
echo "== unmounted"
