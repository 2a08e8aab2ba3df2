#!/usr/bin/env bash
# make bench part 5, end to end: K concurrent jobs of a hyperparameter
# search, each one epoch over the part 5 dataset (2,000 JPEGs) in batches
# of 64 with a simulated GPU step (a sleep of HP_STEP_MS per batch), as a
# user runs them (tools/bench/hp_job.py):
#   tv    each job its own torchvision pipeline (ImageFolder +
#         RandomResizedCrop + flip + ToTensor + Normalize, DataLoader with
#         1 worker) over the mount;
#   f32   all K read one .prep/ group of float32 batches, normalized with
#         ImageNet's mean and std (what tv's jobs get);
#   u8    all K read one group of uint8 batches and turn each into float32
#         in [0, 1] themselves (epochfs.prep.torch_batches).
# Wall time from the moment all K jobs have imported torch (their epochs
# start together; the group is declared then) to the last job's end, the
# median of HP_RUNS runs, and the speedup against tv measured beside it;
# the time with the interpreters' start-up is printed too. The data is in the mount's RAM cache first, so what is
# compared is CPU: K pipelines against one prep and K readers.
# Environment: HP_JOBS ("2 4 8"), HP_RUNS (3), HP_STEP_MS (15), HP_EPOCHS
# (1: epochs per job; a group is declared with as many), HP_CONFIGS
# ("tv f32 u8"), HP_ROWS (a file to keep the rows in), PREPB_FILES (2000),
# PREPB_DIR (build/bench-prep), HP_DAEMON_ARGS (more epochfs options).
set -eu
cd "$(dirname "$0")/../.."
FILES=${PREPB_FILES:-2000}
KS=${HP_JOBS:-2 4 8}
RUNS=${HP_RUNS:-3}
STEP=${HP_STEP_MS:-15}
EPOCHS=${HP_EPOCHS:-1}
CONFIGS=${HP_CONFIGS:-tv f32 u8}
DATA=${PREPB_DIR:-build/bench-prep}
PY=/usr/bin/python3
. tools/bench/lib.sh
need_torchvision "hpsearch"
bench_init hpsearch
prep_dataset "$DATA" "$FILES"
SRC=$(realpath "$DATA")
ROWS=${HP_ROWS:-$W/rows}
: > "$ROWS"
# shellcheck disable=SC2086
"$BUILD/epochfs" -f --no-persist --prep-mem 2G ${HP_DAEMON_ARGS:-} "$SRC" "$W/mnt" 2>"$W/err" & EP_PID=$!
wait_mount "$W/mnt"
find "$W/mnt/" -name '*.jpg' -print0 | xargs -0 cat > /dev/null      # every image in the RAM cache
NORM="--mean 0.485,0.456,0.406 --std 0.229,0.224,0.225"
echo "== part 5, end to end: K jobs of a hyperparameter search, $EPOCHS epoch(s) of $FILES images each, batch 64, ${STEP} ms simulated GPU step, $(nproc) cores"

