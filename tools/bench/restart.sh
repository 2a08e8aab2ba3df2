#!/usr/bin/env bash
# Part 9 of make bench, restarts (issue 15; docs/benchmarks.md "Part 9"):
# does a restarted daemon keep its cache, and how fast does it adopt it?
#
# (1) Epochs across a restart. Part 3's dataset (D bytes), a cache of D/2,
#     epoch 0 fills it (one random-order epoch of epochfs-bench). Then the
#     daemon stops, SOURCE's and the mount's page caches are dropped, a new
#     daemon mounts, and one epoch runs: its storage bytes against D. Four
#     ways: a clean stop (fusermount3 -u) with --persist always, kill -9
#     with the default --persist crash, a clean stop with the default (the
#     memory goes back: 1.0 D after it), and --no-persist (1.0 D). Target:
#     0.5 D after the first two.
# (2) Adoption speed. A dataset of large files (RESTART_GB GiB of 256 MiB
#     files), all cached; RESTART_RUNS restarts: seconds the adoption took
#     (persist_adopt_seconds) and from exec to a mount that serves, and
#     GB/s adopted. Target: >= 5 GB/s (re-validation reads nothing from
#     storage: the scan's stat is the check, the bytes' xxh3 the other).
#     Then one more restart after drop_caches, which on this kernel makes
#     mapping the arena's tmpfs pages about 3x slower (they stay in memory).
# (3) Memory: the daemon's RSS (and its shared part), the arena's pages in
#     tmpfs (du), cache_used_bytes, and the state after a clean stop.
#
# Environment: RESTART_GB (4), RESTART_RUNS (3), THRASH_FILES (4000) and
# THRASH_DIR (build/bench-thrash, part 3's dataset), RESTART_DIR
# (build/bench-restart, the large files), BUILD (build).
set -eu
cd "$(dirname "$0")/../.."
GB=${RESTART_GB:-4}
RUNS=${RESTART_RUNS:-3}
FILES=${THRASH_FILES:-4000}
DATA=${THRASH_DIR:-build/bench-thrash}
BIG=${RESTART_DIR:-build/bench-restart}
. tools/bench/lib.sh
STATE=/dev/shm/epochfs-bench-restart.$$
bench_cleanup_more() { rm -rf "$STATE"; }
bench_init restart

thrash_dataset "$DATA" "$FILES"

start() { ep_start "$@"; }
stop() { ep_stop; }
kill9() {
	kill -9 "$EP_PID"
	wait "$EP_PID" 2>/dev/null || true
	EP_PID=
	fusermount3 -uz "$W/mnt" 2>/dev/null || umount -l "$W/mnt"
}
epoch() { "$BUILD/epochfs-bench" "$W/mnt" --epochs 1 --seed "$1" >/dev/null; }

echo "== part 9: restarts"
echo "(1) one epoch after a restart, cache D/2, D = $((D / 1000000)) MB ($FILES files)"
printf '%-14s %10s %12s %9s %10s\n' "restart" "adopted" "storage MB" "of D" "epoch s"
for how in clean-always kill9 clean-default no-persist; do
	rm -rf "$STATE"
	opts=(--cache-size $((D / 2))B --state-dir "$STATE")
	[ $how = clean-always ] && opts+=(--persist always)
	[ $how = no-persist ] && opts=(--cache-size $((D / 2))B --no-persist)
	drop
	start "${opts[@]}" "$SRC"
	epoch 1
	if [ $how = kill9 ]; then kill9; else stop; fi
	drop
	start "${opts[@]}" "$SRC"
	adopted=$(stat_of persist_adopted)
	t0=$(date +%s.%N)
	epoch 2
	t1=$(date +%s.%N)
	sb=$(stat_of storage_read_bytes)
	stop
	printf '%-14s %10s %12.1f %9.2f %10.2f\n' "$how" "$adopted" "$(echo "$sb / 1000000" | bc -l)" \
		"$(echo "$sb / $D" | bc -l)" "$(echo "$t1 - $t0" | bc -l)"
done

echo "(2) adoption speed: ${GB} GiB of 256 MiB files, all cached, $RUNS restarts"
if [ ! -f "$BIG/.gb-$GB" ]; then
	rm -rf "$BIG"
	mkdir -p "$BIG/d"
	for i in $(seq $((GB * 4))); do
		head -c $((256 << 20)) /dev/urandom > "$BIG/d/part-$i.bin"
	done
	touch "$BIG/.gb-$GB"
fi
BSRC=$(realpath "$BIG")
rm -rf "$STATE"
drop
start --cache-size $((GB + 1))G --state-dir "$STATE" --persist always "$BSRC"
cat "$W/mnt"/d/*.bin > /dev/null
# SOURCE's own page cache after the fill: the daemon drops what it reads.
srcpc=$(fincore -b -n -o RES "$BSRC"/d/*.bin 2>/dev/null | awk '{s += $1} END {printf "%d", s}')
used=$(stat_of cache_used_bytes)
rss=$(awk '/^VmRSS/ {printf "%d", $2 * 1024}' "/proc/$EP_PID/status")
shm=$(awk '/^RssShmem/ {printf "%d", $2 * 1024}' "/proc/$EP_PID/status")
stop
arena=$(du -B1 "$STATE/arena" | cut -f1)
printf '%-6s %10s %12s %14s %12s\n' "run" "adopted GB" "adopt s" "adopt GB/s" "mount s"
rates=""
for r in $(seq "$RUNS") dropped; do
	[ "$r" = dropped ] && drop
	t0=$(date +%s.%N)
	start --cache-size $((GB + 1))G --state-dir "$STATE" --persist always "$BSRC"
	t1=$(date +%s.%N)
	ab=$(stat_of persist_adopted_bytes)
	as=$(stat_of persist_adopt_seconds)
	[ "$(stat_of persist_adopted)" = "$(stat_of cache_items)" ] || echo "restart: not every item adopted" >&2
	rate=$(echo "$ab / 1000000000 / $as" | bc -l)
	[ "$r" = dropped ] || rates="$rates $rate"
	printf '%-6s %10.2f %12.3f %14.1f %12.2f\n' "$r" "$(echo "$ab / 1000000000" | bc -l)" "$as" "$rate" \
		"$(echo "$t1 - $t0" | bc -l)"
	stop
done
med=$(echo "$rates" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}')
printf 'median of runs 1-%s: %.1f GB/s adopted (target >= 5)\n' "$RUNS" "$med"
echo "(3) memory after the fill: cache_used $((used / 1048576)) MiB; daemon RSS $((rss / 1048576)) MiB, of it" \
     "the arena's mapped pages $((shm / 1048576)) MiB; SOURCE's page cache $((${srcpc:-0} / 1048576)) MiB;" \
     "the arena's pages in tmpfs after a clean stop $((arena / 1048576)) MiB"
if [ "$arena" -gt $((used + 4096)) ]; then echo "restart: the state holds more than the items" >&2; fi
