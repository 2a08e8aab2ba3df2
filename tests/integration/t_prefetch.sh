#!/usr/bin/env bash
# The order channel (.epochfs/order/) and the prefetcher behind it, on a real
# mount with a RAM cache of D/4: malformed orders are refused with EINVAL and
# keep what came before; bad stream names and a 65th stream are refused; a
# million-line order costs bounded memory; a reader that follows its order
# gets exact bytes, mostly from staging; one that strays still gets exact
# bytes and wastes at most the staging budget; a file many times staging's
# room is staged item by item within it; a file changed after it was
# staged is served new; idle orders expire; "#range" lines fetch their
# bytes alone; --page-cache drop leaves no copy above the mount.
. "$(dirname "$0")/lib.sh"
EP_ALLOWED_STDERR='order (bad|big|x[0-9]+|idle)'

"$GEN" "$T/src" --files 300 --classes 3 --seed 5 > /dev/null || fail "gen"
D=$(du -sb --apparent-size "$T/src" | cut -f1)
MEM=$((2 << 20))
mount_ep "$T/src" "$T/m" --cache-size $((D / 4))B --prefetch-mem "$MEM"B --prefetch-window 32 \
	--order-expire 2
O=$T/m/.epochfs/order
[ -d "$O" ] || fail "no $O"

# ---- malformed orders, names, too many streams ----
python3 - "$O" <<'PY' || fail "order channel errors"
import errno, os, sys
O = sys.argv[1]

def put(name, data, trunc=True):
    fd = os.open(os.path.join(O, name), os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if trunc else os.O_APPEND))
    try:
        os.write(fd, data)
        return 0
    except OSError as e:
        return e.errno
    finally:
        os.close(fd)

def status(name):
    with open(os.path.join(O, name)) as f:
        return f.read()

first = sorted(os.listdir(os.path.join(O, "../..", "class_0000")))[0]
good = ("class_0000/%s\n" % first).encode()
for bad in (b"/etc/passwd\n", b"../src/x\n", b"class_0000//x\n", b"class_0000/../../x\n", b"a\0b\n",
            b"x" * 5000 + b"\n"):
    e = put("bad", good + bad)
    assert e == errno.EINVAL, (bad[:20], e)
    assert "1 files" in status("bad"), status("bad")      # the line before it is kept
assert put("bad", b"no/such/file.jpg\n" + good) == 0
assert "1 files (1 paths no file has)" in status("bad"), status("bad")
for name in ("a b", ".hidden", "x" * 65):
    try:
        os.close(os.open(os.path.join(O, name), os.O_WRONLY | os.O_CREAT))
        raise AssertionError("stream name %r taken" % name)
    except OSError as e:
        assert e.errno == errno.EINVAL, (name, e)
made = ["x%d" % i for i in range(63)]     # with "bad": 64 streams
for n in made:
    assert put(n, good) == 0
try:
    os.close(os.open(os.path.join(O, "x63"), os.O_WRONLY | os.O_CREAT))
    raise AssertionError("a 65th stream was taken")
except OSError as e:
    assert e.errno == errno.ENOSPC, e
assert len(os.listdir(O)) == 64
for n in made + ["bad"]:
    os.unlink(os.path.join(O, n))
assert os.listdir(O) == []
PY
ok "malformed lines refused (EINVAL, earlier lines kept), bad names refused, a 65th stream ENOSPC"

