# FUSE over io_uring (--fuse-uring, docs/design.md "FUSE over io_uring"):
# with the kernel's switch off, auto serves through /dev/fuse and says why,
# and leaves the switch alone; on turns it on and every byte read through
# the rings matches SOURCE (hits, misses answered from the storage
# completion thread, a file larger than a request); off stays on /dev/fuse;
# -o auto_unmount keeps /dev/fuse (auto) or is refused (on), and a killed
# daemon's mount is then gone; a daemon that may not turn the switch on
# refuses to start with one line. The switch is put back as it was.
# Skipped (77) without root or a kernel with FUSE over io_uring.
. "$(dirname "$0")/lib.sh"
SW=/sys/module/fuse/parameters/enable_uring
[ "$(id -u)" = 0 ] || skip "the kernel's switch needs root"
[ -w "$SW" ] || skip "this kernel has no FUSE over io_uring ($SW)"
was=$(cat "$SW")
trap 'echo "$was" > "$SW"; cleanup' EXIT
m=$T/mnt
mkdir -p "$T/src/d"
for i in $(seq 40); do head -c $((i * 7919)) /dev/urandom > "$T/src/d/f$i"; done
head -c 3000000 /dev/urandom > "$T/src/d/big"
bytes=$(du -sb "$T/src" | cut -f1)

echo N > "$SW"
mount_ep "$T/src" "$m" --no-persist
tr=$(stat_of "$m" fuse_transport)
case $tr in "dev: the kernel does not offer io_uring"*) ;; *) fail "switch off, auto: transport '$tr'" ;; esac
cmp "$m/d/f3" "$T/src/d/f3" || fail "bytes differ through /dev/fuse"
[ "$(stat_of "$m" fuse_uring_reads)" = 0 ] || fail "reads over a ring with the switch off"
umount_ep
[ "$(cat "$SW")" = N ] || fail "auto turned the kernel's switch on"
ok "switch off: auto serves through /dev/fuse and says why; the switch left alone"

# on: the switch turned on; a cache of a third of the data, so that most
# reads are misses answered by the storage completion thread.
mount_ep "$T/src" "$m" --no-persist --fuse-uring on --cache-size $((bytes / 3))B
[ "$(cat "$SW")" = Y ] || fail "--fuse-uring on left the switch off"
grep -q "turned on the kernel's FUSE over io_uring" "$T/daemon.err" || fail "no line saying the switch was turned on"
[ "$(stat_of "$m" fuse_transport)" = io_uring ] || fail "on: transport '$(stat_of "$m" fuse_transport)'"
for pass in 1 2; do
	diff -r "$m/d" "$T/src/d" > /dev/null || fail "bytes differ over io_uring (pass $pass)"
	echo 3 > /proc/sys/vm/drop_caches
done
ur=$(stat_of "$m" fuse_uring_reads)
rd=$(stat_of "$m" reads)
# stats.json's own reads come by the ring too, and are not in "reads".
[ "$ur" -gt 0 ] && [ "$ur" -ge "$rd" ] || fail "reads over the rings: $ur, data reads $rd"
[ "$(stat_of "$m" storage_reads)" -gt 0 ] || fail "no read went to storage: the misses were not tested"
ls /proc/"$EP_PID"/task/*/comm | xargs cat | grep -q '^fuse-ring-' || fail "no ring thread"
umount_ep
ok "on: the switch turned on, every byte matches over the rings ($ur reads, misses included)"

mount_ep "$T/src" "$m" --no-persist --fuse-uring off
[ "$(stat_of "$m" fuse_transport)" = "dev: --fuse-uring off" ] || fail "off: '$(stat_of "$m" fuse_transport)'"
cat "$m/d/f1" > /dev/null
[ "$(stat_of "$m" fuse_uring_reads)" = 0 ] || fail "off: reads over a ring"
umount_ep
ok "off: /dev/fuse with the switch on"

# auto_unmount: auto keeps /dev/fuse, and a killed daemon's mount goes.
"$EPOCHFS" -o auto_unmount --no-persist "$T/src" "$m" 2>"$T/daemon.err" || fail "auto_unmount mount"
EP_MNT=$m
tr=$(stat_of "$m" fuse_transport)
case $tr in "dev: -o auto_unmount"*) ;; *) fail "auto_unmount, auto: transport '$tr'" ;; esac
pid=$(pgrep -f "epochfs -o auto_unmount --no-persist $T/src" | head -1)
[ -n "$pid" ] || fail "daemon pid not found"
kill -9 "$pid"
wait_for sh -c "! mountpoint -q '$m'" || fail "a killed daemon's mount stayed with auto_unmount"
out=$("$EPOCHFS" -f --fuse-uring on -o auto_unmount --no-persist "$T/src" "$m" 2>&1) && fail "on with auto_unmount started"
[ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q "not with -o auto_unmount" || fail "on with auto_unmount: $out"
mountpoint -q "$m" && fail "on with auto_unmount left a mount"
ok "auto_unmount: /dev/fuse under auto (a killed daemon's mount is gone), refused with on"

out=$("$EPOCHFS" --fuse-uring maybe "$T/src" "$m" 2>&1) && fail "--fuse-uring maybe accepted"
echo "$out" | grep -q "expected auto, on or off" || fail "bad value: $out"

# A daemon that may not turn the switch on says so and mounts nothing.
if command -v setpriv > /dev/null && id nobody > /dev/null 2>&1; then
	echo N > "$SW"
	N=$T/nobody
	mkdir -p "$N/m" && cp "$EPOCHFS" "$N/epochfs" && cp -r "$T/src" "$N/src" && chown -R nobody "$N" &&
		chmod 755 "$T" || fail "cannot set up nobody's tree"
	# /dev/fuse may be closed to nobody: then an open copy of it, bound
	# over it in a mount namespace of this test's own.
	mknod -m 666 "$T/fuse" c "$((16#$(stat -c %t /dev/fuse)))" "$((16#$(stat -c %T /dev/fuse)))" ||
		fail "cannot make a copy of /dev/fuse"
	out=$(unshare -m --propagation private sh -c 'mount --bind "$1" /dev/fuse && shift && exec "$@"' sh \
		"$T/fuse" setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups "$N/epochfs" -f \
		--no-persist --fuse-uring on "$N/src" "$N/m" 2>&1) && fail "nobody's daemon started with on and the switch off"
	echo "$out" | grep -q "cannot turn on the kernel's switch" || fail "nobody, on: $out"
	mountpoint -q "$N/m" && fail "nobody's refused daemon left a mount"
	[ "$(cat "$SW")" = N ] || fail "nobody turned the switch on"
	ok "a daemon that may not turn the switch on: one line, nothing mounted"
fi
