# Every write-type operation fails with EROFS and SOURCE stays untouched.
. "$(dirname "$0")/lib.sh"
mkdir -p "$T/src/d"
echo data > "$T/src/d/f"
before=$(cd "$T/src" && find . -printf '%P %s %T@ %m\n' | sort | md5sum)
mount_ep "$T/src" "$T/mnt"
m=$T/mnt
expect_erofs() {
	local out
	out=$("$@" 2>&1) && fail "succeeded: $*"
	echo "$out" | grep -q "Read-only file system" || fail "not EROFS: $* -> $out"
}
expect_erofs touch "$m/new"
expect_erofs touch "$m/d/f"
expect_erofs mkdir "$m/nd"
expect_erofs rm -f "$m/d/f"
expect_erofs rmdir "$m/d"
expect_erofs mv "$m/d/f" "$m/d/g"
expect_erofs ln -s x "$m/l"
expect_erofs ln "$m/d/f" "$m/h"
expect_erofs truncate -s 0 "$m/d/f"
expect_erofs chmod 600 "$m/d/f"
expect_erofs chown 1:1 "$m/d/f"
expect_erofs sh -c "echo x >> '$m/d/f'"
expect_erofs sh -c "echo x > '$m/d/f'"
expect_erofs mknod "$m/p" p
if command -v setfattr >/dev/null; then expect_erofs setfattr -n user.x -v 1 "$m/d/f"; fi
python3 - "$m/d/f" <<'PY' || fail "python open for writing"
import errno, os, sys
for flags in (os.O_WRONLY, os.O_RDWR, os.O_RDONLY | os.O_TRUNC, os.O_WRONLY | os.O_CREAT):
    try:
        os.close(os.open(sys.argv[1], flags)); sys.exit("opened with flags %o" % flags)
    except OSError as e:
        if e.errno not in (errno.EROFS,): sys.exit("flags %o: %s" % (flags, e))
PY
ok "all write operations: EROFS"
umount_ep
after=$(cd "$T/src" && find . -printf '%P %s %T@ %m\n' | sort | md5sum)
[ "$before" = "$after" ] || fail "SOURCE changed"
ok "SOURCE untouched"