# ---- "#wait" reports: summed into job_wait_us / job_run_us ----
w0=$(stat_of "$T/m" job_wait_us); r0=$(stat_of "$T/m" job_run_us)
python3 - "$O" <<'PY' || fail "#wait reports"
import os, sys
O = sys.argv[1]
first = sorted(os.listdir(os.path.join(O, "../..", "class_0000")))[0]
fd = os.open(os.path.join(O, "job"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
os.write(fd, ("class_0000/%s\n" % first).encode())
for line in (b"#wait 1.5 4.0\n", b"#wait x y\n", b"#wait 5 1\n", b"#wait 2.0 6.0\n", b"#wait -1 2\n",
             b"#wait 1e99 1e99\n", b"#wait 2.0 6.0 junk\n"):
    os.write(fd, line)
os.close(fd)
st = open(os.path.join(O, "job")).read()
assert "1 files" in st and "waited for data 2.0 s of 6.0 s" in st, st
fd = os.open(os.path.join(O, "job"), os.O_WRONLY | os.O_TRUNC)     # a new order: reports go on
os.write(fd, ("class_0000/%s\n#wait 0.5 1.0\n" % first).encode())   # lower: a new loader
os.close(fd)
os.unlink(os.path.join(O, "job"))
PY
[ $(($(stat_of "$T/m" job_wait_us) - w0)) = 2500000 ] && [ $(($(stat_of "$T/m" job_run_us) - r0)) = 7000000 ] ||
	fail "job_wait_us/job_run_us: $(stat_of "$T/m" job_wait_us)/$(stat_of "$T/m" job_run_us)"
ok "#wait reports summed (malformed and impossible ones ignored), shown in the stream's status"

# ---- a huge order: a million lines, memory bounded ----
rss() { awk '/VmRSS/ {print $2 * 1024}' "/proc/$EP_PID/status"; }
r0=$(rss)
python3 - "$O" "$T/src" <<'PY' || fail "huge order"
import os, sys
O, src = sys.argv[1:3]
rel = "class_0000/" + sorted(os.listdir(os.path.join(src, "class_0000")))[0]
with open(os.path.join(O, "big"), "w") as f:
    line = rel + "\n"
    for _ in range(100):
        f.write(line * 10000)
PY
grep -q "order 1: 1000000 files" "$O/big" || fail "big order: $(cat "$O/big")"
r1=$(rss)
[ $((r1 - r0)) -lt $((48 << 20)) ] || fail "a million-line order took $(((r1 - r0) >> 20)) MB"
rm "$O/big"
ok "a million-line order: $(((r1 - r0) >> 20)) MB of daemon memory, gone with rm"

# ---- readers: in order, stray, a change under a staged file ----
# read_order SEED: writes a shuffled order (SEED) as stream NAME and reads
# the files in the order of READSEED, comparing with SOURCE. Prints "bad".
read_order() {
	python3 - "$T/src" "$T/m" "$1" "$2" "$3" <<'PY'
import os, random, sys
src, mnt, name, oseed, rseed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
files = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs)
order = files[:]
random.Random(oseed).shuffle(order)
with open(os.path.join(mnt, ".epochfs/order", name), "w") as f:
    f.write("".join(p + "\n" for p in order))
reads = files[:]
random.Random(rseed).shuffle(reads)
bad = 0
for rel in reads:
    with open(os.path.join(src, rel), "rb") as a, open(os.path.join(mnt, rel), "rb") as b:
        bad += a.read() != b.read()
print(bad)
PY
}
S=$T/m/.epochfs/stats.json
biggest=$(find "$T/src" -type f -printf '%s\n' | sort -n | tail -1)
[ "$(read_order follow 1 1)" = 0 ] || fail "in order: wrong bytes"
hits=$(stat_of "$T/m" prefetch_hits) fetched=$(stat_of "$T/m" prefetch_bytes)
peak=$(stat_of "$T/m" prefetch_staged_peak_bytes) st=$(stat_of "$T/m" storage_read_bytes)
[ "$hits" -gt 100 ] || fail "in order: only $hits reads came from staging"
[ "$peak" -le "$MEM" ] || fail "staging peaked at $peak, budget $MEM"
[ "$st" -le $((D * 102 / 100)) ] || fail "in order: $st storage bytes for a $D-byte dataset"
ok "in order: exact bytes, $hits reads served from staging, $fetched bytes prefetched, staging peak $peak <= $MEM"
"$ROOT/$BUILD/epochfs-stat" "$T/m" --count 1 | grep "read MB/s" | grep -q "ahead MB/s.*staged/s.*late" ||
	fail "epochfs-stat shows no prefetch columns"
"$ROOT/$BUILD/epochfs-stat" "$T/m" --count 1 --json | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline())
# The stream may have expired by now (--order-expire 2, a slow sanitizer
# build): its gauge is only required to be there.
assert "order_streams" in r and r["prefetch_mb_s"] > 0 and r["prefetch_hits_per_s"] > 0, r' ||
	fail "epochfs-stat --json: no prefetch figures"
rm "$O/follow"

