# The daemon's ceiling beside a job whose memory climbs (issue 28): the
# daemon and a job share one cgroup v1 memory limit. The daemon's cache is
# full (128 MiB); then the job allocates, 8 MiB every 50 ms, up to a total
# that fits beside the daemon only if the daemon gives most of its cache
# back. The job must get its memory (no OOM kill in the cgroup: the OOM
# killer would take the daemon, the biggest process, or the job), the
# daemon must have given back at once (mem_guard_gives), and every file
# must still read exactly as SOURCE has it.
#
# Without the ceiling (T_CEILING_ARGS=--no-mem-watch, the control) the test
# fails: the cgroup cannot hold the job's 400 MiB and the daemon's ~140 MiB
# in 512 MiB, and the OOM killer takes one of them.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || skip "needs root (a memory cgroup)"
MEMROOT=/sys/fs/cgroup/memory
[ -w "$MEMROOT" ] && [ -f "$MEMROOT/memory.limit_in_bytes" ] || skip "no cgroup v1 memory controller"
CG=$MEMROOT/epochfs-t-ceiling-$$
mkdir "$CG" || fail "mkdir $CG"
trap 'for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done; cleanup; rmdir "$CG" 2>/dev/null' EXIT
in_cg() { sh -c 'echo $$ > "$0/cgroup.procs"; shift; exec "$@"' "$CG" x "$@"; }

MIB=$((1 << 20))
LIM=$((512 * MIB))
mkdir -p "$T/src/d"
for i in $(seq 160); do head -c $MIB /dev/urandom > "$T/src/d/f$i"; done
echo "$LIM" > "$CG/memory.limit_in_bytes" || fail "cannot set the limit"
oom0=$(awk '/^oom_kill / {print $2}' "$CG/memory.oom_control")

EP_ALLOWED_STDERR='^epochfs: (warning: )?memory: '  # the watch saying what it gives back
(in_cg "$EPOCHFS" -f --no-persist --cache-size 128M ${T_CEILING_ARGS:-} "$T/src" "$T/m" 2>"$T/daemon.err") &
EP_PID=$!
EP_MNT=$T/m
mkdir -p "$T/m"
wait_for mountpoint -q "$T/m" || fail "the daemon did not mount"
# Fill the cache, reading from outside the cgroup (the kernel's copies
# are the reader's to pay for, not the job's).
cat "$T"/m/d/* > /dev/null || fail "reading through the mount"
used=$(stat_of "$T/m" cache_used_bytes)
[ "$used" -ge $((120 * MIB)) ] || fail "the cache took $used bytes of 160 MiB read, want >= 120 MiB"
# The watch samples its own memory every 0.5 s: wait for one after the fill.
[ -n "${T_CEILING_ARGS:-}" ] || wait_for sh -c '[ "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[\"mem_own_bytes\"])" "$0/.epochfs/stats.json")" -ge "$1" ]' "$T/m" "$used"
own=$(stat_of "$T/m" mem_own_bytes)
[ -n "${T_CEILING_ARGS:-}" ] || [ "$own" -ge "$used" ] || fail "the daemon's own memory reads $own B with $used B cached"

# The job: up to 400 MiB, touched, in 8 MiB steps; holds it a second.
cat > "$T/hog.py" <<'EOF'
import sys, time
total, step, held = int(sys.argv[1]), 8 << 20, []
while sum(len(b) for b in held) < total:
    b = bytearray(step)
    for i in range(0, step, 4096):
        b[i] = 1
    held.append(b)
    time.sleep(0.05)
time.sleep(1)
print("held", sum(len(b) for b in held))
EOF
in_cg /usr/bin/python3 "$T/hog.py" $((400 * MIB)) > "$T/hog.out" 2>"$T/hog.err" ||
	fail "the job failed (exit $?): $(tail -2 "$T/hog.err"); cgroup: $(grep -E '^(oom_kill|under_oom) ' "$CG/memory.oom_control" | tr '\n' ' ')"
grep -q "^held $((400 * MIB))" "$T/hog.out" || fail "the job printed: $(cat "$T/hog.out")"
oom=$(awk '/^oom_kill / {print $2}' "$CG/memory.oom_control")
[ "$oom" = "$oom0" ] || fail "$((oom - oom0)) OOM kill(s) in the cgroup"
gives=$(stat_of "$T/m" mem_guard_gives)
[ "$gives" -ge 1 ] || fail "the daemon never gave back over its ceiling (mem_guard_gives $gives)"
after=$(stat_of "$T/m" cache_used_bytes)
[ "$after" -lt "$used" ] || fail "the cache still holds $after of $used bytes"
jobmax=$(stat_of "$T/m" mem_job_max_bytes)
[ "$jobmax" -ge $((400 * MIB)) ] || fail "the daemon saw the job at $jobmax B at most, it held 400 MiB"
# Every byte still right: given-back items come from storage again.
for f in "$T"/src/d/*; do cmp -s "$f" "$T/m/d/${f##*/}" || fail "${f##*/} differs through the mount"; done
umount_ep
ok "a job climbing to 400 MiB beside a full 128 MiB cache in 512 MiB: no OOM kill, the daemon gave back at once ($gives times, cache $((used / MIB)) -> $((after / MIB)) MiB), bytes exact"
