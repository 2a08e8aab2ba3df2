"""Readers for make bench part 6 (partitioned peers); stdlib only.

    peer_read.py share MOUNT EPOCH RANK NODES
        reads this node's share of EPOCH, as torch's DistributedSampler hands
        it out: one permutation of all files per epoch (seeded by the epoch),
        node RANK takes every NODES-th from RANK on. Prints bytes and seconds.
    peer_read.py classify MOUNT OUT
        first tells each file's source: reads it once, alone, and looks at the
        mount's peer_read_bytes before and after (a peer served it, or the
        local cache did); writes the peer-served paths to OUT. Then drops the
        kernel's copies and times a second read of every file, back to back
        with nothing between (no stats.json read around a timed read, whose
        daemon work could overlap it), and prints the median latencies of
        local and peer hits.
    peer_read.py throughput MOUNT LIST THREADS
        reads the files of LIST with THREADS threads; prints GB/s.
"""
import json
import os
import random
import statistics
import sys
import threading
import time


def files_of(mount):
    out = []
    for d, dirs, fs in os.walk(mount):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        out.extend(os.path.join(d, f) for f in fs)
    return sorted(out)


def read(path):
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return n
            n += len(b)


def peer_bytes(mount):
    with open(os.path.join(mount, ".epochfs", "stats.json")) as f:
        return json.load(f)["peer_read_bytes"]


cmd, mount = sys.argv[1], sys.argv[2]
if cmd == "share":
    epoch, rank, nodes = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    fs = files_of(mount)
    random.Random(1000 + epoch).shuffle(fs)
    t0, n = time.monotonic(), 0
    for p in fs[rank::nodes]:
        n += read(p)
    print(json.dumps({"bytes": n, "seconds": time.monotonic() - t0}))
elif cmd == "classify":
    if not os.access("/proc/sys/vm/drop_caches", os.W_OK):
        sys.exit("peer_read.py classify: needs root (it drops the kernel's caches "
                 "between its two passes)")
    paths = files_of(mount)
    is_peer = []
    for p in paths:
        b0 = peer_bytes(mount)
        read(p)
        is_peer.append(peer_bytes(mount) > b0)
    with open(sys.argv[3], "w") as f:
        f.write("\n".join(p for p, q in zip(paths, is_peer) if q) + "\n")
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    times, b0 = [], peer_bytes(mount)
    for p in paths:
        t0 = time.perf_counter()
        read(p)
        times.append(time.perf_counter() - t0)
    # The timed pass must find each file where the first one did (a node
    # keeps only what it owns): the peer bytes it moved say whether it did.
    moved = peer_bytes(mount) - b0
    local = [t for t, q in zip(times, is_peer) if not q]
    peer = [t for t, q in zip(times, is_peer) if q]
    print(json.dumps({"local_n": len(local), "peer_n": len(peer),
                      "local_ms": statistics.median(local) * 1e3 if local else None,
                      "peer_ms": statistics.median(peer) * 1e3 if peer else None,
                      "timed_pass_peer_bytes": moved}))
elif cmd == "throughput":
    paths = [p for p in open(sys.argv[3]).read().split("\n") if p]
    k = int(sys.argv[4])
    total = [0] * k

    def run(i):
        for p in paths[i::k]:
            total[i] += read(p)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(k)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.monotonic() - t0
    print(json.dumps({"bytes": sum(total), "seconds": dt, "gbps": sum(total) / dt / 1e9}))
