"""The GPU path of coordinated prep: batches normalized on the GPU, and a
probe of how fast this machine's GPU takes a job's batches in.

A job reading a shared prep group (docs/prep.md) with epochfs.prep's
torch_batches() turns every uint8 batch into float32 on its CPU, then copies
four times the bytes to the GPU from pageable memory. torch_batches() here
reads the same batch files into pinned memory, copies the uint8 bytes
asynchronously, converts them on the GPU, and hands PyTorch the result
without a copy (DLPack). Switching is one line:

    import epochfs.gpu as gpu
    for epoch in range(90):
        for images, labels in gpu.torch_batches("/mnt/imagenet", "search1", epoch):
            ...   # images: float32 [N, 3, 224, 224] on the GPU; labels: int64 [N], CPU

With the default arguments the images are what epochfs.prep.torch_batches()
gives (x / 255, bit for bit), on the GPU; with mean= and std= they are what a
float32 group with that mean and std holds, bit for bit.

For the analyzer (epochfs-analyze):

    gpu.unavailable_reason()          None, or why the GPU path cannot run here
    gpu.probe(256, 224, 224)          the ingestion probe: a dict (see probe())

The work is done by libepochfs_gpu.so (prep/gpu/, built by `make CUDA=1`),
found through $EPOCHFS_GPU_LIB or in the source tree's build-cuda/. Standard
library only (ctypes); torch_batches() and GpuBatches need torch. Where the
library, a driver or a GPU is missing, every entry point raises
GpuUnavailable, whose message says which.
"""
import ctypes
import errno
import os

__all__ = ["GpuUnavailable", "GpuBatches", "probe", "torch_batches", "unavailable_reason", "library_path"]

ABI = 1                     # prep/gpu/libgpu.h's EPGPU_ABI
ENV = "EPOCHFS_GPU_LIB"
_NONE, _SCALE, _AFFINE = 0, 1, 2       # prep/gpu/normalize.h's enum norm_mode
_AUTO = 3                               # consumer.h's GPUCONS_AUTO: x / 255 for uint8, float32 as is
_LAYOUTS = {"nhwc": 0, "nchw": 1}
_DTYPES = {"uint8": 0, "float32": 1}


class GpuUnavailable(RuntimeError):
    """The GPU path cannot run here. str(e), and e.reason, say why: no
    library (build it with `make CUDA=1`), no driver, no device, or a torch
    without CUDA."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


# The C structs this module passes (prep/gpu/consumer.h, probe.h, dlpack.h).
class _ConsOpts(ctypes.Structure):
    _fields_ = [("depth", ctypes.c_uint32), ("mode", ctypes.c_uint32), ("out_layout", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32), ("mean", ctypes.c_float * 4), ("std", ctypes.c_float * 4)]


class _Batch(ctypes.Structure):
    _fields_ = [("images", ctypes.c_void_p), ("labels", ctypes.POINTER(ctypes.c_int32)),
                ("n", ctypes.c_uint32), ("epoch", ctypes.c_uint32), ("bad_samples", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32), ("index", ctypes.c_uint64)]


class _Stats(ctypes.Structure):
    _fields_ = [("queued", ctypes.c_uint32), ("buffers", ctypes.c_uint32), ("pooled", ctypes.c_uint32),
                ("tensors", ctypes.c_uint32)]


class _ProbeOpts(ctypes.Structure):
    _fields_ = [("n", ctypes.c_uint32), ("h", ctypes.c_uint32), ("w", ctypes.c_uint32), ("c", ctypes.c_uint32),
                ("dtype", ctypes.c_uint32), ("device", ctypes.c_int32), ("reps", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32)]


class _ProbeResult(ctypes.Structure):
    _fields_ = [("device_name", ctypes.c_char * 256), ("device", ctypes.c_int32), ("reps", ctypes.c_uint32),
                ("warmup", ctypes.c_uint32), ("reserved", ctypes.c_uint32), ("copy_bytes", ctypes.c_uint64),
                ("kernel_bytes", ctypes.c_uint64), ("pinned_s", ctypes.c_double), ("pageable_s", ctypes.c_double),
                ("kernel_s", ctypes.c_double), ("pinned_gbps", ctypes.c_double),
                ("pageable_gbps", ctypes.c_double), ("kernel_gbps", ctypes.c_double),
                ("kernel_batches_per_s", ctypes.c_double)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    # Only the tail matters here: the DLTensor (48 bytes on LP64) is opaque.
    _fields_ = [("dl_tensor", ctypes.c_byte * 48), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


assert ctypes.sizeof(_Batch) == 40 and ctypes.sizeof(_ProbeResult) == 344
assert ctypes.sizeof(_DLManagedTensor) == 64

_libs = {}                  # path -> loaded library; failures are not cached


def library_path():
    """Where libepochfs_gpu.so is looked for: $EPOCHFS_GPU_LIB, else the
    source tree's build-cuda/ (this file is python/epochfs/gpu.py)."""
    env = os.environ.get(ENV)
    if env:
        return env
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(root, "build-cuda", "libepochfs_gpu.so")


