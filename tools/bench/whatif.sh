#!/usr/bin/env bash
# make bench part 8: are epochfs-analyze's predictions right? One analyze
# run of part 7's job (tools/bench/stalls.sh: an unmodified torchvision job
# on an epochfs mount in a memory cgroup on a throttled disk) at cache 50%,
# 2 workers, 25 MB/s predicts the epoch at cache 25, 50 and 100% of D,
# workers 1 and 4, and storage 25 and 100 MB/s. Each of those is then run
# for real (EPOCHS epochs, epochs >= 1 count, median), with memory for the
# pipeline plus that cache, and the table prints measured against predicted.
# The target: every error within 15% (docs/analyze.md). The analyze runs are
# spread between the cache groups, so that their median prediction stands for
# the same hour as the measurements. Each group's RAM epochs are printed with
# it (the machine's speed then).
#
# Environment: WHATIF_CACHES ("25 50 100"), WHATIF_WORKERS ("1 4"),
# WHATIF_MBPS ("25 100"), WHATIF_RUNS (1: medians over runs), WHATIF_ANALYZE
# (3: analyze runs, one before each cache group; each scenario's prediction
# is their median), WHATIF_EPOCHS
# (4: each configuration's epochs, >= 1 count; the analyze run measures
# epochs 1 and 2 as they are), WHATIF_KEEP
# (a directory: the measured rows and the report are kept there),
# WHATIF_REUSE (a directory kept before: its measured rows are compared
# with a new analyze run, nothing else is run again), and part 7's STALL_*
# (the dataset, EPOCHS, the slack). Needs what part 7 needs.
set -eu
cd "$(dirname "$0")/../.."
CACHES=${WHATIF_CACHES:-25 50 100}
WORKERS=${WHATIF_WORKERS:-1 4}
MBPS=${WHATIF_MBPS:-25 100}
RUNS=${WHATIF_RUNS:-1}
export STALL_EPOCHS=${WHATIF_EPOCHS:-4}
W=$(mktemp -d /tmp/epochfs-whatif.XXXXXX)
trap 'rm -rf "$W"' EXIT

asks=()
for c in $CACHES; do for w in $WORKERS; do for m in $MBPS; do
	# storage in MB/s (10^6) for the analyzer; the disk is throttled in MiB/s
	asks+=(--what-if "cache=$c%,workers=$w,storage=$(awk "BEGIN {print $m * 1.048576}")")
done; done; done
echo "== part 8: epochfs-analyze's predictions against measured epochs"
# analyze I: one analyze run at cache 50%, 2 workers, 25 MB/s (26214400 B/s,
# as part 7), its report kept as $W/an-I-*.json.
analyze_run() {
	STALL_RUNS=1 STALL_RAM_EACH=0 STALL_WORKERS=2 STALL_BPS=26214400 STALL_CACHE_PCT=50 STALL_CONFIGS="ram analyze" \
		STALL_ANALYZE_KEEP="$W/an-$1" STALL_ANALYZE_ARGS="--epochs 2 ${asks[*]}" STALL_ROWS="$W/an-rows-$1" \
		bash tools/bench/stalls.sh | grep -E "analyze: (epoch|  |model|most|storage|mount|GPU)" || true
}
# The analyze runs are spread between the measured groups (one before each
# cache size, the rest after): this machine's speed drifts by 15-20% within
# half an hour, and the median prediction then stands for the same hour as
# the measurements.
: > "$W/rows"
[ -n "${WHATIF_REUSE:-}" ] && cp "$WHATIF_REUSE/rows" "$W/rows"
left=${WHATIF_ANALYZE:-3}
i=0
for c in $CACHES; do
	if [ "$left" -gt 0 ]; then i=$((i + 1)); left=$((left - 1)); analyze_run $i; fi
	[ -n "${WHATIF_REUSE:-}" ] && continue
	bps=""
	for m in $MBPS; do bps="$bps $((m * 1048576))"; done
	STALL_RUNS=$RUNS STALL_WORKERS="$WORKERS" STALL_BPS="${bps# }" STALL_CACHE_PCT=$c \
		STALL_CONFIGS="ram epochfs" STALL_RAM_EACH=0 STALL_ROWS="$W/rows-$c" bash tools/bench/stalls.sh > "$W/log-$c" 2>&1 ||
		{ echo "whatif: part 7 at cache $c% failed: $(tail -3 "$W/log-$c")" >&2; exit 1; }
	# Each group's rows, its RAM runs (the machine's speed then) named for it.
	sed -e "s/^epochfs@/epochfs-c$c@/" -e "s/^ram\//ram-c$c\//" "$W/rows-$c" >> "$W/rows"
