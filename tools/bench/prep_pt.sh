#!/usr/bin/env bash
# make bench part 5 (4): .prep/ batches by kernel passthrough (issue 33).
# K consumers read every batch of an epoch that the group made before they
# start (one more consumer, the puller, reads the epoch first, so every
# batch is made and held for the K), as float32 batches of 64 at 224x224
# (38.5 MB each), through a mount with --passthrough on (an open of a made
# batch is handed its memfd: the kernel reads it) and one with
# --passthrough off (every byte copied through the daemon), one mount at a
# time, the two modes alternating, PREPPT_RUNS runs each. Per mode, medians
# over the runs: GB/s of the K consumers together, their CPU and the
# daemon's per GB, and the daemon's CPU per batch per consumer.
# Environment: PREPB_FILES (2000), PREPB_DIR (build/bench-prep), as part 5;
# PREPPT_JOBS (4), PREPPT_RUNS (3). Needs root and a kernel with FUSE
# passthrough (one "skipped" line otherwise).
set -eu
cd "$(dirname "$0")/../.."
FILES=${PREPB_FILES:-2000}
DATA=${PREPB_DIR:-build/bench-prep}
K=${PREPPT_JOBS:-4}
RUNS=${PREPPT_RUNS:-3}
PY=/usr/bin/python3
. tools/bench/lib.sh
need_torchvision "prep passthrough bench"
bench_init preppt
prep_dataset "$DATA" "$FILES"
SRC=$(realpath "$DATA")
tar cf - -C "$SRC" . | cat > /dev/null
daemon_cpu() { awk '{print ($14 + $15) / 100}' "/proc/$EP_PID/stat"; }
echo "== part 5 (4): .prep/ batches by kernel passthrough, $K consumers, float32 batches of 64 at 224, $RUNS runs a mode"

run_one() { # run_one MODE RUN: one mount, one group, the puller, then K timed consumers
	ep_start --no-persist --prep-mem 3G --passthrough "$1" "$SRC"
	if [ "$1" = on ] && [ "$(stat_of passthrough)" != on ]; then
		echo "(4) skipped: kernel passthrough is not available here ($(stat_of passthrough_available))"
		ep_stop
		exit 0
	fi
	"$BUILD/epochfs-prep" "$W/mnt" g --batch 64 --size 224 --dtype float32 --jobs $((K + 1)) --seed 4 > /dev/null
	$PY tools/bench/prep_consumer.py "$W/mnt" g 0 --raw > /dev/null
	local d0 h0 s0 pids="" i
	d0=$(daemon_cpu) h0=$(stat_of prep_passthrough_opens) s0=$(stat_of prep_served_bytes)
	for i in $(seq "$K"); do
		$PY tools/bench/prep_consumer.py "$W/mnt" g 0 --raw > "$W/c.$1.$2.$i.json" & pids="$pids $!"
	done
	for i in $pids; do wait "$i"; done
	echo "$1 $2 $(python3 -c "print($(daemon_cpu) - $d0)") $(($(stat_of prep_passthrough_opens) - h0)) $(($(stat_of prep_served_bytes) - s0))" >> "$W/runs"
	ep_stop
}
for r in $(seq "$RUNS"); do
	if [ $((r % 2)) = 1 ]; then run_one on "$r"; run_one off "$r"; else run_one off "$r"; run_one on "$r"; fi
done
python3 - "$W" "$K" <<'PY'
import glob, json, os, statistics, sys
w, k = sys.argv[1], int(sys.argv[2])
rows = {}
for line in open(os.path.join(w, "runs")):
    mode, run, dcpu, handed, copied = line.split()
    cons = [json.load(open(f)) for f in glob.glob(os.path.join(w, "c.%s.%s.*.json" % (mode, run)))]
    gb = sum(c["bytes"] for c in cons) / 1e9
    wall = max(c["wall_s"] for c in cons)
    ccpu = sum(c["cpu_s"] for c in cons)
    nb = sum(c["batches"] for c in cons)
    rows.setdefault(mode, []).append((gb / wall, (ccpu + float(dcpu)) / gb, float(dcpu) / gb,
                                      1e3 * float(dcpu) / nb, int(handed), int(copied) / 1e9, nb))
med = {m: [statistics.median(r[i] for r in v) for i in range(7)] for m, v in rows.items()}
print("| %d consumers, batches made | GB/s, all consumers | CPU s/GB, consumers + daemon | daemon CPU s/GB | daemon ms per batch per consumer | batch opens by passthrough | GB copied by the daemon |" % k)
print("|---|---|---|---|---|---|---|")
for m in ("on", "off"):
    v, r = med[m], rows[m]
    print("| --passthrough %s | %.2f (%.2f-%.2f) | %.3f | %.3f | %.1f | %d of %d | %.2f |"
          % (m, v[0], min(x[0] for x in r), max(x[0] for x in r), v[1], v[2], v[3], v[4], v[6], v[5]))
print("on / off: %.2fx GB/s, %.2fx CPU per GB (medians of %d runs)"
      % (med["on"][0] / med["off"][0], med["on"][1] / med["off"][1], len(rows["on"])))
PY
grep -E "warning|error" "$W/err" >&2 || true
