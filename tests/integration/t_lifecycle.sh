# Bad input gets one clear line and a non-zero exit with nothing mounted
# (a MOUNTPOINT on, in or above SOURCE too, also through another epochfs);
# the daemon exits 0 on unmount and on SIGTERM (also one sent as the mount
# appears, while libfuse waits for fusermount3); after kill -9 with
# auto_unmount no mount is left.
. "$(dirname "$0")/lib.sh"
mkdir -p "$T/src" "$T/mnt"
echo x > "$T/src/f"
expect_err() { # expect_err PATTERN ARGS...
	local pat=$1 out rc=0
	shift
	out=$(timeout 20 "$EPOCHFS" "$@" 2>&1) || rc=$?
	[ "$rc" != 0 ] || fail "exit 0 for: $*"
	echo "$out" | grep -q -- "$pat" || fail "for '$*' expected '$pat', got: $out"
	mountpoint -q "$T/mnt" && fail "left a mount after: $*"
	true
}
expect_err "missing SOURCE and MOUNTPOINT"
expect_err "missing MOUNTPOINT" "$T/src"
expect_err "no/such: No such file" "$T/no/such" "$T/mnt"
expect_err "not a directory (SOURCE)" "$T/src/f" "$T/mnt"
expect_err "not a directory (MOUNTPOINT)" "$T/src" "$T/src/f"
expect_err "nomnt: No such file" "$T/src" "$T/nomnt"
expect_err "unknown option" --bogus "$T/src" "$T/mnt"
expect_err "expected a number" --threads abc "$T/src" "$T/mnt"
expect_err "expected seconds" --timeout -3 "$T/src" "$T/mnt"
expect_err "unknown mount option(s): no_such_option (see epochfs --help)" -f -o no_such_option "$T/src" "$T/mnt"
expect_err "unexpected argument" "$T/src" "$T/mnt" extra
expect_err "cannot open log file: No such file" --log "$T/no/such/log" "$T/src" "$T/mnt"
out=$("$EPOCHFS" --log "$T/no/such/log" "$T/src" "$T/mnt" 2>&1)
[ "$(echo "$out" | wc -l)" = 1 ] || fail "--log to a missing directory: more than one line: $out"
"$EPOCHFS" --help | grep -q "usage: epochfs" || fail "--help"
"$EPOCHFS" -V | grep -q "^epochfs " || fail "--version"
ok "bad input: clear errors, nothing mounted"

# A MOUNTPOINT that is SOURCE, inside it, or holds it: refused before
# mounting (exit 2, one line), never a hang.
mkdir -p "$T/src/inner" "$T/up/src2/in" "$T/mnt2"
overlap() { # overlap SOURCE MOUNTPOINT
	local out rc=0
	out=$(timeout 10 "$EPOCHFS" -f "$1" "$2" 2>&1) || rc=$?
	[ "$rc" = 2 ] || fail "$1 on $2: exit $rc (want 2): $out"
	[ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q "overlap" || fail "$1 on $2: $out"
	mountpoint -q "$2" && fail "$2 mounted"
	true
}
overlap "$T/src" "$T/src"
overlap "$T/src" "$T/src/inner"
overlap "$T/up/src2" "$T/up"
overlap "$T/src/." "$T/src/inner/.."
# Through a mount: SOURCE is an epochfs mount whose own SOURCE holds MOUNTPOINT.
mount_ep "$T/up" "$T/mnt2"
[ "$(awk -v m="$T/mnt2" '$2 == m { print $1 }' /proc/mounts)" = "$T/up" ] || fail "fsname is not SOURCE: $(grep mnt2 /proc/mounts)"
overlap "$T/mnt2/src2" "$T/up/src2/in"
out=$(timeout 10 "$EPOCHFS" -f "$T/mnt2" "$T/up/src2/in" 2>&1); rc=$?
[ "$rc" = 2 ] && echo "$out" | grep -q "read through epochfs from $T/up" || fail "through a mount: rc $rc: $out"
umount_ep
ok "MOUNTPOINT on, in or above SOURCE (also through an epochfs mount): refused, exit 2, one line"

mount_ep "$T/src" "$T/mnt"
kill -TERM "$EP_PID"
rc=0; wait "$EP_PID" || rc=$?; EP_PID=
[ "$rc" = 0 ] || fail "exit $rc after SIGTERM"
wait_for sh -c "! mountpoint -q '$T/mnt'" || fail "still mounted after SIGTERM"
check_stderr
ok "SIGTERM: clean exit 0, unmounted"

# SIGTERM the moment the mount appears, while libfuse may still be waiting
# for fusermount3: 40 times, each a clean exit 0 and no mount left (it
# failed 2 times in 40, "fuse: waitpid: Interrupted system call", before
# the mount held the stop signals).
for i in $(seq 40); do
	"$EPOCHFS" -f --no-persist "$T/src" "$T/mnt" 2>"$T/race.err" &
	pid=$!
	for j in $(seq 100000); do mountpoint -q "$T/mnt" && break; kill -0 "$pid" 2>/dev/null || break; done
	kill -TERM "$pid"
	rc=0; wait "$pid" || rc=$?
	[ "$rc" = 0 ] || fail "SIGTERM as the mount appeared (round $i): exit $rc: $(cat "$T/race.err")"
	wait_for sh -c "! mountpoint -q '$T/mnt'" || fail "SIGTERM as the mount appeared (round $i): still mounted"
done
ok "SIGTERM as the mount appears, 40 times: exit 0, unmounted"

mount_ep "$T/src" "$T/mnt"
umount_ep
ok "fusermount3 -u: exit 0"

# Daemon mode: returns once mounted, and serves.
"$EPOCHFS" -o auto_unmount "$T/src" "$T/mnt" 2>"$T/daemon.err" || fail "daemon mode"
EP_MNT=$T/mnt
[ "$(cat "$T/mnt/f")" = x ] || fail "daemon mode does not serve"
pid=$(pgrep -f "epochfs -o auto_unmount $T/src" | head -1)
[ -n "$pid" ] || fail "daemon pid not found"
kill -9 "$pid"
wait_for sh -c "! mountpoint -q '$T/mnt'" || fail "stale mount after kill -9 with auto_unmount"
ls "$T/mnt" > /dev/null 2>&1 || fail "mountpoint unusable after kill -9"
ok "kill -9 with auto_unmount: nothing left mounted"
