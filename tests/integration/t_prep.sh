# Coordinated prep on a real mount: a group declared with epochfs-prep is
# read by 3 consumers at once, who all get the same bytes; every batch is
# made once; labels follow ImageFolder; memory stays under --prep-mem, one
# total for several groups at once; the same spec gives the same bytes
# after a remount; a dead consumer does not stall the others; bad specs and bad images are refused or substituted
# with clear messages, never a crash.
. "$(dirname "$0")/lib.sh"
EP_ALLOWED_STDERR='prep: '
PREP=$ROOT/$BUILD/epochfs-prep
MKJPEG=$ROOT/$BUILD/tests/mkjpeg
CHECK="python3 $ROOT/tests/integration/prep_check.py"
export ROOT
"$GEN" "$T/src" --files 150 --classes 5 --seed 11 2>/dev/null || fail "gen"
m=$T/mnt
one=$((128 + 64 + 16 * 32 * 32 * 3))       # a batch of 16 at 32x32, uint8
mount_ep "$T/src" "$m" --prep-mem $((3 * one))B --prep-timeout 2
PT=
case ${EP_EXTRA_ARGS:-} in *"--passthrough on"*)     # t_prep_pt.sh
	[ "$(stat_of "$m" passthrough)" = on ] || skip "kernel passthrough is not available here: $(stat_of "$m" passthrough_available)"
	PT=1 ;;
esac

# The kernel may keep 128 background requests in flight (not its 12):
# reads parked on batches not made yet must leave room for the reads that
# free memory (docs/design.md, prep). Read back from the FUSE control fs.
CTL=/sys/fs/fuse/connections
if [ "$(id -u)" = 0 ] && { mountpoint -q "$CTL" || mount -t fusectl none "$CTL" 2>/dev/null; }; then
	dev=$(stat -c %d "$m")
	bg=$(cat "$CTL/$((dev & 0xff | (dev >> 12 & 0xfff00)))/max_background" 2>/dev/null)
	[ "$bg" = 128 ] || fail "max_background is ${bg:-unreadable}, not 128"
	ok "the kernel may keep 128 background requests in flight"
fi

out=$("$PREP" "$m" g --batch 16 --size 32 --jobs 3 --epochs 2 --seed 7) || fail "epochfs-prep: $out"
echo "$out" | grep -q "group g: 2 epochs of 10 batches of 16, 32x32 uint8 NCHW, for 3 consumers" || fail "prep said: $out"
[ "$(ls "$m/.prep")" = "$(printf 'g\ng.spec')" ] || fail ".prep lists: $(ls "$m/.prep")"
ls -a "$m" | grep -q '^\.prep$' && fail ".prep shows in the root's listing"
pids=""
# Consumer 3 reads through the page cache (as readers did before
# read_batch's O_DIRECT): the same bytes either way.
for k in 1 2; do $CHECK consume "$m" g 2 > "$T/c$k" & pids="$pids $!"; done
$CHECK consume-plain "$m" g 2 > "$T/c3" & pids="$pids $!"
for p in $pids; do wait "$p" || fail "a consumer failed"; done
[ "$(wc -l < "$T/c1")" = 20 ] || fail "consumer 1 read $(wc -l < "$T/c1") batches"
cmp -s "$T/c1" "$T/c2" && cmp -s "$T/c1" "$T/c3" || fail "consumers saw different batches (O_DIRECT or buffered)"
read -r made regen freed imgs bad peak <<< "$(stat_of "$m" prep_batches_produced) $(stat_of "$m" prep_batches_regenerated) \
	$(stat_of "$m" prep_batches_freed) $(stat_of "$m" prep_images) $(stat_of "$m" prep_bad_samples) $(stat_of "$m" prep_staged_peak_bytes)"