w0=$(stat_of "$T/m" prefetch_wasted_bytes)
echo 3 > /proc/sys/vm/drop_caches
[ "$(read_order stray 2 3)" = 0 ] || fail "stray reader: wrong bytes"
rm "$O/stray"
wasted=$(($(stat_of "$T/m" prefetch_wasted_bytes) - w0))
[ "$wasted" -le "$MEM" ] || fail "a stray reader wasted $wasted bytes (budget $MEM)"
ok "stray reader (another seed): exact bytes, $wasted bytes wasted (budget $MEM)"

# A file staged, then rewritten in SOURCE before it is read: the new bytes.
python3 - "$T/src" "$T/m" <<'PY' || fail "a staged file changed under the mount was served stale"
import json, os, sys, time
src, mnt = sys.argv[1:3]
files = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs)
cached = set()
# Files the RAM cache holds cannot be staged: pick from the end of the
# sorted list, order them first, and wait until they are staged.
pick = files[-8:]
os.system("echo 3 > /proc/sys/vm/drop_caches")
with open(os.path.join(mnt, ".epochfs/order/change"), "w") as f:
    f.write("".join(p + "\n" for p in pick))
stats = lambda: json.load(open(os.path.join(mnt, ".epochfs/stats.json")))
t = time.time()
while stats()["prefetch_staged_bytes"] == 0 and time.time() - t < 10:
    time.sleep(0.05)
assert stats()["prefetch_staged_bytes"] > 0, "nothing was staged"
for rel in pick:
    p = os.path.join(src, rel)
    with open(p, "r+b") as f:
        old = f.read()
        f.seek(0)
        f.write(bytes(b ^ 0x5A for b in old))
time.sleep(0.3)
for rel in pick:
    with open(os.path.join(src, rel), "rb") as a, open(os.path.join(mnt, rel), "rb") as b:
        assert a.read() == b.read(), rel
os.unlink(os.path.join(mnt, ".epochfs/order/change"))
PY
ok "files staged and then rewritten in SOURCE are served with their new bytes"

# ---- expiry ----
find "$T/src" -type f | head -1 | sed "s|$T/src/||" > "$O/idle"
[ -e "$O/idle" ] || fail "no idle stream"
wait_for test ! -e "$O/idle" || fail "an idle order did not expire after 2 s"
grep -q "order idle: no read seen" "$T/daemon.err" || fail "no expiry line"
ok "an order idle for --order-expire is dropped, with one line"
umount_ep

# ---- shards: files many times staging's room, two readers at once ----
# Two workers, each with its stream and its shards (WebDataset-style): each
# file is fetched item by item as its reader frees room, the two taking
# turns; staging never over its budget (a whole-file reservation once
# staged all of a 200 MB file against 2 MiB), every byte read from storage
# once, most reads served from staging.
mkdir "$T/shard"
for k in 0 1; do
	head -c $((12 << 20)) /dev/urandom > "$T/shard/big$k.tar"
	head -c 300000 /dev/urandom > "$T/shard/after$k.tar"
done
mount_ep "$T/shard" "$T/m" --cache-size 0 --prefetch-mem "$MEM"B
printf 'big0.tar\nafter0.tar\n' > "$O/worker0"
printf 'big1.tar\nafter1.tar\n' > "$O/worker1"
python3 - "$T/shard" "$T/m" <<'PY' || fail "shards: wrong bytes"
import sys, threading, time
src, mnt = sys.argv[1:3]
bad = []
def worker(k):
    for name in ("big%d.tar" % k, "after%d.tar" % k):
        with open("%s/%s" % (src, name), "rb") as a, open("%s/%s" % (mnt, name), "rb") as b:
            while True:
                x, y = a.read(1 << 18), b.read(1 << 18)
                if x != y:
                    bad.append(name)
                if not x:
                    break
                time.sleep(0.004)   # a worker decoding what it reads
t = [threading.Thread(target=worker, args=(k,)) for k in (0, 1)]
for x in t:
    x.start()
for x in t:
    x.join()
