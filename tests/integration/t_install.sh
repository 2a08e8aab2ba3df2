# make install into a DESTDIR, then, from there only: mount -t fuse.epochfs
# with -o options (they take effect: stats.json), umount; an fstab line under
# mount -a (a temporary fstab, mount -T) the same; an unknown option refused;
# every man page of docs/man renders (man -l), and every file of the guides'
# directory a page names is installed there (the guides, the sample
# /etc/epochfs conf); make uninstall leaves nothing behind.
. "$(dirname "$0")/lib.sh"
command -v mount >/dev/null && command -v man >/dev/null || skip "needs mount and man"
[ -w /sbin ] || skip "needs /sbin writable (root) for mount(8)'s helper"
[ -e /sbin/mount.fuse.epochfs ] && skip "/sbin/mount.fuse.epochfs exists already: not touched"
R=$T/root
MK=(make -s -C "$ROOT")
case $BUILD in build-san*) MK+=(SANITIZE=address,undefined) ;; esac   # the build under test, not rebuilt
HELPER=/sbin/mount.fuse.epochfs
trap 'rm -f "$HELPER"; for m in "$T/m1" "$T/m2"; do mountpoint -q "$m" && umount -l "$m"; done; cleanup' EXIT
"${MK[@]}" install DESTDIR="$R" PREFIX=/usr/local >"$T/install.out" 2>&1 ||
	fail "make install: $(tail -5 "$T/install.out")"
for f in bin/epochfs bin/epochfs-stat bin/epochfs-warmup bin/epochfs-run bin/epochfs-analyze \
	sbin/mount.fuse.epochfs share/man/man8/epochfs.8 share/man/man1/epochfs-warmup.1 \
	lib/epochfs/python/epochfs/__init__.py lib/epochfs/python/epochfs_prep.py lib/systemd/system/epochfs@.service; do
	[ -e "$R/usr/local/$f" ] || fail "not installed: $f"
done
ver=$("$R/usr/local/bin/epochfs" --version | head -1) || fail "epochfs --version"
ver=${ver#epochfs }
# The Python launchers look in PYTHONDIR, which is /usr/local/... once the
# DESTDIR tree is in place; here it is still staged. The first line is the
# release (the daemon's second, the libfuse it runs with: t_libfuse.sh).
for p in "$R"/usr/local/bin/* "$R"/usr/local/sbin/mount.fuse.epochfs; do
	[ "$(PYTHONPATH="$R/usr/local/lib/epochfs/python" "$p" --version 2>&1 | head -1)" = "$(basename "$p" | sed 's/^mount\.fuse\.epochfs$/epochfs/') $ver" ] ||
		fail "$(basename "$p") --version: $(PYTHONPATH="$R/usr/local/lib/epochfs/python" "$p" --version 2>&1)"
done
for p in "$R"/usr/local/share/man/man*/*; do
	out=$(man -l "$p" 2>&1 >/dev/null)
	[ -z "$out" ] || fail "man -l $(basename "$p"): $out"
	man -l "$p" 2>/dev/null | grep -q DESCRIPTION || fail "man -l $(basename "$p") renders no description"
done
man -l "$R/usr/local/share/man/man8/epochfs.8" 2>/dev/null | grep -q -- "--cache-dir-size" || fail "epochfs(8) lacks options"
for p in "$ROOT"/docs/man/*; do
	n=$(basename "$p")
	[ -f "$R/usr/local/share/man/man${n##*.}/$n" ] || fail "not installed: man page $n"
done
D=/usr/local/share/doc/epochfs
for f in README.md install.md cache.md examples/mnt-imagenet.conf; do
	[ -f "$R$D/$f" ] || fail "not installed: $D/$f"
done
named=$(cat "$R"/usr/local/share/man/man*/* | sed 's/\\-/-/g' | grep -o "$D/[A-Za-z0-9./_-]*" | sed 's/[.,)]*$//' | sort -u)
[ -n "$named" ] || fail "no man page names $D"
for f in $named; do
	[ -e "$R$f" ] || fail "a man page names $f, which make install did not install"
done
ok "make install: binaries (all --version $ver), mount helper, Python package, $(ls "$R"/usr/local/share/man/man*/* | wc -l) man pages that render, the $(echo "$named" | wc -w) files of $D they name"

"$GEN" "$T/src" --files 40 --classes 2 >/dev/null || fail "epochfs-gen"
mkdir -p "$T/m1" "$T/m2"
ln -s "$R/usr/local/sbin/mount.fuse.epochfs" "$HELPER"
# No PATH is involved: mount(8) gives its helpers none; ours runs ../bin/epochfs.
mount -t fuse.epochfs "$T/src" "$T/m1" -o cache_size=16M,no_persist,_netdev,noauto,x-systemd.requires=a.service ||
	fail "mount -t fuse.epochfs"
pid=$(stat_of "$T/m1" daemon_pid)
[ "$(readlink -f "/proc/$pid/exe")" = "$(readlink -f "$R/usr/local/bin/epochfs")" ] || fail "not the installed daemon"
[ "$(stat_of "$T/m1" cache_capacity_bytes)" = 16777216 ] && [ "$(stat_of "$T/m1" persist)" = 0 ] ||
	fail "-o options did not take effect"
[ "$(stat_of "$T/m1" version)" = "$ver" ] || fail "stats.json version: $(stat_of "$T/m1" version), want $ver"
grep -qx "epochfs_version_info{version=\"$ver\"} 1" "$T/m1/.epochfs/metrics" || fail "metrics lack epochfs_version_info"
diff -r -q "$T/src" "$T/m1" >/dev/null || fail "bytes through mount -t differ"
umount "$T/m1" || fail "umount"
wait_for sh -c "! kill -0 $pid 2>/dev/null" || fail "the daemon did not exit after umount"
ok "mount -t fuse.epochfs -o cache_size=16M,no_persist,_netdev,... then umount: options in stats.json, bytes right"

printf '%s %s fuse.epochfs cache_size=8M,no_persist,_netdev,nofail,x-systemd.automount 0 0\n' "$T/src" "$T/m2" > "$T/fstab"
mount -a -T "$T/fstab" || fail "mount -a -T"
mountpoint -q "$T/m2" || fail "the fstab line did not mount"
[ "$(stat_of "$T/m2" cache_capacity_bytes)" = 8388608 ] || fail "fstab options did not take effect"
umount "$T/m2" || fail "umount of the fstab mount"
ok "an fstab line (mount -a -T) mounts with its options and umounts"

if mount -t fuse.epochfs "$T/src" "$T/m1" -o cache_size=1M,no_such_option 2>"$T/bad.err"; then
	umount "$T/m1"; fail "an unknown option was taken"
fi
[ "$(cat "$T/bad.err")" = "epochfs: error: unknown mount option(s): no_such_option (see epochfs --help)" ] ||
	fail "unknown option, want one line: $(cat "$T/bad.err")"
mountpoint -q "$T/m1" && fail "mounted after all"
ok "an unknown -o option is refused: $(tail -1 "$T/bad.err")"

rm -f "$HELPER"
"${MK[@]}" uninstall DESTDIR="$R" PREFIX=/usr/local >/dev/null 2>&1 || fail "make uninstall"
left=$(find "$R" -type f | head -3)
[ -z "$left" ] || fail "make uninstall left: $left"
ok "make uninstall removes every file"
