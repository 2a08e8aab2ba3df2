#!/usr/bin/env bash
# epochfs-analyze over a real mount with an unmodified torchvision job: its
# options (bad ones refused with one line and status 2), the four runs and
# the JSON schema (the breakdown with its memory stall, the job's memory,
# the mount's counters, the storage probed through the daemon's SOURCE,
# every requested what-if answered), the SVG plot, the report of a small
# job (12 steps: no noise shown as a stall, no crowd run and no note a user
# cannot act on, the what-ifs echoed as the user writes them), a COMMAND
# that fails: its status passes through and the report says what was
# measured before, and a job whose sampler has no length: no run drains
# it. Skipped without python3-torchvision.
. "$(dirname "$0")/lib.sh"
plain_pass_only "the analyzer is Python; the daemon paths it reads (reads, stats, the order channel) run under the sanitizers in t_prefetch.sh and t_stat.sh"
PY=/usr/bin/python3
$PY -c 'import torch, torchvision' 2>/dev/null || skip "python3-torchvision is not installed"
AN=$ROOT/$BUILD/epochfs-analyze
export EPOCHFS_PYTHON=$PY
JOB="$(dirname "$0")/analyze_job.py"

"$AN" --help | grep -q "what-if" || fail "epochfs-analyze --help"
for bad in "" "--epochs 0 $T -- true" "--bogus $T -- true" "--what-if colour=red $T -- true" \
	"--what-if cache $T -- true" "--what-if memory=lots $T -- true" "--runs cold $T -- true" \
	"--plot x.pdf $T -- true" "$T"; do
	# shellcheck disable=SC2086
	"$AN" $bad > /dev/null 2> "$T/e"; rc=$?
	[ $rc = 2 ] || fail "epochfs-analyze $bad: exit $rc, expected 2"
	[ "$(wc -l < "$T/e")" = 1 ] || fail "epochfs-analyze $bad: not one line: $(cat "$T/e")"
done
"$AN" "$T/nope" -- true 2> "$T/e"; [ $? = 2 ] && grep -q "not a directory" "$T/e" || fail "a missing DATADIR"
ok "bad options refused with one line, status 2"

# 352 files, 44 steps of 8: enough for the crowd run's ratio (42 steps).
"$GEN" "$T/src" --files 352 --classes 3 --seed 4 > /dev/null || fail "gen"
D=$(du -sb --apparent-size "$T/src" | cut -f1)
mount_ep "$T/src" "$T/m" --cache-size $((D / 2))B
[ "$(stat_of "$T/m" daemon_pid)" = "$EP_PID" ] || fail "stats.json daemon_pid"

"$AN" --json "$T/r.json" --plot "$T/r.svg" --what-if cache=100%,workers=2 --what-if storage=200,prefetch=on \
	"$T/m" -- $PY "$JOB" "$T/m" > "$T/out" 2> "$T/err" || fail "analyze: $(cat "$T/err")"
grep -q "^epoch: " "$T/out" && grep -q "fetch stall" "$T/out" && grep -q "most help: " "$T/out" ||
	fail "the report: $(cat "$T/out")"
grep -q "analyze_job: done" "$T/out" && fail "a run was not stopped after its window"
$PY - "$T/r.json" <<'PYEOF' || fail "the JSON report: $(cat "$T/r.json")"
import json, sys
r = json.load(open(sys.argv[1]))
for k in ("epoch_seconds", "compute_seconds", "prep_stall_seconds", "fetch_stall_seconds", "memory_stall_seconds"):
    assert isinstance(r[k], float) and r[k] >= 0, k
assert r["epoch_seconds"] > 0
parts = sum(r[k] for k in ("compute_seconds", "prep_stall_seconds", "fetch_stall_seconds", "memory_stall_seconds"))
assert abs(parts - r["epoch_seconds"]) < 1e-6 * r["epoch_seconds"] + 0.02 * r["epoch_seconds"], (parts, r)
assert r["noise_floor_seconds"] > 0 and set(r["none_measurable"]) <= {"prep", "fetch", "memory"}, r
m = r["memory"]         # the job's memory, read by the timer inside it
assert m["psi_scope"] in ("cgroup", "machine", None), m
assert m["room_min_bytes"] > 0 and m["major_faults_per_epoch"] >= 0, m
assert m["daemon_rss_bytes"] > 0 and m["daemon_in_job_cgroup"] in (True, False), m
assert r["all_in_memory"]["predicted_epoch_seconds"] > 0, r["all_in_memory"]
for w in r["what_if"]:
    assert w["memory_needed_bytes"] >= 0 and isinstance(w["fits"], bool), w
