"""Read epochfs's pre-augmented minibatches (MOUNTPOINT/.prep/NAME/...).

A group of batches is declared once per hyperparameter search and read by
every job (docs/prep.md). This module declares a group and reads its batch
files: the standard library alone gives labels and raw pixels; with numpy
the pixels come as an array, with torch as tensors. It was
tools/epochfs_prep.py; `import epochfs_prep` still gives this module.

    import epochfs.prep as ep
    ep.declare("/mnt/imagenet", "search1", root="train", batch=256, jobs=4,
               epochs=90, dtype="float32")
    for epoch in range(90):
        for images, labels in ep.torch_batches("/mnt/imagenet", "search1", epoch):
            ...   # images: float32 [N, 3, 224, 224], labels: int64 [N]

The file format is docs/prep-format.md.
"""
import array
import os
import struct
import sys

MAGIC = b"EPBATCH1"
# magic, version, header_bytes, n, h, w, c, dtype, layout, epoch, bad_samples,
# index, first, seed, labels_offset, pixels_offset, pixels_bytes, total_bytes
HEADER = struct.Struct("<8s10I7Q24x")
assert HEADER.size == 128
DTYPES = {0: "uint8", 1: "float32"}
LAYOUTS = {0: "nhwc", 1: "nchw"}


class BatchError(ValueError):
    """A file that is not a batch this reader understands."""


class Batch:
    """One minibatch: header fields, int32 labels, raw pixel bytes."""

    def __init__(self, data):
        if len(data) < HEADER.size:
            raise BatchError("%d bytes: shorter than a batch header" % len(data))
        f = HEADER.unpack_from(data)
        if f[0] != MAGIC:
            raise BatchError("not a batch (magic %r)" % f[0])
        (_, self.version, hb, self.n, self.h, self.w, self.c, dt, lay, self.epoch,
         self.bad_samples, self.index, self.first, self.seed, lo, po, pb, total) = f
        if self.version != 1 or hb != HEADER.size:
            raise BatchError("batch format version %d, header %d bytes: unknown" % (self.version, hb))
        if total != len(data) or po + pb != total or lo + 4 * self.n > po:
            raise BatchError("inconsistent sizes: %d bytes, header says %d" % (len(data), total))
        self.dtype, self.layout = DTYPES[dt], LAYOUTS[lay]
        self.labels = array.array("i")
        self.labels.frombytes(bytes(data[lo:lo + 4 * self.n]))
        if sys.byteorder != "little":
            self.labels.byteswap()
        self.pixels = memoryview(data)[po:po + pb]

    @property
    def shape(self):
        return ((self.n, self.c, self.h, self.w) if self.layout == "nchw"
                else (self.n, self.h, self.w, self.c))

    def numpy(self):
        """(images, labels) as numpy arrays; the images share the batch's memory."""
        import numpy as np
        images = np.frombuffer(self.pixels, dtype=np.dtype(self.dtype).newbyteorder("<"))
        return images.reshape(self.shape), np.frombuffer(self.labels.tobytes(), dtype="<i4")

    def torch(self):
        """(images, labels) as torch tensors (labels int64, as CrossEntropyLoss wants).

        The images share the batch's memory (no copy): with read_batch(into=buf)
        they are valid until buf is read into again."""
        import torch
        images, labels = self.numpy()
        if images.flags.writeable:
            x = torch.from_numpy(images)
        else:
            x = torch.from_numpy(images.copy())
        return x, torch.from_numpy(labels.astype("int64"))


    def float01(self, out=None):
        """uint8 images as float32 in [0, 1] (x / 255, bit for bit what
        ToTensor gives), as a numpy array; into OUT (a float32 array of this
        shape) when given, so a loop allocates nothing. numpy's divide into a
        preallocated array is about 5x cheaper here than torch's
        x.float().div_(255) (4 vs 20 ms for 64 x 3 x 224 x 224)."""
        import numpy as np
        if self.dtype != "uint8":
            raise ValueError("float01: batch is %s, not uint8" % self.dtype)
        images, _ = self.numpy()
        if out is None or out.shape != images.shape or out.dtype != np.float32:
            out = np.empty(images.shape, dtype=np.float32)
        return np.divide(images, np.float32(255), out=out, dtype=np.float32)


def _buffer(size):
    """A writable buffer of SIZE bytes, page-aligned (an anonymous mapping),
    as O_DIRECT reads want."""
    import mmap
    return mmap.mmap(-1, max(size, 1))


