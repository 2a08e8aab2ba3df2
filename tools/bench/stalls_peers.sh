#!/usr/bin/env bash
# make bench part 7, across nodes: three DDP-style ranks on three epochfs
# nodes on loopback, against the same three ranks reading from RAM.
#
# The part 7 dataset (4,000 JPEGs, D = 474 MB). Three nodes over one SOURCE,
# caches of D/3 + 0.5% each (together they hold D once), partitioned peers,
# the disk throttled to BPS (blkio, every daemon in the cgroup). Rank r runs
# tools/bench/tv_train.py --world 3 --rank r (torch's DistributedSampler,
# set_epoch each epoch; 1 DataLoader worker) on node r's mount under
# epochfs-run, all three at once; "ram" runs the same three ranks over a copy
# in /dev/shm. An epoch's time is its slowest rank's; epochs >= 1 count
# (median). Also reported: storage bytes per epoch summed over the nodes, and
# the bytes fetched ahead of the readers.
#
# Needs root, cgroup v1 blkio, /dev/shm room for D, python3-torchvision.
# Environment: STALLP_BPS (26214400), STALLP_EPOCHS (3), STALL_FILES (4000),
# THRASH_DIR (build/bench-thrash), BUILD.
set -eu
cd "$(dirname "$0")/../.."
FILES=${STALL_FILES:-4000}
EPOCHS=${STALLP_EPOCHS:-3}
BPS=${STALLP_BPS:-26214400}
DATA=${THRASH_DIR:-build/bench-thrash}
BLKROOT=/sys/fs/cgroup/blkio
PY=/usr/bin/python3
[ -w "$BLKROOT" ] || { echo "stalls_peers: $BLKROOT not writable (needs root, cgroup v1); skipped" >&2; exit 0; }
$PY -c "import torchvision" 2>/dev/null || { echo "stalls_peers: needs python3-torchvision; skipped" >&2; exit 0; }

. tools/bench/lib.sh
bench_init stallsp
BLKCG=$BLKROOT/epochfs-stallsp-$$
SHM=/dev/shm/epochfs-stallsp-$$
PIDS=()
bench_cleanup_more() {
	local r
	for r in 0 1 2; do mountpoint -q "$W/m$r" && fusermount3 -uz "$W/m$r"; done
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$SHM"
	for _ in $(seq 50); do rmdir "$BLKCG" 2>/dev/null && break; sleep 0.1; done
}
mkdir -p "$BLKCG"
thrash_dataset "$DATA" "$FILES"
dev=$(stat -c '%d' "$SRC")
DEVNO="$((dev >> 8)):$((dev & 255))"
[ -e "/sys/dev/block/$DEVNO/partition" ] && DEVNO=$(cat "/sys/dev/block/$DEVNO/../dev")
echo "$DEVNO $BPS" > "$BLKCG/blkio.throttle.read_bps_device"
nstat() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$W/m$1/.epochfs/stats.json" "$2"; }
sum_stat() { echo $(($(nstat 0 "$1") + $(nstat 1 "$1") + $(nstat 2 "$1"))); }
ports=$(python3 -c 'import socket; s=[socket.socket() for _ in range(3)]; [x.bind(("127.0.0.1",0)) for x in s]; print(",".join("127.0.0.1:%d" % x.getsockname()[1] for x in s))')
head -c 32 /dev/urandom | base64 > "$W/secret"
chmod 600 "$W/secret"

# ranks NAME ROOT0 ROOT1 ROOT2 [run]: the three ranks at once; appends
# "NAME epoch seconds storage_bytes" per epoch (the slowest rank's time).
ranks() {
	local name=$1 r pids=() wrap=()
	[ "${5:-}" = run ] && wrap=("$BUILD/epochfs-run" -q --)
	for r in 0 1 2; do
		local root=$2
		[ "$r" = 1 ] && root=$3
		[ "$r" = 2 ] && root=$4
		"${wrap[@]}" $PY tools/bench/tv_train.py "$root" --workers 1 --epochs "$EPOCHS" \
			--world 3 --rank "$r" --seed 5 > "$W/rank$r" &
		pids+=($!)
	done
	wait "${pids[@]}"
	python3 - "$name" "$W/rank0" "$W/rank1" "$W/rank2" >> "$W/rows" <<'PY'
import json, sys
per = [[json.loads(l) for l in open(f)] for f in sys.argv[2:5]]
for e in range(len(per[0])):
    print(sys.argv[1], e, max(p[e]["seconds"] for p in per))
PY
}

echo "== part 7 across nodes: 3 ranks on 3 nodes, D = $((D / 1000000)) MB, caches D/3 + 0.5%, disk $((BPS >> 20)) MB/s, $EPOCHS epochs"
: > "$W/rows"
cp -a "$SRC" "$SHM"
drop
ranks ram "$SHM" "$SHM" "$SHM"

CACHE=$((D / 3 + D / 200))
for r in 0 1 2; do
	mkdir -p "$W/m$r"
	(exec sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$BLKCG" \
		"$BUILD/epochfs" -f --no-persist --cache-size "$CACHE"B --peers "$ports" --rank "$r" \
		--secret-file "$W/secret" "$SRC" "$W/m$r" 2>>"$W/err$r") &
	PIDS+=($!)
done
for r in 0 1 2; do wait_mount "$W/m$r"; done
drop
ranks peers "$W/m0" "$W/m1" "$W/m2" run
storage=$(sum_stat storage_read_bytes) ahead=$(sum_stat prefetch_bytes) peer=$(sum_stat peer_read_bytes)
for r in 0 1 2; do fusermount3 -u "$W/m$r"; done
for p in "${PIDS[@]}"; do wait "$p" || true; done
PIDS=()
python3 - "$W/rows" "$D" "$storage" "$ahead" "$peer" "$EPOCHS" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    name, e, s = line.split()
    rows[name][int(e)] = float(s)
D, st, ahead, peer, epochs = (int(x) for x in sys.argv[2:7])
med = {n: statistics.median(v[e] for e in v if e >= 1) for n, v in rows.items()}
for n, v in rows.items():
    print("  %-6s s/epoch (slowest rank): %s   median of epochs >= 1: %.2f"
          % (n, " ".join("%.2f" % v[e] for e in sorted(v)), med[n]))
print("  peers under epochfs-run / ram: %.2fx   (target <= 1.10)" % (med["peers"] / med["ram"]))
print("  storage bytes over all epochs: %.3f D (epoch 0 reads D once); peer bytes %.2f D; fetched ahead %.2f D"
      % (st / D, peer / D, ahead / D))
PY
grep -hE "error|warning" "$W"/err* >&2 || true
