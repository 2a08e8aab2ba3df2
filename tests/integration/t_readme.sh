# The README's first screen, as a new user runs it: make install into
# /usr/local, mkdir, its /etc/fstab line (allow_other), mount, then the
# training job as a user who is not root. Each command is taken from the
# README's first code block (the paths /data/imagenet and /mnt/imagenet
# moved under $T), so the README and this test cannot part:
#   - the install is a real one in /usr/local: DESTDIR, then bound over
#     /usr/local in a private mount namespace (nothing on the machine is
#     touched), so mount(8) finds its helper the way the README's install
#     makes it find one;
#   - /proc/mounts says fuse.epochfs and allow_other; the daemon is the
#     installed one;
#   - as nobody: the listing is SOURCE's, every file's bytes are SOURCE's,
#     a write to the dataset is refused (read-only file system); a PyTorch
#     job reads the whole dataset, right, both plain and under epochfs-run,
#     whose orders the mount takes from nobody (the daemon fetched ahead);
#     a stream is nobody's own: another user can neither write nor end it;
#     epochfs-stat reads the counters;
#   - the same line with ro: the kernel refuses every write, orders too, and
#     epochfs-run says so in one line and runs the job as before;
#   - the same mount without allow_other: nobody gets "Permission denied"
#     (why the README's line has it);
#   - the daemon killed (kill -9): `mount` of the same fstab line again
#     clears the dead mount, saying so, and serves (docs/install.md's
#     table);
#   - umount: the daemon exits, and said nothing unexpected.
if [ -z "${EPOCHFS_README_NS:-}" ]; then
	[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (mount(8), /etc/fstab's mounts, a second user)"; exit 77; }
	command -v unshare >/dev/null || { echo "SKIP: no unshare"; exit 77; }
	EPOCHFS_README_NS=1 exec unshare -m --propagation private bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"
plain_pass_only "the README's commands and install; the daemon's paths it reaches run under the sanitizers in t_bytes.sh and t_install.sh"
command -v runuser >/dev/null && id nobody >/dev/null 2>&1 || skip "needs runuser and the user nobody"
/usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null || skip "needs python3-torchvision"
trap 'mountpoint -q "$T/mnt2" && umount -l "$T/mnt2"; cleanup' EXIT
README=$ROOT/README.md
MNT0=/mnt/imagenet
SRC0=/data/imagenet

# ---- the README's first code block ------------------------------------------
awk '/^```/ { n++; next } n == 1' "$README" > "$T/block"
[ -s "$T/block" ] || fail "the README has no first code block"
has() { grep -qF -- "$1" "$T/block" || fail "the README's first screen lacks: $1"; }
has "sudo make install"
has "sudo mkdir -p $MNT0"
has "| sudo tee -a /etc/fstab"
has "sudo mount $MNT0"
has "grep $MNT0 /proc/mounts"
has "python3 train.py $MNT0/train"
has "epochfs-run -- python3 train.py $MNT0/train"
has "epochfs-stat $MNT0"
line=$(sed -n "s/^echo '\\([^']*\\)'.*/\\1/p" "$T/block")
read -r f_src f_mnt f_type f_opts f_dump f_pass <<<"$line"
[ "$f_src $f_mnt $f_type" = "$SRC0 $MNT0 fuse.epochfs" ] && [ "$f_dump $f_pass" = "0 0" ] ||
	fail "the README's fstab line: $line"
case ,$f_opts, in *,ro,*) fail "the README's fstab line has ro (orders need a mount jobs may write to): $f_opts" ;; esac
case ,$f_opts, in *,allow_other,*) ;; *) fail "the README's fstab line has no allow_other: $f_opts" ;; esac
ok "the README's first screen: $line"

# ---- sudo make install (into /usr/local, in this mount namespace) ------------
MK=(make -s -C "$ROOT")
case $BUILD in build-san*) MK+=(SANITIZE=address,undefined) ;; esac
"${MK[@]}" install DESTDIR="$T/root" PREFIX=/usr/local >"$T/install.out" 2>&1 ||
	fail "make install: $(tail -5 "$T/install.out")"
