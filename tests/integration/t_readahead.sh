# The mount's readahead window (--readahead): with --readahead 1M the
# daemon sets its bdi's read_ahead_kb to 1024, so a 200 KB file read as a
# training loader reads it (Python's buffered file, 64 KiB reads) is one
# READ request, not two, and a 3 MB file takes a third of the requests or
# fewer; stats.json says what was set; by default (0) the kernel's 128 KiB
# stays and the same file takes more than one request; -o readahead=SIZE
# works as the option; values out of range are refused with the range. A
# daemon that may not write sysfs is tested as nobody in t_libfuse.sh (one
# info line, the kernel's window). Skipped (77) where the bdi cannot be
# written even by root (a read-only /sys).
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || skip "setting a bdi's readahead needs root"
mkdir -p "$T/src/d"
head -c 200000 /dev/urandom > "$T/src/d/mid"
head -c 3000000 /dev/urandom > "$T/src/d/big"
m=$T/mnt

# reads_for FILE: the READ requests the daemon saw while FILE was read the
# way torchvision's loader reads it: Python's buffered file, 64 KiB reads.
reads_for() {
	local a b
	a=$(stat_of "$m" reads)
	python3 -c '
import sys
with open(sys.argv[1], "rb") as f:
    while f.read(65536):
        pass' "$1" || fail "cannot read $1"
	b=$(stat_of "$m" reads)
	echo $((b - a))
}
bdi_kb() { cat "/sys/class/bdi/$(mountpoint -d "$m")/read_ahead_kb"; }

mount_ep "$T/src" "$m" --no-persist --readahead 1M
# A read-only /sys (some containers): the daemon keeps the kernel's window
# and says so (t_libfuse.sh checks the line); nothing here to measure.
if [ ! -w "/sys/class/bdi/$(mountpoint -d "$m")/read_ahead_kb" ]; then
	umount_ep
	skip "the mount's bdi is not writable here (a read-only /sys)"
fi
[ "$(stat_of "$m" readahead_bytes)" = 1048576 ] || fail "stats.json readahead_bytes: $(stat_of "$m" readahead_bytes)"
[ "$(bdi_kb)" = 1024 ] || fail "the mount's read_ahead_kb is $(bdi_kb), expected 1024"
n=$(reads_for "$m/d/mid")
[ "$n" = 1 ] || fail "a 200 KB file took $n READ requests with a 1 MiB window"
nbig=$(reads_for "$m/d/big")
cmp -s "$T/src/d/mid" "$m/d/mid" && cmp -s "$T/src/d/big" "$m/d/big" || fail "bytes differ"
umount_ep
ok "--readahead 1M: read_ahead_kb 1024, a 200 KB file in 1 READ; bytes right"

mount_ep "$T/src" "$m" --no-persist
[ "$(stat_of "$m" readahead_bytes)" = 0 ] || fail "default: readahead_bytes $(stat_of "$m" readahead_bytes)"
kb=$(bdi_kb)
[ "$kb" -le 128 ] || fail "default: read_ahead_kb $kb, expected the kernel's"
n=$(reads_for "$m/d/mid")
[ "$n" -ge 2 ] || fail "default: a 200 KB file took $n READ request: the test cannot tell the window's effect"
nbig0=$(reads_for "$m/d/big")
[ $((nbig * 3)) -le "$nbig0" ] || fail "a 3 MB file: $nbig READs with a 1 MiB window against $nbig0 with the kernel's"
cmp -s "$T/src/d/mid" "$m/d/mid" || fail "bytes differ (default)"
umount_ep
mount_ep "$T/src" "$m" --no-persist --readahead 0
[ "$(stat_of "$m" readahead_bytes)" = 0 ] && [ "$(bdi_kb)" -le 128 ] || fail "--readahead 0 changed the window"
umount_ep
mount_ep "$T/src" "$m" --no-persist -o readahead=256K
[ "$(bdi_kb)" = 256 ] || fail "-o readahead=256K: read_ahead_kb $(bdi_kb)"
[ "$(stat_of "$m" readahead_bytes)" = 262144 ] || fail "-o readahead=256K: readahead_bytes $(stat_of "$m" readahead_bytes)"
umount_ep
ok "the default (and --readahead 0) leaves the kernel's ${kb} KiB (the 200 KB file in $n READs; 3 MB in $nbig0 against $nbig);" \
	"-o readahead=256K sets 256"

for bad in 1K 17M abc -1 4k2 5000B; do
	rc=0
	"$EPOCHFS" -f --readahead "$bad" "$T/src" "$m" 2>"$T/bad.err" || rc=$?
	[ "$rc" = 2 ] || fail "--readahead $bad: exit $rc, expected 2"
	grep -q -- "--readahead $bad: expected a multiple of 4K from 4K to 16M, or 0" "$T/bad.err" ||
		fail "--readahead $bad: $(cat "$T/bad.err")"
done
mountpoint -q "$m" && fail "a refused option left a mount"
ok "--readahead 1K, 17M, abc, -1, 4k2, 5000B refused with the range"
