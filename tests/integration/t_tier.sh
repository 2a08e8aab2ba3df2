# The SSD tier (--cache-dir; docs/cache.md, "The SSD tier"): with RAM for a
# quarter of the data and a tier for the rest, epochs after the first read
# nothing from storage, and every byte equals SOURCE's; a restart adopts the
# tier; a file changed across the restart is served new; a corrupt item in
# the tier is dropped and read from storage; a full tier stops admitting; a
# tier whose filesystem turns read-only or whose directory vanishes at run
# time admits nothing more while reads go on; a second daemon on the same
# directory is refused; a daemon started in the background (no -f) writes
# and reads its tier.
. "$(dirname "$0")/lib.sh"
S=/dev/shm/epochfs-t-tier.$$
LOOPMNT=$T/ext4
trap 'mountpoint -q "$LOOPMNT" 2>/dev/null && umount -l "$LOOPMNT"; mountpoint -q "$T/tight" 2>/dev/null && umount -l "$T/tight"; cleanup; rm -rf "$S"' EXIT
"$GEN" "$T/src" --files 300 --classes 3 --seed 4 >/dev/null || fail "epochfs-gen"
D=$(du -sb "$T/src" | cut -f1)
M=$T/mnt
st() { stat_of "$M" "$1"; }
same() { diff -r -q "$T/src" "$M" >/dev/null || fail "$1: bytes through the mount differ from SOURCE"; }
epoch() { # epoch SEED: one shuffled epoch with the kernel's caches dropped; prints storage bytes read
	local s0
	s0=$(st storage_read_bytes)
	sync; echo 3 > /proc/sys/vm/drop_caches
	"$BENCH" "$M" --epochs 1 --seed "$1" >/dev/null || fail "epochfs-bench"
	echo $(($(st storage_read_bytes) - s0))
}
settle() { # until the tier's writes stop moving (0.2 s apart), at most 10 s
	local a b i
	for i in $(seq 50); do
		a=$(($(st tier_admitted) + $(st tier_write_errors)))
		sleep 0.2
		b=$(($(st tier_admitted) + $(st tier_write_errors)))
		[ "$a" = "$b" ] && return 0
	done
	fail "the tier's writes did not settle"
}
# Warnings the tier gives where this test breaks it on purpose.
EP_ALLOWED_STDERR='SSD tier '
OPTS=(--cache-size $((D / 4))B --state-dir "$S" --persist always)

mount_ep "$T/src" "$M" "${OPTS[@]}" --cache-dir "$T/ssd"
[ "$(st tier_dirs)" = 1 ] || fail "no tier"
epoch 1 >/dev/null
settle
[ "$(st tier_items)" -gt 150 ] || fail "the tier took $(st tier_items) items"
b=$(epoch 2)
[ "$b" = 0 ] || fail "epoch 1 read $b bytes from storage with RAM D/4 + a tier"
same "RAM + tier"
ram=$(st cache_items); tier=$(st tier_items)
[ $((ram + tier)) -ge 300 ] || fail "RAM $ram + tier $tier items < 300 files"
[ "$(st tier_hits)" -gt 0 ] || fail "no tier hits"
direct=$(st tier_direct)
umount_ep
ok "RAM D/4 + tier: epoch 1 read 0 storage bytes ($ram items in RAM, $tier in the tier, O_DIRECT $direct)"

# A restart adopts the tier; one file changed meanwhile is served new.
f=$(cd "$T/src" && find . -name '*.jpg' | sort | sed -n 5p)
mount_ep "$T/src" "$M" "${OPTS[@]}" --cache-dir "$T/ssd"
[ "$(st tier_adopted)" = "$tier" ] || fail "adopted $(st tier_adopted) of $tier tier items"
"$ROOT/$BUILD/epochfs-stat" "$M" --count 1 | grep -q "at mount: the RAM cache adopted $ram items .*the SSD tier adopted $tier items" ||
	fail "epochfs-stat does not say what was adopted: $("$ROOT/$BUILD/epochfs-stat" "$M" --count 1)"
