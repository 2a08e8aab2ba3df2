# Kernel passthrough (docs/design.md, "Kernel passthrough"): the kernel
# reads files of 4 MiB or more that the RAM cache holds whole straight from
# the cache's memfd.
#   - SOURCE with large files (8-64 MiB) and many small ones, --passthrough
#     auto: on, one log line saying why; every file read twice and compared
#     with SOURCE (cmp, and an mmap of one); the second open of each large
#     file is a passthrough open, the small ones never are;
#   - reading a large file through a passthrough open leaves no page on the
#     FUSE inode (cachestat(2) on the descriptor: mincore and fincore map
#     the file, which in passthrough maps the memfd, the one copy), while
#     the same read through the daemon (--passthrough off) does;
#   - a file rewritten in SOURCE is read back new (a fresh open never gets
#     the old memfd), and a descriptor opened before the change reads the
#     old version whole, never a mix;
#   - --passthrough off: stats say so, no open reaches the daemon;
#   - a dataset of small files: auto keeps passthrough off and says why;
#   - misses by passthrough (--passthrough on, a cache of a fifth of the
#     small files): misses opened on SOURCE's file, bytes right, no page
#     on the FUSE inode, a replaced file read new; auto keeps no-open;
#   - .prep/ batches by passthrough: every open of a batch is handed its
#     file (made, or once made); bytes as without passthrough, each batch
#     made once and freed once its consumers closed it; a batch mapped and
#     closed never changes under its mapping;
#   - a daemon run by nobody with --passthrough on: off, with the reason
#     (no CAP_SYS_ADMIN), bytes right.
# Skipped (77) where this kernel or user cannot use passthrough.
if [ -z "${EPOCHFS_PT_NS:-}" ] && [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
	EPOCHFS_PT_NS=1 exec unshare -m --propagation private bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"

mkdir -p "$T/src/shards" "$T/src/img"
python3 - "$T/src" <<'PY'
import os, random, sys
r = random.Random(33)
for name, mb in (("a.tar", 8), ("b.tar", 24), ("c.tar", 64)):
    with open(os.path.join(sys.argv[1], "shards", name), "wb") as f:
        for _ in range(mb):
            f.write(r.randbytes(1 << 20))
for i in range(300):
    open(os.path.join(sys.argv[1], "img", "%03d.jpg" % i), "wb").write(r.randbytes(r.randint(1000, 30000)))
PY
# The FUSE inode's own page cache, as seen through a descriptor of it.
cat > "$T/cachestat.py" <<'PY'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
class Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]
class Stat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("cache", "dirty", "writeback", "evicted", "recently_evicted")]
fd = os.open(sys.argv[1], os.O_RDONLY)
while os.read(fd, 1 << 20):     # read it all through this open
    pass
r, s = Range(0, 0), Stat()
if libc.syscall(451, fd, ctypes.byref(r), ctypes.byref(s), 0) != 0:   # cachestat, x86-64 and arm64
    print("nosys")
else:
    print(s.cache)
