#!/usr/bin/env bash
# make bench part 5: coordinated prep against torchvision 0.14 (Debian's
# python3-torchvision), on one generated ImageFolder dataset, in one run:
#   (1) images per CPU-second: epochfs's prep workers (prep_cpu_seconds) vs
#       torchvision's train pipeline (ImageFolder + RandomResizedCrop(224) +
#       RandomHorizontalFlip + ToTensor) in one process with one thread.
#       epochfs makes float32 with mean 0 and std 1, i.e. ToTensor's output;
#       then uint8 against the same pipeline ending in PILToTensor (uint8,
#       what a job converting on the GPU runs).
#   (2) K consumers of one group vs K independent torchvision pipelines:
#       total CPU seconds (the daemon's and the K consumers' vs the K
#       pipelines'). The group makes uint8 batches; every consumer turns each
#       into a float32 [0, 1] tensor, as ToTensor would. Then per image
#       under that load: prep's CPU while the K consumers read, against K
#       torchvision uint8 pipelines (PILToTensor) at once.
#   (3) GB/s one consumer pulls through batch files already made.
#   (4) K consumers of made float32 batches with --passthrough on against
#       off, alternating mounts (tools/bench/prep_pt.sh).
# Environment: PREPB_FILES (2000), PREPB_JOBS (4), PREPB_DIR (build/bench-prep).
set -eu
cd "$(dirname "$0")/../.."
FILES=${PREPB_FILES:-2000}
K=${PREPB_JOBS:-4}
DATA=${PREPB_DIR:-build/bench-prep}
PY=/usr/bin/python3
. tools/bench/lib.sh
need_torchvision "prep bench"
bench_init prepbench
prep_dataset "$DATA" "$FILES"
SRC=$(realpath "$DATA")
tar cf - -C "$SRC" . | cat > /dev/null          # both sides read warm data
"$BUILD/epochfs" -f --no-persist --prep-mem 2G "$SRC" "$W/mnt" 2>"$W/err" & EP_PID=$!
wait_mount "$W/mnt"
daemon_cpu() { awk '{print ($14 + $15) / 100}' "/proc/$EP_PID/stat"; }
F32="--batch 64 --dtype float32 --mean 0,0,0 --std 1,1,1"
echo "== part 5: coordinated prep, $FILES images ($(du -sh "$SRC" | cut -f1)), $(nproc) cores"

# (1) per core
c0=$(stat_of prep_cpu_seconds)      # before declaring: workers start at once
"$BUILD/epochfs-prep" "$W/mnt" one $F32 --jobs 1 > /dev/null
$PY tools/bench/prep_consumer.py "$W/mnt" one 0 --raw > "$W/one.json"
ep_cpu=$(python3 -c "print($(stat_of prep_cpu_seconds) - $c0)")
$PY tools/bench/tv_pipeline.py "$SRC" > "$W/tv1.json"
python3 - "$W/tv1.json" "$FILES" "$ep_cpu" <<'PY'
import json, sys
tv = json.load(open(sys.argv[1]))
n, ep = int(sys.argv[2]), float(sys.argv[3])
e, t = n / ep, tv["images"] / tv["cpu_s"]
print("(1) images per CPU-second: epochfs prep %.0f, torchvision %.0f (%.0f images/s wall, 1 thread): %.2fx   (target >= 2x)"
      % (e, t, tv["images"] / tv["wall_s"], e / t))
PY
c0=$(stat_of prep_cpu_seconds)
"$BUILD/epochfs-prep" "$W/mnt" one8 --batch 64 --jobs 1 > /dev/null
$PY tools/bench/prep_consumer.py "$W/mnt" one8 0 --raw > /dev/null
ep_cpu=$(python3 -c "print($(stat_of prep_cpu_seconds) - $c0)")
$PY tools/bench/tv_pipeline.py "$SRC" --uint8 > "$W/tv8.json"
python3 - "$W/tv8.json" "$FILES" "$ep_cpu" <<'PY'
import json, sys
tv = json.load(open(sys.argv[1]))
n, ep = int(sys.argv[2]), float(sys.argv[3])
e, t = n / ep, tv["images"] / tv["cpu_s"]
print("    uint8: epochfs prep %.0f, torchvision with PILToTensor %.0f (%.0f images/s wall): %.2fx, %.2f of its CPU per image   (target <= 0.5)"
      % (e, t, tv["images"] / tv["wall_s"], e / t, t / e))
