#!/usr/bin/env bash
# make bench part 6: partitioned peers. Three nodes on loopback over one
# SOURCE, dataset D, caches of D/3 each, 3 epochs; in each epoch every node
# reads a different third of the dataset, reshuffled every epoch (torch's
# DistributedSampler). Storage bytes per epoch, summed over the nodes, for
#   (a) three independent MinIO caches (no peers),
#   (b) partitioned peers, caches D/3,
#   (c) partitioned peers, caches D/3 + 0.5% (room for each item's 64-byte
#       alignment and the tail of an arena too short for the next item).
# Then, on (c)'s warm cluster: the median latency of a whole-file read served
# by a peer vs by the local cache, and peer fetch throughput (GB/s, 1 and 4
# threads). Kernel caches are dropped before every epoch and measurement, so
# reads reach the daemons. The same again on a cluster run with
# --insecure-peers, whose frames carry no seal: the seal's cost, side by
# side. Last, the manifest's build rate against cat of the same tree, both
# cold.
# Environment: PEERB_FILES (2400), PEERB_DIR (build/bench-peers).
set -eu
cd "$(dirname "$0")/../.."
FILES=${PEERB_FILES:-2400}
DATA=${PEERB_DIR:-build/bench-peers}
. tools/bench/lib.sh
bench_init peerbench
if [ ! -f "$DATA/.files-$FILES" ]; then
	rm -rf "$DATA"
	"$BUILD/epochfs-gen" "$DATA" --files "$FILES" --classes 20 --seed 6 > /dev/null
	touch "$DATA/.files-$FILES"
fi
SRC=$(realpath "$DATA")
PIDS=()
bench_cleanup_more() {
	local r
	for r in 0 1 2; do mountpoint -q "$W/m$r" && fusermount3 -uz "$W/m$r"; done
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
}
nstat() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$W/m$1/.epochfs/stats.json" "$2"; }
sum_stat() { echo $(($(nstat 0 "$1") + $(nstat 1 "$1") + $(nstat 2 "$1"))); }
ports=$(python3 -c 'import socket; s=[socket.socket() for _ in range(3)]; [x.bind(("127.0.0.1",0)) for x in s]; print(",".join("127.0.0.1:%d" % x.getsockname()[1] for x in s))')
head -c 32 /dev/urandom | base64 > "$W/secret"
chmod 600 "$W/secret"

start3() {     # start3 CACHE_BYTES [peer options]
	local cache=$1 r rank=()
	shift
	PIDS=()
	for r in 0 1 2; do
		mkdir -p "$W/m$r"
		[ $# -gt 0 ] && rank=(--rank "$r")
		"$BUILD/epochfs" -f --no-persist --cache-size "$cache"B --prefault 0 "$@" "${rank[@]}" "$SRC" "$W/m$r" 2>>"$W/err$r" &
		PIDS+=($!)
	done
	for r in 0 1 2; do wait_mount "$W/m$r"; done
}
stop3() {
	local r
	for r in 0 1 2; do fusermount3 -u "$W/m$r"; done
	for p in "${PIDS[@]}"; do wait "$p" || true; done
	PIDS=()
}
epochs() {     # prints storage bytes per epoch, summed over the nodes
	local e r before out=""
	for e in 0 1 2; do
		drop
		before=$(sum_stat storage_read_bytes)
		for r in 0 1 2; do python3 tools/bench/peer_read.py share "$W/m$r" "$e" "$r" 3 > "$W/share$r" & done
		wait $(jobs -p | tail -3)
		out="$out $(( $(sum_stat storage_read_bytes) - before ))"
	done
	echo $out
}

echo "== part 6: partitioned peers, 3 nodes on loopback, $FILES files ($(du -sh "$SRC" | cut -f1))"
start3 1G
D=$(nstat 0 bytes_total)
stop3
third=$((D / 3))
fmt() { python3 -c 'import sys; D=float(sys.argv[1]); print("  ".join("%.4f D" % (int(x)/D) for x in sys.argv[2:]))' "$D" "$@"; }

start3 "$third"
a=$(epochs)
stop3
start3 "$third" --peers "$ports" --secret-file "$W/secret"
b=$(epochs)
stop3
start3 "$((third * 1005 / 1000))" --peers "$ports" --secret-file "$W/secret"
c=$(epochs)
echo "storage bytes per epoch (epochs 0, 1, 2; sum of the 3 nodes; D = $D bytes):"
echo "  (a) independent caches of D/3:     $(fmt $a)   (expected about 2/3 D after epoch 0)"
echo "  (b) partitioned peers, D/3:        $(fmt $b)   (target 0 after epoch 0)"
echo "  (c) partitioned peers, D/3 + 0.5%: $(fmt $c)"
measure() {   # measure SUFFIX LABEL: node 0 alone, caches dropped before each
	drop
	python3 tools/bench/peer_read.py classify "$W/m0" "$W/peerfiles" > "$W/lat$1.json"
	drop
	python3 tools/bench/peer_read.py throughput "$W/m0" "$W/peerfiles" 1 > "$W/t1$1.json"
	drop
	python3 tools/bench/peer_read.py throughput "$W/m0" "$W/peerfiles" 4 > "$W/t4$1.json"
	python3 - "$W" "$1" "$2" <<'PY'
import json, os, sys
w, sfx, label = sys.argv[1:4]
lat = json.load(open(os.path.join(w, "lat%s.json" % sfx)))
t1 = json.load(open(os.path.join(w, "t1%s.json" % sfx)))
t4 = json.load(open(os.path.join(w, "t4%s.json" % sfx)))
print("%s: whole-file read (%.0f KB mean), median: local cache hit %.3f ms, peer hit %.3f ms: +%.3f ms for the peer (%d and %d files)"
      % (label, t1["bytes"] / max(1, lat["peer_n"]) / 1e3, lat["local_ms"], lat["peer_ms"],
         lat["peer_ms"] - lat["local_ms"], lat["local_n"], lat["peer_n"]))
print("%s: the timed pass moved %d peer bytes (the first pass's peer files: %d; a file found elsewhere than in the first pass would blur the split)"
      % (label, lat.get("timed_pass_peer_bytes", -1), lat["peer_n"]))
print("%s: peer fetch throughput (node 0 reading what nodes 1 and 2 hold): %.2f GB/s with 1 thread, %.2f GB/s with 4"
      % (label, t1["gbps"], t4["gbps"]))
PY
}
measure "" "sealed frames (--secret-file)"
stop3

# The seal's cost: the same cluster without a secret, so without seals.
start3 "$((third * 1005 / 1000))" --peers "$ports" --insecure-peers
epochs > /dev/null
measure -u "no seals (--insecure-peers)"
stop3
grep -hE "error|warning" "$W"/err* >&2 || true

# The manifest's build rate, cold, against cat of the same files, cold.
drop
t0=$(date +%s%N)
"$BUILD/epochfs-manifest" -q -o "$W/bench.manifest" "$SRC" 2>/dev/null
t1=$(date +%s%N)
drop
t2=$(date +%s%N)
find "$SRC" -type f -print0 | xargs -0 cat > /dev/null
t3=$(date +%s%N)
python3 -c 'import sys; D, m, c = int(sys.argv[1]), int(sys.argv[2]) / 1e9, int(sys.argv[3]) / 1e9; print("manifest build (cold): %.0f MB/s (%.2f s); cat of the same tree (cold): %.0f MB/s (%.2f s); ratio %.2fx" % (D / m / 1e6, m, D / c / 1e6, c, c / m))' "$D" $((t1 - t0)) $((t3 - t2))