PY
cached_pages() { python3 "$T/cachestat.py" "$1"; }
M=$T/m
shopt -s nullglob
read_all() { # read_all: every file compared with SOURCE
	local f
	for f in "$T"/src/shards/* "$T"/src/img/*; do
		cmp -s "$f" "$M/${f#"$T"/src/}" || fail "${f#"$T"/src/}: bytes differ from SOURCE"
	done
}

mount_ep "$T/src" "$M" --no-persist --cache-size 256M
[ "$(stat_of "$M" passthrough_available)" = yes ] ||
	skip "kernel passthrough is not available here: $(stat_of "$M" passthrough_available)"
[ "$(stat_of "$M" passthrough)" = on ] || fail "auto with 95% of the bytes in shards: $(stat_of "$M" passthrough)"
[ "$(grep -c 'kernel passthrough' "$T/daemon.err")" = 1 ] &&
	grep -qxE "epochfs: kernel passthrough on \(auto: 9[0-9]% of the dataset's bytes are in files of 4 MiB or more\): the kernel reads files of 4 MiB or more that the RAM cache holds whole straight from it; open\(\) is answered by the daemon" "$T/daemon.err" ||
	fail "want one line saying passthrough is on and why: $(cat "$T/daemon.err")"
read_all
[ "$(stat_of "$M" cache_backed_whole)" = 3 ] || fail "the shards are not held whole: $(stat_of "$M" cache_backed_whole)"
pt0=$(stat_of "$M" passthrough_opens)
rb0=$(stat_of "$M" read_bytes)
read_all
pt1=$(stat_of "$M" passthrough_opens)
rb1=$(stat_of "$M" read_bytes)
[ "$pt1" -ge $((pt0 + 3)) ] || fail "second read: $((pt1 - pt0)) passthrough opens, want 3"
# The small files may come through the daemon again (whatever drops the
# kernel's page cache meanwhile); the shards' 96 MiB may not.
small=$(du -cb "$T"/src/img/* | tail -1 | cut -f1)
[ $((rb1 - rb0)) -le "$small" ] || fail "second read: the daemon served $((rb1 - rb0)) bytes (the shards went through it)"
python3 - "$T/src/shards/b.tar" "$M/shards/b.tar" <<'PY' || fail "mmap of a passthrough file differs"
import mmap, sys
a, b = (open(p, "rb") for p in sys.argv[1:])
assert mmap.mmap(b.fileno(), 0, prot=mmap.PROT_READ)[:] == a.read()
PY
ok "auto: on (one line why); every file twice as in SOURCE; the second read of the shards: $((pt1 - pt0)) passthrough opens, $((rb1 - rb0)) bytes through the daemon"

n=$(cached_pages "$M/shards/c.tar")
[ "$n" = nosys ] && skip "no cachestat(2) to see the FUSE inode's pages (Linux 6.5)"
[ "$n" = 0 ] || fail "a 64 MiB shard read in passthrough left $n pages on the FUSE inode"
ok "a 64 MiB shard read in passthrough: 0 pages on the FUSE inode (the memfd is the one copy)"

# A rewrite in SOURCE, with a descriptor held across it.
exec 7< "$M/shards/a.tar"
head -c 4096 <&7 >/dev/null
old=$(stat_of "$M" cache_backings_retired)
python3 - "$T/src/shards/a.tar" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.write(b"N" * (8 << 20))
PY
wait_for cmp -s "$T/src/shards/a.tar" "$M/shards/a.tar" || fail "the rewritten shard still reads old"
cmp -s "$T/src/shards/a.tar" "$M/shards/a.tar" || fail "the rewritten shard, read again"
cmp -s "$T/src/shards/a.tar" "$M/shards/a.tar" || fail "the rewritten shard, third read"
[ "$(stat_of "$M" cache_backings_retired)" -gt "$old" ] || fail "the old memfd was not retired"
held=$(python3 -c '
import os
d = os.pread(7, 8 << 20, 0)
print("new" if d == b"N" * len(d) else "error" if not d else "mixed" if b"N" * 4096 in d else "old")' 7<&7)
case $held in old|error) ;; *) fail "a descriptor held across the rewrite read $held bytes" ;; esac
exec 7<&-
ok "a rewritten shard reads new at once; a descriptor held across the change reads the old version ($held)"

# An open through the daemon held while the cache fills: the next open of
# the file goes through the daemon too (the kernel would refuse a mix with
# EIO); once both are closed, the next one is a passthrough open.
python3 - "$T/src/shards/a.tar" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.write(b"M" * (8 << 20))
PY
wait_for sh -c "head -c 1 '$M/shards/a.tar' | grep -q M" || fail "the second rewrite is not seen"
busy=$(stat_of "$M" passthrough_busy)
pt0=$(stat_of "$M" passthrough_opens)
exec 8< "$M/shards/a.tar"
cat <&8 >/dev/null
cmp -s "$T/src/shards/a.tar" "$M/shards/a.tar" || fail "an open beside one through the daemon"
[ "$(stat_of "$M" passthrough_busy)" -gt "$busy" ] || fail "passthrough_busy did not count the open beside"
exec 8<&-
wait_for sh -c "cmp -s '$T/src/shards/a.tar' '$M/shards/a.tar' && [ \$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[\"passthrough_opens\"])' '$M/.epochfs/stats.json') -gt $pt0 ]" ||
	fail "no passthrough open once the open through the daemon was closed"
[ "$(stat_of "$M" passthrough_errors)" = 0 ] || fail "the kernel refused backing files"
ok "beside an open through the daemon a shard opens through the daemon too; passthrough once it is closed"
umount_ep

# The same read through the daemon leaves the kernel a copy.
mount_ep "$T/src" "$M" --no-persist --cache-size 256M --passthrough off
[ "$(stat_of "$M" passthrough)" = "off: --passthrough off" ] || fail "--passthrough off: $(stat_of "$M" passthrough)"
read_all
read_all
[ "$(stat_of "$M" opens)" = 0 ] || fail "--passthrough off: $(stat_of "$M" opens) opens reached the daemon"
n=$(cached_pages "$M/shards/c.tar")
[ "$n" -ge 8192 ] || fail "through the daemon, a 64 MiB shard left only $n pages on the FUSE inode"
umount_ep
ok "--passthrough off: no-open mode, every file right; the same read leaves $n pages on the FUSE inode"

# Small files only: auto keeps the no-open mode.
rm -rf "$T/src/shards"
mount_ep "$T/src" "$M" --no-persist --cache-size 256M
want="off: auto: 0% of the dataset's bytes are in files of 4 MiB or more, under half; --passthrough on uses it anyway"
[ "$(stat_of "$M" passthrough)" = "$want" ] || fail "small files: $(stat_of "$M" passthrough)"
read_all
[ "$(stat_of "$M" opens)" = 0 ] || fail "small files: opens reached the daemon"
umount_ep
ok "small files: auto keeps passthrough off ($want)"

# Misses by passthrough (--passthrough on): small files and a cache that
# holds a fifth of them; once the cache is full, a file no store holds is
# read by the kernel from SOURCE (no copy through the daemon, no page on
# the FUSE inode). Cached files keep the daemon's path; bytes right both
# ways, a change seen. Auto, with the same cache, keeps the no-open mode.
small=$(du -cb "$T"/src/img/* | tail -1 | cut -f1)
mount_ep "$T/src" "$M" --no-persist --cache-size $((small / 5))B
read_all
[ "$(stat_of "$M" opens)" = 0 ] || fail "auto, a cache of a fifth: opens reached the daemon"
umount_ep
# (--stand-aside off: two epochs of cmp may trigger a trial that gives the
# cache back, which t_aside.sh tests; here the cache keeps what it took.)
mount_ep "$T/src" "$M" --no-persist --cache-size $((small / 5))B --passthrough on --stand-aside off
pt=$(stat_of "$M" passthrough)
[ "$pt" = on ] || fail "--passthrough on, a cache of a fifth of the dataset: passthrough $pt"
grep -qE "kernel passthrough on \(--passthrough on\): .*and files no store holds, opened while the cache has no room for them, from SOURCE" "$T/daemon.err" ||
	fail "want a line saying misses go to the kernel: $(cat "$T/daemon.err")"
read_all
read_all
src=$(stat_of "$M" passthrough_source_opens)
[ "$src" -ge 300 ] || fail "two reads of 300 files with a fifth cached: $src opens from SOURCE, want 300 or more"
[ "$(stat_of "$M" passthrough_source_bytes)" -ge "$small" ] || fail "passthrough_source_bytes: $(stat_of "$M" passthrough_source_bytes)"
[ "$(stat_of "$M" cache_items)" -gt 0 ] || fail "the cache took no file (epoch 0 fills it through the daemon)"
[ "$(stat_of "$M" passthrough_errors)" = 0 ] || fail "the kernel refused backing files"
for f in "$T"/src/img/*; do
	rel=img/${f##*/}
	# A file the cache does not hold: opened from SOURCE, no page of its own.
	where=$(python3 -c 'import os,sys; print(os.getxattr(sys.argv[1], "user.epochfs.where").decode())' "$M/$rel") ||
		fail "$rel: no user.epochfs.where"
	if ! printf '%s\n' "$where" | grep -qx "map R"; then
		n=$(cached_pages "$M/$rel")
		[ "$n" = 0 ] || [ "$n" = nosys ] || fail "$rel read from SOURCE by passthrough left $n pages on the FUSE inode"
		break
	fi
