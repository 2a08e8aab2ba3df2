"""epochfs mounts, and writing orders to them (.epochfs/order/).

A mount is recognised by its type in /proc/self/mountinfo (fuse.epochfs).
An order is the list of paths, relative to the mount's root, that a job will
read, one a line, written to MOUNT/.epochfs/order/STREAM; writing it from
the start replaces the stream's previous order (docs/prefetch.md).
"""
import os

_MOUNTINFO = "/proc/self/mountinfo"


def _unescape(s):
    # mountinfo escapes space, tab, newline and backslash as \ooo.
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and s[i + 1:i + 4].isdigit() and len(s[i + 1:i + 4]) == 3:
            out.append(chr(int(s[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def mounts(mountinfo=_MOUNTINFO):
    """The mountpoints of the epochfs mounts visible here, deepest first."""
    found = []
    try:
        with open(mountinfo) as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, rfields = left.split(), right.split()
                if len(fields) >= 5 and rfields and rfields[0] == "fuse.epochfs":
                    found.append(_unescape(fields[4]))
    except OSError:
        return []
    return sorted(set(found), key=len, reverse=True)


def mount_of(path, known=None):
    """(mountpoint, path relative to it) for PATH under an epochfs mount,
    else None. PATH should be absolute and free of symlinks (realpath)."""
    for m in known if known is not None else mounts():
        if path == m:
            return m, ""
        if path.startswith(m.rstrip("/") + "/"):
            return m, path[len(m.rstrip("/")) + 1:]
    return None


def publish_order(mount, stream, paths, keep=False):
    """Writes the order PATHS (relative to MOUNT, one a line) as STREAM.
    An entry may also be a tuple (path, offset, length): those bytes of the
    file alone (a "#range" line: a record reader's slice of a shard).
    Returns how many were written, or with KEEP (n, fd): the stream left
    open after the order, for report lines ("#wait WAIT RUN", see
    report_wait). Raises OSError if the mount takes no orders (an old
    daemon, or --no-order), ValueError for a range with a negative offset
    or a length under 1."""
    d = os.path.join(mount, ".epochfs", "order")
    fd = os.open(os.path.join(d, stream), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    n = 0
    done = False
    try:
        buf = []
        size = 0
        for p in paths:
            if isinstance(p, tuple):
                path, off, length = p
                if int(off) < 0 or int(length) < 1:
                    raise ValueError("order range %r: offset >= 0 and length >= 1 wanted" % (p,))
                if "\n" in path:
                    continue
                p = "#range %d %d %s" % (int(off), int(length), path)
            elif "\n" in p:
                continue            # no line can hold it; the read is just not prefetched
            buf.append(p)
            size += len(p) + 1
            n += 1
            if size >= 1 << 16:
                _write_all(fd, ("\n".join(buf) + "\n").encode("utf-8", "surrogateescape"))
                buf, size = [], 0
        if buf:
            _write_all(fd, ("\n".join(buf) + "\n").encode("utf-8", "surrogateescape"))
        done = True
    finally:
        if not (keep and done):
            os.close(fd)
    return (n, fd) if keep else n


def report_wait(fd, wait_s, run_s):
    """Tells the stream open on FD that its job waited WAIT_S seconds for
    data in RUN_S seconds of running (both since the stream began): the
    daemon sums them into job_wait_us / job_run_us, epochfs-stat's jobwait%
    column. Written after the order, so it never starts a new one."""
    _write_all(fd, ("#wait %.3f %.3f\n" % (wait_s, max(run_s, wait_s))).encode())


def report_batches(fd, nbytes):
    """Tells the stream open on FD that its loader may hold NBYTES of
    batches at once (workers x prefetch_factor x a batch's bytes): the
    daemon counts them in the job's peak memory before they all come
    (docs/prefetch.md, "The job's peak")."""
    _write_all(fd, ("#batches %d\n" % max(0, int(nbytes))).encode())


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