# The job has 1 worker: the crowd run gives it a second one (where it fits
# in memory), both pinned to 1 CPU.
assert set(r["measured"]) == {"as-is", "warm", "compute", "crowd"}, r["measured"]
cw = r["model"]["crowd_workers"]
assert cw is None or (cw, r["model"]["crowd_cpus"]) == (2, 1), r["model"]
assert r["model"]["crowd"] >= 0.0 and (cw or r["model"]["crowd"] == 0.0), r["model"]
assert r["job"]["items_per_epoch"] == 352 and r["job"]["steps_per_epoch"] == 44, r["job"]
assert r["storage_mbps_probed"] > 0, "storage not probed"
assert r["mount"]["storage_bytes_per_epoch"] >= 0
assert r["model"]["cache_kind"] == "minio" and 0.4 < r["model"]["cache_fraction"] < 0.6, r["model"]
asked = [w for w in r["what_if"] if w.get("requested")]
assert len(asked) == 2, asked
assert asked[0]["cache"] == 100.0 and asked[0]["workers"] == 2 and asked[0]["predicted_epoch_seconds"] > 0
assert asked[1]["storage_mbps"] == 200.0 and asked[1]["prefetch"] == "on"
assert any(w.get("cache_kind") == "pagecache" for w in r["what_if"])
assert r["job"]["batch_shape"][0] == 8 and r["job"]["batch_dtype"], r["job"]   # recorded by the hook
g = r["gpu"]
assert g["available"] or g["reason"], g        # probed, or why not, in one line
assert 0.0 <= r["model"]["overlap"] <= 1.0 and r["model"]["reader_cpu_per_item"] >= 0.0, r["model"]
PYEOF
grep -q "^GPU: " "$T/out" || fail "the report says nothing of the GPU: $(cat "$T/out")"
# --from: new scenarios from the report, without running the job.
"$AN" --from "$T/r.json" --what-if workers=1 --gpu-rate 1000 --json "$T/r2.json" > "$T/out2" 2> "$T/err" ||
	fail "--from: $(cat "$T/err")"
grep -q "1000 steps/s (--gpu-rate)" "$T/out2" || fail "--from --gpu-rate: $(cat "$T/out2")"
$PY - "$T/r.json" "$T/r2.json" <<'PYEOF' || fail "the --from report: $(cat "$T/r2.json")"
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
asked = [w for w in b["what_if"] if w.get("requested")]
assert len(asked) == 1 and asked[0]["workers"] == 1 and asked[0]["predicted_epoch_seconds"] > 0, asked
assert b["epoch_seconds"] == a["epoch_seconds"] and b["model"]["model_compute_per_step"] == 0.001, b["model"]
PYEOF
"$AN" --from "$T/nope.json" > /dev/null 2> "$T/e"; [ $? = 2 ] && [ "$(wc -l < "$T/e")" = 1 ] ||
	fail "--from a missing report: $(cat "$T/e")"
# The model's inputs are --verbose's; the plain report leaves them out.
grep -q "^model: " "$T/out" && fail "the model line without --verbose: $(cat "$T/out")"
"$AN" -v --from "$T/r.json" > "$T/out2" 2> "$T/err" && grep -q "^model: preparing an item takes" "$T/out2" ||
	fail "--verbose: $(cat "$T/out2" "$T/err")"
ok "batch shape, GPU line, --from with --gpu-rate"
$PY -c 'import sys, xml.etree.ElementTree as E; t = E.parse(sys.argv[1]); assert len([e for e in t.iter() if e.tag.endswith("path")]) >= 3' \
	"$T/r.svg" || fail "the SVG plot"
ok "four runs (crowd: 2 workers on 1 CPU), breakdown and what-ifs in JSON, storage probed through SOURCE, SVG plot"
umount_ep