# run CONFIG K RUN: the K jobs at once; appends "CONFIG K RUN epoch_s cpu_s
# daemon_cpu_s images whole_s". The jobs import torch first and wait; the
# clock starts when all are ready, with the group's declaration.
run() {
	local cfg=$1 k=$2 r=$3 g="" t0 t1 tl pids="" i c0 dc
	rm -f "$W"/ready-* "$W/go" "$W"/job*
	tl=$(date +%s.%N)
	for i in $(seq "$k"); do
		if [ "$cfg" = tv ]; then
			$PY tools/bench/hp_job.py tv "$W/mnt" --step-ms "$STEP" --epochs "$EPOCHS" --seed "$i" \
				--ready "$W/ready-$i" --go "$W/go" > "$W/job$i" &
		else
			$PY tools/bench/hp_job.py prep "$W/mnt" "$cfg$k-$r" --step-ms "$STEP" --epochs "$EPOCHS" \
				--ready "$W/ready-$i" --go "$W/go" > "$W/job$i" &
		fi
		pids="$pids $!"
	done
	until [ "$(find "$W" -maxdepth 1 -name 'ready-*' | wc -l)" -ge "$k" ]; do sleep 0.01; done
	c0=$(awk '{print $14 + $15}' "/proc/$EP_PID/stat")
	t0=$(date +%s.%N)
	case $cfg in
	f32) g="$cfg$k-$r"; "$BUILD/epochfs-prep" "$W/mnt" "$g" --batch 64 --epochs "$EPOCHS" --jobs "$k" --seed "$r" --dtype float32 $NORM > /dev/null ;;
	u8) g="$cfg$k-$r"; "$BUILD/epochfs-prep" "$W/mnt" "$g" --batch 64 --epochs "$EPOCHS" --jobs "$k" --seed "$r" > /dev/null ;;
	esac
	touch "$W/go"
	# shellcheck disable=SC2086
	wait $pids
	t1=$(date +%s.%N)
	dc=$(awk -v c0="$c0" '{print ($14 + $15 - c0) / 100}' "/proc/$EP_PID/stat")
	if [ -n "$g" ]; then "$BUILD/epochfs-prep" "$W/mnt" "$g" --remove > /dev/null 2>&1 || true; fi
	cat "$W"/job* | $PY -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
t0, t1, tl, dc = map(float, sys.argv[4:8])
assert len(rows) == int(sys.argv[2]) and all(r["images"] > 0 for r in rows), rows
print(sys.argv[1], sys.argv[2], sys.argv[3], "%.3f" % (max(r["t1"] for r in rows) - t0),
      "%.2f" % (sum(r["cpu_s"] for r in rows) + dc), "%.2f" % dc, rows[0]["images"], "%.3f" % (t1 - tl))' \
		"$cfg" "$k" "$r" "$t0" "$t1" "$tl" "$dc" >> "$ROWS"
}
for k in $KS; do
	for r in $(seq "$RUNS"); do
		for cfg in $CONFIGS; do run "$cfg" "$k" "$r"; done
	done
done
$PY - "$ROWS" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    cfg, k, r, wall, cpu, dcpu, images, whole = line.split()
    rows[(cfg, int(k))].append((float(wall), float(cpu), float(dcpu), float(whole)))
ks = sorted({k for _, k in rows})
print("%3s %14s %14s %8s %14s %8s   (median seconds from the K jobs' start to the last one's end, "
      "interpreters' start-up excluded; CPU-s in brackets)" % ("K", "tv", "shared f32", "speedup", "shared u8",
                                                                "speedup"))
for k in ks:
    def med(cfg):
        v = rows.get((cfg, k))
        if not v:
            return None, None
        return statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)
    tv, f32, u8 = med("tv"), med("f32"), med("u8")
    cells = []
    for m in (tv, f32, u8):
        cells.append("%6.2f (%5.1f)" % m if m[0] is not None else "%14s" % "-")
    sp = lambda m: ("%7.2fx" % (tv[0] / m[0])) if m[0] and tv[0] else "%8s" % "-"
    print("%3d %s %s %s %s %s" % (k, cells[0], cells[1], sp(f32), cells[2], sp(u8)))
print("with the interpreters' start-up (launch to the last exit), medians: %s"
      % ", ".join("%s K=%d %.2f s" % (c, k, statistics.median(x[3] for x in v)) for (c, k), v in sorted(rows.items())))
print("runs per cell: %d; target (issue 17): K = 4 shared >= 5.7x tv, both dtypes"
      % min(len(v) for v in rows.values()))
PY
echo "daemon: .prep/ batches $(stat_of prep_batch_files | cut -d: -f1); batch opens by passthrough $(stat_of prep_passthrough_opens), $(python3 -c "print('%.2f' % ($(stat_of prep_served_bytes) / 1e9))") GB copied to consumers by the daemon"
grep -hE "error|warning" "$W/err" >&2 || true
