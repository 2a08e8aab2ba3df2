# A torchvision job under epochfs-run in a tight memory cgroup (issue 28's
# CI case): the job, its DataLoader workers and the daemon share one cgroup
# v1 memory limit of the pipeline's own peak + D/2 + 88 MiB, the cache is
# D/2 and prefetch is on. Two epochs: the job finishes, it read exactly
# SOURCE's bytes (every file once per epoch, decoded and augmented as
# torchvision's ImageNet pipeline does), the cgroup's OOM counter stays at
# 0, nothing failed a read, and the daemon's staging came out of the cache's
# budget rather than on top of it; the loader's "#batches" figure reached
# the daemon. Then split: the daemon in a memory cgroup of its own does not
# count that figure (the batches are not in its room).
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || skip "needs root (a memory cgroup)"
MEMROOT=/sys/fs/cgroup/memory
[ -w "$MEMROOT" ] && [ -f "$MEMROOT/memory.limit_in_bytes" ] || skip "no cgroup v1 memory controller"
/usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null || skip "needs python3-torchvision"
CG=$MEMROOT/epochfs-t-memory-$$
mkdir "$CG" || fail "mkdir $CG"
trap 'for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done; cleanup; rmdir "$CG" 2>/dev/null' EXIT

"$GEN" "$T/src" --files 300 --classes 3 --seed 28 >/dev/null || fail "epochfs-gen"
D=$(find "$T/src" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
cat > "$T/job.py" <<'EOF'
# torchvision's train pipeline over ImageFolder, 2 workers, 2 shuffled
# epochs; prints a digest of every file's bytes as read, per epoch.
import hashlib, io, sys
import torch
import torchvision.transforms as T
from PIL import Image
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder

aug = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                 T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])

def load(path):
    with open(path, "rb") as f:
        b = f.read()
    return hashlib.sha256(b).hexdigest(), Image.open(io.BytesIO(b)).convert("RGB")

class DS(ImageFolder):
    def __getitem__(self, i):
        (digest, img), label = self.loader(self.samples[i][0]), self.targets[i]
        return aug(img), label, digest

torch.manual_seed(28)
ds = DS(sys.argv[1], loader=load)
dl = DataLoader(ds, batch_size=32, shuffle=True, num_workers=2)
for epoch in range(2):
    seen = sorted(d for _, _, ds_ in dl for d in ds_)
    print(epoch, len(seen), hashlib.sha256("".join(seen).encode()).hexdigest(), flush=True)
EOF
in_cg() { sh -c 'echo $$ > "$0/cgroup.procs"; shift; exec "$@"' "$CG" x "$@"; }

# The pipeline's own peak (no limit, the data in tmpfs copied from outside
# the cgroup, so that no page cache of its reads counts), and what it must
# print.
SHM=/dev/shm/epochfs-t-memory-$$
trap 'rm -rf "$SHM"; for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done; cleanup; rmdir "$CG" 2>/dev/null' EXIT
cp -a "$T/src" "$SHM" || fail "cp to $SHM"
echo 0 > "$CG/memory.max_usage_in_bytes" 2>/dev/null
in_cg /usr/bin/python3 "$T/job.py" "$SHM" > "$T/want" 2>"$T/job.err" || fail "native job: $(tail -3 "$T/job.err")"
PEAK=$(cat "$CG/memory.max_usage_in_bytes")
rm -rf "$SHM"
[ "$(wc -l < "$T/want")" = 2 ] && [ "$(awk '{print $2}' "$T/want" | sort -u)" = 300 ] || fail "native job printed: $(cat "$T/want")"
LIM=$((PEAK + D / 2 + (88 << 20)))
echo "$LIM" > "$CG/memory.limit_in_bytes" || fail "cannot set the limit"
oom0=$(awk '/^oom_kill / {print $2}' "$CG/memory.oom_control")

# The daemon in the same cgroup, --cache-size D/2, prefetch on (its
# default staging budget must come out of the cache's, not on top).
echo 3 > /proc/sys/vm/drop_caches
EP_ALLOWED_STDERR='^epochfs: (warning: )?memory: '  # the budget saying what it does, and gives back
(in_cg "$EPOCHFS" -f --no-persist --cache-size $((D / 2))B "$T/src" "$T/m" 2>"$T/daemon.err") &
EP_PID=$!
EP_MNT=$T/m
mkdir -p "$T/m"
wait_for mountpoint -q "$T/m" || fail "the daemon did not mount"
# run_job WHAT: the job under epochfs-run in its cgroup; its output in
# $have, and in $said the most bytes of batches the mount counted while it
# ran (the loader's word lives with its stream, which ends with the job:
# read by a poller).
run_job() {
	(while :; do stat_of "$T/m" mem_job_batches_bytes 2>/dev/null; sleep 0.2; done > "$T/said") &
	local poll=$!
	have=$(in_cg "$ROOT/$BUILD/epochfs-run" -- /usr/bin/python3 "$T/job.py" "$T/m" 2>"$T/run.err") ||
		{ kill $poll; fail "$1: the job under epochfs-run failed: $(tail -5 "$T/run.err")"; }
	kill $poll; wait $poll 2>/dev/null
	said=$(sort -n "$T/said" | tail -1)
}
# The loader's word: what its 2 workers x 2 batches of 32 may hold at
# once, counted in the job's peak.
run_job "shared"
[ "$said" = $((2 * 2 * (32 * 3 * 224 * 224 * 4 + 32 * 8))) ] ||
	fail "the mount took ${said:-nothing} bytes of batches from the loader, want 2 x 2 x 19267840"