mount --bind "$T/root/usr/local" /usr/local || fail "cannot bind the install over /usr/local"
# Without PREFIX=/usr, mount(8) finds no mount.fuse.epochfs in /sbin and runs
# fuse3's mount.fuse, which runs the epochfs on its path. A helper already
# in /sbin (another test's, for a moment) is covered by ours here.
helper="/sbin/mount.fuse (fuse3's mount.fuse3, which runs /usr/local/bin/epochfs)"
if [ -e /sbin/mount.fuse.epochfs ]; then
	mount --bind /usr/local/sbin/mount.fuse.epochfs /sbin/mount.fuse.epochfs || fail "cannot cover /sbin/mount.fuse.epochfs"
	helper="/usr/local/sbin/mount.fuse.epochfs over /sbin's"
fi
man -w epochfs >/dev/null 2>&1 || fail "man epochfs: no page (MANPATH misses /usr/local/share/man?)"

# ---- the dataset, the mount point, the fstab line ---------------------------
chmod 755 "$T"
SRC=$T/data
MNT=$T/mnt
mkdir -p "$SRC" && "$GEN" "$SRC/train" --files 48 --classes 3 --seed 31 >/dev/null || fail "epochfs-gen"
mkdir -p "$MNT"
# The README's line with its paths moved, and the daemon's log kept for
# the check at the end (a detached daemon's messages go nowhere else).
printf '%s %s %s %s,log=%s %s %s\n' "$SRC" "$MNT" "$f_type" "$f_opts" "$T/daemon.err" "$f_dump" "$f_pass" > "$T/fstab"
EP_MNT=$MNT
mount -T "$T/fstab" "$MNT" 2>>"$T/mount.err" || fail "mount $MNT (fstab: $(cat "$T/fstab")): $(cat "$T/mount.err")"
mountpoint -q "$MNT" || fail "mount returned, but nothing is mounted on $MNT"
entry=$(awk -v m="$MNT" '$2 == m' /proc/mounts)
read -r _ _ m_type m_opts _ <<<"$entry"
[ "$m_type" = fuse.epochfs ] || fail "/proc/mounts type: $entry"
case ,$m_opts, in *,allow_other,*) ;; *) fail "/proc/mounts does not say allow_other: $entry" ;; esac
EP_PID=$(stat_of "$MNT" daemon_pid)
[ "$(readlink -f "/proc/$EP_PID/exe")" = /usr/local/bin/epochfs ] ||
	fail "the daemon is $(readlink -f "/proc/$EP_PID/exe"), not /usr/local/bin/epochfs"
ok "mount (through $helper): /proc/mounts: $m_type $m_opts"

# ---- the job, as a user who is not root -------------------------------------
as_nobody() { runuser -u nobody -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/nonexistent LC_ALL=C.UTF-8 "$@"; }
(cd "$SRC" && find . -type f | sort) > "$T/want.list"
as_nobody sh -c "cd '$MNT' && find . -type f | sort" > "$T/have.list" 2>"$T/ls.err" ||
	fail "nobody cannot list the mount: $(cat "$T/ls.err")"
cmp -s "$T/want.list" "$T/have.list" || fail "nobody's listing differs from SOURCE: $(diff "$T/want.list" "$T/have.list" | head -5)"
(cd "$SRC" && xargs -a "$T/want.list" -d '\n' sha256sum) > "$T/want.sum"
as_nobody sh -c "cd '$MNT' && xargs -a '$T/want.list' -d '\\n' sha256sum" > "$T/have.sum" 2>"$T/read.err" ||
	fail "nobody cannot read the mount: $(cat "$T/read.err")"
