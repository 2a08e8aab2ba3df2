# Without inotify (--no-watch, as on NFS or Lustre, where another host's
# change raises no event) a file rewritten in SOURCE is served with its new
# bytes once --timeout has passed: through a fresh open, O_DIRECT and stat,
# even when the old bytes sit in the RAM cache and the kernel's page cache.
# Before the bound: old bytes or new, whole, never mixed. A handle opened
# before the change never mixes versions either (old bytes, or EIO).
. "$(dirname "$0")/lib.sh"
mkdir -p "$T/src"
python3 - "$T/src" <<'PY'
import os, sys
for name, ch in (("c4", b"A"), ("held", b"H"), ("gone", b"G")):
    open(os.path.join(sys.argv[1], name), "wb").write(ch * 200000)
PY
mount_ep "$T/src" "$T/mnt" --no-watch --timeout 1 --cache-size 64M
m=$T/mnt
one_version() { # one_version FILE: prints the one byte value FILE holds, or "mixed"
	python3 -c 'import sys; d = open(sys.argv[1], "rb").read(); print(chr(d[0]) if d and d == d[:1] * len(d) else "mixed %d" % len(d))' "$1"
}
[ "$(one_version "$m/c4")" = A ] || fail "first read"
[ "$(one_version "$m/held")" = H ] || fail "first read of held"
[ "$(stat_of "$m" cache_items)" -ge 2 ] || fail "not in the RAM cache"
exec 7< "$m/held"                       # a handle across the change
head -c 1000 <&7 > /dev/null

# Rewrite in place (same inode, same size), as another NFS client would.
python3 - "$T/src" <<'PY'
import os, sys
for name, ch in (("c4", b"B"), ("held", b"I")):
    with open(os.path.join(sys.argv[1], name), "r+b") as f:
        f.write(ch * 200000)
PY
rm "$T/src/gone"
# Until the bound: the old version or the new, whole; the new one by the
# bound (1 s, plus a margin for a loaded machine).
t0=$(date +%s%N)
while :; do
	v=$(one_version "$m/c4")
	dt=$((($(date +%s%N) - t0) / 1000000))
	case $v in A) ;; B) break ;; *) fail "mixed bytes before the bound: $v" ;; esac
	[ "$dt" -le 1800 ] || fail "old bytes $dt ms after the change (bound 1000 ms)"
	sleep 0.05
done
[ "$(one_version "$m/c4")" = B ] || fail "cat after the timeout: $(one_version "$m/c4")"
dd if="$m/c4" iflag=direct bs=4096 count=1 2>/dev/null | grep -q '^BBBB' || fail "O_DIRECT after the timeout: old bytes"
[ "$(stat -c %Y "$m/c4")" = "$(stat -c %Y "$T/src/c4")" ] || fail "stat shows the old mtime"
[ -e "$m/gone" ] && fail "a removed file still shows"
ok "rewrite without inotify: new bytes $dt ms after the change (bound 1000 ms); O_DIRECT, mtime and absence agree"

# The handle held across the change: the rest of its bytes are the old
# version or an error, never the new one mixed in.
rest=$(python3 -c '
import os, sys
fd = 7
try:
    d = os.pread(fd, 199000, 1000)
except OSError as e:
    print("error"); sys.exit(0)
print(chr(d[0]) if d == d[:1] * len(d) else "mixed")')
case $rest in H|error) ;; *) fail "held handle read: $rest" ;; esac
exec 7<&-
[ "$(stat_of "$m" changes)" -ge 2 ] || fail "changes not counted: $(stat_of "$m" changes)"
ok "a handle opened before the change read '$rest' (old bytes or EIO), never a mix"

# RAM cache hits are re-checked too: read through O_DIRECT (every read
# reaches the daemon and hits the cached item), change, wait, read again.
dd if="$m/c4" iflag=direct bs=65536 2>/dev/null | cmp -s - "$T/src/c4" || fail "O_DIRECT read"
hits=$(stat_of "$m" cache_hits)
dd if="$m/c4" iflag=direct bs=65536 2>/dev/null | cmp -s - "$T/src/c4" || fail "O_DIRECT read"
[ "$(stat_of "$m" cache_hits)" -gt "$hits" ] || fail "the O_DIRECT read was no RAM cache hit"
python3 -c 'import sys; open(sys.argv[1], "r+b").write(b"C" * 200000)' "$T/src/c4"
sleep 1.3
dd if="$m/c4" iflag=direct bs=65536 2>/dev/null | cmp -s - "$T/src/c4" || fail "a RAM cache hit served old bytes past the bound"
[ "$(stat_of "$m" cache_stale)" -ge 1 ] || fail "the stale item was not counted"
ok "RAM cache hits are re-checked once --timeout passed: new bytes, the old item dropped"
umount_ep