def _load():
    path = library_path()
    lib = _libs.get(path)
    if lib is not None:
        return lib
    if not os.path.exists(path):
        how = ("set by $%s" % ENV) if os.environ.get(ENV) else ("$%s is not set" % ENV)
        raise GpuUnavailable("%s: not found (%s): the GPU path is built by `make CUDA=1`, "
                             "which needs nvcc" % (path, how))
    try:
        lib = ctypes.CDLL(path)
        abi = lib.epgpu_abi()
    except (OSError, AttributeError) as e:
        raise GpuUnavailable("%s: cannot be loaded: %s" % (path, e)) from None
    if abi != ABI:
        raise GpuUnavailable("%s: ABI %d, this module speaks %d: rebuild it with `make CUDA=1`"
                             % (path, abi, ABI))
    c_int, c_void_p, c_char_p, c_size_t = ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    for name, res, args in [
            ("epgpu_device_check", c_int, [c_int, c_char_p, c_size_t]),
            ("epgpu_open", c_int, [c_int, ctypes.POINTER(_ConsOpts), ctypes.POINTER(c_void_p), c_char_p, c_size_t]),
            ("gpucons_submit", c_int, [c_void_p, c_char_p]),
            ("gpucons_next", c_int, [c_void_p, ctypes.c_uint64, ctypes.c_uint, ctypes.POINTER(_Batch)]),
            ("gpucons_why", c_char_p, [c_void_p]),
            ("gpucons_get_stats", None, [c_void_p, ctypes.POINTER(_Stats)]),
            ("gpucons_free", None, [c_void_p]),
            ("gpuprobe_run", c_int, [ctypes.POINTER(_ProbeOpts), ctypes.POINTER(_ProbeResult), c_char_p,
                                     c_size_t])]:
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    _libs[path] = lib
    return lib


def _reason(buf):
    return buf.value.decode(errors="replace")


def _check(err, why):
    """Raises what -errno ERR from the library means, with WHY's text: no
    device GpuUnavailable, a bad argument ValueError, else OSError."""
    if err == -errno.ENODEV:
        raise GpuUnavailable(_reason(why))
    if err == -errno.EINVAL:
        raise ValueError(_reason(why))
    if err:
        raise OSError(-err, _reason(why))


def _device_check(lib, device):
    why = ctypes.create_string_buffer(512)
    if lib.epgpu_device_check(device, why, len(why)):
        raise GpuUnavailable(_reason(why))


def unavailable_reason(device=0):
    """None when the GPU path can run on CUDA DEVICE here, else the reason as
    one line ("...: not found ...: built by `make CUDA=1`", "no CUDA device:
    <CUDA's own words>"). Never raises. Does not look at torch."""
    try:
        _device_check(_load(), device)
    except GpuUnavailable as e:
        return e.reason
    return None


def probe(batch, height, width, channels=3, dtype="uint8", device=0, reps=7):
    """The ingestion probe (prep/gpu/probe.h) for batches of BATCH x HEIGHT x
    WIDTH x CHANNELS stored as DTYPE ("uint8" or "float32"), on CUDA DEVICE.

    Returns a dict (the keys of `epochfs-gpuprobe --json`):
      device, device_name, batch, height, width, channels, dtype,
      bytes               one batch as stored: what each copy moves
      reps, warmup        timed runs (medians of them) and unrecorded ones
      h2d_pinned_s, h2d_pageable_s        seconds per batch copied to the
                          device from pinned / pageable host memory (wall
                          clock, copy and synchronize)
      h2d_pinned_gbps, h2d_pageable_gbps  bytes / s, in 1e9 bytes/s
      kernel_s            seconds per batch of the uint8 NHWC -> normalized
                          float32 NCHW conversion (CUDA events, device memory)
      kernel_bytes        bytes it reads and writes per batch (5 per uint8 value)
      kernel_gbps         kernel_bytes / kernel_s, in 1e9 bytes/s
      kernel_batches_per_s  1 / kernel_s
    A GPU consumer of uint8 batches delivers at most about
    min(1 / h2d_pinned_s, kernel_batches_per_s) batches/s, before the read
    of the batch files.

    Raises GpuUnavailable (no library, no driver, no device: e.reason says
    which), ValueError for a bad shape, OSError for a CUDA failure (out of
    memory: ENOMEM)."""
    if dtype not in _DTYPES:
        raise ValueError("dtype %r: expected uint8 or float32" % (dtype,))
    for name, v, hi in [("batch", batch, 1 << 20), ("height", height, 1 << 16), ("width", width, 1 << 16),
                        ("channels", channels, 4), ("reps", reps, 1000)]:
        if not isinstance(v, int) or not 1 <= v <= hi:
            raise ValueError("%s=%r: expected a whole number from 1 to %d" % (name, v, hi))
    lib = _load()
    o = _ProbeOpts(n=batch, h=height, w=width, c=channels, dtype=_DTYPES[dtype], device=device, reps=reps)
    r = _ProbeResult()
    why = ctypes.create_string_buffer(512)
    _check(lib.gpuprobe_run(ctypes.byref(o), ctypes.byref(r), why, len(why)), why)
    return {"device": r.device, "device_name": r.device_name.decode(errors="replace"), "batch": batch,
            "height": height, "width": width, "channels": channels, "dtype": dtype, "bytes": r.copy_bytes,
            "reps": r.reps, "warmup": r.warmup, "h2d_pinned_s": r.pinned_s, "h2d_pageable_s": r.pageable_s,
            "h2d_pinned_gbps": r.pinned_gbps, "h2d_pageable_gbps": r.pageable_gbps, "kernel_s": r.kernel_s,
            "kernel_bytes": r.kernel_bytes, "kernel_gbps": r.kernel_gbps,
            "kernel_batches_per_s": r.kernel_batches_per_s}


