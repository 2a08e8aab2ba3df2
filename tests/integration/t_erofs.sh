# Every write-type operation on the dataset fails and SOURCE stays untouched.
# The mount is read-write only for .prep/ specs: the daemon answers EROFS to
# every other write. Because the kernel opens files itself (no-open mode), an
# open for writing succeeds and the write fails with EROFS. With --no-prep the
# mount is "ro" and the kernel refuses every write at open. (Shell commands
# run in bash: dash's builtins print "I/O error" for any failed write.)
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
expect_erofs bash -c "echo x >> '$m/d/f'"
expect_erofs bash -c "echo x > '$m/d/f'"
expect_erofs mknod "$m/p" p
if command -v setfattr >/dev/null; then expect_erofs setfattr -n user.x -v 1 "$m/d/f"; fi
python3 - "$m/d/f" "$m/d/new" <<'PY' || fail "python open for writing"
import errno, os, sys
for flags in (os.O_WRONLY, os.O_RDWR):
    fd = os.open(sys.argv[1], flags)
    try:
        os.write(fd, b"x"); sys.exit("wrote with flags %o" % flags)
    except OSError as e:
        if e.errno != errno.EROFS: sys.exit("flags %o: %s" % (flags, e))
    finally:
        os.close(fd)
for path, flags in ((sys.argv[1], os.O_WRONLY | os.O_TRUNC), (sys.argv[2], os.O_WRONLY | os.O_CREAT)):
    try:
        os.close(os.open(path, flags)); sys.exit("opened %s with flags %o" % (path, flags))
    except OSError as e:
        if e.errno != errno.EROFS: sys.exit("flags %o: %s" % (flags, e))
PY
[ "$(cat "$m/d/f")" = data ] || fail "the file changed"
ok "all write operations: EROFS (at open, or at the first write)"
umount_ep

mount_ep "$T/src" "$m" --no-prep
expect_erofs touch "$m/new"
expect_erofs bash -c "echo x >> '$m/d/f'"
[ -e "$m/.prep" ] && fail ".prep exists with --no-prep"
python3 - "$m/d/f" <<'PY' || fail "--no-prep: python open for writing"
import errno, os, sys
for flags in (os.O_WRONLY, os.O_RDWR, os.O_RDONLY | os.O_TRUNC, os.O_WRONLY | os.O_CREAT):
    try:
        os.close(os.open(sys.argv[1], flags)); sys.exit("opened with flags %o" % flags)
    except OSError as e:
        if e.errno not in (errno.EROFS,): sys.exit("flags %o: %s" % (flags, e))
assert os.statvfs(sys.argv[1]).f_flag & os.ST_RDONLY
PY
ok "--no-prep: a read-only mount, EROFS at open"
umount_ep

# mount(8) gives its helpers "-o rw" unless told ro: --no-prep stays ro all
# the same (it did not: the daemon's ro came first and the rw after won).
ro_in_mounts() { awk -v m="$m" '$2 == m { print $4 }' /proc/mounts | tr , '\n' | grep -qx ro; }
mount_ep "$T/src" "$m" --no-prep -o rw
ro_in_mounts || fail "--no-prep -o rw: /proc/mounts says $(awk -v m="$m" '$2 == m { print $4 }' /proc/mounts)"
expect_erofs touch "$m/new"
umount_ep
# -o ro (an fstab line's): read-only for the kernel, .prep/ specs included.
mount_ep "$T/src" "$m" -o ro
ro_in_mounts || fail "-o ro: /proc/mounts says $(awk -v m="$m" '$2 == m { print $4 }' /proc/mounts)"
expect_erofs bash -c "printf 'batch=4\\n' > '$m/.prep/g.spec'"
expect_erofs touch "$m/new"
umount_ep
ok "/proc/mounts says ro for --no-prep -o rw (mount(8)'s default) and for -o ro, whose .prep/ takes no spec"
after=$(cd "$T/src" && find . -printf '%P %s %T@ %m\n' | sort | md5sum)
[ "$before" = "$after" ] || fail "SOURCE changed"
ok "SOURCE untouched"
