# Every file byte-identical to SOURCE (also under concurrent readers), and the
# listing equal to SOURCE's: names, types, sizes, mtimes, inode numbers, link
# counts (hard links share one inode, as there) and blocks (a sparse file
# stays sparse).
. "$(dirname "$0")/lib.sh"
"$GEN" "$T/src" --files 400 --classes 8 --seed 7 2>/dev/null || fail "gen"
mkdir -p "$T/src/deep/a/b/c"
head -c 5000000 /dev/urandom > "$T/src/deep/a/b/c/big.bin"   # several read requests
: > "$T/src/deep/empty"
ln -s ../class_0000 "$T/src/deep/rel-link"
ln "$T/src/deep/a/b/c/big.bin" "$T/src/deep/hard-link"
truncate -s 16M "$T/src/deep/sparse" && printf 'end' >> "$T/src/deep/sparse"
mount_ep "$T/src" "$T/mnt"

listing() { (cd "$1" && find . -mindepth 1 -printf '%P %y %s %T@ %i %n %b\n' | LC_ALL=C sort); }
diff <(listing "$T/src") <(listing "$T/mnt") > "$T/diff" || fail "listing differs: $(head -5 "$T/diff")"
ok "listing equal ($(listing "$T/src" | wc -l) entries)"

(cd "$T/src" && find . -type f) > "$T/files"
while read -r f; do cmp -s "$T/src/$f" "$T/mnt/$f" || fail "$f differs"; done < "$T/files"
ok "every file identical (cold)"

# Four concurrent readers, each over the whole tree in a different order,
# after dropping the kernel's caches so the daemon serves them.
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null
for k in 1 2 3 4; do
	(shuf --random-source=<(yes $k) "$T/files" | while read -r f; do
		cmp -s "$T/src/$f" "$T/mnt/$f" || { echo "reader $k: $f differs"; exit 1; }
	done) &
done
for k in 1 2 3 4; do wait -n || fail "a concurrent reader saw different bytes"; done
ok "four concurrent readers identical"

[ "$(readlink "$T/mnt/deep/rel-link")" = ../class_0000 ] || fail "symlink target"
[ "$(stat -c %s "$T/mnt/deep/empty")" = 0 ] && [ -z "$(cat "$T/mnt/deep/empty")" ] || fail "empty file"
dd if="$T/mnt/deep/a/b/c/big.bin" bs=4096 skip=333 count=7 2>/dev/null | cmp -s - \
	<(dd if="$T/src/deep/a/b/c/big.bin" bs=4096 skip=333 count=7 2>/dev/null) || fail "offset read"
ok "links, empty files, reads at an offset"
python3 - "$T/mnt" <<'PY2' || fail "xattr/statfs/inode checks"
import errno, os, sys
m = sys.argv[1]
f = os.path.join(m, "class_0000", os.listdir(os.path.join(m, "class_0000"))[0])
assert os.listxattr(f) == [], os.listxattr(f)
try:
    os.getxattr(f, "user.x"); sys.exit("getxattr succeeded")
except OSError as e:
    assert e.errno == errno.ENODATA, e
sv = os.statvfs(m)
assert sv.f_blocks > 0, sv   # read-only flag: t_erofs.sh, --no-prep
assert os.stat(f).st_ino == os.stat(f).st_ino
assert os.access(f, os.R_OK)   # W_OK: only a --no-prep mount is read-only for access()
PY2
ok "xattrs empty, statfs, stable inode numbers, access"
umount_ep
