# The request threads' time slice (--request-slice, util/sched.h): the
# threads that answer FUSE requests (fuse_worker; fuse-ring-N over io_uring) or finish them (the
# io_uring completion thread, epochfs-io) run on the short slice asked for
# and every other thread of the daemon on the kernel's default; stats.json
# says what they got; 0 leaves the kernel's default; a value out of range
# is refused with the range; -o request_slice=N works as --request-slice N.
# Skipped (77) where the kernel keeps its own slice (before Linux 6.12) or
# refuses one (a sandbox, a policy other than SCHED_OTHER), or /proc shows
# no thread's slice (se.slice in /proc/PID/sched, CONFIG_SCHED_DEBUG).
. "$(dirname "$0")/lib.sh"
mkdir -p "$T/src/d"
head -c 300000 /dev/urandom > "$T/src/d/f"
m=$T/mnt

# slices PID: "COMM SLICE" per thread but the main one (which only waits).
slices() {
	local t
	local t c v
	for t in /proc/"$1"/task/*; do
		[ "${t##*/}" = "$1" ] && continue
		# A thread may end between the glob and the read: no line for it.
		c=$(cat "$t/comm" 2>/dev/null) && v=$(awk '$1 == "se.slice" {print $3}' "$t/sched" 2>/dev/null) &&
			[ -n "$c" ] && [ -n "$v" ] && printf '%s %s\n' "$c" "$v"
	done
	return 0
}

mount_ep "$T/src" "$m" --no-persist
cmp -s "$T/src/d/f" "$m/d/f" || fail "bytes differ"
got=$(stat_of "$m" request_slice_ns)
if [ "$got" = 0 ]; then
	why=$(grep -- '--request-slice:' "$T/daemon.err") || fail "no slice and no word why: $(cat "$T/daemon.err")"
	umount_ep
	skip "no request slice here: $why"
fi
[ "$got" = 100000 ] || fail "stats.json request_slice_ns: $got, expected the default 100000"
grep -q '^se\.slice ' "/proc/$EP_PID/task/$EP_PID/sched" 2>/dev/null ||
	{ umount_ep; skip "/proc/PID/sched shows no se.slice (CONFIG_SCHED_DEBUG, Linux 6.12+)"; }
s=$(slices "$EP_PID")
req='^(fuse_worker|fuse-ring-[0-9]+|epochfs-io|epochfs-peer)$'
echo "$s" | grep -q '^fuse_worker ' || fail "no request thread found: $s"
echo "$s" | grep -q '^epochfs-io ' || fail "no io_uring completion thread found: $s"
echo "$s" | awk -v r="$req" '$1 ~ r && $2 != 100000 {bad = 1} END {exit bad}' ||
	fail "a request thread is not on the 100 us slice: $s"
echo "$s" | awk -v r="$req" '$1 !~ r && $2 == 100000 {bad = 1} END {exit bad}' ||
	fail "a background thread took the request threads' slice: $s"
nbg=$(echo "$s" | awk -v r="$req" '$1 !~ r {n++} END {print n + 0}')
[ "$nbg" -gt 0 ] || fail "no background thread to compare: $s"
umount_ep
ok "request and completion threads on a 100 us slice, $nbg background threads on the default"

# With an SSD tier: its ring's completion thread (started earlier, at the
# scan) takes the slice too.
mkdir -p "$T/tier"
mount_ep "$T/src" "$m" --no-persist --cache-dir "$T/tier" --cache-dir-size 64M
cmp -s "$T/src/d/f" "$m/d/f" || fail "bytes differ (tier)"
s=$(slices "$EP_PID")
[ "$(echo "$s" | grep -c '^epochfs-io 100000$')" = 2 ] || fail "with a tier, not both completion threads on 100 us: $s"
umount_ep
ok "with an SSD tier, both io_uring completion threads on 100 us"

mount_ep "$T/src" "$m" --no-persist --request-slice 0
cmp -s "$T/src/d/f" "$m/d/f" || fail "bytes differ (0)"
[ "$(stat_of "$m" request_slice_ns)" = 0 ] || fail "--request-slice 0 reports a slice"
s=$(slices "$EP_PID")
echo "$s" | awk '$2 == 100000 {bad = 1} END {exit bad}' || fail "--request-slice 0: a thread on 100 us: $s"
umount_ep
mount_ep "$T/src" "$m" --no-persist -o request_slice=2000
cmp -s "$T/src/d/f" "$m/d/f" || fail "bytes differ (-o)"
[ "$(stat_of "$m" request_slice_ns)" = 2000000 ] || fail "-o request_slice=2000: $(stat_of "$m" request_slice_ns)"
umount_ep
ok "--request-slice 0 leaves the default; -o request_slice=2000 gives 2 ms"

for bad in 50 100001 -1 1ms; do
	rc=0
	"$EPOCHFS" -f --request-slice "$bad" "$T/src" "$m" 2>"$T/bad.err" || rc=$?
	[ "$rc" = 2 ] || fail "--request-slice $bad: exit $rc, expected 2"
	grep -q "request-slice $bad: expected microseconds from 100 to 100000" "$T/bad.err" ||
		fail "--request-slice $bad: $(cat "$T/bad.err")"
done
mountpoint -q "$m" && fail "a refused option mounted"
ok "--request-slice 50, 100001, -1, 1ms refused with the range"
