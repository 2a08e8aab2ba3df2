#!/usr/bin/env bash
# Part 9 of make bench, cache tiers (issue 15; docs/benchmarks.md "Part 9"):
# what a second, no-eviction tier on local disk (--cache-dir) buys a
# dataset that RAM holds a quarter of.
#
# Part 3's dataset (D bytes), TIER_EPOCHS epochs after the fill, the
# kernel's caches dropped before every epoch (every read reaches the daemon
# or the disk), files/s of epochfs-bench (2 threads) and the storage bytes
# of each epoch, for:
#   native     epochfs-bench on SOURCE itself (the same disk, cold)
#   ram-only   epochfs, RAM cache D/4, no tier (0.75 D from storage an epoch)
#   ram+tier   epochfs, RAM D/4 + a tier of D on this machine's disk (target:
#              0 storage bytes after epoch 0)
#   tier-only  RAM 64 KiB (no item fits) + the tier: files/s from the tier,
#              O_DIRECT, and again with --cache-dir-io buffered
#   ram-all    RAM for the whole dataset: files/s from RAM
# Then the tier's pages in the page cache (fincore) after the O_DIRECT epochs
# (the tier keeps no second copy in memory) against the buffered ones.
#
# Environment: TIER_EPOCHS (3), THRASH_FILES (4000), THRASH_DIR
# (build/bench-thrash), TIER_DIR (a directory on the disk to test; default:
# the work directory, on the same disk as SOURCE), BUILD (build).
set -eu
cd "$(dirname "$0")/../.."
EPOCHS=${TIER_EPOCHS:-3}
FILES=${THRASH_FILES:-4000}
DATA=${THRASH_DIR:-build/bench-thrash}
. tools/bench/lib.sh
bench_init tiers
TD=${TIER_DIR:-$W/tier}
thrash_dataset "$DATA" "$FILES"

start() { ep_start --no-persist "$@" "$SRC"; }
stop() { ep_stop; }
# run NAME DIR: the fill epoch (epoch 0), then EPOCHS epochs, caches dropped
# before each; prints a row (files/s median of the epochs after the fill).
run() {
	local name=$1 dir=$2 e out rates="" sb0 sb=0 fill
	for e in $(seq 0 "$EPOCHS"); do
		drop
		[ "$dir" = "$W/mnt" ] && sb0=$(stat_of storage_read_bytes)
		out=$("$BUILD/epochfs-bench" "$dir" --epochs 1 --seed $((e + 1)))
		f=$(echo "$out" | grep -o '[0-9]* files/s' | cut -d' ' -f1)
		if [ "$e" = 0 ]; then fill=$f; else rates="$rates $f"; fi
		if [ "$dir" = "$W/mnt" ] && [ "$e" -gt 0 ]; then
			sb=$((sb + $(stat_of storage_read_bytes) - sb0))
		fi
		# The tier writes behind the readers: let the fill's writes land.
		if [ "$e" = 0 ] && [ "$dir" = "$W/mnt" ]; then
			local a b
			for _ in $(seq 100); do
				a=$(stat_of tier_admitted); sleep 0.2; b=$(stat_of tier_admitted)
				[ "$a" = "$b" ] && break
			done
		fi
	done
	med=$(echo "$rates" | tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}')
	if [ "$dir" = "$W/mnt" ]; then
		printf '%-11s %10s %12s %14.2f %12s\n' "$name" "$fill" "$med" "$(echo "$sb / $EPOCHS / $D" | bc -l)" \
			"$(stat_of tier_items)"
	else
		printf '%-11s %10s %12s %14s %12s\n' "$name" "$fill" "$med" "(all)" "-"
	fi
}

echo "== part 9: cache tiers, D = $((D / 1000000)) MB ($FILES files), $EPOCHS epochs after the fill, caches dropped before each"
echo "   tier on $(df --output=source "$(dirname "$TD")" | tail -1) ($(df --output=fstype "$(dirname "$TD")" | tail -1)); SOURCE on $(df --output=source "$SRC" | tail -1)"
printf '%-11s %10s %12s %14s %12s\n' "config" "fill f/s" "epoch f/s" "storage D/ep" "tier items"
run native "$SRC"
start --cache-size $((D / 4))B
run ram-only "$W/mnt"
stop
rm -rf "$TD"
start --cache-size $((D / 4))B --cache-dir "$TD" --cache-dir-size $((D + D / 8))B
run ram+tier "$W/mnt"
stop
rm -rf "$TD"
start --cache-size 64K --cache-dir "$TD" --cache-dir-size $((D + D / 8))B
run tier-only "$W/mnt"
direct_pc=$(fincore -b -n -o RES "$TD/epochfs-tier/arena" 2>/dev/null | awk '{printf "%d", $1}')
stop
rm -rf "$TD"
start --cache-size 64K --cache-dir "$TD" --cache-dir-size $((D + D / 8))B --cache-dir-io buffered
run tier-buf "$W/mnt"
buf_pc=$(fincore -b -n -o RES "$TD/epochfs-tier/arena" 2>/dev/null | awk '{printf "%d", $1}')
stop
rm -rf "$TD"
start --cache-size $((D + D / 8))B
run ram-all "$W/mnt"
stop
echo "the tier's data file in the page cache after its last epoch: O_DIRECT $((${direct_pc:-0} / 1048576)) MiB," \
     "buffered $((${buf_pc:-0} / 1048576)) MiB"