[ "$made/$regen/$freed/$imgs/$bad" = "20/0/20/300/0" ] || fail "made/regen/freed/images/bad: $made/$regen/$freed/$imgs/$bad"
[ "$peak" -le $((3 * one)) ] || fail "held $peak bytes of batches, --prep-mem $((3 * one))"
ok "3 consumers, identical bytes; 20 batches made once and freed; peak $peak <= $((3 * one)) bytes"
if [ -n "$PT" ]; then
	[ "$(stat_of "$m" prep_passthrough_opens)/$(stat_of "$m" prep_served_bytes)" = 60/0 ] ||
		fail "with passthrough: $(stat_of "$m" prep_passthrough_opens) of 60 batch opens handed the file, $(stat_of "$m" prep_served_bytes) bytes copied"
	held=$(stat_of "$m" prep_consumer_held_peak_bytes)
	[ "$held" -gt 0 ] && [ "$held" -le $((3 * one)) ] ||
		fail "batch files held by consumers out of --prep-mem's count: peak $held bytes, bound $((3 * one))"
	ok "with passthrough: all 60 batch opens handed the batch's file ($(stat_of "$m" prep_batch_files | cut -d: -f1)), no byte copied; consumers held at most $held bytes of them out of --prep-mem's count"
fi
"$ROOT/$BUILD/epochfs-stat" "$m" --count 1 | grep "read MB/s" | grep -q "prep im/s.*cores" || fail "epochfs-stat: no prep columns"
"$ROOT/$BUILD/epochfs-stat" "$m" --json --count 1 > "$T/stat" || fail "epochfs-stat"
python3 - "$T/stat" <<'PY' || fail "epochfs-stat: $(cat "$T/stat")"
import json, sys
r = json.loads(open(sys.argv[1]).read())
assert abs(r["prep_images_per_s"] * r["seconds"] - 300) < 1, r
assert 0 < r["prep_cores"] * r["seconds"], r
PY
ok "epochfs-stat: prep columns; its since-mount images per second make the 300 images made"
ls -l "$m/.prep/g/epoch-0000" "$m/.prep/g/epoch-0001" > /dev/null || fail "ls -l of the epochs"
sleep 0.3
[ "$(stat_of "$m" prep_batches_regenerated)" = 0 ] || fail "ls -l made batches again: $(stat_of "$m" prep_batches_regenerated)"
ok "ls -l of consumed epochs makes nothing again"
$CHECK labels "$m" g "$T/src" 7 1 > /dev/null || fail "labels (epoch 1)"
if /usr/bin/python3 -c "import torchvision" 2>/dev/null; then
	/usr/bin/python3 - "$T/src" <<'PY' || fail "torchvision's ImageFolder disagrees with our order"
import os, sys
sys.path.insert(0, os.path.join(os.environ["ROOT"], "tests", "integration"))
from prep_check import imagefolder
from torchvision.datasets import ImageFolder
assert ImageFolder(sys.argv[1]).samples == imagefolder(sys.argv[1])
PY
fi
ok "labels follow ImageFolder's order and the epoch's permutation"
md5=$(sed -n '14p' "$T/c1")                 # epoch 1, batch 3
umount_ep

# The same spec after a remount: the same bytes.
mount_ep "$T/src" "$m" --prep-mem $((3 * one))B --prep-timeout 2
PT=
case ${EP_EXTRA_ARGS:-} in *"--passthrough on"*)     # t_prep_pt.sh
	[ "$(stat_of "$m" passthrough)" = on ] || skip "kernel passthrough is not available here: $(stat_of "$m" passthrough_available)"
	PT=1 ;;