# A DLManagedTensor reaches torch in a PyCapsule named "dltensor"; torch
# renames the capsule it takes ("used_dltensor") and calls the deleter when
# the tensor dies. A capsule nobody took calls it from its destructor.
# Private function objects: argtypes set here do not leak into
# ctypes.pythonapi's shared ones.
_CAPSULE_NAME = b"dltensor"
_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capsule_new = ctypes.pythonapi["PyCapsule_New"]
_capsule_new.restype, _capsule_new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, _DESTRUCTOR]
_capsule_valid = ctypes.pythonapi["PyCapsule_IsValid"]
_capsule_valid.restype, _capsule_valid.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi["PyCapsule_GetPointer"]
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]


def _delete_tensor(ptr):
    _DLManagedTensor.from_address(ptr).deleter(ptr)


@_DESTRUCTOR
def _capsule_destructor(capsule):
    if _capsule_valid(capsule, _CAPSULE_NAME):
        _delete_tensor(_capsule_pointer(capsule, _CAPSULE_NAME))


def _capsule(ptr):
    return _capsule_new(ptr, _CAPSULE_NAME, _capsule_destructor)


class _Consumer:
    """One C consumer (prep/gpu/consumer.h). DEVICE -1: the host backend."""

    def __init__(self, device, depth, mode, layout, mean, std):
        self._c = None
        self._lib = _load()
        o = _ConsOpts(depth=depth, mode=mode, out_layout=layout)
        for i, (m, s) in enumerate(zip(mean or (), std or ())):
            o.mean[i], o.std[i] = m, s
        c, why = ctypes.c_void_p(), ctypes.create_string_buffer(512)
        _check(self._lib.epgpu_open(device, ctypes.byref(o), ctypes.byref(c), why, len(why)), why)
        self._c = c

    def _error(self, err):
        why = self._lib.gpucons_why(self._c).decode(errors="replace")
        return ValueError(why) if err == -errno.EINVAL else OSError(-err, why)

    def submit(self, path):
        err = self._lib.gpucons_submit(self._c, os.fsencode(path))
        if err:
            raise self._error(err)

    def next(self, stream=0, sync=False):
        """(DLManagedTensor address, labels as a list of ints, header dict)."""
        b = _Batch()
        err = self._lib.gpucons_next(self._c, stream, 1 if sync else 0, ctypes.byref(b))
        if err:
            raise self._error(err)
        return b.images, b.labels[:b.n], {"n": b.n, "epoch": b.epoch, "index": b.index,
                                           "bad_samples": b.bad_samples}

    def stats(self):
        s = _Stats()
        self._lib.gpucons_get_stats(self._c, ctypes.byref(s))
        return {k: getattr(s, k) for k, _ in _Stats._fields_}

    def close(self):
        if self._c:
            self._lib.gpucons_free(self._c)
            self._c = None

    __del__ = close


def _epoch_dir(mount, name, epoch):
    return os.path.join(mount, ".prep", name, "epoch-%04d" % epoch)


