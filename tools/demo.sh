#!/usr/bin/env bash
# make demo: generate a small dataset, mount it with a RAM cache of half its
# size, read three shuffled epochs through the mount, restart the daemon
# (the cache is kept across a planned restart) and read one more, then
# print one short table of what each epoch did and unmount. Leaves nothing
# mounted and no cache state behind. DEMO_JSON=1 (make demo JSON=1) also
# prints every counter the mount keeps, as .epochfs/stats.json has them.
set -eu
BUILD=${BUILD:-build}
FILES=${DEMO_FILES:-2000}
D=$(mktemp -d /tmp/epochfs-demo.XXXXXX)
S=/dev/shm/epochfs-demo.$$
cleanup() { mountpoint -q "$D/mnt" 2>/dev/null && fusermount3 -u "$D/mnt"; rm -rf "$D" "$S"; }
trap cleanup EXIT
echo "== generating $FILES images into $D/src"
"$BUILD/epochfs-gen" "$D/src" --files "$FILES" --classes 20
size=$(du -sb --apparent-size "$D/src" | cut -f1)
mkdir -p "$D/mnt"
# --persist always: a clean stop keeps the cache for the next daemon (the
# default, crash, keeps it only when the daemon dies).
MOUNT=("$BUILD/epochfs" -o auto_unmount --cache-size $((size / 2))B --persist always --state-dir "$S"
	"$D/src" "$D/mnt")
echo "== mounting with a RAM cache for half the dataset (D/2):"
echo "   ${MOUNT[*]}"
"${MOUNT[@]}"
stat() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join(str(d[k]) for k in sys.argv[2:]))' \
	"$D/mnt/.epochfs/stats.json" "$@"; }
echo "== reading 3 epochs, each whole dataset in a fresh random order (the kernel's page"
echo "   cache dropped first, so every read reaches the daemon), then restarting the daemon"
ROWS=$D/rows
epoch() {
	local e=$1 note=$2
	echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
	read -r s0 <<< "$(stat storage_read_bytes)"
	"$BUILD/epochfs-bench" "$D/mnt" --epochs 1 --seed $((e + 1)) --json > "$D/epoch.json"
	read -r s1 used items <<< "$(stat storage_read_bytes cache_used_bytes cache_items)"
	python3 - "$D/epoch.json" "$e" $((s1 - s0)) "$used" "$items" "$note" >> "$ROWS" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
e, storage, used, items, note = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
hit = 100.0 * (1 - storage / r["bytes"]) if r["bytes"] else 0.0
print("%5d %8.0f %8.1f %7.1f%% %11.1f %9.1f %7d  %s" % (e, r["files_per_s"], r["mb_per_s"], max(hit, 0.0),
      storage / 1e6, used / 1e6, items, note))
PY
}
epoch 0 "fills the cache: every byte from storage"
epoch 1 "half from the cache, half from storage"
epoch 2 "the same half: nothing evicted, nothing thrashed"
fusermount3 -u "$D/mnt"
for _ in $(seq 100); do mountpoint -q "$D/mnt" || break; sleep 0.05; done
"${MOUNT[@]}"
adopted=$(stat persist_adopted persist_adopted_bytes persist_adopt_seconds)
read -r a_items a_bytes a_secs <<< "$adopted"
epoch 3 "after the restart: the cache was kept"
echo
printf "%5s %8s %8s %8s %11s %9s %7s\n" epoch files/s MB/s hit "storage MB" "cache MB" items
cat "$ROWS"
echo
awk -v d="$size" -v n="$FILES" -v i="$a_items" -v b="$a_bytes" -v t="$a_secs" 'BEGIN {
	printf "dataset %.1f MB in %d files; cache budget %.1f MB. \"hit\": bytes read that did\n", d / 1e6, n, d / 2e6
	printf "not come from storage. The restart adopted %d items (%.1f MB) in %s s,\n", i, b / 1e6, t }'
echo "each re-checked against SOURCE and its checksum. Live view: epochfs-stat MOUNTPOINT."
if [ "${DEMO_JSON:-0}" = 1 ]; then
	echo "== every counter ($D/mnt/.epochfs/stats.json):"
	python3 -m json.tool "$D/mnt/.epochfs/stats.json" 2>/dev/null || cat "$D/mnt/.epochfs/stats.json"
fi
fusermount3 -u "$D/mnt"
echo "== unmounted; the cache state is removed (make demo JSON=1 prints every counter)"
