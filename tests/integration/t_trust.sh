# Nothing found on disk outside SOURCE is trusted until checked (docs/cache.md,
# "What is trusted"). A local user (made for the test, removed after) tries
# what a hostile user would against root's daemon with default options:
#   - plants /dev/shm/epochfs-0 with symlinks named owner, lock and arena to
#     root-only files: nothing is written through them, the mount serves
#     without persistence and says why in one line and in stats.json;
#   - writes a table and arena of its own there: nothing is adopted;
#   - a plain file there, or a lock holding any pid: no denial of service;
#   - cannot read or truncate root's state while it serves (0700, 0600);
#   - offers its own directory as --state-dir, a world-writable --cache-dir
#     or one holding its own tier, its own secret or manifest: refused in
#     one line naming the path and why, nothing served from them;
#   - a 256 MiB /dev/shm (Docker's default is 64 MiB): a cache larger than
#     it can spare goes to anonymous memory, a torchvision DataLoader with workers (which
#     pass batches through /dev/shm) runs, and nothing is left after umount.
# It all runs in a private mount namespace with a /dev/shm of its own, so
# the machine's /dev/shm is never touched.
if [ -z "${EPOCHFS_TRUST_NS:-}" ]; then
	command -v unshare >/dev/null || { echo "SKIP: no unshare"; exit 77; }
	[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (it makes a user)"; exit 77; }
	EPOCHFS_TRUST_NS=1 exec unshare -m --propagation private bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"
mount -t tmpfs -o size=1G,mode=1777 tmpfs /dev/shm || skip "cannot mount a private /dev/shm"
U=epfs-hostile-$$
useradd -M -N -s /usr/sbin/nologin "$U" 2>/dev/null || skip "cannot add a user"
UID_H=$(id -u "$U")
trap 'cleanup; userdel "$U" 2>/dev/null' EXIT
as_user() { runuser -u "$U" -- "$@"; }
chmod 755 "$T"

"$GEN" "$T/src" --files 60 --classes 3 --seed 27 >/dev/null || fail "epochfs-gen"
M=$T/mnt
R=/dev/shm/epochfs-0
st() { stat_of "$M" "$1"; }
same() { diff -r -q "$T/src" "$M" >/dev/null || fail "$1: bytes through the mount differ from SOURCE"; }
# Root-only files a planted link could make the daemon overwrite.
mkdir -p "$T/root" && chmod 700 "$T/root"
for v in a b c; do echo "root's $v" > "$T/root/$v"; chmod 600 "$T/root/$v"; done
victims_intact() {
	for v in a b c; do [ "$(cat "$T/root/$v")" = "root's $v" ] || fail "$1: $T/root/$v was written through a planted link"; done
}
EP_ALLOWED_STDERR='not trusted: '

# ---- the state root planted with links -------------------------------------
as_user mkdir -m 777 "$R"
as_user mkdir -m 777 "$R/x"
for f in owner lock arena; do as_user ln -s "$T/root/${f:0:1}" "$R/$f"; done
mount_ep "$T/src" "$M"
same "with a planted state root"
[ "$(st persist)" = 0 ] || fail "the daemon used a state root another user owns"
st persist_state | grep -q "^off: the cache state $R/.*: not trusted: $R is owned by uid $UID_H, not by root" || fail "persist_state: $(st persist_state)"
[ "$(grep -c "the cache uses anonymous memory" "$T/daemon.err")" = 1 ] || fail "not said in one line: $(cat "$T/daemon.err")"
why=$(st persist_state)
umount_ep
victims_intact "a planted state root"
ok "a state root planted with links by uid $UID_H: nothing written through them, served without persistence ($why)"

# A state of the user's own making: a real daemon's table and arena, handed
# over whole (every checksum right): still not adopted, because of where it is.
rm -rf "$R"
mount_ep "$T/src" "$M" --persist always
same "filling a state"
sd=$(st persist_state | sed 's/^on (always): //')
umount_ep
[ -f "$sd/table" ] || fail "no state to hand over"
mkdir -p "$T/forged" && cp -a "$sd/." "$T/forged/"
rm -rf "$R"
as_user mkdir -m 700 "$R" "$R/$(basename "$sd")"
cp "$T/forged/"* "$R/$(basename "$sd")/" && chown -R "$U" "$R"
mount_ep "$T/src" "$M"
[ "$(st persist_adopted)" = 0 ] || fail "adopted $(st persist_adopted) items from a state another user wrote"
same "with a state offered by another user"
umount_ep
ok "a state another user wrote (a valid one, handed over whole) is never adopted"

# A plain file where the root would be, or a lock with any pid: the mount works.
rm -rf "$R"
as_user sh -c "echo 1 > $R"
mount_ep "$T/src" "$M"
same "with a file at the state root"
st persist_state | grep -q "^off: " || fail "persist_state: $(st persist_state)"
umount_ep
rm -f "$R"
as_user mkdir -m 700 "$R"
as_user mkdir -m 700 "$R/$(basename "$sd")"
as_user sh -c "echo 1 > $R/$(basename "$sd")/lock"
mount_ep "$T/src" "$M"
same "with a planted lock"
umount_ep
rm -rf "$R"
ok "a file at the state root, or a planted lock holding pid 1: no denial of service"

# Root's own state, while it serves: out of the user's reach.
mount_ep "$T/src" "$M" --cache-size 32M
same "filling"
sd=$(st persist_state | sed 's/^on (crash): //')
[ "$(stat -c '%U %a' "$R")" = "root 700" ] && [ "$(stat -c '%U %a' "$sd")" = "root 700" ] &&
	[ "$(stat -c '%U %a' "$sd/arena")" = "root 600" ] || fail "state modes: $(ls -la "$R" "$sd")"
as_user cat "$sd/arena" >/dev/null 2>&1 && fail "the user read root's arena (SOURCE's root-only bytes)"
as_user truncate -s 0 "$sd/arena" 2>/dev/null && fail "the user truncated root's arena"
same "after the user's tries"
kill -0 "$EP_PID" || fail "the daemon died"
umount_ep
[ ! -e "$sd" ] || fail "umount left $sd"
ok "root's state (root 0700, arena 0600) cannot be read or cut by the user; umount frees it"

# ---- places the user offers -------------------------------------------------
refused() { # refused WHAT PATTERN OPTIONS...: the mount is refused in one line matching PATTERN
	local what=$1 pat=$2
	shift 2
	mkdir -p "$M"
	if "$EPOCHFS" -f "$@" "$T/src" "$M" 2>"$T/refused.err"; then
		fusermount3 -u "$M"; fail "$what: mounted"
	fi
	mountpoint -q "$M" && fail "$what: left a mount"
	[ "$(grep -c . "$T/refused.err")" = 1 ] && grep -q -- "$pat" "$T/refused.err" ||
		fail "$what: $(cat "$T/refused.err")"
	ok "$what: refused: $(cat "$T/refused.err")"
}
as_user mkdir -m 700 /dev/shm/theirs
refused "--state-dir in another user's directory" "not trusted: .*theirs is owned by uid $UID_H" \
	--state-dir /dev/shm/theirs/s
mkdir -m 777 "$T/pub" && chmod 777 "$T/pub"
refused "a world-writable, non-sticky --cache-dir" "--cache-dir $T/pub: not trusted: .*writable by group or others (mode 0777) and not sticky" \
	--cache-dir "$T/pub"
# A sticky scratch directory is fine, but not a tier the user wrote there.
mkdir -m 1777 "$T/scratch" && chmod 1777 "$T/scratch"
as_user mkdir -m 700 "$T/scratch/epochfs-tier"
refused "another user's tier in a sticky --cache-dir" "epochfs-tier: not trusted: .*owned by uid $UID_H" \
	--cache-dir "$T/scratch"
rm -rf "$T/scratch/epochfs-tier"
mount_ep "$T/src" "$M" --cache-size 1M --cache-dir "$T/scratch"
same "with a tier in a sticky directory"
[ "$(stat -c '%U %a' "$T/scratch/epochfs-tier")" = "root 700" ] || fail "the tier directory is not root's 0700"
umount_ep
ok "a tier in a sticky scratch directory is made root's, 0700"
head -c 32 /dev/urandom | base64 > "$T/secret"; chmod 600 "$T/secret"; chown "$U" "$T/secret"
refused "a secret the user owns" "--secret-file $T/secret: .*owned by uid $UID_H" \
	--peers 127.0.0.1:1,127.0.0.1:2 --rank 0 --secret-file "$T/secret"
chown root "$T/secret"
as_user ln -s "$T/secret" /dev/shm/link
refused "a secret reached through the user's symlink" "/dev/shm/link is a symlink owned by uid $UID_H" \
	--peers 127.0.0.1:1,127.0.0.1:2 --rank 0 --secret-file /dev/shm/link
"$ROOT/$BUILD/epochfs-manifest" -q -o "$T/src.manifest" "$T/src" || fail "epochfs-manifest"
chmod 666 "$T/src.manifest"
refused "a manifest others can write" "--manifest $T/src.manifest: not trusted: .*writable by group or others" \
	--manifest "$T/src.manifest"

# ---- a small /dev/shm --------------------------------------------------------
umount /dev/shm
mount -t tmpfs -o size=256M,mode=1777 tmpfs /dev/shm || fail "cannot mount a 256M /dev/shm"
# A cache larger than the room /dev/shm can spare (the default, 25% of RAM,
# is on most machines; this dataset is too small to need it).
mount_ep "$T/src" "$M" --cache-size 200M
[ "$(st persist)" = 0 ] || fail "a 200 MiB cache went on a 256 MiB /dev/shm: $(st persist_state)"
/usr/bin/python3 - "$M" <<'PY' || fail "a DataLoader with workers failed over the mount"
import sys, torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms
ds = datasets.ImageFolder(sys.argv[1], transforms.Compose([transforms.RandomResizedCrop(64), transforms.ToTensor()]))
n = 0
for x, y in DataLoader(ds, batch_size=8, shuffle=True, num_workers=2):
    n += len(y)
assert n == len(ds), (n, len(ds))
PY
umount_ep
used=$(df --output=used -B1 /dev/shm | tail -1)
[ "$used" -lt $((1 << 20)) ] || fail "$used bytes of /dev/shm used after umount"
ok "a 256 MiB /dev/shm: a 200 MiB cache uses anonymous memory, a DataLoader with 2 workers runs, /dev/shm holds $used bytes after umount"