PY

# (2) K consumers of one group vs K pipelines. The group makes uint8 and each
# consumer turns it into float32 in [0, 1], the tensor ToTensor gives: a
# quarter of the bytes through the mount.
d0=$(daemon_cpu)
p0=$(stat_of prep_cpu_seconds)
"$BUILD/epochfs-prep" "$W/mnt" k --batch 64 --jobs "$K" --seed 1 > /dev/null
pids=""
for i in $(seq "$K"); do $PY tools/bench/prep_consumer.py "$W/mnt" k 0 > "$W/k$i.json" & pids="$pids $!"; done
for p in $pids; do wait "$p"; done
d1=$(daemon_cpu)
p1=$(stat_of prep_cpu_seconds)
pids=""
for i in $(seq "$K"); do $PY tools/bench/tv_pipeline.py "$SRC" > "$W/tv$i.k.json" & pids="$pids $!"; done
for p in $pids; do wait "$p"; done
# Under load, per image: prep's CPU while the K consumers read beside it,
# against K torchvision uint8 pipelines (PILToTensor) running at once.
pids=""
for i in $(seq "$K"); do $PY tools/bench/tv_pipeline.py "$SRC" --uint8 > "$W/tv8-$i.k.json" & pids="$pids $!"; done
for p in $pids; do wait "$p"; done
python3 - "$W" "$K" "$p0" "$p1" "$FILES" <<'PY'
import glob, json, os, sys
w, k, p0, p1, n = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
tvs = [json.load(open(f)) for f in glob.glob(os.path.join(w, "tv8-*.k.json"))]
ep = 1e3 * (p1 - p0) / n
tv = 1e3 * sum(t["cpu_s"] for t in tvs) / sum(t["images"] for t in tvs)
print("    under load (%d readers, or %d pipelines, on %d cores): prep %.2f ms CPU per image, torchvision uint8 %.2f ms: %.2f of its CPU per image   (target <= 0.5)"
      % (k, k, os.cpu_count(), ep, tv, ep / tv))
PY
python3 - "$W" "$K" "$d0" "$d1" "$(stat_of prep_batches_produced)" "$(stat_of prep_batches_regenerated)" <<'PY'
import glob, json, os, sys
w, k, d0, d1 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
cons = [json.load(open(os.path.join(w, "k%d.json" % i))) for i in range(1, k + 1)]
tvs = [json.load(open(f)) for f in glob.glob(os.path.join(w, "tv*.k.json"))]
ep = (d1 - d0) + sum(c["cpu_s"] for c in cons)
tv = sum(t["cpu_s"] for t in tvs)
print("(2) %d jobs: epochfs %.1f CPU-s (daemon %.1f + consumers %.1f), %d independent torchvision pipelines %.1f CPU-s: %.2fx   (target <= 0.3x)"
      % (k, ep, d1 - d0, sum(c["cpu_s"] for c in cons), k, tv, ep / tv))
print("    batches made %s (regenerated %s) for %d consumers x %d batches read" % (sys.argv[5], sys.argv[6], k, cons[0]["batches"]))
PY

# (3) one consumer through made batches: a group of two jobs, the first
# consumer pulls the epoch through (batches are made as it reads, --prep-ahead
# past it), the second one, timed, reads what the first left in memory.
"$BUILD/epochfs-prep" "$W/mnt" ready --batch 64 --jobs 2 --seed 2 > /dev/null
$PY tools/bench/prep_consumer.py "$W/mnt" ready 0 --raw > /dev/null
$PY tools/bench/prep_consumer.py "$W/mnt" ready 0 --raw > "$W/ready.json"
python3 - "$W/ready.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("(3) one consumer through made batches: %.2f GB/s (%d batches, %.0f MB, uint8 NCHW)"
      % (r["bytes"] / r["wall_s"] / 1e9, r["batches"], r["bytes"] / 1e6))
PY
grep -E "warning|error" "$W/err" >&2 || true
ep_stop          # (4) mounts its own, one at a time
BUILD=$BUILD PREPB_FILES=$FILES PREPB_DIR=$DATA bash tools/bench/prep_pt.sh