done
while [ "$left" -gt 0 ]; do i=$((i + 1)); left=$((left - 1)); analyze_run $i; done
REPORTS=("$W"/an-*.json)
[ -f "${REPORTS[0]}" ] || { echo "whatif: the analyze run left no report" >&2; exit 1; }
if [ -n "${WHATIF_KEEP:-}" ]; then
	mkdir -p "$WHATIF_KEEP" && cp "$W/rows" "${REPORTS[@]}" "$WHATIF_KEEP/"
fi
python3 - "$W/rows" "${REPORTS[@]}" <<'PY'
import collections, json, statistics, sys
rows = collections.defaultdict(list)
ram = collections.defaultdict(list)           # (cache group, workers) -> RAM epochs
for line in open(sys.argv[1]):
    f = line.split()
    if int(f[1]) < 1:
        continue
    if f[0].startswith("epochfs-c"):
        rows[f[0]].append(float(f[2]))
    elif f[0].startswith("ram-c"):
        g, w = f[0][5:].split("/w")
        ram[(int(g), int(w))].append(float(f[2]))
reps = [json.load(open(p)) for p in sys.argv[2:]]
preds = collections.defaultdict(list)
for rep in reps:
    for w in rep.get("what_if", []):
        if w.get("requested"):
            preds[(round(w["cache"]), w["workers"], round(w["storage_mbps"] * 1e6 / 1048576))].append(w)
pred = {k: dict(sorted(v, key=lambda w: w["predicted_epoch_seconds"])[len(v) // 2],
                predicted_epoch_seconds=statistics.median(w["predicted_epoch_seconds"] for w in v))
        for k, v in preds.items()}
ram_med = {k: statistics.median(v) for k, v in ram.items()}
print("predicted from %d analyze run(s) at cache 50%%, 2 workers, 25 MB/s, spread between the groups (median "
      "of the predictions; epochs measured there: %s s; crowd runs: %s)"
      % (len(reps), ", ".join("%.2f" % (r.get("epoch_seconds") or 0) for r in reps),
         ", ".join("k=%.2f (step %.2fx on %s of the CPUs)" % (r["model"]["crowd"], r["model"]["crowd_step_ratio"],
                                                            r["model"]["crowd_cpus"])
                   if r.get("model", {}).get("crowd_step_ratio") else "none" for r in reps)))
print("%6s %8s %6s %9s %10s %7s %9s  %s" % ("cache", "workers", "MB/s", "measured", "predicted", "error",
                                          "RAM then", "bound"))
errs = []
for name in sorted(rows, key=lambda n: (int(n.split("@")[0][9:]), int(n.split("/w")[1]), int(n.split("@")[1].split("MBps")[0]))):
    c = int(name.split("@")[0][9:])
    m = int(name.split("@")[1].split("MBps")[0])
    w = int(name.split("/w")[1])
    meas = statistics.median(rows[name])
    rm = ram_med.get((c, w))
    p = pred.get((c, w, m))
    if p is None:
        print("%5d%% %8d %6d %9.2f %10s" % (c, w, m, meas, "-"))
        continue
    err = p["predicted_epoch_seconds"] / meas - 1
    errs.append(abs(err))
    print("%5d%% %8d %6d %9.2f %10.2f %+6.0f%% %9s  %s"
          % (c, w, m, meas, p["predicted_epoch_seconds"], 100 * err, "-" if rm is None else "%.2f" % rm,
             p["bottleneck"]))
if errs:
    print("largest error %.0f%%, median %.0f%% (target: every one within 15%%)"
          % (100 * max(errs), 100 * statistics.median(errs)))
PY
