# fio lays files out in SOURCE with crc32c verify headers; reading them back
# through the mount (buffered, and O_DIRECT with io_uring) verifies with 0
# errors, and one flipped byte in SOURCE makes fio fail.
. "$(dirname "$0")/lib.sh"
command -v fio >/dev/null || skip "fio not installed"
mkdir -p "$T/src/fio"
common="--name=lay --nrfiles=4 --size=8M --bs=64k --verify=crc32c --ioengine=psync --verify_state_save=0"
fio $common --directory="$T/src/fio" --rw=write --do_verify=0 > "$T/lay.log" 2>&1 || fail "fio layout: $(tail -3 "$T/lay.log")"
mount_ep "$T/src" "$T/mnt"
fio $common --directory="$T/mnt/fio" --rw=read --readonly > "$T/read.log" 2>&1 \
	|| fail "fio verify through the mount failed: $(grep -i -m3 'verify\|err' "$T/read.log")"
grep -q "err= 0" "$T/read.log" || fail "fio reported errors"
ok "buffered verify: 0 errors"
fio --name=lay --nrfiles=4 --size=8M --bs=64k --verify=crc32c --ioengine=io_uring --direct=1 \
	--directory="$T/mnt/fio" --rw=read --readonly > "$T/direct.log" 2>&1 \
	|| fail "O_DIRECT verify failed: $(grep -i -m3 'verify\|err' "$T/direct.log")"
ok "O_DIRECT + io_uring verify: 0 errors"
# Control: flip one byte in a data block of SOURCE; fio must notice.
f=$(ls "$T/src/fio" | head -1)
printf '\x5a' | dd of="$T/src/fio/$f" bs=1 seek=$((3 * 65536 + 1000)) conv=notrunc 2>/dev/null
if fio $common --directory="$T/mnt/fio" --rw=read --readonly > "$T/flip.log" 2>&1; then
	fail "fio passed although a byte was flipped"
fi
grep -qi "verify" "$T/flip.log" || fail "fio failed for another reason: $(tail -3 "$T/flip.log")"
ok "flipped byte detected"
# The shipped DL-pattern jobs run on the read-only mount without errors.
"$GEN" "$T/src/imgs" --files 60 --classes 3 --shards 1 2>/dev/null || fail "gen"
umount_ep
mount_ep "$T/src" "$T/mnt"
for j in "$ROOT"/tools/fio/*.fio; do
	sed 's/^runtime=.*/runtime=1/' "$j" > "$T/job.fio"
	DATASET=$T/mnt/imgs fio --readonly "$T/job.fio" > "$T/job.log" 2>&1 || fail "$(basename "$j"): $(tail -3 "$T/job.log")"
	grep -q "err= 0" "$T/job.log" || fail "$(basename "$j") reported errors"
done
ok "tools/fio jobs run on the mount"
umount_ep
