"""epochfs.gpu: the GPU path's Python side.

Without libepochfs_gpu.so (no `make CUDA=1`): every entry point raises
GpuUnavailable saying so. With it and no GPU: the probe and GpuBatches say
"no CUDA device: ...". Through the library's host backend (device="cpu"),
which needs no GPU: the same batches epochfs.prep.torch_batches() gives,
bit for bit; normalized ones equal to a float32 group's bytes; capsules and
deleters; bad files named. On a GPU: the device's tensors equal the host
backend's, and the probe returns its figures.
"""
import gc
import os
import struct
import tempfile
import unittest

from epochfs import gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
HEADER = struct.Struct("<8s10I7Q24x")           # docs/prep-format.md

try:
    import numpy as np
    import torch
except ImportError:                             # pragma: no cover
    np = torch = None


def library_or_skip():
    try:
        gpu._load()
    except gpu.GpuUnavailable as e:
        raise unittest.SkipTest("no GPU library: %s" % e.reason)


def write_batch(path, pixels, labels, layout, epoch=0, index=0):
    """A batch file of PIXELS (a numpy array in LAYOUT, uint8 or float32)."""
    n = len(labels)
    h, w, c = pixels.shape[1:] if layout == "nhwc" else (pixels.shape[2], pixels.shape[3], pixels.shape[1])
    po = (128 + 4 * n + 63) & ~63
    dt = 1 if pixels.dtype == np.float32 else 0
    head = HEADER.pack(b"EPBATCH1", 1, 128, n, h, w, c, dt, 1 if layout == "nchw" else 0, epoch, 0, index,
                       index * n, 7, 128, po, pixels.nbytes, po + pixels.nbytes)
    body = struct.pack("<%di" % n, *labels)
    with open(path, "wb") as f:
        f.write(head + body + bytes(po - 128 - 4 * n) + pixels.astype(pixels.dtype.newbyteorder("<")).tobytes())


def prep_float32(u8_nhwc):
    """What prep's float32 path (aug_store_f32) stores: x * mul + add in float32,
    mul = 1 / (255 std), add = -mean / std, two roundings."""
    f = np.float32
    out = np.empty(u8_nhwc.shape, dtype=np.float32)
    for c in range(3):
        mul = f(1) / (f(255) * f(STD[c]))
        add = -f(MEAN[c]) / f(STD[c])
        out[..., c] = u8_nhwc[..., c].astype(np.float32) * mul + add
    return out


