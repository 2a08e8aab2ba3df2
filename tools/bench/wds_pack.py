"""Pack an ImageFolder tree into WebDataset-style tar shards: the shard
dataset of make bench part 7's shard job (tools/bench/stalls.sh with
STALL_SHARDS=K) and issue 33's shard case.

    wds_pack.py ROOT OUT --shards K [--seed S]

The images are shuffled once (seed S, 7 by default) and dealt into K tar
files OUT/shard-NNNN.tar of about equal size, each sample as two members
with one key, as WebDataset writes them: KEY.jpg (the file's bytes) and
KEY.cls (the class index in ImageFolder's order, as text). A sample never
spans two shards. OUT is made anew (written beside it, then renamed), and
OUT/.packed names ROOT, K and S, so that a later call with the same
arguments keeps it. Prints one line: shards, samples, bytes.
"""
import argparse
import io
import os
import random
import shutil
import sys
import tarfile

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("root")
ap.add_argument("out")
ap.add_argument("--shards", type=int, required=True)
ap.add_argument("--seed", type=int, default=7)
a = ap.parse_args()
if a.shards < 1:
    sys.exit("wds_pack: --shards must be 1 or more")
stamp = "%s %d %d\n" % (os.path.realpath(a.root), a.shards, a.seed)
try:
    with open(os.path.join(a.out, ".packed")) as f:
        if f.read() == stamp:
            sys.exit(0)
except OSError:
    pass

classes = sorted(d.name for d in os.scandir(a.root) if d.is_dir() and not d.name.startswith("."))
if not classes:
    sys.exit("wds_pack: %s has no class directory" % a.root)
items = []
for ci, c in enumerate(classes):
    for e in sorted(os.scandir(os.path.join(a.root, c)), key=lambda e: e.name):
        if e.is_file() and e.name.lower().endswith((".jpg", ".jpeg")):
            items.append((e.path, ci, e.stat().st_size))
if len(items) < a.shards:
    sys.exit("wds_pack: %d images cannot fill %d shards" % (len(items), a.shards))
random.Random(a.seed).shuffle(items)
total = sum(s for _, _, s in items)

tmp = a.out.rstrip("/") + ".tmp"
shutil.rmtree(tmp, ignore_errors=True)
os.makedirs(tmp)


def member(tf, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 0
    ti.mode = 0o644
    tf.addfile(ti, io.BytesIO(data))


# Deal by bytes: shard k takes the samples that start in its K-th of the total.
k, done, tf = -1, 0, None
for n, (path, ci, size) in enumerate(items):
    want = min(a.shards - 1, done * a.shards // total)
    if want != k or tf is None:
        if tf is not None:
            tf.close()
        k = max(k + 1, want)
        tf = tarfile.open(os.path.join(tmp, "shard-%04d.tar" % k), "w", format=tarfile.USTAR_FORMAT)
    with open(path, "rb") as f:
        data = f.read()
    key = "%07d" % n
    member(tf, key + ".jpg", data)
    member(tf, key + ".cls", str(ci).encode())
    done += size
tf.close()
made = sorted(os.listdir(tmp))
if len(made) != a.shards:
    shutil.rmtree(tmp)
    sys.exit("wds_pack: made %d shards, not %d (images too few or too uneven)" % (len(made), a.shards))
with open(os.path.join(tmp, ".packed"), "w") as f:
    f.write(stamp)
shutil.rmtree(a.out, ignore_errors=True)
os.rename(tmp, a.out)
size = sum(os.path.getsize(os.path.join(a.out, m)) for m in made)
print("wds_pack: %d shards, %d samples, %d bytes in %s" % (len(made), len(items), size, a.out))
