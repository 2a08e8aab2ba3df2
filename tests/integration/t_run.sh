#!/usr/bin/env bash
# epochfs-run with real torchvision DataLoaders over a mount: training is
# unchanged bit for bit (batches, labels, pixels, torch's random stream and
# the loaders' generators after every epoch) for every kind of sampler, the
# ones the hook reads ahead and the ones it must leave alone (a custom one
# drawing as it goes, an infinite one); every epoch of a known sampler
# reaches the daemon (the paths counted), the others are said once and
# never drained; the order written is the order read (no workers: exactly;
# 2 workers: each worker's files in sequence), a dataset the hook cannot
# map is reported once and runs as before, the streams go with their
# loaders, and the prefetcher served reads. Through the real launcher, a
# job that never imports torch has the modules and sys.path it has without
# it. Skipped where python3-torchvision is not installed.
. "$(dirname "$0")/lib.sh"
plain_pass_only "epochfs-run's hook is Python (torch's loaders); the daemon's order channel, prefetcher and staging run under the sanitizers in t_prefetch.sh"
PY=/usr/bin/python3
$PY -c 'import torch, torchvision' 2>/dev/null || skip "python3-torchvision is not installed"
RUN=$ROOT/$BUILD/epochfs-run

"$RUN" --help | grep -q "COMMAND" || fail "epochfs-run --help"
"$RUN" 2> "$T/e"; [ $? = 2 ] && grep -q "missing COMMAND" "$T/e" || fail "epochfs-run without a command"
"$RUN" --bogus -- true 2> "$T/e"; [ $? = 2 ] || fail "epochfs-run took an unknown option"
"$RUN" -- sh -c 'exit 3'; [ $? = 3 ] || fail "epochfs-run did not pass the exit status on"

"$GEN" "$T/src" --files 120 --classes 3 --seed 9 > /dev/null || fail "gen"
D=$(du -sb --apparent-size "$T/src" | cut -f1)
mount_ep "$T/src" "$T/m" --cache-size $((D / 4))B

# A job that never imports torch: not one module more, the same sys.path.
probe='import sys, json; print(json.dumps([sorted(sys.modules), sys.path]))'
PYTHONPATH="$T:" $PY -c "$probe" > "$T/bare.plain" || fail "bare job"
PYTHONPATH="$T:" EPOCHFS_PYTHON=$PY "$RUN" -- $PY -c "$probe" > "$T/bare.hooked" 2> "$T/bare.err" || fail "bare job under epochfs-run"
cmp -s "$T/bare.plain" "$T/bare.hooked" && [ ! -s "$T/bare.err" ] ||
	fail "a job without torch sees more under epochfs-run: $(diff "$T/bare.plain" "$T/bare.hooked" | head -5) $(cat "$T/bare.err")"
ok "a job that never imports torch: the same modules and sys.path under epochfs-run, nothing on stderr"

$PY "$(dirname "$0")/run_job.py" "$T/m" > "$T/plain" 2> "$T/plain.err" || fail "plain job: $(cat "$T/plain.err")"
p0=$(stat_of "$T/m" order_paths)
[ "$p0" = 0 ] || fail "a job without epochfs-run wrote orders"
echo 3 > /proc/sys/vm/drop_caches      # what the RAM cache lacks is now read from storage
EPOCHFS_PYTHON=$PY timeout 120 "$RUN" -- $PY "$(dirname "$0")/run_job.py" "$T/m" > "$T/hooked" 2> "$T/hooked.err" ||
	fail "job under epochfs-run: $(cat "$T/hooked.err")"
cmp -s "$T/plain" "$T/hooked" || fail "training changed under epochfs-run"
# Each epoch's end reports the loader's data wait (EPOCHFS_RUN_REPORT_S: and every step).
jr=$(stat_of "$T/m" job_run_us); jw=$(stat_of "$T/m" job_wait_us)
[ "$jr" -gt 0 ] && [ "$jw" -gt 0 ] && [ "$jw" -le "$jr" ] || fail "data wait reports: $jw of $jr us"
# shuffled 2 x 120, Subset/Concat 60 + 40, distributed 2 x 60 (rank 1 of 2),
# sequential 120, own generator 2 x 120, replacement 50, subset 40,
# weighted 30, batch sampler 12 x 10, list 18; the custom and infinite
# ones none.
paths=$((240 + 100 + 120 + 120 + 240 + 50 + 40 + 30 + 120 + 18))
[ "$(stat_of "$T/m" order_paths)" = $paths ] || fail "order_paths $(stat_of "$T/m" order_paths), expected $paths"
[ "$(grep -c "Numbers: cannot map" "$T/hooked.err")" = 1 ] || fail "the unmappable dataset: $(cat "$T/hooked.err")"
[ "$(grep -c "LazyGlobal: not one of torch's own samplers" "$T/hooked.err")" = 1 ] ||
	fail "the custom sampler: $(cat "$T/hooked.err")"
[ "$(grep -c "Forever: it has no length" "$T/hooked.err")" = 1 ] || fail "the infinite sampler: $(cat "$T/hooked.err")"
grep -q "DataLoader orders go to $T/m" "$T/hooked.err" || fail "no line saying where orders go"
[ -z "$(ls "$T/m/.epochfs/order")" ] || fail "streams left after the job: $(ls "$T/m/.epochfs/order")"
[ "$(stat_of "$T/m" prefetch_bytes)" -gt 0 ] || fail "nothing was prefetched"
ok "every sampler kind: same batches and random streams with and without epochfs-run; $paths paths told; custom, infinite and unmappable reported once"

EPOCHFS_PYTHON=$PY "$RUN" -q -- $PY "$(dirname "$0")/run_order.py" "$T/m" "$T/m" > "$T/o" 2>&1 || fail "$(cat "$T/o")"
ok "the order written is the order read (0 and 2 workers)"

umount_ep
mount_ep "$T/src" "$T/m" --no-order
EPOCHFS_PYTHON=$PY "$RUN" -- $PY "$(dirname "$0")/run_job.py" "$T/m" > "$T/hooked2" 2> "$T/hooked2.err" ||
	fail "job on a --no-order mount: $(cat "$T/hooked2.err")"
cmp -s "$T/plain" "$T/hooked2" || fail "training changed on a --no-order mount"
grep -q "takes no orders" "$T/hooked2.err" || fail "a mount without the channel was not reported: $(cat "$T/hooked2.err")"
umount_ep
ok "a mount with no order channel: reported once, the job runs as before"