def bits_equal(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and bytes(a.contiguous().numpy()) == bytes(
        b.contiguous().numpy())


class NoLibrary(unittest.TestCase):
    def setUp(self):
        self.saved = os.environ.get(gpu.ENV)
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        if self.saved is None:
            os.environ.pop(gpu.ENV, None)
        else:
            os.environ[gpu.ENV] = self.saved
        self.tmp.cleanup()

    def test_a_missing_library_is_a_clear_error(self):
        path = os.path.join(self.tmp.name, "libepochfs_gpu.so")
        os.environ[gpu.ENV] = path
        with self.assertRaises(gpu.GpuUnavailable) as cm:
            gpu.probe(8, 32, 32)
        self.assertIn(path, cm.exception.reason)
        self.assertIn("make CUDA=1", cm.exception.reason)
        self.assertEqual(gpu.unavailable_reason(), cm.exception.reason)
        if torch is not None:
            with self.assertRaises(gpu.GpuUnavailable):
                next(iter(gpu.GpuBatches([])))

    def test_a_file_that_is_not_a_library(self):
        path = os.path.join(self.tmp.name, "libepochfs_gpu.so")
        with open(path, "w") as f:
            f.write("not ELF\n")
        os.environ[gpu.ENV] = path
        reason = gpu.unavailable_reason()
        self.assertIn("cannot be loaded", reason)

    def test_bad_probe_arguments_need_no_library(self):
        os.environ[gpu.ENV] = os.path.join(self.tmp.name, "nothere.so")
        for kw in [dict(batch=0), dict(channels=5), dict(dtype="int8"), dict(reps=0), dict(height=1.5)]:
            args = dict(batch=8, height=32, width=32)
            args.update(kw)
            with self.assertRaises(ValueError):
                gpu.probe(**args)
        with self.assertRaises(ValueError):
            gpu.GpuBatches([], layout="chw")
        with self.assertRaises(ValueError):
            gpu.GpuBatches([], mean=MEAN)


class NoGpu(unittest.TestCase):
    def setUp(self):
        library_or_skip()
        reason = gpu.unavailable_reason()
        if reason is None:
            raise unittest.SkipTest("a GPU is here (the Gpu tests cover it)")
        self.reason = reason

    def test_the_reason_names_cuda(self):
        self.assertTrue(self.reason.startswith("no CUDA device: "), self.reason)
        self.assertNotIn("\n", self.reason)
        with self.assertRaises(gpu.GpuUnavailable) as cm:
            gpu.probe(8, 32, 32)
        self.assertEqual(cm.exception.reason, self.reason)

    @unittest.skipIf(torch is None, "no torch")
    def test_gpu_batches_say_why(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(gpu.GpuUnavailable) as cm:
                list(gpu.GpuBatches(d, device=0))
            self.assertEqual(cm.exception.reason, self.reason)


@unittest.skipIf(torch is None, "no torch and numpy")
class HostBackend(unittest.TestCase):
    """The library's CPU reference through the whole Python path (no GPU)."""

    def setUp(self):
        library_or_skip()
        self.tmp = tempfile.TemporaryDirectory()
        self.mount = self.tmp.name
        self.epoch = os.path.join(self.mount, ".prep", "g", "epoch-0000")
        os.makedirs(self.epoch)
        rng = np.random.default_rng(5)
        self.u8 = [rng.integers(0, 256, size=(n, 16, 12, 3), dtype=np.uint8) for n in (6, 6, 2)]
        self.labels = [[(i * 7 + k) % 10 for k in range(len(b))] for i, b in enumerate(self.u8)]

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, kind):
        """The three batches as a group stores them: u8-nchw, u8-nhwc, f32-nchw."""
        for i, (b, lab) in enumerate(zip(self.u8, self.labels)):
            if kind == "u8-nchw":
                px, layout = b.transpose(0, 3, 1, 2).copy(), "nchw"
            elif kind == "u8-nhwc":
                px, layout = b, "nhwc"
            else:
                px, layout = prep_float32(b).transpose(0, 3, 1, 2).copy(), "nchw"
            write_batch(os.path.join(self.epoch, "batch-%06d" % i), px, lab, layout, index=i)

    def test_default_is_epochfs_prep_torch_batches_bit_for_bit(self):
        import epochfs.prep as ep
        self.write("u8-nchw")
        cpu = [(x.clone(), y) for x, y in ep.torch_batches(self.mount, "g", 0)]
        ours = list(gpu.torch_batches(self.mount, "g", 0, device="cpu"))
        self.assertEqual(len(ours), 3)
        for (a, la), (b, lb) in zip(cpu, ours):
            self.assertTrue(bits_equal(a, b))
            self.assertEqual(b.dtype, torch.float32)
            self.assertTrue(torch.equal(la, lb) and lb.dtype == torch.int64)

    def test_mean_std_give_the_float32_groups_bytes(self):
        self.write("u8-nhwc")
        for layout in ("nchw", "nhwc"):
            got = list(gpu.GpuBatches(self.epoch, mean=MEAN, std=STD, layout=layout, device="cpu"))
            for b, (x, y) in zip(self.u8, got):
                want = prep_float32(b)
                if layout == "nchw":
                    want = want.transpose(0, 3, 1, 2)
                self.assertTrue(bits_equal(x, torch.from_numpy(np.ascontiguousarray(want))), layout)
        with self.assertRaises(ValueError):
            list(gpu.GpuBatches(self.epoch, mean=MEAN, std=(0.2, 0.0, 0.2), device="cpu"))

    def test_float32_groups_come_as_made(self):
        self.write("f32")
        got = list(gpu.GpuBatches(self.epoch, device="cpu"))
        raw = list(gpu.GpuBatches(self.epoch, device="cpu", raw=True))
        for b, (x, _), (r, _) in zip(self.u8, got, raw):
            want = torch.from_numpy(prep_float32(b).transpose(0, 3, 1, 2).copy())
            self.assertTrue(bits_equal(x, want) and bits_equal(r, want))
        with self.assertRaises(ValueError) as cm:
            list(gpu.GpuBatches(self.epoch, mean=MEAN, std=STD, device="cpu"))
        self.assertIn("float32", str(cm.exception))

    def test_raw_uint8_in_the_other_layout(self):
        self.write("u8-nhwc")
        for b, (x, _) in zip(self.u8, gpu.GpuBatches(self.epoch, raw=True, layout="nchw", device="cpu")):
            self.assertEqual(x.dtype, torch.uint8)
            self.assertTrue(torch.equal(x, torch.from_numpy(b.transpose(0, 3, 1, 2).copy())))

    def test_a_bad_file_names_itself(self):
        self.write("u8-nchw")
        bad = os.path.join(self.epoch, "batch-000001")
        os.truncate(bad, 300)
        it = iter(gpu.GpuBatches(self.epoch, device="cpu", depth=1))
        next(it)
        with self.assertRaises(OSError) as cm:
            next(it)
        self.assertIn(bad, str(cm.exception))
        self.assertIn("truncated", str(cm.exception))

    def test_tensors_outlive_the_iterator_and_deleters_run(self):
        self.write("u8-nchw")
        it = gpu.torch_batches(self.mount, "g", 0, device="cpu")
        first, _ = next(it)
        it.close()                  # the consumer is freed; the tensor is not
        want = torch.from_numpy(self.u8[0].transpose(0, 3, 1, 2).astype(np.float32)) / 255
        self.assertTrue(bits_equal(first, want))
        c = gpu._Consumer(-1, 2, 1, 1, None, None)
        c.submit(os.path.join(self.epoch, "batch-000000"))
        c.submit(os.path.join(self.epoch, "batch-000001"))
        p1, labels, head = c.next()
        self.assertEqual(labels, self.labels[0])
        self.assertEqual(head, {"n": 6, "epoch": 0, "index": 0, "bad_samples": 0})
        p2, _, _ = c.next()
        self.assertEqual(c.stats()["tensors"], 2)
        cap = gpu._capsule(p1)      # never handed to torch: its destructor deletes
        del cap
        t = torch.utils.dlpack.from_dlpack(gpu._capsule(p2))
        gc.collect()
        self.assertEqual(c.stats()["tensors"], 1)
        del t
        gc.collect()
        self.assertEqual(c.stats()["tensors"], 0)
        c.close()


@unittest.skipIf(torch is None, "no torch and numpy")
class Gpu(unittest.TestCase):
    """On a machine with a GPU (and a torch with CUDA)."""

    def setUp(self):
        library_or_skip()
        reason = gpu.unavailable_reason()
        if reason:
            raise unittest.SkipTest(reason)
        if not torch.cuda.is_available():
            raise unittest.SkipTest("torch has no CUDA")
        self.tmp = tempfile.TemporaryDirectory()
        rng = np.random.default_rng(9)
        for i, n in enumerate((32, 32, 7)):
            b = rng.integers(0, 256, size=(n, 3, 64, 48), dtype=np.uint8)
            write_batch(os.path.join(self.tmp.name, "batch-%06d" % i), b, list(range(n)), "nchw", index=i)

    def tearDown(self):
        self.tmp.cleanup()

    def test_the_device_gives_the_references_bytes(self):
        for kw in [dict(), dict(mean=MEAN, std=STD), dict(layout="nhwc"), dict(raw=True, layout="nhwc")]:
            host = list(gpu.GpuBatches(self.tmp.name, device="cpu", **kw))
            dev = list(gpu.GpuBatches(self.tmp.name, device=0, **kw))
            self.assertEqual(len(host), len(dev))
            for (a, la), (b, lb) in zip(host, dev):
                self.assertEqual(b.device.type, "cuda")
                self.assertTrue(bits_equal(a, b.cpu()), kw)
                self.assertTrue(torch.equal(la, lb))

    def test_probe(self):
        r = gpu.probe(16, 64, 64)
        for k in ("h2d_pinned_s", "h2d_pageable_s", "kernel_s", "h2d_pinned_gbps", "kernel_batches_per_s"):
            self.assertGreater(r[k], 0, k)
        self.assertEqual(r["bytes"], 16 * 64 * 64 * 3)
        self.assertEqual(r["kernel_bytes"], 5 * 16 * 64 * 64 * 3)


if __name__ == "__main__":
    unittest.main()
