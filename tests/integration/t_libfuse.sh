# The libfuse the daemon runs with, and what the mount says of kernel
# passthrough (docs/install.md, "libfuse"):
#   - epochfs --version names a libfuse of 3.17 or newer (the build links
#     the system's when it is that new, else Debian's, built by the
#     Makefile);
#   - installed (make install into a DESTDIR), every binary finds its
#     libraries (ldd), none through a path into the build tree (RPATH or
#     RUNPATH), only the daemon has libfuse (statically, where it was built:
#     ldd names none), and the installed daemon runs the same libfuse;
#   - as root: stats.json's passthrough_available is "yes" where the kernel
#     is built with it (/proc/config.gz says; without it, the kernel's
#     reason); a dataset of small files keeps passthrough off ("auto" says
#     why), the metrics say the same, the log has one line saying so and
#     that reads are copied, and the bytes are SOURCE's (t_passthrough.sh
#     has the mounts that use it);
#   - as nobody, with a mount point it owns: the mount is made through the
#     system's setuid fusermount3 (whatever its release), passthrough is off
#     for want of CAP_SYS_ADMIN, --readahead 1M leaves the kernel's window
#     (sysfs is root's; one line says so), the bytes are SOURCE's, fusermount3 -u by
#     nobody ends it; mounted again, SIGTERM ends it (the daemon unmounts
#     through fusermount3 itself); the daemon said nothing unexpected. Where
#     /dev/fuse is closed to other users (mode 0600 in some containers), a
#     node of the same device open to all is bound over it in a private
#     mount namespace: nothing on the machine changes.
if [ -z "${EPOCHFS_LIBFUSE_NS:-}" ] && [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
	EPOCHFS_LIBFUSE_NS=1 exec unshare -m --propagation private bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"

# ---- the library ------------------------------------------------------------
out=$("$EPOCHFS" --version) || fail "epochfs --version"
lib=$(sed -n 's/^libfuse \([0-9][0-9.]*\)$/\1/p' <<<"$out")
[ -n "$lib" ] || fail "epochfs --version names no libfuse: $out"
IFS=. read -r maj min _ <<<"$lib"
[ "$maj" -gt 3 ] || { [ "$maj" = 3 ] && [ "$min" -ge 17 ]; } || fail "the daemon runs with libfuse $lib, want >= 3.17"
ok "epochfs --version: $(tr '\n' ' ' <<<"$out")(>= 3.17)"

# ---- installed --------------------------------------------------------------
MK=(make -s -C "$ROOT")
case $BUILD in build-san*) MK+=(SANITIZE=address,undefined) ;; esac   # the build under test, not rebuilt
R=$T/root
"${MK[@]}" install DESTDIR="$R" PREFIX=/usr/local >"$T/install.out" 2>&1 ||
	fail "make install: $(tail -5 "$T/install.out")"