done
# A change in SOURCE: the next open reads it new.
f=$(ls "$T"/src/img | tail -1)
printf 'new bytes' > "$T/src/img/$f.tmp" && mv "$T/src/img/$f.tmp" "$T/src/img/$f"
wait_for cmp -s "$T/src/img/$f" "$M/img/$f" || fail "a file replaced in SOURCE still reads old"
umount_ep
ok "--passthrough on, a cache of a fifth of 300 small files (auto: no opens): misses to the kernel; two reads right, $src opens from SOURCE, a replaced file reads new"

# .prep/ batches by passthrough (--passthrough on): a group for 2 consumers
# with memory for all its batches; consumer 1 reads every batch (its opens
# wait for each batch to be made), consumer 2 then finds each made; both are
# handed the batch's file at open: the kernel reads it, the daemon copies
# none of it. Both get the bytes a mount
# without passthrough gives (the same spec makes the same batches); every
# batch is made once and freed once both consumers closed it; a batch file
# opened for writing is refused.
"$GEN" "$T/prep" --files 80 --classes 4 --seed 12 2>/dev/null || fail "gen"
PREP=$ROOT/$BUILD/epochfs-prep
CHECK="python3 $ROOT/tests/integration/prep_check.py"
export ROOT
one=$((128 + 64 + 8 * 32 * 32 * 3))
for mode in on off; do
	EP_ALLOWED_STDERR='prep: '
	mount_ep "$T/prep" "$M" --no-persist --passthrough $mode --prep-mem $((24 * one))B
	"$PREP" "$M" g --batch 8 --size 32 --jobs 2 --epochs 2 --seed 3 > /dev/null || fail "epochfs-prep ($mode)"
	# A mapping kept after close() (numpy.memmap does): with passthrough
	# it maps the batch's file itself, which must never be made into
	# another batch while the consumers read on.
	rm -f "$T/go" "$T/mapped"
	[ $mode = on ] || touch "$T/mapped" "$T/go"
	[ $mode = on ] && python3 - "$M/.prep/g/epoch-0000/batch-000000" "$T" <<'PY' > "$T/map.$mode" &