# A small job, as a user would try one first: 96 files, 12 steps an epoch.
"$GEN" "$T/small" --files 96 --classes 3 --seed 5 > /dev/null || fail "gen"
DS=$(du -sb --apparent-size "$T/small" | cut -f1)
mount_ep "$T/small" "$T/m" --cache-size $((DS / 2))B
"$AN" --json "$T/s.json" --what-if cache=50%,storage=25 --what-if memory=+1G,prefetch=on "$T/m" -- $PY "$JOB" "$T/m" \
	> "$T/out" 2> "$T/err" || fail "analyze, the small job: $(cat "$T/err")"
grep -q "no crowd run: its window would be 12 steps, and a ratio takes 42" "$T/err" ||
	fail "the crowd run: $(cat "$T/err")"
grep -qi "crowd" "$T/out" && fail "a crowd line in the small job's report: $(cat "$T/out")"
# Every note names what to do (an option to give); nothing the user cannot act on.
grep "^note: " "$T/out" | grep -v -- "--[a-z]" && fail "a note with nothing to act on: $(cat "$T/out")"
grep -q "what if cache=50%, storage=25MB/s: " "$T/out" && grep -q "what if memory=+1G, prefetch=on: " "$T/out" ||
	fail "the what-ifs in the user's words: $(cat "$T/out")"
grep "^what if" "$T/out" | grep -E "storage_mbps|cache_kind|minio|memory_added" && fail "internal names: $(cat "$T/out")"
$PY - "$T/s.json" "$T/out" <<'PYEOF' || fail "the small job's report: $(cat "$T/out")"
import json, re, sys
r = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
assert "crowd" not in r["measured"] and r["model"]["crowd_skipped"], r["model"]
# Where nothing was read from storage (the page cache above the mount holds
# the data, as it does here): no fetch stall, whatever the two runs' drift.
if r["mount"]["storage_bytes_per_epoch"] == 0:
    assert r["fetch_stall_seconds"] == 0.0, r
    assert re.search(r"^  fetch stall +none measurable \(nothing read from storage\)", text, re.M), text
# A stall shown with a figure is at least the noise floor; the others say so.
for name, key in (("prep stall", "prep_stall_seconds"), ("fetch stall", "fetch_stall_seconds"),
                  ("memory stall", "memory_stall_seconds")):
    line = [l for l in text.splitlines() if l.startswith("  " + name)][0]
    if "none measurable" not in line:
        assert r[key] >= r["noise_floor_seconds"], (line, r[key], r["noise_floor_seconds"])
    else:
        assert name.split()[0] in r["none_measurable"], (line, r["none_measurable"])
PYEOF
ok "a small job's report: no noise shown as a stall, no crowd run, every note actionable, the user's names"
umount_ep
mount_ep "$T/src" "$T/m" --cache-size $((D / 2))B

"$AN" -q --storage-mbps 50 "$T/m" -- sh -c 'exit 5' > "$T/out" 2>&1; rc=$?
[ $rc = 5 ] || fail "a failing COMMAND: exit $rc, expected 5"
grep -q "no DataLoader was iterated" "$T/out" && grep -q "exited 5 in the as-is run" "$T/out" ||
	fail "a failing COMMAND's report: $(cat "$T/out")"
"$AN" -q --storage-mbps 50 "$T/m" -- $PY "$JOB" "$T/m" --die-at 1 > "$T/out" 2>&1; rc=$?
[ $rc = 1 ] || fail "a job dying in epoch 1: exit $rc, expected 1"
grep -q "as-is run, epoch 0: " "$T/out" && grep -q "as-is run, epoch 1 (cut short)" "$T/out" ||
	fail "what was measured before the job died: $(cat "$T/out")"
ok "COMMAND's exit status passes through; the report says what was measured before it failed"

# The same rules as epochfs-run: a sampler without a length is never
# drained, by the order hook (--order) or by the warm run.
timeout 200 "$AN" -q --order --steps 4 --storage-mbps 50 "$T/m" -- $PY "$JOB" "$T/m" --forever > "$T/out" 2>&1 ||
	fail "a job with an infinite sampler: $(cat "$T/out")"
grep -q "drained" "$T/out" && fail "the infinite sampler was drained: $(cat "$T/out")"
[ "$(grep -c "Forever: it has no length" "$T/out")" = 1 ] || fail "the as-is run's order hook said: $(cat "$T/out")"
grep -q "a sampler without a length" "$T/out" || fail "the report: $(cat "$T/out")"
ok "an infinite sampler: every run done, never drained, the order hook said so once"
umount_ep
