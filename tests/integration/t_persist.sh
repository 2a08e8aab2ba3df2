# A restarted daemon adopts the RAM cache its predecessor left in the state
# directory (docs/cache.md, "Restarts"). By default (--persist crash) a clean
# stop gives the memory back and only a crash leaves the state; with
# --persist always a clean stop keeps it too. After a clean stop (always)
# and after kill -9 during fills and during reads, every byte read equals SOURCE's; a file
# changed across the restart is served with its new bytes; a corrupt item
# or table is dropped or discarded and counted, never served; a second
# daemon on the same state directory, and a state directory off tmpfs, are
# refused; a full tmpfs refuses admissions instead of crashing the daemon.
. "$(dirname "$0")/lib.sh"
S=/dev/shm/epochfs-t-persist.$$
S2=$S.2
trap 'mountpoint -q "$T/small" 2>/dev/null && umount -l "$T/small"; cleanup; rm -rf "$S" "$S2"' EXIT
"$GEN" "$T/src" --files 240 --classes 4 --seed 3 >/dev/null || fail "epochfs-gen"
D=$(du -sb "$T/src" | cut -f1)
M=$T/mnt

same() { diff -r -q "$T/src" "$M" >/dev/null || fail "$1: bytes through the mount differ from SOURCE"; }
st() { stat_of "$M" "$1"; }

# The default: the state lives while the daemon does, and a clean stop frees it.
ROOTDIR=/dev/shm/epochfs-$(id -u)
others=$(ls -A "$ROOTDIR" 2>/dev/null)      # states of other daemons of this user, if any
mount_ep "$T/src" "$M" --cache-size 64M
[ "$(st persist)" = 1 ] || fail "persist is not on by default"
dflt=$(st persist_state | sed 's/^on (crash): //')
[ -d "$dflt" ] && [ "${dflt#/dev/shm/epochfs-$(id -u)/}" != "$dflt" ] || fail "default state not under the user's root: $(st persist_state)"
[ "$(stat -c %a "$dflt")" = 700 ] && [ "$(stat -c %a "$(dirname "$dflt")")" = 700 ] || fail "the state or its root is not 0700"
same "first mount"
umount_ep
[ ! -e "$dflt" ] || fail "a clean umount left the cache in $dflt ($(du -sh "$dflt" | cut -f1))"
# The user's root goes with its last state; beside another daemon's it stays.
[ -n "$others" ] || [ ! -e "$ROOTDIR" ] || fail "a clean umount left the empty root $ROOTDIR behind"
mount_ep "$T/src" "$M" --cache-size 64M
first=$EP_PID
mkdir -p "$T/mnt2"
"$EPOCHFS" -f --cache-size 16M "$T/src" "$T/mnt2" 2>"$T/daemon2.err" &
second=$!
wait_for mountpoint -q "$T/mnt2" || fail "a second daemon did not mount"
fusermount3 -u "$M"; wait "$first" || fail "the first daemon exited with $?"
EP_PID= EP_MNT=
[ -d "$ROOTDIR" ] || fail "the root went while the second daemon's state was in it"
fusermount3 -u "$T/mnt2"; wait "$second" || fail "the second daemon exited with $?"
[ -n "$others" ] || [ ! -e "$ROOTDIR" ] || fail "the last clean umount left the empty root $ROOTDIR behind"
ok "by default a clean umount gives the RAM cache back: $dflt is gone, and $ROOTDIR with the last state"

mount_ep "$T/src" "$M" --cache-size 64M --state-dir "$S" --persist always
[ "$(st persist_found)" = 0 ] || fail "a new state directory was taken for an old one"
same "first mount"
files=$(st cache_items)
[ "$files" = 240 ] || fail "expected 240 items cached, got $files"
[ -f "$S/arena" ] && [ -f "$S/table" ] && grep -q "^mountpoint=$M\$" "$S/owner" || fail "state files missing"
umount_ep
grep -qx "kept=1" "$S/owner" || fail "a state kept on purpose is not marked so"
ok "a first daemon fills the state directory; --persist always keeps it at umount"

