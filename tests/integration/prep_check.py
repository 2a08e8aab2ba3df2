"""Helpers for t_prep.sh: a consumer, and the labels a batch must carry.

consume MOUNT NAME EPOCHS   read every batch of every epoch in order; print
                            "epoch index md5 n bad" per batch (consume-plain:
                            buffered reads, not read_batch's O_DIRECT)
labels MOUNT NAME SRCROOT SEED EPOCH
                            check every batch's labels against ImageFolder's
                            order of SRCROOT and the epoch's permutation,
                            recomputed here (splitmix64 + Fisher-Yates, as
                            prep/batch.c draws it)
"""
import hashlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import epochfs.prep as ep  # noqa: E402

M = (1 << 64) - 1
EXT = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def plain(mount, name, epoch):
    """The batches of EPOCH read the way readers did before O_DIRECT
    (buffered, through the page cache): what read_batch gives must match."""
    d = os.path.join(ep.group_dir(mount, name), "epoch-%04d" % epoch)
    for entry in sorted(os.listdir(d)):
        with open(os.path.join(d, entry), "rb") as f:
            yield ep.Batch(bytearray(f.read()))


def rng_next(s):
    s = (s + 0x9E3779B97F4A7C15) & M
    z = s
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return s, z ^ (z >> 31)


def stream(seed, a, b):
    s = seed ^ 0x6A09E667F3BCC909
    s, z = rng_next(s)
    s = z ^ ((a * 0x9E3779B97F4A7C15) & M)
    s, z = rng_next(s)
    s = z ^ ((b * 0xC2B2AE3D27D4EB4F) & M)
    s, z = rng_next(s)
    return z


def order(seed, epoch, n):
    s, v = stream(seed, epoch, M), list(range(n))
    for i in range(n, 1, -1):
        s, z = rng_next(s)
        j = z % i
        v[i - 1], v[j] = v[j], v[i - 1]
    return v


def imagefolder(root):
    """torchvision 0.14's ImageFolder: (path, label) in its order."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    out = []
    for ci, c in enumerate(classes):
        for r, _, fnames in sorted(os.walk(os.path.join(root, c), followlinks=True)):
            for f in sorted(fnames):
                if f.lower().endswith(EXT):
                    out.append((os.path.join(r, f), ci))
    return out


def main():
    cmd, mount, name = sys.argv[1:4]
    if cmd in ("consume", "consume-plain"):   # consume MNT NAME EPOCHS [FIRST]
        first = int(sys.argv[5]) if len(sys.argv) > 5 else 0
        for e in range(first, first + int(sys.argv[4])):
            for i, b in enumerate(ep.batches(mount, name, e) if cmd == "consume" else plain(mount, name, e)):
                assert (b.epoch, b.index) == (e, i), (b.epoch, b.index, e, i)
                print(e, i, hashlib.md5(b.pixels).hexdigest(), hashlib.md5(b.labels.tobytes()).hexdigest(),
                      b.n, b.bad_samples)
    elif cmd == "labels":
        src, seed, epoch = sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
        samples = imagefolder(src)
        perm = order(seed, epoch, len(samples))
        pos = 0
        for b in ep.batches(mount, name, epoch):
            want = [samples[perm[pos + k]][1] for k in range(b.n)]
            assert list(b.labels) == want, (b.index, list(b.labels), want)
            assert b.first == pos, (b.first, pos)
            pos += b.n
        assert pos == len(samples), (pos, len(samples))
        print("labels of %d samples match ImageFolder" % pos)


if __name__ == "__main__":
    main()
