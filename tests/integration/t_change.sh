# A backing file changed while mounted is served with its new bytes at the
# next open; a removed one disappears; a handle never mixes versions.
. "$(dirname "$0")/lib.sh"
mkdir -p "$T/src/d"
printf 'version-one\n' > "$T/src/d/inplace"
printf 'old-by-rename\n' > "$T/src/d/renamed"
printf 'same-size-AAAA\n' > "$T/src/d/sametime"
printf 'doomed\n' > "$T/src/d/gone"
mount_ep "$T/src" "$T/mnt"
m=$T/mnt/d
for f in inplace renamed sametime gone; do cat "$m/$f" > /dev/null; done   # warm the caches

printf 'version-two, longer\n' > "$T/src/d/inplace"
wait_for sh -c "[ \"\$(cat '$m/inplace')\" = 'version-two, longer' ]" || fail "in-place rewrite: got $(cat "$m/inplace")"
ok "in-place rewrite served new bytes"

printf 'new-by-rename\n' > "$T/src/d/.tmp" && mv "$T/src/d/.tmp" "$T/src/d/renamed"
wait_for sh -c "[ \"\$(cat '$m/renamed')\" = new-by-rename ]" || fail "rename over: got $(cat "$m/renamed")"
ok "rename-over served new bytes"

touch -r "$T/src/d/sametime" "$T/ref"
printf 'same-size-BBBB\n' > "$T/src/d/sametime" && touch -r "$T/ref" "$T/src/d/sametime"
wait_for sh -c "[ \"\$(cat '$m/sametime')\" = same-size-BBBB ]" || fail "same size+mtime rewrite: got $(cat "$m/sametime")"
ok "rewrite with the same size and mtime served new bytes"

rm "$T/src/d/gone"
wait_for sh -c "! [ -e '$m/gone' ]" || fail "removed file still visible"
ls "$m" | grep -qx gone && fail "removed file still listed"
ok "removed file gone"

# An open handle across a rewrite: its bytes are the old or the new file
# whole, or an error, never a mix.
head -c 2000000 /dev/zero | tr '\0' 'A' > "$T/src/d/big"
umount_ep
mount_ep "$T/src" "$T/mnt"
python3 - "$T/mnt/d/big" "$T/src/d/big" <<'PY' || fail "mixed read"
import os, sys
f = open(sys.argv[1], "rb", buffering=0)
first = f.read(65536)
with open(sys.argv[2] + ".new", "wb") as w: w.write(b"B" * 2000000)
os.rename(sys.argv[2] + ".new", sys.argv[2])
try:
    rest = f.read()
except OSError as e:
    print("old handle: %s (allowed)" % e); sys.exit(0)
data = first + rest
if len(set(data)) != 1: sys.exit("mixed bytes: %r" % (set(data),))
print("old handle read %d bytes of one version" % len(data))
PY
wait_for sh -c "head -c 1 '$T/mnt/d/big' | grep -q B" || fail "new open did not see the new version"
ok "no mixed versions within one open"
umount_ep