class GpuBatches:
    """(images, labels) for each batch file of SOURCE, converted on the GPU.

    SOURCE is an epoch's directory (MOUNT/.prep/NAME/epoch-EEEE, its batch
    files in name order) or an iterable of batch file paths. Iterating
    reads them in order, DEPTH ahead, each into a pinned buffer; the copy
    and the conversion run on a stream of the library's own, and the
    images come as a torch tensor on DEVICE (default: torch's current
    device) that the current stream may use at once. Labels are int64 on
    the CPU, as epochfs.prep.torch_batches() gives them.

    The images, per the group's dtype and the arguments:
      uint8 group, default       float32 x / 255 (ToTensor), bit for bit
                                 what epochfs.prep.torch_batches() gives
      uint8 group, mean and std  float32, bit for bit what a float32 group
                                 with this mean and std holds
      float32 group              as stored (mean/std refused: it was
                                 normalized when it was made)
      raw=True                   as stored, uint8 or float32
    LAYOUT is "nchw" (PyTorch's) or "nhwc", whatever the group stores.

    Each images tensor owns its device memory until torch frees it: keeping
    one costs memory, never correctness; a buffer is reused only after its
    tensor is gone and the stream that used it is past it.

    DEVICE "cpu" (or -1) runs the library's CPU reference instead, with CPU
    tensors: the same bytes the GPU gives, for comparisons and tests.

    Raises GpuUnavailable when the library, a driver, a device, or CUDA in
    torch is missing (at the first batch); OSError for a missing or bad
    batch file (the message names it); ValueError for bad arguments."""

    def __init__(self, source, mean=None, std=None, layout="nchw", device=None, depth=3, raw=False):
        if layout not in _LAYOUTS:
            raise ValueError("layout %r: expected nchw or nhwc" % (layout,))
        if (mean is None) != (std is None):
            raise ValueError("mean and std go together")
        if mean is not None and (len(mean) != 3 or len(std) != 3):
            raise ValueError("mean and std: three values each (R, G, B)")
        if raw and mean is not None:
            raise ValueError("raw=True takes no mean/std")
        if not isinstance(depth, int) or not 1 <= depth <= 64:
            raise ValueError("depth=%r: expected 1 to 64" % (depth,))
        if isinstance(source, (str, bytes, os.PathLike)):
            d = os.fsdecode(source)
            self.paths = [os.path.join(d, e) for e in sorted(os.listdir(d))]
        else:
            self.paths = [os.fsdecode(p) for p in source]
        self.mean, self.std, self.layout, self.depth, self.raw = mean, std, layout, depth, raw
        self.device = device

    def __len__(self):
        return len(self.paths)

    def _mode(self):
        if self.raw:
            return _NONE
        return _AFFINE if self.mean is not None else _AUTO

    def _torch_device(self, torch):
        """(the library's device number, the torch device): (-1, None) for "cpu"."""
        if isinstance(self.device, int) and self.device == -1 or str(self.device) == "cpu":
            return -1, None
        dev = None
        if self.device is not None:
            dev = torch.device("cuda", self.device) if isinstance(self.device, int) else torch.device(self.device)
            if dev.type != "cuda":
                raise ValueError("device %r: expected a CUDA device or \"cpu\"" % (self.device,))
        cuda = torch.cuda.is_available()
        index = dev.index if dev is not None and dev.index is not None else (
            torch.cuda.current_device() if cuda else 0)
        reason = unavailable_reason(index)
        if reason:
            raise GpuUnavailable(reason)
        if not cuda:
            raise GpuUnavailable("this torch (%s) has no CUDA: torch.cuda.is_available() is False"
                                 % torch.__version__)
        return index, torch.device("cuda", index)

    def __iter__(self):
        import torch
        from torch.utils.dlpack import from_dlpack
        _load()
        index, dev = self._torch_device(torch)
        c = _Consumer(index, self.depth, self._mode(), _LAYOUTS[self.layout], self.mean, self.std)
        try:
            sent = 0
            for k in range(len(self.paths)):
                while sent < len(self.paths) and sent < k + self.depth:
                    c.submit(self.paths[sent])
                    sent += 1
                stream = torch.cuda.current_stream(dev).cuda_stream if dev is not None else 0
                ptr, labels, _ = c.next(stream)
                images = from_dlpack(_capsule(ptr))
                yield images, torch.tensor(labels, dtype=torch.int64)
        finally:
            c.close()


def torch_batches(mount, name, epoch, reuse=True, mean=None, std=None, layout="nchw", device=None, depth=3,
                  raw=False):
    """(images, labels) for every batch of EPOCH of group NAME on MOUNT, in
    order: epochfs.prep.torch_batches() with the images converted on the
    GPU (GpuBatches says what they hold). REUSE is accepted for the same
    call to work: buffers here are reused only once their tensor is gone,
    so a tensor kept stays valid either way."""
    del reuse
    yield from GpuBatches(_epoch_dir(mount, name, epoch), mean=mean, std=std, layout=layout, device=device,
                          depth=depth, raw=raw)
