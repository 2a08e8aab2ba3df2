# Bad input gets one clear line and a non-zero exit with nothing mounted;
# the daemon exits 0 on unmount and on SIGTERM; after kill -9 with
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
expect_err "unknown option" -f -o no_such_option "$T/src" "$T/mnt"
expect_err "unexpected argument" "$T/src" "$T/mnt" extra
"$EPOCHFS" --help | grep -q "usage: epochfs" || fail "--help"
"$EPOCHFS" -V | grep -q "^epochfs " || fail "--version"
ok "bad input: clear errors, nothing mounted"

mount_ep "$T/src" "$T/mnt"
kill -TERM "$EP_PID"
rc=0; wait "$EP_PID" || rc=$?; EP_PID=
[ "$rc" = 0 ] || fail "exit $rc after SIGTERM"
wait_for sh -c "! mountpoint -q '$T/mnt'" || fail "still mounted after SIGTERM"
check_stderr
ok "SIGTERM: clean exit 0, unmounted"

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
