#!/usr/bin/env bash
# make bench part 8: are epochfs-analyze's predictions right? One analyze
# run of part 7's job (tools/bench/stalls.sh: an unmodified torchvision job
# on an epochfs mount in a memory cgroup on a throttled disk) at cache 50%,
# 2 workers, 25 MB/s predicts the epoch at cache 25, 50 and 100% of D,
# workers 1 and 4, and storage 25 and 100 MB/s. Each of those is then run
# for real (EPOCHS epochs, epochs >= 1 count, median), with memory for the
# pipeline plus that cache, and the table prints measured against predicted.
# The target: every error within 15% (docs/analyze.md).
#
# Environment: WHATIF_CACHES ("25 50 100"), WHATIF_WORKERS ("1 4"),
# WHATIF_MBPS ("25 100"), WHATIF_RUNS (1: medians over runs), WHATIF_ANALYZE
# (3: analyze runs; each scenario's prediction is their median), WHATIF_EPOCHS
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
# The one analyze run: cache 50%, 2 workers, 25 MB/s (26214400 B/s, as part 7).
STALL_RUNS=${WHATIF_ANALYZE:-3} STALL_RAM_EACH=0 STALL_WORKERS=2 STALL_BPS=26214400 STALL_CACHE_PCT=50 STALL_CONFIGS="ram analyze" \
	STALL_ANALYZE_KEEP="$W/an" STALL_ANALYZE_ARGS="--epochs 2 ${asks[*]}" STALL_ROWS="$W/an-rows" \
	bash tools/bench/stalls.sh | grep -E "analyze: (epoch|  |model|most|storage|mount|GPU)" || true
REPORTS=("$W"/an-*.json)
[ -f "${REPORTS[0]}" ] || { echo "whatif: the analyze run left no report" >&2; exit 1; }
: > "$W/rows"
[ -n "${WHATIF_REUSE:-}" ] && cp "$WHATIF_REUSE/rows" "$W/rows"
for c in $CACHES; do
	[ -n "${WHATIF_REUSE:-}" ] && break
	bps=""
	for m in $MBPS; do bps="$bps $((m * 1048576))"; done
	STALL_RUNS=$RUNS STALL_WORKERS="$WORKERS" STALL_BPS="${bps# }" STALL_CACHE_PCT=$c \
		STALL_CONFIGS="ram epochfs" STALL_RAM_EACH=0 STALL_ROWS="$W/rows-$c" bash tools/bench/stalls.sh > "$W/log-$c" 2>&1 ||
		{ echo "whatif: part 7 at cache $c% failed: $(tail -3 "$W/log-$c")" >&2; exit 1; }
	sed "s/^epochfs@/epochfs-c$c@/" "$W/rows-$c" >> "$W/rows"
done
if [ -n "${WHATIF_KEEP:-}" ]; then
	mkdir -p "$WHATIF_KEEP" && cp "$W/rows" "${REPORTS[@]}" "$WHATIF_KEEP/"
fi
python3 - "$W/rows" "${REPORTS[@]}" <<'PY'
import collections, json, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if int(f[1]) >= 1 and f[0].startswith("epochfs-c"):
        rows[f[0]].append(float(f[2]))
reps = [json.load(open(p)) for p in sys.argv[2:]]
preds = collections.defaultdict(list)
for rep in reps:
    for w in rep.get("what_if", []):
        if w.get("requested"):
            preds[(round(w["cache"]), w["workers"], round(w["storage_mbps"] * 1e6 / 1048576))].append(w)
pred = {k: dict(sorted(v, key=lambda w: w["predicted_epoch_seconds"])[len(v) // 2],
                predicted_epoch_seconds=statistics.median(w["predicted_epoch_seconds"] for w in v))
        for k, v in preds.items()}
print("predicted from %d analyze run(s) at cache 50%%, 2 workers, 25 MB/s (median of the predictions; "
      "epochs measured there: %s s)" % (len(reps), ", ".join("%.2f" % r["epoch_seconds"] for r in reps)))
print("%6s %8s %8s %10s %10s %8s  %s" % ("cache", "workers", "MB/s", "measured", "predicted", "error",
                                          "bound"))
errs = []
for name in sorted(rows, key=lambda n: (int(n.split("@")[0][9:]), int(n.split("/w")[1]), int(n.split("@")[1].split("MBps")[0]))):
    c = int(name.split("@")[0][9:])
    m = int(name.split("@")[1].split("MBps")[0])
    w = int(name.split("/w")[1])
    meas = statistics.median(rows[name])
    p = pred.get((c, w, m))
    if p is None:
        print("%5d%% %8d %8d %10.2f %10s" % (c, w, m, meas, "-"))
        continue
    err = p["predicted_epoch_seconds"] / meas - 1
    errs.append(abs(err))
    print("%5d%% %8d %8d %10.2f %10.2f %+7.0f%%  %s" % (c, w, m, meas, p["predicted_epoch_seconds"],
                                                      100 * err, p["bottleneck"]))
if errs:
    print("largest error %.0f%%, median %.0f%% (target: every one within 15%%)"
          % (100 * max(errs), 100 * statistics.median(errs)))
PY