mount_ep "$T/src" "$M" --cache-size 64M --state-dir "$S" --persist always
[ "$(st persist_adopted)" = 240 ] || fail "adopted $(st persist_adopted) of 240 items after a clean stop"
same "after a clean restart"
[ "$(st storage_read_bytes)" = 0 ] || fail "a restarted epoch read $(st storage_read_bytes) bytes from storage"
grep -q "adopted 240 of 240 items" "$T/daemon.err" || fail "no adoption line in the log"
umount_ep
ok "a clean restart adopts every item: the next epoch reads 0 bytes from storage"

# A file rewritten while no daemon runs: same size, same mtime, new bytes.
f=$(cd "$T/src" && find . -name '*.jpg' | sort | sed -n 7p)
touch -r "$T/src/$f" "$T/ref"
python3 - "$T/src/$f" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0xff
open(p, "wb").write(bytes(b))
PY
touch -r "$T/ref" "$T/src/$f"
mount_ep "$T/src" "$M" --cache-size 64M --state-dir "$S" --persist always
[ "$(st persist_dropped_changed)" = 1 ] || fail "changed file: dropped_changed=$(st persist_dropped_changed)"
[ "$(st persist_adopted)" = 239 ] || fail "changed file: adopted $(st persist_adopted)"
cmp -s "$T/src/$f" "$M/$f" || fail "a file changed across the restart was served with old bytes"
same "after a change across the restart"
umount_ep
ok "a file changed across a restart is dropped and served with its new bytes"

# A flipped byte in the arena: that item is dropped, the rest adopted.
python3 - "$S/arena" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(200000); b = f.read(1); f.seek(200000); f.write(bytes([b[0] ^ 0x40]))
PY
mount_ep "$T/src" "$M" --cache-size 64M --state-dir "$S" --persist always
[ "$(st persist_dropped_corrupt)" = 1 ] || fail "corrupt item: dropped_corrupt=$(st persist_dropped_corrupt)"
[ "$(st persist_adopted)" = 239 ] || fail "corrupt item: adopted $(st persist_adopted)"
same "after an item was corrupted in the state"
ok "a corrupt item in the state is dropped and counted, never served"

# Two daemons on one state directory.
mkdir -p "$T/mnt2"
if "$EPOCHFS" -f --cache-size 64M --state-dir "$S" "$T/src" "$T/mnt2" 2>"$T/second.err"; then
	fusermount3 -u "$T/mnt2"
	fail "a second daemon was let onto a state directory in use"
fi
grep -q "in use by another epochfs (pid $EP_PID)" "$T/second.err" || fail "second daemon: $(cat "$T/second.err")"
umount_ep
ok "a second daemon on the same state directory is refused: $(cat "$T/second.err")"

# A corrupt table header: the whole state is discarded, in one line.
printf 'XXXX' | dd of="$S/table" bs=1 seek=16 conv=notrunc status=none
mount_ep "$T/src" "$M" --cache-size 64M --state-dir "$S" --persist always
[ "$(st persist_discarded)" = 1 ] && [ "$(st persist_adopted)" = 0 ] || fail "corrupt table not discarded"
grep -q "discarded: its table's header is missing or corrupt" "$T/daemon.err" || fail "no discard line"
same "after the table was corrupted"
umount_ep
ok "a corrupt table is discarded whole and the cache refills"

# Another SOURCE on the same state directory.
mkdir -p "$T/src2/d" && printf 'other\n' > "$T/src2/d/x"
mount_ep "$T/src2" "$M" --cache-size 64M --state-dir "$S" --persist always
grep -q "discarded: it was made for another SOURCE" "$T/daemon.err" || fail "another SOURCE was not discarded"
[ "$(cat "$M/d/x")" = other ] || fail "another SOURCE: wrong bytes"
umount_ep
ok "a state made for another SOURCE is discarded"

