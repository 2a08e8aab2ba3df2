"""The GPU consumer against the CPU reader, per batch, as a PyTorch job sees
them: make bench's GPU part (tools/bench/gpu.sh).

    gpu_consumer.py EPOCH_DIR [--passes 3] [--check 4]

EPOCH_DIR holds the batch files of one epoch of a .prep/ group (gpu.sh
copies them out of the mount, so every reader reads the same files from the
page cache and what is compared is the consumer, not the prep). Readers,
each over every batch, in interleaved passes:

  cpu       epochfs.prep.torch_batches (a uint8 batch becomes float32 / 255
            on the CPU), then .to("cuda") from pageable memory: a job
            without the GPU path;
  cpu-pin   the same, pinned first and copied with non_blocking=True (what
            DataLoader(pin_memory=True) does);
  gpu       epochfs.gpu.torch_batches: the file read into pinned memory,
            the stored bytes copied asynchronously, converted on the GPU,
            handed to torch through DLPack.

Every step reduces the images on the GPU (what a training step's first
layer does: all bytes must be there); each pass ends with
torch.cuda.synchronize(). Prints one JSON line per reader, medians over
passes: wall and process CPU seconds per batch in the steady state (from
the third batch: a reader's set-up, such as pinning its buffers, is once an
epoch) and over the whole pass, images delivered per second (steady), and
"equal_to_cpu": the first --check batches of gpu, and of cpu-pin, are bit
for bit cpu's. Exit 77 with the reason where no GPU is usable.
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("epoch_dir")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--check", type=int, default=4)
    a = ap.parse_args()
    if a.passes < 1 or a.check < 0:
        ap.error("--passes must be at least 1 and --check at least 0")
    try:
        import torch
    except ImportError as e:
        print("gpu_consumer: no torch: %s" % e)
        return 77
    import epochfs.prep as epochfs_prep
    from epochfs import gpu
    why = gpu.unavailable_reason()
    if why is None and not torch.cuda.is_available():
        why = "torch has no CUDA device"
    if why:
        print("gpu_consumer: %s" % why)
        return 77
    files = sorted(os.listdir(a.epoch_dir))
    if not files:
        print("gpu_consumer: %s holds no batch files" % a.epoch_dir, file=sys.stderr)
        return 1
    parent, epoch = os.path.split(os.path.abspath(a.epoch_dir.rstrip("/")))
    group_root, name = os.path.split(parent)                      # MOUNT/.prep/NAME/epoch-EEEE
    mount = os.path.dirname(group_root)
    e = int(epoch.split("-")[1])
    dev = torch.device("cuda")

    def cpu(pin):
        for x, y in epochfs_prep.torch_batches(mount, name, e):
            if pin:
                x = x.pin_memory().to(dev, non_blocking=True)
            else:
                x = x.to(dev)
            yield x, y

    readers = {
        "cpu": lambda: cpu(False),
        "cpu-pin": lambda: cpu(True),
        "gpu": lambda: gpu.torch_batches(mount, name, e),
    }
    # Bit for bit: the first CHECK batches of each reader against cpu's.
    ref = [x.clone() for x, _ in zip((x for x, _ in readers["cpu"]()), range(a.check))]
    equal = {}
    for r in ("cpu-pin", "gpu"):
        got = [x.clone() for x, _ in zip((x for x, _ in readers[r]()), range(a.check))]
        equal[r] = len(got) == len(ref) and all(torch.equal(p, q) for p, q in zip(ref, got))
    equal["cpu"] = True
    del ref

    rows = {r: [] for r in readers}
    info = {}
    for _ in range(a.passes):
        for r, make in readers.items():
            torch.cuda.synchronize()
            t0, c0 = time.perf_counter(), time.process_time()
            n = images = 0
            acc = torch.zeros((), device=dev)
            for x, y in make():
                acc += x.sum()
                n += 1
                if n == 2:                      # the steady state starts with the third batch
                    torch.cuda.synchronize()
                    t2, c2, i2 = time.perf_counter(), time.process_time(), images + len(y)
                images += len(y)
                if r not in info:
                    info[r] = (tuple(x.shape), str(x.dtype))
            torch.cuda.synchronize()
            t1, c1 = time.perf_counter(), time.process_time()
            if n < 4:
                print("gpu_consumer: %d batches: too few for a steady state (4 at least)" % n, file=sys.stderr)
                return 1
            rows[r].append({"all": ((t1 - t0) / n, (c1 - c0) / n), "steady": ((t1 - t2) / (n - 2), (c1 - c2) / (n - 2)),
                            "images_per_s": (images - i2) / (t1 - t2), "n": n})
    for r, runs in rows.items():
        med = lambda k, i: round(1e3 * statistics.median(x[k][i] for x in runs), 3)   # noqa: E731
        print(json.dumps({"reader": r, "batches": runs[0]["n"], "shape": info[r][0], "dtype": info[r][1],
                          "wall_ms_per_batch": med("steady", 0), "cpu_ms_per_batch": med("steady", 1),
                          "pass_wall_ms_per_batch": med("all", 0), "pass_cpu_ms_per_batch": med("all", 1),
                          "images_per_s": round(statistics.median(x["images_per_s"] for x in runs), 1),
                          "equal_to_cpu": equal[r], "passes": len(runs)}), flush=True)
    return 0 if all(equal.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