def _open_direct(path):
    """A descriptor for PATH read with O_DIRECT where the system allows it
    (on an epochfs mount the kernel then hands the daemon 1 MiB requests
    and copies once, into the reader's buffer, instead of 128 KiB ones
    through the page cache: a float32 batch read 2.6x faster, for a tenth
    of the reader's system CPU; docs/prep.md), else plainly."""
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
    direct = getattr(os, "O_DIRECT", 0)
    if direct:
        try:
            return os.open(path, flags | direct)
        except OSError as e:
            import errno
            if e.errno != errno.EINVAL:
                raise
    return os.open(path, flags)


def read_batch(path, into=None):
    """Reads one batch file. INTO (a writable buffer, as a Batch's
    pixels.obj) is reused when large enough, so a loop over batches
    allocates nothing; the batch then lives in it."""
    fd = _open_direct(path)
    try:
        size = os.fstat(fd).st_size
        if into is None or len(into) < size:
            into = _buffer(size)
        view, got, plain = memoryview(into)[:size], 0, False
        while got < size:
            try:
                n = os.readv(fd, [view[got:]])
            except OSError as e:
                import errno
                if e.errno != errno.EINVAL or got or plain:
                    raise
                # O_DIRECT refused at the read (a file system that takes
                # the flag at open only): read it plainly.
                os.close(fd)
                fd, plain = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)), True
                continue
            if not n:
                break
            got += n
    finally:
        os.close(fd)
    return Batch(view[:got])


def group_dir(mount, name):
    return os.path.join(mount, ".prep", name)


def batch_path(mount, name, epoch, index):
    return os.path.join(group_dir(mount, name), "epoch-%04d" % epoch, "batch-%06d" % index)


def batches(mount, name, epoch, reuse=False):
    """Every batch of EPOCH, in order. With REUSE, one buffer serves them all:
    each batch is valid until the next one is read."""
    d = os.path.join(group_dir(mount, name), "epoch-%04d" % epoch)
    buf = None
    for entry in sorted(os.listdir(d)):
        b = read_batch(os.path.join(d, entry), buf)
        if reuse:
            buf = b.pixels.obj
        yield b


def torch_batches(mount, name, epoch, reuse=True):
    """(images, labels) tensors for every batch of EPOCH, in order. uint8 batches
    become float32 in [0, 1] (what ToTensor gives); float32 ones come as made.
    With REUSE (the default) buffers are recycled: each images tensor is valid
    until the next batch is yielded (moving it to the GPU, as a training step
    does, is a copy); clone() it to keep it."""
    import torch
    out = None
    for b in batches(mount, name, epoch, reuse):
        x, y = b.torch()
        if b.dtype == "uint8":
            f = b.float01(out)
            if reuse:
                out = f
            x = torch.from_numpy(f)
        yield x, y


def spec_text(**spec):
    """key=value lines; tuples become comma lists (scale=(0.08, 1.0))."""
    lines = []
    for k, v in spec.items():
        if isinstance(v, (tuple, list)):
            v = ",".join(str(x) for x in v)
        elif isinstance(v, bool):
            v = int(v)
        lines.append("%s=%s\n" % (k, v))
    return "".join(lines)


def declare(mount, name, **spec):
    """Declares group NAME (or joins it, if it runs with the same spec).

    Raises OSError with the daemon's reason when the spec is refused, the group
    cannot start, or it already runs with a different spec."""
    prep = os.path.join(mount, ".prep")
    text = spec_text(**spec).encode()
    try:
        with open(os.path.join(prep, name + ".spec"), "wb", buffering=0) as f:
            f.write(text)
    except OSError as e:
        raise OSError(e.errno, "%s: %s" % (name, _error(prep, name) or e.strerror)) from None
    if not os.path.isdir(os.path.join(prep, name)):     # the lookup commits the spec
        raise OSError(22, "%s: %s" % (name, _error(prep, name) or "group did not start"))
    err = _error(prep, name)
    if err:
        raise OSError(17, "%s: %s" % (name, err))
    return group_dir(mount, name)


def _error(prep, name):
    try:
        with open(os.path.join(prep, name + ".error")) as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


def main(argv=None):
    """python3 -m epochfs.prep BATCHFILE...: print each batch's header."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python3 -m epochfs.prep BATCHFILE...\n\n"
              "Prints the header of each epochfs prep batch file (docs/prep-format.md).")
        return 0 if argv else 2
    for p in argv:
        b = read_batch(p)
        print("%s: epoch %d batch %d, %d samples %s %s %s, labels %s, %d substituted"
              % (p, b.epoch, b.index, b.n, "x".join(map(str, b.shape)), b.dtype, b.layout,
                 list(b.labels[:8]), b.bad_samples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