n=0 how=
for f in "$R"/usr/local/bin/* "$R"/usr/local/sbin/*; do
	[ "$(head -c 4 "$f" | tail -c 3)" = ELF ] || continue   # the scripts
	b=$(basename "$f")
	l=$(ldd "$f" 2>&1) || fail "ldd $b: $l"
	grep -q 'not found' <<<"$l" && fail "installed $b lacks libraries: $(grep 'not found' <<<"$l")"
	rp=$(readelf -d "$f" 2>/dev/null | grep -E 'R(UN)?PATH')
	[ -n "$rp" ] && grep -qF "$ROOT" <<<"$rp" && fail "installed $b looks in the build tree: $rp"
	fl=$(grep -o '\S*libfuse3\S* => \S*' <<<"$l")
	if [ "$b" = epochfs ]; then
		how=${fl:-static}
	else
		[ -z "$fl" ] || fail "$b links libfuse ($fl); only the daemon does"
	fi
	n=$((n + 1))
done
[ -n "$how" ] || fail "make install installed no epochfs"
iout=$("$R/usr/local/bin/epochfs" --version) || fail "the installed epochfs --version"
[ "$iout" = "$out" ] || fail "the installed daemon says $(tr '\n' ' ' <<<"$iout"), the built one $(tr '\n' ' ' <<<"$out")"
ok "installed: $n binaries find their libraries (ldd), none in the build tree; the daemon's libfuse $lib: $how"

# ---- root -------------------------------------------------------------------
[ "$(id -u)" = 0 ] || skip "libfuse $lib; the rest needs root (a mount as root, then one as nobody)"
"$GEN" "$T/src" --files 24 --classes 2 --seed 5 >/dev/null || fail "epochfs-gen"
mount_ep "$T/src" "$T/m" --no-persist
pa=$(stat_of "$T/m" passthrough_available)
pt=$(stat_of "$T/m" passthrough)
kconf=$(zcat /proc/config.gz 2>/dev/null || cat "/boot/config-$(uname -r)" 2>/dev/null)
if grep -qx 'CONFIG_FUSE_PASSTHROUGH=y' <<<"$kconf"; then
	[ "$pa" = yes ] || fail "passthrough as root on a kernel built with it: $pa"
elif [ -n "$kconf" ]; then
	[ "${pa#no: the kernel does not offer it}" != "$pa" ] || fail "passthrough on a kernel without it: $pa"
else
	# No kernel config to read: either answer, as long as it is one of ours.
	[ "$pa" = yes ] || [ "${pa#no: the kernel does not offer it}" != "$pa" ] || fail "passthrough as root: $pa"
fi
# JPEGs of a few KB: auto keeps the no-open mode.
want="off: auto: 0% of the dataset's bytes are in files of 4 MiB or more"
case $pt in "$want"*) ;; *) fail "a dataset of small files should keep passthrough off: $pt" ;; esac
grep -qxF "epochfs_passthrough_info{passthrough=\"$pt\"} 1" "$T/m/.epochfs/metrics" &&
	grep -qxF "epochfs_passthrough_available_info{passthrough_available=\"$pa\"} 1" "$T/m/.epochfs/metrics" ||
	fail "metrics lack passthrough"
[ "$(grep -c 'kernel passthrough' "$T/daemon.err")" = 1 ] &&
	grep -qxF "epochfs: kernel passthrough ${pt%%: *} (${pt#off: }): reads are copied through the daemon" "$T/daemon.err" ||
	fail "want one line saying how reads go: $(cat "$T/daemon.err")"
diff -r -q "$T/src" "$T/m" >/dev/null || fail "bytes through the mount differ"
umount_ep
ok "as root: passthrough available \"$pa\", in use \"$pt\" (stats.json, metrics, one log line), bytes right"

# ---- nobody, through fusermount3 ---------------------------------------------
id nobody >/dev/null 2>&1 && command -v runuser >/dev/null && command -v setpriv >/dev/null ||
	skip "needs runuser, setpriv and the user nobody"
FM=$(command -v fusermount3) && [ -u "$(readlink -f "$FM")" ] || skip "no setuid fusermount3"
fmver=$(dpkg-query -W -f '${Version}' fuse3 2>/dev/null || echo "?")
if ! runuser -u nobody -- test -r /dev/fuse -a -w /dev/fuse; then
	[ -n "${EPOCHFS_LIBFUSE_NS:-}" ] || skip "/dev/fuse is closed to nobody, and no private mount namespace to open it in"
	mknod -m 666 "$T/fuse" c "$((16#$(stat -c %t /dev/fuse)))" "$((16#$(stat -c %T /dev/fuse)))" &&
		mount --bind "$T/fuse" /dev/fuse || skip "/dev/fuse is closed to nobody and cannot be opened here"
fi
N=$T/nobody
mkdir -p "$N/m" && cp "$EPOCHFS" "$N/epochfs" && cp -r "$T/src" "$N/src" && chown -R nobody "$N" &&
	chmod 755 "$T" || fail "cannot set up nobody's tree"
as_nobody() { runuser -u nobody -- "$@"; }
# The daemon itself as nobody (setpriv execs it: $! is the daemon).
start_nobody() {
	setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups "$N/epochfs" -f --no-persist --readahead 1M \
		"$N/src" "$N/m" 2>>"$T/daemon.err" &
	EP_PID=$!
	EP_MNT=$N/m
	wait_for grep -q " $N/m fuse.epochfs .*user_id=$(id -u nobody)," /proc/mounts || fail "nobody's mount did not appear"
}
start_nobody
pt=$(as_nobody python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["passthrough"])' "$N/m/.epochfs/stats.json") ||
	fail "nobody cannot read its stats.json"
case $pt in
"off: not available: the daemon (uid $(id -u nobody)) lacks CAP_SYS_ADMIN"*) ;;
*) fail "passthrough for a daemon run by nobody: $pt" ;;
esac
as_nobody diff -r -q "$N/src" "$N/m" >/dev/null || fail "bytes through nobody's mount differ"
# sysfs is root's: the readahead window stays the kernel's, said in one line.
ra=$(as_nobody python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["readahead_bytes"])' "$N/m/.epochfs/stats.json")
[ "$ra" = 0 ] || fail "nobody's daemon reports readahead_bytes $ra"
grep -q -- "--readahead: cannot set /sys/class/bdi/.*read_ahead_kb to 1024 (\(Permission denied\|Read-only file system\)); the kernel's window stays" "$T/daemon.err" ||
	fail "nobody's daemon did not say why the readahead window stays"
as_nobody fusermount3 -u "$N/m" || fail "fusermount3 -u as nobody"
rc=0
wait "$EP_PID" || rc=$?
EP_PID=
[ "$rc" = 0 ] || fail "nobody's daemon exited with $rc after fusermount3 -u"
start_nobody
kill -TERM "$EP_PID"
rc=0
wait "$EP_PID" || rc=$?
EP_PID=
[ "$rc" = 0 ] || fail "nobody's daemon exited with $rc after SIGTERM"
grep -q " $N/m " /proc/mounts && fail "nobody's daemon left its mount after SIGTERM"
check_stderr
ok "as nobody: mounted through fusermount3 $fmver with libfuse $lib; passthrough \"$pt\"; bytes right;" \
	"the kernel's readahead window, said why;" \
	"ended by fusermount3 -u, and by SIGTERM"
