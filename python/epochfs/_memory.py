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

epochfs-analyze also asks how hard memory pressed on a job while it ran:
snapshot() reads, at one moment, the job's memory cgroup (limit, usage,
its page cache, the refaults and major faults counted in memory.stat), the
pressure stall information (PSI) of its cgroup v2 directory, or of the
machine where the job has none of its own (cgroup v1, or the v2 root), and
MemAvailable. The timer takes one at each end of a run's window; the
analyzer turns the two into a memory stall (analyze.memory_of). faults()
and rss() read a process's major faults and resident memory from /proc.
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


def _stat(path):
    """The fields of a memory.stat file as {name: int}; {} where it cannot
    be read."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(" ")
                try:
                    out[k] = int(v)
                except ValueError:
                    continue
    except OSError:
        pass
    return out


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


# memory.stat's counters of pressure, per version: major faults, and the
# refaults (pages read back soon after the kernel evicted them; one field
# before Linux 5.9, a file and an anonymous one since).
_PRESSURE = {1: ("total_pgmajfault", ("total_workingset_refault_file", "total_workingset_refault_anon",
                                      "total_workingset_refault")),
             2: ("pgmajfault", ("workingset_refault_file", "workingset_refault_anon", "workingset_refault"))}


def _reading(version, d):
    lim_f, use_f, files, mapped = _FILES[version]
    lim, use = _read_int(os.path.join(d, lim_f)), _read_int(os.path.join(d, use_f))
    st = _stat(os.path.join(d, "memory.stat"))
    unmapped = sum(st.get(k, 0) for k in files) - st.get(mapped, 0)
    majflt, refaults = _PRESSURE[version]
    return {"version": version, "dir": d, "limit": lim, "usage": use, "unmapped_file": max(0, unmapped),
            "major_faults": st.get(majflt, 0), "refaults": sum(st.get(k, 0) for k in refaults)}


def _cgroup_lines(proc, pid):
    try:
        with open(os.path.join(proc, str(pid), "cgroup")) as f:
            return [line.strip().split(":", 2) for line in f]
    except OSError:
        return []


def cgroups(proc="/proc", root="/sys/fs/cgroup", pid="self"):
    """The memory cgroups of process PID (this one by default), as read:
    dicts of version (1 or 2), dir, limit (None: none), usage,
    unmapped_file (bytes of file pages no process maps), major_faults and
    refaults (memory.stat's counters, pages). One whose files cannot be
    read is left out."""
    lines = _cgroup_lines(proc, pid)
    if not lines:
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


def _room_of(avail, groups):
    got = avail
    for cg in groups:
        lim, use = cg["limit"], cg["usage"]
        if lim is None or lim >= NO_LIMIT or use is None:
            continue
        free = max(0, lim - use + cg["unmapped_file"])
        got = free if got is None else min(got, free)
    return got


def room(proc="/proc", root="/sys/fs/cgroup", pid="self"):
    """Bytes process PID (this one) could still be given: the least of the
    machine's MemAvailable and, for each memory cgroup with a limit, that
    limit less its usage with the unmapped file pages counted as free."""
    got = _room_of(available(proc), cgroups(proc, root, pid))
    return got if got is not None else UNKNOWN_ROOM


# ---- pressure: what epochfs-analyze measures over a run ----------------------

def pressure(path):
    """The totals of a PSI file (/proc/pressure/memory, a cgroup's
    memory.pressure) as {"some": us, "full": us}, or None. "some": the
    time at least one task waited for memory (reclaim, or a page it had
    used read back after eviction); "full": the time no task that could
    run did, all of them waiting for memory."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if parts and parts[0] in ("some", "full"):
                    for p in parts[1:]:
                        if p.startswith("total="):
                            out[parts[0]] = int(p[6:])
    except (OSError, ValueError):
        return None
    if "some" not in out:
        return None
    out.setdefault("full", 0)
    return out


def v2_dir(proc="/proc", root="/sys/fs/cgroup", pid="self"):
    """The cgroup v2 directory of process PID (in ROOT itself, or in
    ROOT/unified in the hybrid layout; a container that sees its own
    cgroup at the mount's root is found there), or None: no v2 hierarchy,
    or the process in its root cgroup, whose pressure is the machine's."""
    for parts in _cgroup_lines(proc, pid):
        if len(parts) != 3 or parts[0] != "0" or parts[1] != "":
            continue
        rel = parts[2].strip("/")
        if not rel:
            return None
        for base in (os.path.join(root, "unified"), root):
            if not os.path.exists(os.path.join(base, "cgroup.controllers")):
                continue
            for d in (os.path.join(base, rel), base):
                if os.path.exists(os.path.join(d, "memory.pressure")):
                    return d
        return None
    return None


def snapshot(proc="/proc", root="/sys/fs/cgroup", pid="self"):
    """One reading of process PID's memory, for differences over a run: a
    dict of its memory cgroup's version, dir, limit (None: none), usage,
    unmapped_file, major_faults and refaults (pages; of the cgroup with
    the least room where there are several: v1 beside v2), room (bytes it
    could still be given, as room()), available (MemAvailable), and the
    PSI totals psi_some_us and psi_full_us with psi_scope: "cgroup" (its
    own v2 directory's memory.pressure, psi_dir) or "machine"
    (/proc/pressure/memory); None where nothing could be read."""
    avail = available(proc)
    groups = cgroups(proc, root, pid)
    mine = None
    for cg in groups:
        lim = cg["limit"]
        if mine is None or (lim is not None and lim < NO_LIMIT and
                            (mine["limit"] is None or mine["limit"] >= NO_LIMIT or
                             _room_of(None, [cg]) < _room_of(None, [mine]))):
            mine = cg
    out = {"version": None, "dir": None, "limit": None, "usage": None, "unmapped_file": None,
           "major_faults": None, "refaults": None, "available": avail, "room": _room_of(avail, groups),
           "psi_scope": None, "psi_dir": None, "psi_some_us": None, "psi_full_us": None}
    if mine is not None:
        out.update({k: mine[k] for k in ("version", "dir", "usage", "unmapped_file", "major_faults", "refaults")})
        out["limit"] = mine["limit"] if mine["limit"] is not None and mine["limit"] < NO_LIMIT else None
    d = v2_dir(proc, root, pid)
    got = pressure(os.path.join(d, "memory.pressure")) if d else None
    if got is not None:
        out.update(psi_scope="cgroup", psi_dir=d)
    else:
        got = pressure(os.path.join(proc, "pressure", "memory"))
        if got is not None:
            out["psi_scope"] = "machine"
    if got is not None:
        out["psi_some_us"], out["psi_full_us"] = got["some"], got["full"]
    return out


def faults(pid="self", proc="/proc"):
    """(major faults, major faults of its waited-for children) of process
    PID, from /proc/PID/stat (fields 12 and 13), or None."""
    try:
        with open(os.path.join(proc, str(pid), "stat")) as f:
            fields = f.read().rpartition(")")[2].split()
        return int(fields[9]), int(fields[10])
    except (OSError, ValueError, IndexError):
        return None


def rss(pid, proc="/proc"):
    """Resident memory of process PID (VmRSS), bytes, or None."""
    try:
        with open(os.path.join(proc, str(pid), "status")) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def same_cgroup(pid, proc="/proc", root="/sys/fs/cgroup", other="self"):
    """Whether process PID's memory is counted in the same memory cgroup
    as process OTHER's (this one): True, False, or None where either
    cannot be read."""
    a = cgroups(proc, root, pid)
    b = cgroups(proc, root, other)
    if not a or not b:
        return None
    limited = [cg["dir"] for cg in b if cg["limit"] is not None and cg["limit"] < NO_LIMIT]
    return any(cg["dir"] in (limited or [b[0]["dir"]]) for cg in a)