grep -q "DataLoader orders go to" "$T/run.err" || fail "epochfs-run told no order: $(cat "$T/run.err")"
oom=$(awk '/^oom_kill / {print $2}' "$CG/memory.oom_control")
[ "$oom" = "$oom0" ] || fail "$((oom - oom0)) OOM kill(s) in the job's cgroup (limit $LIM: peak $PEAK + D/2 + 88 MiB)"
[ "$have" = "$(cat "$T/want")" ] || fail "the job read other bytes under epochfs: $have, want $(cat "$T/want")"
[ "$(stat_of "$T/m" read_errors)" = 0 ] || fail "$(stat_of "$T/m" read_errors) read errors"
[ "$(stat_of "$T/m" order_paths)" -ge 600 ] || fail "the mount took $(stat_of "$T/m" order_paths) paths of 600"
[ -n "${T_MEMORY_DEBUG:-}" ] && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print({k: v for k, v in d.items() if k.startswith(("cache_", "prefetch", "memory", "order"))})' "$T/m/.epochfs/stats.json" >&2
staged=$(stat_of "$T/m" prefetch_staged_peak_bytes)
used=$(stat_of "$T/m" cache_used_bytes)
cap=$(stat_of "$T/m" cache_capacity_bytes)
[ "$used" -le "$cap" ] || fail "the cache holds $used of $cap"
# Staging comes out of the cache's budget: what the cache holds (it never
# evicts, so the most it held) and the most staged at once fit in it.
[ $((used + staged)) -le $((cap + (256 << 10))) ] ||
	fail "cache $used + staging peak $staged > --cache-size $cap: staging came on top of the cache"
umount_ep
ok "a torchvision job under epochfs-run in peak + D/2 + 88 MiB: 2 epochs, exact bytes, no OOM kill, no read error (staging peak $staged B, cache $used of $cap B)"

# Split: the daemon in a memory cgroup of its own (a systemd unit, a
# DaemonSet), the job in its cgroup as before. The job's batches are not
# in the daemon's room: its word is not counted, and the cache keeps all
# it took.
CGD=$MEMROOT/epochfs-t-memory-d-$$
mkdir "$CGD" || fail "mkdir $CGD"
trap 'for g in "$CG" "$CGD"; do for p in $(cat "$g/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done; done; cleanup; rmdir "$CG" "$CGD" 2>/dev/null' EXIT
echo $((D / 2 + (64 << 20))) > "$CGD/memory.limit_in_bytes" || fail "cannot set the daemon's limit"
echo 3 > /proc/sys/vm/drop_caches
(sh -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' "$CGD" "$EPOCHFS" -f --no-persist --cache-size $((D / 2))B \
	"$T/src" "$T/m" 2>"$T/daemon.err") &
EP_PID=$!
wait_for mountpoint -q "$T/m" || fail "the daemon did not mount in its own cgroup"
run_job "split"
[ "$have" = "$(cat "$T/want")" ] || fail "split: the job read other bytes: $have"
[ "$(stat_of "$T/m" order_paths)" -ge 600 ] || fail "split: the mount took $(stat_of "$T/m" order_paths) paths of 600"
[ "${said:-x}" = 0 ] || fail "split: the daemon counted ${said:-nothing} bytes of a job's batches that are not in its cgroup"
[ "$(stat_of "$T/m" cache_given_back_bytes)" = 0 ] || fail "split: the cache gave $(stat_of "$T/m" cache_given_back_bytes) B back"
oom=$(awk '/^oom_kill / {s += $2} END {print s + 0}' "$CG/memory.oom_control" "$CGD/memory.oom_control")
[ "$oom" = "$oom0" ] || fail "split: $((oom - oom0)) OOM kill(s)"
umount_ep
ok "split: the job's batches in its own cgroup are not counted in the daemon's (exact bytes, nothing given back, no OOM kill)"