b=$(epoch 3)
[ "$b" = 0 ] || fail "the epoch after a restart read $b bytes from storage"
umount_ep
printf 'changed while no daemon ran' >> "$T/src/$f"
mount_ep "$T/src" "$M" "${OPTS[@]}" --cache-dir "$T/ssd"
same "after a change across the restart"
cmp -s "$T/src/$f" "$M/$f" || fail "a changed file was served with old bytes"
[ $(($(st tier_dropped) + $(st persist_dropped_changed))) -ge 1 ] || fail "the changed file's item was not dropped"
umount_ep
ok "a restart adopts the tier (the next epoch reads 0 storage bytes); a changed file is served new"

# epochfs-warmup: loads the caches before training, says what did not fit.
WARM=$ROOT/$BUILD/epochfs-warmup
mount_ep "$T/src" "$M" --cache-size $((D / 4))B --no-persist --cache-dir "$T/warm"
"$WARM" -q "$M" > "$T/warm.out" || fail "epochfs-warmup failed: $(cat "$T/warm.out")"
grep -q "300 files" "$T/warm.out" && grep -q "; 0.0 MB fit in neither" "$T/warm.out" ||
	fail "warm-up summary: $(cat "$T/warm.out")"
b=$(epoch 7)
[ "$b" = 0 ] || fail "the first epoch after a warm-up read $b bytes from storage"
(cd "$T/src" && find . -name '*.jpg' | head -5) > "$T/list"
"$WARM" -q --list "$T/list" "$M" | grep -q "5 files" || fail "--list"
"$WARM" "$M" /etc >/dev/null 2>&1 && fail "a path outside the mount was taken"
"$WARM" "$T/src" >/dev/null 2>&1; [ $? = 2 ] || fail "a directory that is not a mount was taken"
umount_ep
mount_ep "$T/src" "$M" --cache-size $((D / 4))B --no-persist
"$WARM" -q "$M" > "$T/warm.out" || fail "epochfs-warmup without a tier"
grep -q "fit in neither: every epoch reads them" "$T/warm.out" || fail "what did not fit: $(cat "$T/warm.out")"
umount_ep
ok "epochfs-warmup fills RAM and tier (the next epoch reads 0 storage bytes), takes a list, says what did not fit"

# With an order told (epochfs-run's channel), what RAM cannot take is
# prefetched into the tier, not into staging: the next epoch reads nothing.
ordered() { # ordered SEED: tells a shuffled order and reads in it, every file checked
	python3 - "$T/src" "$M" "$1" <<'PY' || fail "ordered epoch: wrong bytes"
import os, random, sys
src, mnt, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs)
random.Random(seed).shuffle(files)
with open(os.path.join(mnt, ".epochfs/order/t"), "w") as f:
    f.write("".join(p + "\n" for p in files))
for rel in files:
    with open(os.path.join(src, rel), "rb") as a, open(os.path.join(mnt, rel), "rb") as b:
        assert a.read() == b.read(), rel
os.unlink(os.path.join(mnt, ".epochfs/order/t"))
PY
}
mount_ep "$T/src" "$M" --cache-size $((D / 4))B --no-persist --cache-dir "$T/pf" --prefetch-window 32
ordered 11
settle
pf=$(st prefetch_bytes) ti=$(st tier_items)
[ "$pf" -gt 0 ] && [ "$ti" -gt 150 ] || fail "prefetch into the tier: prefetched $pf, tier items $ti"
s0=$(st storage_read_bytes)
sync; echo 3 > /proc/sys/vm/drop_caches
ordered 12
[ "$(st storage_read_bytes)" = "$s0" ] || fail "an ordered epoch after the fill read $(($(st storage_read_bytes) - s0)) storage bytes"
umount_ep
ok "prefetch fills the tier with what RAM cannot take ($ti items); the next ordered epoch reads 0 storage bytes"

