# Links inside SOURCE show as links; the daemon never follows one out of SOURCE,
# not even a directory swapped for a link after the scan.
. "$(dirname "$0")/lib.sh"
mkdir -p "$T/outside" "$T/src/sub"
echo SECRET > "$T/outside/secret"
echo inside > "$T/src/sub/secret"
ln -s "$T/outside" "$T/src/escape"
ln -s ../outside/secret "$T/src/rel-escape"
mount_ep "$T/src" "$T/mnt" --no-watch
[ -L "$T/mnt/escape" ] || fail "escape is not shown as a link"
[ "$(readlink "$T/mnt/escape")" = "$T/outside" ] || fail "link text"
[ "$(stat_of "$T/mnt" files)" = 1 ] || fail "the index counted files behind a link"
[ "$(cat "$T/mnt/sub/secret")" = inside ] || fail "inside file"
ok "links shown as links, not entered"
# Swap the directory for a link to the outside, behind the daemon's back
# (--no-watch: it cannot know), and drop the kernel's page cache.
mv "$T/src/sub" "$T/src/sub.old"
ln -s "$T/outside" "$T/src/sub"
echo 3 > /proc/sys/vm/drop_caches
out=$(cat "$T/mnt/sub/secret" 2>&1)
case $out in *SECRET*) fail "served a file from outside SOURCE" ;; esac
ok "swapped-in link not followed ($out)"
EP_ALLOWED_STDERR='^$'
umount_ep