cmp -s "$T/want.sum" "$T/have.sum" || fail "bytes nobody read differ from SOURCE"
first=$MNT/$(head -1 "$T/want.list" | sed 's|^\./||')
for w in "touch '$MNT/train/new'" "cp '$T/want.list' '$MNT/train/'" "rm -f '$first'" "mkdir '$MNT/d'" \
	"touch '$MNT/.epochfs/x'" "truncate -s 0 '$first'"; do
	if as_nobody sh -c "$w" 2>"$T/w.err"; then fail "nobody changed the dataset: $w"; fi
	grep -q "Read-only file system\|Permission denied" "$T/w.err" || fail "$w: $(cat "$T/w.err")"
done
cmp -s "$T/want.list" <(cd "$SRC" && find . -type f | sort) || fail "SOURCE changed"
ok "as nobody: $(wc -l < "$T/want.list") files listed and read, bytes identical to SOURCE; writes refused"

# train.py: the README's `python3 train.py /mnt/imagenet/train`, a PyTorch
# job (ImageFolder, shuffled DataLoader, 2 workers) that reads every file
# once and prints a digest of what it read.
cat > "$T/train.py" <<'EOF'
import hashlib, sys
import torch
from torch.utils.data import DataLoader
from torchvision import datasets

def load(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()

ds = datasets.ImageFolder(sys.argv[1], loader=load)
seen = []
torch.manual_seed(31)
for digests, labels in DataLoader(ds, batch_size=5, shuffle=True, num_workers=2):
    seen += list(zip(digests, labels.tolist()))
print(hashlib.sha256(repr(sorted(seen)).encode()).hexdigest(), len(seen))
EOF
chmod 644 "$T/train.py"
want=$(/usr/bin/python3 "$T/train.py" "$SRC/train" 2>"$T/job.err") || fail "train.py on SOURCE: $(tail -3 "$T/job.err")"
have=$(as_nobody python3 "$T/train.py" "$MNT/train" 2>"$T/job.err") || fail "train.py as nobody: $(tail -3 "$T/job.err")"
[ "$have" = "$want" ] || fail "train.py as nobody read other data: $have, want $want"
have=$(as_nobody epochfs-run -- python3 "$T/train.py" "$MNT/train" 2>"$T/run.err") ||
	fail "epochfs-run as nobody: $(tail -3 "$T/run.err")"
[ "$have" = "$want" ] || fail "under epochfs-run, train.py read other data: $have, want $want"
said=$(grep '^epochfs-run:' "$T/run.err")
[ "$said" = "epochfs-run: DataLoader orders go to $MNT (prefetch ahead of the readers)" ] ||
	fail "epochfs-run said: $(cat "$T/run.err")"
[ "$(stat_of "$MNT" order_paths)" -ge "$(wc -l < "$T/want.list")" ] ||
	fail "the mount took $(stat_of "$MNT" order_paths) paths from nobody's job"
ok "as nobody: train.py read all ${want#* } files right, plain and under epochfs-run ($said)"

# nobody's stream is nobody's: root's daemon took it, another user can
# neither write to it nor end it, nobody ends it.
O=$MNT/.epochfs/order
[ "$(stat -c %a "$O")" = 1777 ] || fail ".epochfs/order/ is $(stat -c %a "$O"), not 1777"
as_nobody sh -c "echo train/x > '$O/nobodys'" || fail "nobody cannot start a stream"
[ "$(stat -c %U "$O/nobodys")" = nobody ] || fail "the stream is $(stat -c %U "$O/nobodys")'s, not nobody's"
other=$(awk -F: '$3 >= 1 && $3 < 65534 && $1 != "nobody" {print $1; exit}' /etc/passwd)
if [ -n "$other" ]; then
	as_other() { runuser -u "$other" -- env -i PATH=/usr/bin:/bin LC_ALL=C.UTF-8 "$@"; }
	if as_other sh -c "echo train/y > '$O/nobodys'" 2>/dev/null; then fail "$other wrote nobody's stream"; fi
	if as_other rm -f "$O/nobodys" 2>/dev/null && [ ! -e "$O/nobodys" ]; then fail "$other ended nobody's stream"; fi
fi
as_nobody rm "$O/nobodys" || fail "nobody cannot end its stream"
ok "as nobody: .epochfs/order/ is 1777, a stream its creator's${other:+ ($other can neither write nor end it)}"
as_nobody epochfs-stat "$MNT" --count 1 > "$T/stat.out" 2>&1 || fail "epochfs-stat as nobody: $(cat "$T/stat.out")"
grep -q "read MB/s" "$T/stat.out" || fail "epochfs-stat printed: $(cat "$T/stat.out")"
ok "as nobody: epochfs-stat $MNT reads the counters"

# ---- without allow_other ----------------------------------------------------
mkdir -p "$T/mnt2"
mount -t fuse.epochfs "$SRC" "$T/mnt2" -o ro,no_persist,cache_size=1M || fail "mount without allow_other"
if as_nobody ls "$T/mnt2" >/dev/null 2>"$T/deny.err"; then
	umount "$T/mnt2"; fail "nobody read a mount made without allow_other"
fi
umount "$T/mnt2" || fail "umount $T/mnt2"
grep -q "Permission denied" "$T/deny.err" || fail "without allow_other, nobody got: $(cat "$T/deny.err")"
ok "the same mount without allow_other: nobody gets \"Permission denied\""

# ---- with ro ------------------------------------------------------------------
mount -t fuse.epochfs "$SRC" "$T/mnt2" -o ro,allow_other,no_persist,cache_size=1M || fail "mount with ro"
grep -q " $T/mnt2 fuse.epochfs ro," /proc/mounts || { umount "$T/mnt2"; fail "/proc/mounts: $(grep "$T/mnt2" /proc/mounts)"; }
have=$(as_nobody epochfs-run -- python3 "$T/train.py" "$T/mnt2/train" 2>"$T/run.err") || { umount "$T/mnt2"; fail "epochfs-run on ro"; }
umount "$T/mnt2" || fail "umount $T/mnt2"
[ "$have" = "$want" ] || fail "under epochfs-run on ro, train.py read other data"
said=$(grep '^epochfs-run:' "$T/run.err")
[ "$said" = "epochfs-run: $T/mnt2 takes no orders (Read-only file system); the job runs as before" ] ||
	fail "epochfs-run on ro said: $(cat "$T/run.err")"
ok "with ro: /proc/mounts says ro, epochfs-run says no orders in one line, the job reads right"

# ---- a crash, and mount again -----------------------------------------------
kill -9 "$EP_PID"
wait_for sh -c "! kill -0 $EP_PID 2>/dev/null" || fail "the daemon outlived kill -9"
# statfs always reaches the daemon (a listing may come from the kernel's cache).
wait_for sh -c "! stat -f '$MNT' >/dev/null 2>&1" || fail "the mount still answers after kill -9"
mount -T "$T/fstab" "$MNT" 2>>"$T/mount.err" || fail "mount $MNT again after kill -9: $(cat "$T/mount.err")"
EP_PID=$(stat_of "$MNT" daemon_pid)
as_nobody sh -c "cd '$MNT' && xargs -a '$T/want.list' -d '\\n' sha256sum" > "$T/have.sum" 2>"$T/read.err" ||
	fail "nobody cannot read the mount made again: $(cat "$T/read.err")"
cmp -s "$T/want.sum" "$T/have.sum" || fail "after the restart, bytes nobody read differ from SOURCE"
grep -q "a dead epochfs mount was there (its daemon died); unmounted it" "$T/mount.err" ||
	fail "the restart did not say it cleared the dead mount: $(cat "$T/mount.err")"
ok "kill -9, then mount of the same line again: the dead mount cleared, nobody reads the right bytes"

umount "$MNT" || fail "umount $MNT"
wait_for sh -c "! kill -0 $EP_PID 2>/dev/null" || fail "the daemon did not exit after umount"
EP_PID=
# What the daemons said before they detached (to mount's stderr), then after.
cat "$T/mount.err" >> "$T/daemon.err"
EP_ALLOWED_STDERR='a dead epochfs mount was there'
check_stderr
ok "umount: the daemon exited; it said nothing unexpected"