# kill -9 while the cache fills, and again while it serves.
for when in filling reading; do
	rm -rf "$S2"
	mount_ep "$T/src" "$M" --cache-size 64M --state-dir "$S2"
	[ $when = reading ] && same "before kill -9"
	# Slow enough that the kill lands inside the first pass (240 files).
	( while :; do for x in "$M"/class_*/*.jpg; do cat "$x" >/dev/null 2>&1 || exit; sleep 0.005; done; done ) &
	reader=$!
	sleep 0.3
	kill -9 "$EP_PID"
	wait "$EP_PID" 2>/dev/null
	kill "$reader" 2>/dev/null; wait "$reader" 2>/dev/null
	fusermount3 -uz "$M" 2>/dev/null
	EP_PID=
	mount_ep "$T/src" "$M" --cache-size 64M --state-dir "$S2"
	a=$(st persist_adopted)
	[ $when = reading ] && [ "$a" != 240 ] && fail "kill -9 while reading: adopted $a of 240"
	same "after kill -9 while $when"
	[ "$(st cache_items)" = 240 ] || fail "after kill -9 while $when: $(st cache_items) items"
	umount_ep
	ok "kill -9 while $when: $a items adopted, every byte right"
done

# A state directory off tmpfs is refused, in one line.
if "$EPOCHFS" -f --state-dir "$T/state" "$T/src" "$M" 2>"$T/tmpdir.err"; then
	fusermount3 -u "$M"; fail "a state directory off tmpfs was taken"
fi
grep -q "is not on tmpfs" "$T/tmpdir.err" || fail "off tmpfs: $(cat "$T/tmpdir.err")"
ok "a state directory off tmpfs is refused"

# A state filesystem too small for the cache and its headroom (Docker's
# 64 MiB /dev/shm): the cache lives in anonymous memory, said in one line.
mkdir -p "$T/small"
mount -t tmpfs -o size=8M tmpfs "$T/small" || skip "cannot mount a tmpfs"
mount_ep "$T/src" "$M" --cache-size 64M --state-dir "$T/small/s"
same "with a small state tmpfs"
[ "$(st persist)" = 0 ] || fail "a 64 MiB cache was put on an 8 MiB tmpfs"
st persist_state | grep -q "^off: .*leave less than the 4 MiB kept for others" || fail "persist_state: $(st persist_state)"
[ "$(grep -c "the cache uses anonymous memory" "$T/daemon.err")" = 1 ] || fail "not said once: $(cat "$T/daemon.err")"
[ "$(df --output=used -B1 "$T/small" | tail -1)" -lt $((1 << 20)) ] || fail "the small tmpfs was used"
umount_ep
umount "$T/small"
ok "a state tmpfs too small for the cache and its headroom: anonymous memory, one line"

# Others take the state tmpfs while the cache fills: admissions stop at the
# headroom (no SIGBUS, the last of it stays for others), every byte right.
mount -t tmpfs -o size=256M tmpfs "$T/small" || skip "cannot mount a tmpfs"
mount_ep "$T/src" "$M" --cache-size 64M --state-dir "$T/small/s" --prefault 0
[ "$(st persist)" = 1 ] || fail "a 64 MiB cache did not fit a 256 MiB tmpfs: $(st persist_state)"
head -c $((150 << 20)) /dev/zero > "$T/small/filler"      # PyTorch's batches, say
same "with the state tmpfs taken by others"
[ "$(st cache_no_space)" -ge 1 ] || fail "no admission was refused for lack of room"
free=$(df --output=avail -B1 "$T/small" | tail -1)
[ "$free" -ge $((100 << 20)) ] || fail "the cache took the state tmpfs down to $free bytes free"
kill -0 "$EP_PID" || fail "the daemon died on a tight tmpfs"
umount_ep
ok "others filling the state tmpfs: admissions stop at its headroom ($((free >> 20)) MiB left free)"
umount "$T/small"

# --no-persist: anonymous memory, nothing kept.
# An earlier state of this mount point (kill -9) is freed, not left behind.
mount_ep "$T/src" "$M" --cache-size 64M
dflt=$(st persist_state | sed 's/^on (crash): //')
same "before a kill -9"
kill -9 "$EP_PID"; wait "$EP_PID" 2>/dev/null; EP_PID=
fusermount3 -uz "$M" 2>/dev/null
[ -d "$dflt" ] || fail "kill -9 did not leave the state $dflt"
mount_ep "$T/src" "$M" --cache-size 64M --no-persist
[ "$(st persist)" = 0 ] || fail "--no-persist still persists"
[ "$(st persist_state)" = "off (--persist off)" ] || fail "persist_state: $(st persist_state)"
[ ! -e "$dflt" ] || fail "--no-persist left the earlier state $dflt"
grep -q "freed the cache state $dflt" "$T/daemon.err" || fail "not said: $(cat "$T/daemon.err")"
[ -n "$others" ] || [ ! -e "$ROOTDIR" ] || fail "--no-persist freed the last state but left the empty root $ROOTDIR"
umount_ep
ok "--no-persist keeps nothing, and frees what a killed daemon left (and the root it was in)"