# A flipped byte in the tier's data file: dropped on read, served from storage.
python3 - "$T/ssd/epochfs-tier/arena" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(100); b = f.read(1); f.seek(100); f.write(bytes([b[0] ^ 0x20]))
PY
mount_ep "$T/src" "$M" "${OPTS[@]}" --cache-dir "$T/ssd"
same "with a corrupt tier item"
[ "$(st tier_corrupt)" = 1 ] || fail "tier_corrupt=$(st tier_corrupt)"
umount_ep
ok "a corrupt tier item is dropped on its read and served from storage"

# Two daemons on one tier directory.
mount_ep "$T/src" "$M" --cache-size $((D / 4))B --no-persist --cache-dir "$T/ssd"
mkdir -p "$T/m2"
if "$EPOCHFS" -f --no-persist --cache-dir "$T/ssd" "$T/src" "$T/m2" 2>"$T/second.err"; then
	fusermount3 -u "$T/m2"; fail "a second daemon was let onto a tier directory in use"
fi
grep -q -- "--cache-dir $T/ssd/epochfs-tier is in use by another epochfs (pid $EP_PID)" "$T/second.err" ||
	fail "second daemon: $(cat "$T/second.err")"
umount_ep
ok "a second daemon on the same tier directory is refused"

# A mount refused for its --cache-dir leaves no RAM cache state behind.
mkdir -p "$T/m3"
for bad in /proc "$T/src/$(ls "$T/src" | head -1)" "$T/src" "$T/m3/t" "$T/nowhere/../etc/passwd"; do
	if "$EPOCHFS" -f --cache-dir "$bad" "$T/src" "$T/m3" 2>"$T/bad.err"; then
		fusermount3 -u "$T/m3"; fail "mounted with --cache-dir $bad"
	fi
	for o in /dev/shm/epochfs-"$(id -u)"/*/owner; do
		[ -f "$o" ] && grep -qx "mountpoint=$T/m3" "$o" && fail "--cache-dir $bad: a state left in $(dirname "$o")"
	done
done
ok "a --cache-dir in SOURCE or the mount, or unusable, is refused and leaves no cache state"

# A full tier: a budget of 4 MiB takes what fits and no more.
mount_ep "$T/src" "$M" --cache-size $((D / 4))B --no-persist --cache-dir "$T/small" --cache-dir-size 4M
epoch 4 >/dev/null
settle
[ "$(st tier_used_bytes)" -le $((4 << 20)) ] || fail "tier used $(st tier_used_bytes) of 4 MiB"
[ "$(st tier_full)" -gt 0 ] || fail "a full tier refused nothing"
same "with a full tier"
used=$(st tier_used_bytes)
umount_ep
ok "a full tier stops at its budget ($used of 4194304 bytes used); bytes right"

# The directory vanishes at run time.
mount_ep "$T/src" "$M" --cache-size $((D / 4))B --no-persist --cache-dir "$T/gone"
epoch 5 >/dev/null
settle
rm -rf "$T/gone"
wait_for sh -c "[ \"\$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[\"tier_dirs_down\"])' '$M/.epochfs/stats.json')\" = 1 ]" ||
	fail "a vanished directory was not noticed"
same "after the tier's directory vanished"
umount_ep
ok "a tier directory that vanishes stops admissions; reads go on"

# A tier at its default size on a disk its data fills: a restart counts
# that data as the tier's own room, and adopts every item (sized from the
# free space alone, it came out smaller than what it held and adoption
# cut it: 67 of 351 items).
truncate -s 64M "$T/tight.img" && mkfs.ext4 -q -F "$T/tight.img" 2>/dev/null && mkdir -p "$T/tight" &&
	mount -o loop "$T/tight.img" "$T/tight" 2>/dev/null || skip "no loop-mounted ext4 here"
mount_ep "$T/src" "$M" --cache-size $((D / 4))B --cache-dir "$T/tight/t"
epoch 6 >/dev/null
settle
held=$(st tier_items) cap=$(st tier_capacity_bytes)
umount_ep
head -c $((10 << 20)) /dev/zero > "$T/tight/other"       # someone else's file too
free=$(df --output=avail -B1 "$T/tight" | tail -1)
[ "$free" -lt "$cap" ] || fail "the test needs a disk the tier's data fills ($free bytes free, tier $cap)"
mount_ep "$T/src" "$M" --cache-size $((D / 4))B --cache-dir "$T/tight/t"
[ "$(st tier_adopted)" = "$held" ] || fail "a restart at the default size adopted $(st tier_adopted) of $held items"
[ "$(st tier_capacity_bytes)" -ge "$cap" ] || fail "the tier shrank from $cap to $(st tier_capacity_bytes) bytes"
same "after a restart on a tight disk"
umount_ep
umount "$T/tight"
ok "a default-size tier on a tight disk ($((free >> 20)) MiB free at restart) adopts all $held items"

# Started in the background (no -f): the daemon forks after it opened the
# tier, so the tier's threads (its reads' completions, its writer) must
# start in the process that serves, or nothing is ever written to it.
B=$T/bg
mkdir -p "$B/t" "$B/m"
"$EPOCHFS" --no-persist --cache-size $((D / 4))B --cache-dir "$B/t" --log "$T/bg.log" "$T/src" "$B/m" ||
	fail "a mount in the background failed: $(cat "$T/bg.log" 2>/dev/null)"
wait_for mountpoint -q "$B/m" || fail "the background mount did not appear"
bpid=$(stat_of "$B/m" daemon_pid)
diff -r -q "$T/src" "$B/m" >/dev/null || fail "background mount: bytes differ from SOURCE"
wait_for sh -c '[ "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[\"tier_admitted\"])" "$0/.epochfs/stats.json")" -gt 0 ]' "$B/m" ||
	fail "background mount: nothing written to the tier (its threads did not start in the daemon)"
sync; echo 3 > /proc/sys/vm/drop_caches
h0=$(stat_of "$B/m" tier_hits)
diff -r -q "$T/src" "$B/m" >/dev/null || fail "background mount, second read: bytes differ"
[ "$(stat_of "$B/m" tier_hits)" -gt "$h0" ] || fail "background mount: no read served from the tier"
fusermount3 -u "$B/m" || fail "cannot unmount the background mount"
wait_for sh -c '! kill -0 "$0" 2>/dev/null' "$bpid" || fail "the background daemon did not exit"
ok "started in the background: the tier is written and read by the daemon's own threads"

# The tier's filesystem turns read-only (an ext4 error, errors=remount-ro).
truncate -s 64M "$T/ext4.img" && mkfs.ext4 -q -F "$T/ext4.img" 2>/dev/null && mkdir -p "$LOOPMNT" &&
	mount -o loop,errors=remount-ro "$T/ext4.img" "$LOOPMNT" 2>/dev/null || skip "no loop-mounted ext4 here"
dev=$(basename "$(findmnt -n -o SOURCE "$LOOPMNT")")
mount_ep "$T/src" "$M" --cache-size $((D / 4))B --no-persist --cache-dir "$LOOPMNT/t"
(cd "$T/src" && find . -name '*.jpg' | sort | head -100) | while read -r x; do cat "$M/$x" >/dev/null; done
settle
echo epochfs-test > "/sys/fs/ext4/$dev/trigger_fs_error" 2>/dev/null || skip "cannot trigger an ext4 error"
same "after the tier's filesystem turned read-only"
settle
[ "$(st tier_write_errors)" -ge 1 ] && [ "$(st tier_dirs_down)" = 1 ] ||
	fail "read-only tier: write errors $(st tier_write_errors), dirs down $(st tier_dirs_down)"
same "with a read-only tier"
umount_ep
ok "a tier whose filesystem turns read-only stops admissions ($(grep -c 'SSD tier' "$T/daemon.err") log line); reads go on"
