"""Memory readings for epochfs's Python side: how much more memory this
process could be given, from its memory cgroup (v1 or v2) and the machine.
Two readers use it: the step timer inside a job (how many files the warm
run may copy to tmpfs, how many workers the crowd run may add) and
epochfs-analyze outside it (what share of the data the page cache could
hold when the data is not under a mount). Neither belongs to the other,
so the readings live here, beside both.

DESIGN: one figure, room(), rather than limits and usages for callers to
combine: the smallest of what the machine has available (MemAvailable) and
what each memory cgroup of the process still allows (its limit less its
usage). A cgroup's usage includes its page cache; the file pages no process
maps are counted as free, since the kernel drops them before it refuses
memory. That errs high where those pages are dirty or locked, so both
readers take a fraction of it (a quarter, a half), never all. Every reading
fails soft: a file missing or unreadable leaves its source out, and with no
source at all 1 GiB is assumed. The paths are arguments so that the tests
read a made-up /proc and /sys/fs/cgroup. Standard library only.
"""
import os

# What room() says when nothing could be read: enough for a small warm run,
# too little to crowd a machine.
UNKNOWN_ROOM = 1 << 30
# A limit at or above this is no limit (v1 writes 2^63 rounded to a page).
NO_LIMIT = 1 << 60


def _read_int(path):
    """The integer in file PATH, or None for "max" (v2's no limit)."""
    with open(path) as f:
        v = f.read().strip()
    return None if v == "max" else int(v)


def _stat_of(path, key):
    """Field KEY of a memory.stat file, or 0 where it has none."""
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(" ")
                if k == key:
                    return int(v)
    except (OSError, ValueError):
        pass
    return 0


def available(proc="/proc"):
    """The machine's MemAvailable, bytes, or None."""
    try:
        with open(os.path.join(proc, "meminfo")) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


# Per version: the limit, the usage, and the memory.stat fields of the file
# pages (active and inactive) and of those mapped.
_FILES = {1: ("memory.limit_in_bytes", "memory.usage_in_bytes",
              ("total_inactive_file", "total_active_file"), "total_mapped_file"),
          2: ("memory.max", "memory.current", ("inactive_file", "active_file"), "file_mapped")}


def _reading(version, d):
    lim_f, use_f, files, mapped = _FILES[version]
    lim, use = _read_int(os.path.join(d, lim_f)), _read_int(os.path.join(d, use_f))
    st = os.path.join(d, "memory.stat")
    unmapped = sum(_stat_of(st, k) for k in files) - _stat_of(st, mapped)
    return {"version": version, "dir": d, "limit": lim, "usage": use, "unmapped_file": max(0, unmapped)}


def cgroups(proc="/proc", root="/sys/fs/cgroup"):
    """The memory cgroups of this process, as read: dicts of version (1 or
    2), dir, limit (None: none), usage and unmapped_file (bytes of file
    pages no process maps). One whose files cannot be read is left out."""
    try:
        with open(os.path.join(proc, "self", "cgroup")) as f:
            lines = [line.strip().split(":", 2) for line in f]
    except OSError:
        return []
    out = []
    for parts in lines:
        if len(parts) != 3:
            continue
        if "memory" in parts[1].split(","):
            version, base = 1, os.path.join(root, "memory")
        elif parts[0] == "0" and parts[1] == "":
            version, base = 2, root
        else:
            continue
        # A container with its own view of the hierarchy names its cgroup
        # by the host's path but sees it at the root of the mount.
        for d in (base + parts[2], base):
            try:
                out.append(_reading(version, d))
                break
            except (OSError, ValueError):
                continue
    return out


def room(proc="/proc", root="/sys/fs/cgroup"):
    """Bytes this process could still be given: the least of the machine's
    MemAvailable and, for each memory cgroup with a limit, that limit less
    its usage with the unmapped file pages counted as free."""
    got = available(proc)
    for cg in cgroups(proc, root):
        lim, use = cg["limit"], cg["usage"]
        if lim is None or lim >= NO_LIMIT or use is None:
            continue
        free = max(0, lim - use + cg["unmapped_file"])
        got = free if got is None else min(got, free)
    return got if got is not None else UNKNOWN_ROOM