import ctypes, hashlib, os, sys, time
# mmap(2) and close(2) in C: Python's mmap module keeps a descriptor of its
# own, which would keep the open (and so the batch's pin) alive.
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
addr = libc.mmap(None, size, 1, 1, fd, 0)      # PROT_READ, MAP_SHARED
assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
os.close(fd)
first = hashlib.md5(ctypes.string_at(addr, size)).hexdigest()
open(os.path.join(sys.argv[2], "mapped"), "w").close()
while not os.path.exists(os.path.join(sys.argv[2], "go")):
    time.sleep(0.02)
print("same" if hashlib.md5(ctypes.string_at(addr, size)).hexdigest() == first else "changed")
PY
	mpid=$!
	wait_for test -e "$T/mapped" || fail "the mapping did not start"
	$CHECK consume "$M" g 2 > "$T/prep.$mode.1" || fail "consumer 1 ($mode)"
	$CHECK consume-plain "$M" g 2 > "$T/prep.$mode.2" || fail "consumer 2 ($mode)"
	if [ $mode = on ]; then
		touch "$T/go"
		wait "$mpid" || fail "the mapping's reader failed"
		[ "$(cat "$T/map.$mode")" = same ] || fail "--passthrough on: a batch mapped before close() changed under its mapping"
	fi
	cmp -s "$T/prep.$mode.1" "$T/prep.$mode.2" || fail "--passthrough $mode: the consumers saw different batches"
	[ "$(wc -l < "$T/prep.$mode.1")" = 20 ] || fail "--passthrough $mode: consumer 1 read $(wc -l < "$T/prep.$mode.1") batches"
	# With passthrough the mapping's reader is a third consumer of batch
	# 0 (done when it closed): the second consumer gets it made again.
	want=20/0/20
	[ $mode = on ] && want=20/1/21
	wait_for sh -c "[ \$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[\"prep_batches_freed\"])' '$M/.epochfs/stats.json') = ${want##*/} ]" ||
		fail "--passthrough $mode: $(stat_of "$M" prep_batches_freed) batches freed, want ${want##*/}"
	made=$(stat_of "$M" prep_batches_produced)/$(stat_of "$M" prep_batches_regenerated)/$(stat_of "$M" prep_batches_freed)
	[ "$made" = "$want" ] || fail "--passthrough $mode: made/regenerated/freed $made, want $want"
	handed=$(stat_of "$M" prep_passthrough_opens)
	copied=$(stat_of "$M" prep_served_bytes)
	total=$(stat_of "$M" prep_passthrough_bytes)
	if [ $mode = on ]; then
		[ "$handed" = 41 ] || fail "--passthrough on: $handed batch opens by passthrough, want all 41"
		handed_on=$handed copied_on=$copied
		files=$(stat_of "$M" prep_batch_files)
		case $files in tmpfs:*|memfd:*) ;; *) fail "--passthrough on: prep_batch_files is \"$files\"" ;; esac
		[ "$copied" = 0 ] && [ "$total" -ge $((2 * 20 * one - 2 * one)) ] ||
			fail "--passthrough on: $copied bytes copied and $total handed (some went through the daemon)"
		b=$M/.prep/g/epoch-0000/batch-000000
		python3 -c 'import sys; open(sys.argv[1], "r+b")' "$b" 2>/dev/null && fail "a batch file opened for writing"
	else
		[ "$handed" = 0 ] || fail "--passthrough off: $handed batch opens by passthrough"
		case $(stat_of "$M" prep_batch_files) in memory:*) ;; *) fail "--passthrough off: prep_batch_files is $(stat_of "$M" prep_batch_files)" ;; esac
	fi
	umount_ep
