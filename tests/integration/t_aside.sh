# Standing aside (fs/core/aside.h, docs/design.md "A cache that does not
# pay stands aside"): with every file readable from SOURCE by passthrough
# (--passthrough on), the daemon times the job's opens with and without the
# cache once it is warm, and keeps whichever made the job faster.
#   - a job whose opens come slower while the cache serves (a reader that
#     sleeps longer in the trial's cache windows, as a CPU-bound job does
#     when each hit is a round trip): the cache stands aside, says so in
#     one line, gives all its memory back (cache_used_bytes 0,
#     aside_given_bytes > 0); a further epoch is read by the kernel from
#     SOURCE (every open a passthrough one, no byte copied by the daemon),
#     bytes right throughout; a file replaced in SOURCE reads new;
#   - a job whose opens come slower from SOURCE (a storage-bound job): the
#     cache serves on and keeps its bytes, and says when it tries again;
#   - --stand-aside off, and auto passthrough on small files: off, and why;
#     --stand-aside with a bad word: a clear error.
# Skipped (77) where this kernel or user cannot use passthrough.
if [ -z "${EPOCHFS_PT_NS:-}" ] && [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
	EPOCHFS_PT_NS=1 exec unshare -m --propagation private bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"

mkdir -p "$T/src/img"
python3 - "$T/src/img" <<'PY'
import os, random, sys
r = random.Random(28)
for i in range(256):
    open(os.path.join(sys.argv[1], "%03d.jpg" % i), "wb").write(r.randbytes(r.randint(2000, 20000)))
PY
size=$(du -sb "$T/src" | cut -f1)
M=$T/m

# The job: shuffled epochs, every file compared with SOURCE; it sleeps 6 ms
# a file while the phase is SLOW_IN, else FAST_MS (1), until the phase is
# UNTIL (or EPOCHS epochs). The phase is read every 4 files, well inside a
# window's settling quarter (8 of 40 opens here).
cat > "$T/job.py" <<'PY'
import json, os, random, sys, time
src, mnt, slow_in, until, epochs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
fast = float(sys.argv[6]) if len(sys.argv) > 6 else 1
names = sorted(os.listdir(os.path.join(src, "img")))
r = random.Random(7)
phase, bad = "", 0
def read_phase():
    with open(os.path.join(mnt, ".epochfs", "stats.json")) as f:
        return json.load(f)["stand_aside"]
for ep in range(epochs):
    r.shuffle(names)
    for i, n in enumerate(names):
        if i % 4 == 0:
            phase = read_phase()
            if phase == until:
                print("phase", phase, "epoch", ep)
                sys.exit(1 if bad else 0)
        with open(os.path.join(mnt, "img", n), "rb") as f:
            got = f.read()
        with open(os.path.join(src, "img", n), "rb") as f:
            bad += got != f.read()
        time.sleep((6 if phase == slow_in else fast) / 1000)
print("phase", read_phase(), "after", epochs, "epochs;", bad, "files differ")
sys.exit(1 if bad or until != "-" else 0)
PY
job() { python3 "$T/job.py" "$T/src" "$M" "$@"; }

# 1. The cache does not pay: it stands aside.
mount_ep "$T/src" "$M" --no-persist --cache-size $((size / 2))B --passthrough on
[ "$(stat_of "$M" passthrough_available)" = yes ] ||
	skip "kernel passthrough is not available here: $(stat_of "$M" passthrough_available)"
[ "$(stat_of "$M" stand_aside)" = warming ] || fail "stand_aside at the start: $(stat_of "$M" stand_aside)"
out=$(job "trial (cache)" aside 8) || fail "the job: $out"
[ "$(stat_of "$M" aside_stood)" = 1 ] && [ "$(stat_of "$M" aside_trials)" = 1 ] ||
	fail "stood $(stat_of "$M" aside_stood) after $(stat_of "$M" aside_trials) trials"
grep -qE "^epochfs: stand-aside: the job opened a file every [0-9.]+ ms served from the cache, every [0-9.]+ ms read from SOURCE: the cache does not pay here\. It stands aside" "$T/daemon.err" ||
	fail "no line saying the cache stands aside, and why"
wait_for sh -c "[ \"\$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[\"cache_used_bytes\"])' '$M/.epochfs/stats.json')\" = 0 ]" ||
	fail "the cache kept $(stat_of "$M" cache_used_bytes) bytes aside"
[ "$(stat_of "$M" aside_given_bytes)" -gt 0 ] || fail "aside_given_bytes $(stat_of "$M" aside_given_bytes)"
ok "a job slower with the cache: it stands aside ($out) and gives back $(stat_of "$M" aside_given_bytes) bytes"
rb0=$(stat_of "$M" read_bytes) so0=$(stat_of "$M" passthrough_source_opens)
# No sleep: the job no slower than in the trial's SOURCE windows (a job
# 30% slower for two windows would bring the cache back, by design).
out=$(job - - 1 0) || fail "an epoch aside: $out"
[ "$(stat_of "$M" read_bytes)" = "$rb0" ] || fail "the daemon copied $(($(stat_of "$M" read_bytes) - rb0)) bytes aside"
[ $(($(stat_of "$M" passthrough_source_opens) - so0)) = 256 ] ||
	fail "$(($(stat_of "$M" passthrough_source_opens) - so0)) of 256 opens from SOURCE aside"
[ "$(stat_of "$M" stand_aside)" = aside ] && [ "$(stat_of "$M" cache_used_bytes)" = 0 ] ||
	fail "an epoch aside left it $(stat_of "$M" stand_aside) with $(stat_of "$M" cache_used_bytes) bytes"
python3 -c 'import sys; open(sys.argv[1], "wb").write(b"new bytes" * 999)' "$T/new"
mv "$T/new" "$T/src/img/007.jpg"
wait_for cmp -s "$T/src/img/007.jpg" "$M/img/007.jpg" || fail "a file replaced in SOURCE reads old aside"
ok "aside: an epoch of 256 opens read by the kernel from SOURCE, none copied by the daemon, bytes right; a replaced file reads new"
umount_ep

# 2. The cache pays: it serves on.
mount_ep "$T/src" "$M" --no-persist --cache-size $((size / 2))B --passthrough on
out=$(job "trial (source)" serving 8) || fail "the job: $out"
[ "$(stat_of "$M" aside_trials)" = 1 ] && [ "$(stat_of "$M" aside_stood)" = 0 ] ||
	fail "stood $(stat_of "$M" aside_stood) after $(stat_of "$M" aside_trials) trials"
grep -qE "^epochfs: stand-aside: the job opened a file every [0-9.]+ ms served from the cache, every [0-9.]+ ms read from SOURCE: the cache pays and serves on \(next trial in 16 windows\)$" "$T/daemon.err" ||
	fail "no line saying the cache serves on"
used=$(stat_of "$M" cache_used_bytes)
[ "$used" -gt $((size / 4)) ] && [ "$(stat_of "$M" aside_given_bytes)" = 0 ] ||
	fail "the cache holds $used bytes, gave $(stat_of "$M" aside_given_bytes) to stand aside"
ok "a job slower from SOURCE: the cache serves on with $used bytes ($out)"
umount_ep

# 3. Off, and why.
mount_ep "$T/src" "$M" --no-persist --cache-size $((size / 2))B --passthrough on --stand-aside off
[ "$(stat_of "$M" stand_aside)" = "off: --stand-aside off" ] || fail "stand_aside: $(stat_of "$M" stand_aside)"
umount_ep
mount_ep "$T/src" "$M" --no-persist --cache-size $((size / 2))B
case $(stat_of "$M" stand_aside) in
"off: needs every file readable from SOURCE by passthrough"*) ;;
*) fail "auto passthrough on small files: stand_aside $(stat_of "$M" stand_aside)" ;;
esac
umount_ep
rc=0
"$EPOCHFS" --stand-aside maybe "$T/src" "$M" 2>"$T/err" || rc=$?
[ "$rc" = 2 ] && grep -q "stand-aside maybe: expected auto or off" "$T/err" ||
	fail "--stand-aside maybe: exit $rc, $(cat "$T/err")"
ok "off: --stand-aside off, and auto passthrough on small files, say so; a bad word is refused"