assert not bad, bad
PY
SZ=$((2 * ((12 << 20) + 300000)))
# Staged reads: ready (hits) or on their way (late, the reader waited for
# the prefetcher's fetch rather than start its own).
hits=$(($(stat_of "$T/m" prefetch_hits) + $(stat_of "$T/m" prefetch_late))) reads=$(stat_of "$T/m" reads)
peak=$(stat_of "$T/m" prefetch_staged_peak_bytes)
st=$(stat_of "$T/m" storage_read_bytes) wasted=$(stat_of "$T/m" prefetch_wasted_bytes)
[ "$peak" -le "$MEM" ] || fail "shards: staging peaked at $peak, budget $MEM"
[ "$st" -le $((SZ + MEM)) ] || fail "shards: $st bytes read from storage for $SZ"
[ $((hits * 2)) -ge "$reads" ] || fail "shards: only $hits of their $reads reads came from staging"
[ "$wasted" -le "$MEM" ] || fail "shards: $wasted bytes staged and never read"
ok "two 12 MiB shards read at once through 2 MiB of staging: exact bytes, staging peak $peak, $st storage bytes for $SZ, $hits of $reads reads staged, $wasted wasted"

# A record reader's order: "#range OFFSET LENGTH PATH" lines, 8 of big0's
# 24 half-MiB records in a shuffled order. Only their bytes are fetched
# (whole-file places would fetch all 12 MiB), ahead of the reader.
echo 3 > /proc/sys/vm/drop_caches
f0=$(stat_of "$T/m" prefetch_bytes) h0=$(($(stat_of "$T/m" prefetch_hits) + $(stat_of "$T/m" prefetch_late)))
s0=$(stat_of "$T/m" storage_read_bytes)
python3 - "$T/shard" "$T/m" <<'PY' || fail "ranges: wrong bytes"
import os, random, sys, time
src, mnt = sys.argv[1:3]
R = 1 << 19
offs = [k * R for k in random.Random(4).sample(range(24), 8)]
with open(mnt + "/.epochfs/order/records", "w") as f:
    f.write("".join("#range %d %d big0.tar\n" % (o, R) for o in offs))
time.sleep(0.3)
with open(src + "/big0.tar", "rb", buffering=0) as a, open(mnt + "/big0.tar", "rb", buffering=0) as b:
    for o in offs:
        x, y = os.pread(a.fileno(), R, o), os.pread(b.fileno(), R, o)
        assert x == y, o
        time.sleep(0.02)
os.unlink(mnt + "/.epochfs/order/records")
PY
fetched=$(($(stat_of "$T/m" prefetch_bytes) - f0)) hits=$(($(stat_of "$T/m" prefetch_hits) + $(stat_of "$T/m" prefetch_late) - h0))
st=$(($(stat_of "$T/m" storage_read_bytes) - s0))
[ "$fetched" -gt 0 ] && [ "$fetched" -le $((4 << 20)) ] || fail "ranges: $fetched bytes prefetched for 4 MiB of records"
[ "$hits" -gt 0 ] || fail "ranges: no read came from staging"
[ "$st" -lt $((6 << 20)) ] || fail "ranges: $st bytes read from storage for 4 MiB of records of a 12 MiB file"
ok "#range lines: 8 half-MiB records of a 12 MiB shard, exact bytes; $fetched bytes prefetched, $hits reads staged, $st from storage"
umount_ep

# ---- --page-cache drop / keep: the kernel's copy above the mount ----
mount_ep "$T/src" "$T/m" --page-cache drop
f=$(find "$T/src" -type f | head -1)
rel=${f#"$T/src/"}
cmp "$f" "$T/m/$rel" || fail "page-cache drop: wrong bytes"
pages() { fincore --noheadings --output PAGES "$T/m/$rel" | tr -d ' '; }
no_pages() { [ "$(pages)" = 0 ]; }
wait_for no_pages || fail "--page-cache drop: $(pages) pages still cached above the mount"
[ "$(stat_of "$T/m" page_cache_drops)" -ge 1 ] || fail "page_cache_drops not counted"
cmp "$f" "$T/m/$rel" || fail "page-cache drop: wrong bytes on the second read"
umount_ep
mount_ep "$T/src" "$T/m" --page-cache keep
cat "$T/m/$rel" > /dev/null
sleep 3
[ "$(pages)" -gt 0 ] || fail "--page-cache keep: the kernel's copy went"
umount_ep
ok "--page-cache drop: no copy above the mount once read (counted); keep: the copy stays"