esac
"$PREP" "$m" g --batch 16 --size 32 --jobs 3 --epochs 2 --seed 7 > /dev/null || fail "re-declare"
printf 'batch=16\nsize=32\njobs=3\nepochs=2\nseed=7\n' > "$m/.prep/g.spec" || fail "a second job declaring the same group"
python3 - "$m" "$md5" <<'PY' || fail "bytes differ after a remount"
import hashlib, os, sys
sys.path.insert(0, os.path.join(os.environ["ROOT"], "python"))
import epochfs.prep as ep
b = ep.read_batch(ep.batch_path(sys.argv[1], "g", 1, 3))
assert "1 3 " + hashlib.md5(b.pixels).hexdigest() == " ".join(sys.argv[2].split()[:3]), sys.argv[2]
PY
ok "same spec, same bytes after a remount; declaring it again is fine"
out=$("$PREP" "$m" g --batch 8 --size 32 2>&1) && fail "a different spec was accepted"
echo "$out" | grep -q "already runs with another spec" || fail "different spec: $out"
out=$("$PREP" "$m" x --batch 0 2>&1); [ $? = 2 ] || fail "--batch 0: rc"
echo "$out" | grep -q "batch=0: expected a whole number from 1 to 65536" || fail "--batch 0: $out"
out=$("$PREP" "$m" y --root nothere 2>&1) && fail "a missing root was accepted"
echo "$out" | grep -q "root nothere: No such file or directory" || fail "missing root: $out"
[ -e "$m/.prep/y" ] && fail ".prep/y exists"
err=$(bash -c "printf 'size=7\n' > '$m/.prep/z.spec'" 2>&1) && fail "size=7 was written"
echo "$err" | grep -q "Invalid argument" || fail "bad spec write: $err"
grep -q "size=7: expected a side in pixels" "$m/.prep/z.error" || fail "z.error: $(cat "$m/.prep/z.error")"
ok "bad specs: the tool and the write refuse them, with the reason in NAME.error"

# A batch larger than --prep-mem is refused when the spec is committed
# (a shell writes line by line, and the first lines alone may ask for more
# than the whole spec does), and never made.
printf 'batch=65536\nsize=2048\ndtype=float32\n' > "$m/.prep/h2.spec" || fail "h2.spec write"
[ -e "$m/.prep/h2" ] && fail ".prep/h2 exists: a 3.3 TB batch was accepted"
grep -q "one batch is 3298.5 GB .*more than the prep memory" "$m/.prep/h2.error" || fail "h2.error: $(cat "$m/.prep/h2.error")"
[ "$(ls -l "$m/.prep" | grep -c ' h2$')" = 0 ] || fail "h2 listed"
# A spec whose last line has no newline fails its write (close() cannot
# report in no-open mode: docs/design.md), from a shell and from Python.
err=$(bash -c "printf 'batch=8' > '$m/.prep/q1.spec'" 2>&1) && fail "printf 'batch=8' was accepted"
grep -q "line 1 does not end with a newline" "$m/.prep/q1.error" || fail "q1.error: $(cat "$m/.prep/q1.error")"
python3 - "$m/.prep/q2.spec" <<'PY' || fail "os.write of a spec without its newline"
import errno, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
try:
    os.write(fd, b"batch=8\nsize=32")
    sys.exit("accepted")
except OSError as e:
    assert e.errno == errno.EINVAL, e
finally:
    os.close(fd)
