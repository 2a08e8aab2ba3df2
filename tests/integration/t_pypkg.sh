# The Python package as a user installs it: a venv, `pip install ./python`
# offline (--no-index: pip has nothing to fetch, the backend is in-tree),
# then, from outside the tree and with no PYTHONPATH, `import epochfs`
# declares a prep group on a real mount and reads it: two consumers, one in
# an isolated venv (standard library only: labels and raw pixels), one in a
# venv that sees the system's torch (tensors), and the two agree byte for
# byte. The version is the daemon's; the old name epochfs_prep still works;
# the console scripts run, and the venv's epochfs-run adds nothing of the
# venv to a job's path; pip uninstall leaves nothing of it.
. "$(dirname "$0")/lib.sh"
plain_pass_only "packaging of the Python package; .prep/ under the sanitizers is t_prep.sh"
EP_ALLOWED_STDERR='prep: '
/usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || skip "needs python3-venv"
"$GEN" "$T/src" --files 48 --classes 3 --seed 5 >/dev/null 2>&1 || fail "epochfs-gen"
mount_ep "$T/src" "$T/m" --no-persist

for v in plain sys; do
	args=()
	[ $v = sys ] && args=(--system-site-packages)
	/usr/bin/python3 -m venv "${args[@]}" "$T/$v" || fail "venv $v"
	"$T/$v/bin/pip" install --no-index --no-cache-dir --disable-pip-version-check "$ROOT/python" \
		> "$T/pip-$v.out" 2>&1 || fail "pip install ($v venv): $(tail -5 "$T/pip-$v.out")"
done
ok "pip install --no-index ./python into two venvs"

cd "$T" || fail "cd"
# Consumer 1: an isolated venv, no numpy, no torch. It declares the group.
env -u PYTHONPATH "$T/plain/bin/python" - "$T/m" "$T/plain" > "$T/plain.sums" <<'PY' || fail "stdlib consumer"
import hashlib, json, os, sys
import epochfs, epochfs_prep
mnt, venv = sys.argv[1:3]
assert os.path.realpath(epochfs.__file__).startswith(os.path.realpath(venv)), epochfs.__file__
assert epochfs_prep is epochfs.prep and epochfs_prep.Batch is epochfs.Batch
with open(os.path.join(mnt, ".epochfs", "stats.json")) as f:
    daemon = json.load(f)["version"]
assert epochfs.__version__ == daemon, (epochfs.__version__, daemon)
try:
    import torch  # noqa: F401
    sys.exit("the isolated venv sees torch")
except ImportError:
    pass
epochfs.declare(mnt, "g", batch=16, size=32, jobs=2, epochs=1, seed=3)
n = 0
for b in epochfs.batches(mnt, "g", 0):
    assert b.shape == (16, 3, 32, 32) and b.dtype == "uint8", (b.shape, b.dtype)
    print(b.index, hashlib.md5(bytes(b.pixels)).hexdigest(), ",".join(map(str, b.labels)))
    n += 1
assert n == 3, n
PY
# Consumer 2: torch from the system, the same group as tensors.
env -u PYTHONPATH "$T/sys/bin/python" - "$T/m" > "$T/sys.sums" <<'PY' || fail "torch consumer"
import hashlib, sys
import epochfs
import torch
mnt = sys.argv[1]
epochfs.declare(mnt, "g", batch=16, size=32, jobs=2, epochs=1, seed=3)   # joins it
for i, (x, y) in enumerate(epochfs.torch_batches(mnt, "g", 0)):
    assert x.dtype == torch.float32 and tuple(x.shape) == (16, 3, 32, 32), (x.dtype, x.shape)
    assert y.dtype == torch.int64
    u8 = (x * 255).round().to(torch.uint8).contiguous().numpy().tobytes()
    print(i, hashlib.md5(u8).hexdigest(), ",".join(str(int(v)) for v in y))
PY
[ "$(wc -l < "$T/plain.sums")" = 3 ] && cmp -s "$T/plain.sums" "$T/sys.sums" ||
	fail "the two venvs read different batches: $(diff "$T/plain.sums" "$T/sys.sums" | head -4)"
[ "$(stat_of "$T/m" prep_batches_freed)" = 3 ] || fail "batches not freed after both consumers: $(stat_of "$T/m" prep_batches_freed)"
ok "import epochfs from two venvs: a prep group declared and read, stdlib and torch agree, version = daemon's"

"$T/sys/bin/epochfs-run" --version | grep -qx "epochfs-run $(stat_of "$T/m" version)" || fail "epochfs-run --version"
"$T/sys/bin/epochfs-analyze" --version | grep -qx "epochfs-analyze $(stat_of "$T/m" version)" || fail "epochfs-analyze --version"
# (a batch both consumers read was freed: reading it again makes it again)
"$T/plain/bin/python" -m epochfs.prep "$T/m/.prep/g/epoch-0000/batch-000001" |
	grep -q "epoch 0 batch 1, 16 samples 16x3x32x32 uint8 nchw" || fail "python -m epochfs.prep FILE"
"$T/plain/bin/python" -m epochfs_prep --help | grep -q "usage: python3 -m epochfs.prep" || fail "python -m epochfs_prep --help"
ok "console scripts epochfs-run and epochfs-analyze; python -m epochfs.prep and the old epochfs_prep"

# The venv's epochfs-run puts none of the venv on the job's path: a dev
# checkout on PYTHONPATH still wins over the copy installed beside epochfs,
# and Debian's python3 imports its own pip and setuptools, not the venv's.
site=$("$T/sys/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$site/mylib" "$T/dev/mylib"
echo "WHO = 'installed'" > "$site/mylib/__init__.py"
echo "WHO = 'dev'" > "$T/dev/mylib/__init__.py"
probe='
import json, sys, mylib
where = {}
for name in ("pip", "setuptools"):
    try:
        where[name] = __import__(name).__file__
    except Exception as e:          # (a venv setuptools over Debian distutils asserts)
        where[name] = type(e).__name__
print(json.dumps([mylib.WHO, sys.path, where]))'
for py in "$T/sys/bin/python" /usr/bin/python3; do
	PYTHONPATH="$T/dev" "$py" -c "$probe" > "$T/venv.plain" || fail "$py without epochfs-run"
	PYTHONPATH="$T/dev" "$T/sys/bin/epochfs-run" -- "$py" -c "$probe" > "$T/venv.hooked" 2> "$T/venv.err" ||
		fail "$py under the venv's epochfs-run: $(cat "$T/venv.err")"
	cmp -s "$T/venv.plain" "$T/venv.hooked" ||
		fail "$py sees another path under the venv's epochfs-run: $(cat "$T/venv.plain") / $(cat "$T/venv.hooked")"
	grep -q '^\["dev"' "$T/venv.hooked" || fail "$py: the dev checkout lost: $(cat "$T/venv.hooked")"
done
rm -rf "$site/mylib"
ok "the venv's epochfs-run: a dev checkout on PYTHONPATH wins, Debian's python3 keeps its own pip and setuptools"

"$T/plain/bin/pip" uninstall -y --disable-pip-version-check epochfs > /dev/null 2>&1 || fail "pip uninstall"
left=$(find "$T/plain/lib" -path '*site-packages/epochfs*' | head -3)
[ -z "$left" ] || fail "pip uninstall left: $left"
"$T/plain/bin/python" -c 'import epochfs' 2>/dev/null && fail "epochfs still importable after uninstall"
ok "pip uninstall removes the package"
cd / && umount_ep