done
cmp -s "$T/prep.on.1" "$T/prep.off.1" || fail "batches by passthrough differ from batches through the daemon"
ok ".prep/ by passthrough (${files%%:*}): all $handed_on batch opens handed the batch's file, $copied_on bytes copied by the daemon; a mapping kept after close() unchanged; bytes as without passthrough; every batch made once (the mapped one again for its third consumer) and freed"

# ---- a daemon run by nobody ---------------------------------------------------
[ "$(id -u)" = 0 ] || skip "the rest needs root (a daemon run by nobody)"
id nobody >/dev/null 2>&1 && command -v runuser >/dev/null && command -v setpriv >/dev/null ||
	skip "needs runuser, setpriv and the user nobody"
FM=$(command -v fusermount3) && [ -u "$(readlink -f "$FM")" ] || skip "no setuid fusermount3"
if ! runuser -u nobody -- test -r /dev/fuse -a -w /dev/fuse; then
	[ -n "${EPOCHFS_PT_NS:-}" ] || skip "/dev/fuse is closed to nobody, and no private mount namespace to open it in"
	mknod -m 666 "$T/fuse" c "$((16#$(stat -c %t /dev/fuse)))" "$((16#$(stat -c %T /dev/fuse)))" &&
		mount --bind "$T/fuse" /dev/fuse || skip "/dev/fuse is closed to nobody and cannot be opened here"
fi
N=$T/nobody
mkdir -p "$N/m" "$N/src" && cp "$EPOCHFS" "$N/epochfs" && head -c $((8 << 20)) /dev/urandom > "$N/src/s.tar" &&
	chown -R nobody "$N" && chmod 755 "$T" || fail "cannot set up nobody's tree"
EP_ALLOWED_STDERR='warning: --passthrough on: not available: the daemon'
setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups "$N/epochfs" -f --no-persist --passthrough on \
	"$N/src" "$N/m" 2>>"$T/daemon.err" &
EP_PID=$!
EP_MNT=$N/m
wait_for grep -q " $N/m fuse.epochfs " /proc/mounts || fail "nobody's mount did not appear"
pt=$(runuser -u nobody -- python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["passthrough"])' "$N/m/.epochfs/stats.json")
[ "$pt" = "off: not available: the daemon (uid $(id -u nobody)) lacks CAP_SYS_ADMIN, which registering backing files needs" ] ||
	fail "passthrough for a daemon run by nobody: $pt"
grep -qF "epochfs: warning: --passthrough on: not available: the daemon (uid $(id -u nobody)) lacks CAP_SYS_ADMIN" "$T/daemon.err" ||
	fail "no warning saying why --passthrough on is off: $(cat "$T/daemon.err")"
for i in 1 2; do runuser -u nobody -- cmp -s "$N/src/s.tar" "$N/m/s.tar" || fail "nobody's mount: bytes differ"; done
kill -TERM "$EP_PID"
rc=0
wait "$EP_PID" || rc=$?
EP_PID=
[ "$rc" = 0 ] || fail "nobody's daemon exited with $rc"
check_stderr
ok "a daemon run by nobody with --passthrough on: \"$pt\" (a warning says so), bytes right"