PY
# Refused and empty specs give their slot back: 500 refusals and 100
# empty creates in a row, then a good spec still starts, and .prep/ lists
# no more than the kept errors.
python3 - "$m/.prep" <<'PY' || fail "500 refused specs"
import errno, os, sys
d = sys.argv[1]
for i in range(500):
    fd = os.open(os.path.join(d, "r%d.spec" % i), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        os.write(fd, b"size=7\n")
        sys.exit("r%d accepted" % i)
    except OSError as e:
        assert e.errno == errno.EINVAL, (i, e)
    os.close(fd)
for i in range(100):
    os.close(os.open(os.path.join(d, "t%d.spec" % i), os.O_WRONLY | os.O_CREAT))
PY
"$PREP" "$m" good --batch 16 --size 32 --epochs 1 > /dev/null || fail "a good spec after 500 refusals"
[ -d "$m/.prep/good" ] || fail ".prep/good missing"
n=$(ls "$m/.prep" | wc -l)
[ "$n" -le 70 ] || fail ".prep/ holds $n entries after the refusals"
[ -e "$m/.prep/r499.error" ] && [ ! -e "$m/.prep/r0.error" ] && [ ! -e "$m/.prep/t5.spec" ] || fail "errors kept: $(ls "$m/.prep" | head)"
for f in "$m"/.prep/*.error; do rm "$f" || fail "rm $f"; done
[ "$(ls "$m/.prep" | grep -c error)" = 0 ] || fail "errors left after rm"
"$PREP" "$m" good --remove > /dev/null || fail "remove good"
ok "a batch over --prep-mem is refused; a line without a newline fails its write; 500 refused specs keep no slot"

# A consumer that dies: three expected, two read.
"$PREP" "$m" d --batch 16 --size 32 --jobs 3 --epochs 2 > /dev/null || fail "declare d"
pids=""
for k in 1 2; do $CHECK consume "$m" d 2 > "$T/d$k" & pids="$pids $!"; done
for p in $pids; do wait "$p" || fail "a consumer of d failed"; done
cmp -s "$T/d1" "$T/d2" && [ "$(wc -l < "$T/d1")" = 20 ] || fail "the two consumers of d"
[ "$(stat_of "$m" prep_consumers_dropped)" -ge 1 ] || fail "no consumer was dropped"
"$PREP" "$m" d --remove > /dev/null || fail "remove d"
[ -e "$m/.prep/d" ] && fail "d still there"
ok "a dead consumer is dropped after --prep-timeout; the others finish"
umount_ep

# --prep-mem is one total for all groups, not a budget each. Six groups of
# two consumers: the first consumer of each reads on until the memory is
# full (every batch it read waits for the second), then the second ones
# come. Batches held stay within the total plus one batch a group, and so
# does what the daemon holds (RssAnon, less what it held before, and room
# for 12 workers' decoding buffers); each group alone would hold 45 MB, the
# six 270 MB. Every consumer gets the same bytes, none is dropped. Batches
# under 1 MiB: a read parked in the daemon holds one of the kernel's 12
# background requests (docs/design.md), and six parked must leave room.
one=$((128 + 64 + 6 * 224 * 224 * 3))       # a batch of 6 at 224x224, uint8
total=$((48 << 20))
mount_ep "$T/src" "$m" --prep-mem 48M --prep-timeout 120
anon() { awk '/^RssAnon:/ {print $2 * 1024}' "/proc/$EP_PID/status"; }
anon0=$(anon)
pids=""
for k in 0 1 2 3 4 5; do
	"$PREP" "$m" s$k --batch 6 --size 224 --jobs 2 --epochs 2 --seed $k > /dev/null || fail "declare s$k"
	$CHECK consume "$m" s$k 2 > "$T/s$k.a" & pids="$pids $!"
done
prev=-1 same=0 anon_max=0
for i in $(seq 600); do                     # full: nothing changes for a second (60 s at most)
	sleep 0.1
	a=$(anon); [ "$a" -gt "$anon_max" ] && anon_max=$a
	held=$(stat_of "$m" prep_staged_bytes)
	if [ "$held" = "$prev" ]; then same=$((same + 1)); else same=0 prev=$held; fi
	[ "$same" -ge 10 ] && break
done
[ "$held" -ge $((total - one)) ] || fail "the groups held $held bytes: the memory never filled"
[ "$held" -le $((total + 6 * one)) ] || fail "six groups held $held bytes of batches, --prep-mem $total"
grow=$((anon_max - anon0))
case $BUILD in
*san*) ;;                                   # the sanitizers hold freed memory in quarantine
*) [ "$grow" -le $((total + 6 * one + (32 << 20))) ] || fail "the daemon grew by $grow bytes, --prep-mem $total" ;;
esac
for k in 0 1 2 3 4 5; do $CHECK consume "$m" s$k 2 > "$T/s$k.b" & pids="$pids $!"; done
for p in $pids; do wait "$p" || fail "a consumer of the six groups failed"; done
for k in 0 1 2 3 4 5; do
	[ "$(wc -l < "$T/s$k.a")" = 50 ] && cmp -s "$T/s$k.a" "$T/s$k.b" || fail "the consumers of s$k saw different batches"
done
peak=$(stat_of "$m" prep_staged_peak_bytes)
[ "$peak" -le $((total + 6 * one)) ] || fail "peak $peak bytes of batches, --prep-mem $total"
[ "$(stat_of "$m" prep_consumers_dropped)" = 0 ] || fail "a live consumer was dropped"
ok "six groups share --prep-mem $total: held $held (peak $peak) bytes of batches, the daemon grew by $grow"
umount_ep

# Bad images: substitutes, counted and logged once each; good odd ones decode.
mkdir -p "$T/b/a" "$T/b/b"
for k in 1 2 3 4 5 6; do "$MKJPEG" rgb $((40 + k)) 37 "$T/b/a/ok$k.jpg" || fail mkjpeg; done
"$MKJPEG" gray 50 40 "$T/b/b/gray.jpg" && "$MKJPEG" cmyk 50 40 "$T/b/b/cmyk.jpg" &&
	"$MKJPEG" progressive 50 40 "$T/b/b/progressive.jpg" && "$MKJPEG" rgb 64 48 "$T/b/b/base.jpg" || fail mkjpeg
head -c 300 "$T/b/b/base.jpg" > "$T/b/b/truncated.jpg"
printf '\x89PNG\r\n\x1a\n\0\0\0\rIHDR' > "$T/b/b/png.jpg"
: > "$T/b/b/empty.jpg"
python3 - "$T/b/b" <<'PY'
import os, sys
d = sys.argv[1]
j = bytearray(open(os.path.join(d, "base.jpg"), "rb").read())
k = j.index(b"\xff\xc0")
j[k + 5:k + 9] = b"\xea\x60\xea\x60"              # 60000 x 60000
open(os.path.join(d, "huge.jpg"), "wb").write(j)
f = bytearray(open(os.path.join(d, "base.jpg"), "rb").read())
for i in range(200, len(f) - 2, 37):
    f[i] ^= 0x55
open(os.path.join(d, "flipped.jpg"), "wb").write(f)
PY
mount_ep "$T/b" "$m"
"$PREP" "$m" bad --batch 4 --size 24 --epochs 2 > /dev/null || fail "declare bad"
$CHECK consume "$m" bad 2 > "$T/bad" || fail "reading the bad group"
nbad=$(stat_of "$m" prep_bad_samples)
[ "$nbad" -ge 8 ] && [ "$nbad" -le 10 ] || fail "bad samples $nbad, want 2 x (4 or 5)"
for f in truncated png empty huge; do
	[ "$(grep -c "prep: bad: b/$f.jpg" "$T/daemon.err")" = 1 ] || fail "$f.jpg not logged exactly once: $(cat "$T/daemon.err")"
done
grep -qE "b/(gray|cmyk|progressive|base).jpg" "$T/daemon.err" && fail "a good image was called bad: $(cat "$T/daemon.err")"
ok "bad images: $nbad substitutes over 2 epochs, each logged once; gray, CMYK, progressive decode"

# An image removed while its group runs: batches made after the removal
# have a substitute in its place, counted in their headers and logged once.
# Epochs 0 and 1 are made before the removal (epoch 1 by run-ahead while
# epoch 0 is read), epoch 2 after it.
"$PREP" "$m" gone --batch 4 --size 24 --epochs 3 > /dev/null || fail "declare gone"
$CHECK consume "$m" gone 1 0 > "$T/gone0" || fail "reading epoch 0"
rm "$T/b/a/ok3.jpg"
wait_for sh -c "! stat '$m/a/ok3.jpg' 2>/dev/null" || fail "the mount still shows a/ok3.jpg"
$CHECK consume "$m" gone 2 1 > "$T/gone12" || fail "reading epochs 1 and 2 after a removal"
bad0=$(awk '{s += $6} END {print s}' "$T/gone0")
bad2=$(awk '$1 == 2 {s += $6} END {print s}' "$T/gone12")
[ "$bad2" = $((bad0 + 1)) ] || fail "bad samples: epoch 0 $bad0, epoch 2 $bad2 (want one more)"
[ "$(grep -c "prep: gone: a/ok3.jpg" "$T/daemon.err")" = 1 ] || fail "removed image not logged once: $(grep ok3 "$T/daemon.err")"
ok "an image removed while its group ran: $bad0 substitutes in epoch 0, $bad2 in epoch 2, logged once"
umount_ep
