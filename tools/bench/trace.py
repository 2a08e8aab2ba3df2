"""Samples what a part 7 run is doing, for finding where the disk idles.

    trace.py OUT STATS BLKIO DEVNO PID NAME [INTERVAL]

Every INTERVAL seconds (0.25) until killed, appends to OUT one line: NAME,
the time (seconds since the epoch, as date +%s.%N), the cgroup's device read bytes (BLKIO's
io_service_bytes for DEVNO), the daemon's CPU ticks (PID; 0 if none), then
from the mount's STATS (absent: zeros) storage_read_bytes, prefetch_bytes,
prefetch_staged_bytes, prefetch_hits, prefetch_late, cache_hits, reads,
mem_state, cache_limit_bytes, mem_room_bytes, mem_mapped_bytes and
mem_refaults_per_s. One process for the whole
run, so sampling costs no interpreter start-ups on a busy machine.
"""
import json
import sys
import time

out, stats, blkio, devno, pid, name = sys.argv[1:7]
step = float(sys.argv[7]) if len(sys.argv) > 7 else 0.25
KEYS = ("storage_read_bytes", "prefetch_bytes", "prefetch_staged_bytes", "prefetch_hits",
        "prefetch_late", "cache_hits", "reads", "mem_state", "cache_limit_bytes", "mem_room_bytes",
        "mem_mapped_bytes", "mem_refaults_per_s")


def dev_read():
    try:
        for line in open(blkio):
            f = line.split()
            if len(f) == 3 and f[0] == devno and f[1] == "Read":
                return int(f[2])
    except OSError:
        pass
    return 0


def ticks():
    try:
        f = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
        return int(f[11]) + int(f[12])
    except (OSError, IndexError, ValueError):
        return 0


with open(out, "a") as o:
    while True:
        try:
            s = json.load(open(stats))
        except (OSError, ValueError):
            s = {}
        o.write("%s %.2f %d %d %s\n" % (name, time.time(), dev_read(), ticks(),
                                        " ".join(str(s.get(k, 0)) for k in KEYS)))
        o.flush()
        time.sleep(step)
