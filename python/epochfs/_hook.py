"""The hook epochfs-run puts into a Python process: every PyTorch DataLoader
whose files lie under an epochfs mount tells the mount, at the start of
each epoch, the order it will read them in. epochfs-analyze arms the same
hook with a step timer (_timing.Timer, armed with set_timer()): it is told
when an iterator starts an epoch (and may hand it the epoch's indices,
drawn already, through _epochfs_preset), and it wraps the iterator's
__next__.

The boot shim (_boot/sitecustomize.py) loads this module, under the private
package name _epochfs_hook, once torch.utils.data.dataloader has run, and
calls boot(): nothing of epochfs is in a process that never imports torch.

How: a DataLoader iterator takes every index of an epoch through
_BaseDataLoaderIter._next_index, from a fresh iterator of its sampler each
epoch. When it asks for an epoch's first index, the hook decides, before
anything is drawn, whether this epoch's order can be known without changing
what the job draws (sampler_plan), and if so maps its indices to files and
writes them to MOUNT/.epochfs/order/STREAM, in the order the loader's
workers will read them (their batches interleaved, see _reading_order).

DESIGN: training is unchanged, bit for bit; the order is a hint and gives
way wherever the two could conflict. Only samplers whose every draw is known
are read ahead, and each in the one way that leaves its draws where they
were (sampler_plan):
  take  torch's SequentialSampler, DistributedSampler, SubsetRandomSampler,
        WeightedRandomSampler and RandomSampler without a generator of its
        own, and plain lists or ranges of indices, draw all their
        randomness when their first index is asked for (a RandomSampler
        takes one seed from the global stream and draws the rest from a
        private generator). That call is the hook's: it takes the first
        index and the rest of the epoch along, and hands the loader an
        iterator over the same list.
  copy  a RandomSampler with its own generator draws from it as it goes
        (a randperm per pass and one at the end, a randint per 32 indices
        with replacement), and the job may draw from that generator too.
        The hook reads the epoch from a copy of the sampler over a clone of
        the generator's state; the job's sampler runs untouched.
A BatchSampler is read as the sampler under it. Anything else (a custom or
subclassed sampler, one without a length such as detectron2's and
mmengine's infinite ones, a batch sampler of the job's own) is left alone,
with one line on stderr: reading it ahead could drain it forever or move
its draws. The epoch's size is checked against the order bound
(MAX_ORDER) first. No other random stream is touched, and the global one
never.

Datasets mapped: ImageFolder and DatasetFolder (`samples`), anything with
`samples`, `imgs` or `files` (paths, or tuples whose first item is one),
Subset, ConcatDataset, nested. A dataset it cannot map (an IterableDataset
among them), paths outside any epochfs mount, or a mount that takes no
orders, is reported once on stderr and the job runs as before. One stream
per DataLoader, per process (so per DDP rank), replaced at every epoch,
removed with its DataLoader. Once a second, a loader with a stream also
reports how long its iterators waited in __next__ ("#wait" lines after the
order; epochfs-stat's jobwait% column), and after its first batch, once,
how many bytes of batches its workers may hold at once ("#batches": the
daemon beside the job counts them in the job's peak memory).
"""
import bisect
import copy
import os
import socket
import sys
import threading
import time
import weakref

from ._mounts import mount_of, mounts, publish_order, report_batches, report_wait

MAX_ORDER = 16 << 20                # the daemon takes no more paths in all orders
# How often a loader reports its data wait (seconds; and at each epoch's end).
WAIT_REPORT_S = float(os.environ.get("EPOCHFS_RUN_REPORT_S", "1.0"))
_reported = set()
_lock = threading.Lock()
_counter = [0]
_state = {"installed": False, "publish": False,
          "verbose": os.environ.get("EPOCHFS_RUN_VERBOSE") == "1",
          "quiet": os.environ.get("EPOCHFS_RUN_QUIET") == "1",
          "timer": None}               # see set_timer()


def _say(key, msg, who="epochfs-run"):
    """One line on stderr, once per KEY."""
    with _lock:
        if key in _reported or _state["quiet"]:
            return
        _reported.add(key)
    sys.stderr.write("%s: %s\n" % (who, msg))


# ---- the step timer --------------------------------------------------------

def set_timer(timer):
    """Arms TIMER in the hook, or with None disarms the one armed; returns
    the timer armed before. The hook asks two things of a timer (as
    _timing.Timer does them):
      epoch_start(it, loader)  iterator IT of LOADER starts an epoch, before
                               its workers start and before its first index
                               is drawn (it may set it._epochfs_preset to
                               the epoch's indices, drawn already);
      next(it, orig)           in place of IT's __next__; ORIG(it) is
                               torch's own, and fetches the batch.
    Every DataLoader's iterators are handed to it: which it measures is
    its own choice. One timer at a time."""
    before, _state["timer"] = _state["timer"], timer
    return before


def current_timer():
    """The timer armed (set_timer()), or None."""
    return _state["timer"]


# ---- indices to paths ------------------------------------------------------

def _path_of_sample(s):
    if isinstance(s, (str, bytes, os.PathLike)):
        return os.fsdecode(s)
    if isinstance(s, (tuple, list)) and s and isinstance(s[0], (str, bytes, os.PathLike)):
        return os.fsdecode(s[0])
    return None


def concat_part(cum, i):
    """(k, j): index I of a ConcatDataset whose cumulative_sizes are CUM is
    item J of its part K. A negative I counts from the end, as
    ConcatDataset.__getitem__ has it (a part's own -1 is another item)."""
    if i < 0:
        i += cum[-1] if cum else 0
    k = bisect.bisect_right(cum, i)
    return k, i - (cum[k - 1] if k else 0)


def _resolver(ds):
    """A function index -> path (or None) for dataset DS, or None if it
    cannot be mapped."""
    try:
        from torch.utils.data import ConcatDataset, Subset
    except ImportError:             # torch not there: not a DataLoader of ours
        return None
    if isinstance(ds, Subset):
        inner = _resolver(ds.dataset)
        if inner is None:
            return None
        idx = ds.indices
        return lambda i: inner(int(idx[i]))
    if isinstance(ds, ConcatDataset):
        parts = [_resolver(d) for d in ds.datasets]
        if any(p is None for p in parts):
            return None
        cum = list(ds.cumulative_sizes)

        def concat(i):
            k, j = concat_part(cum, i)
            return parts[k](j)
        return concat
    for attr in ("samples", "imgs", "files"):
        seq = getattr(ds, attr, None)
        if isinstance(seq, (list, tuple)) and seq and _path_of_sample(seq[0]) is not None:
            return lambda i, seq=seq: _path_of_sample(seq[i])
    return None


class _Mapper:
    """Absolute paths to (mount, relative path), resolving each directory
    once (an ImageNet has 1,000, not 1.28M)."""

    def __init__(self):
        self.known = mounts()
        self.dirs = {}

    def __call__(self, path):
        d, base = os.path.split(path)
        real = self.dirs.get(d)
        if real is None:
            real = self.dirs[d] = os.path.realpath(d)
        return mount_of(os.path.join(real, base), self.known)


# ---- the hook --------------------------------------------------------------

def _flatten(items):
    for x in items:
        if isinstance(x, (list, tuple)):
            for y in x:
                yield y
        else:
            yield x


def _reading_order(it, indices):
    """The epoch's indices in the order the files will be read: a loader
    with W worker processes hands batch b to worker b mod W, and the
    workers read their batches side by side, so the J-th file of the
    batches of one round is needed at about the same time. Interleaving
    them (round by round: item J of each worker's batch, then item J + 1)
    lets a prefetcher that follows the order in sequence fetch every
    worker's next file, rather than one worker's whole batch first."""
    workers = getattr(it, "_num_workers", 0) or 0
    batches = [x for x in indices]
    if workers < 2 or not batches or not isinstance(batches[0], (list, tuple)):
        return list(_flatten(batches))
    out = []
    for r in range(0, len(batches), workers):
        rnd = batches[r:r + workers]
        for j in range(max(len(b) for b in rnd)):
            for b in rnd:
                if j < len(b):
                    out.append(b[j])
    return out


def _stream_name(loader):
    rank = ""
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            rank = "-r%d" % dist.get_rank()
    except Exception:
        pass
    sid = getattr(loader, "_epochfs_stream", None)
    if sid is None:
        with _lock:
            _counter[0] += 1
            sid = _counter[0]
        loader._epochfs_stream = sid
    host = socket.gethostname().split(".")[0][:20] or "host"
    name = "%s-%d-dl%d%s" % (host, os.getpid(), sid, rank)
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name)[:64]


# ---- which samplers can be read ahead --------------------------------------

def _torch_own(cls, base, names):
    """Whether CLS is torch's BASE, or a subclass that changes none of the
    NAMES its epoch depends on."""
    return isinstance(cls, type) and issubclass(cls, base) and \
        all(getattr(cls, n, None) is getattr(base, n) for n in names)


def _plain_kind(s):
    """"take", "copy" or None for S, a sampler of indices (not of batches)."""
    from torch.utils.data import sampler as ts
    from torch.utils.data.distributed import DistributedSampler
    t = type(s)
    if t in (list, tuple, range):
        return "take"
    if _torch_own(t, ts.RandomSampler, ("__iter__", "__len__", "num_samples")):
        return "take" if s.generator is None else "copy"
    for base in (ts.SequentialSampler, ts.SubsetRandomSampler, ts.WeightedRandomSampler, DistributedSampler):
        if _torch_own(t, base, ("__iter__", "__len__")):
            return "take"
    return None


def _is_batch_sampler(s):
    from torch.utils.data import sampler as ts
    return _torch_own(type(s), ts.BatchSampler, ("__iter__", "__len__"))


def _sampler_name(s):
    if _is_batch_sampler(s):
        return "BatchSampler over %s" % type(s.sampler).__name__
    return type(s).__name__


def sampler_plan(sampler):
    """How an epoch of SAMPLER (a DataLoader's index sampler: a sampler of
    indices, or a BatchSampler over one) can be known without changing what
    the job draws: ("take", n) or ("copy", n) (see the module's text), N
    the number of indices an epoch has; else (None, 0), or (None, None)
    for a sampler without a length. Draws nothing."""
    inner = sampler.sampler if _is_batch_sampler(sampler) else sampler
    kind = _plain_kind(inner)
    if kind is None:
        # The job's own code is not called, not even its __len__.
        return None, (0 if hasattr(type(inner), "__len__") else None)
    return kind, len(inner)


def copy_order(sampler):
    """An epoch of SAMPLER (whose plan is "copy") read from copies of it and
    of the sampler under it, each with a clone of its generator: the job's
    sampler and generator are not touched."""
    import torch

    def shadow(s):
        if type(s) in (list, tuple, range):
            return s
        c = copy.copy(s)
        if _is_batch_sampler(s):
            c.sampler = shadow(s.sampler)
        g = getattr(s, "generator", None)
        if g is not None:
            c.generator = torch.Generator(device=g.device)
            c.generator.set_state(g.get_state())
        return c
    return list(iter(shadow(sampler)))


def _plan(it, loader):
    """Whether this epoch of iterator IT (of LOADER) gets an order, decided
    before anything is drawn: (how, resolve, mapper), or None (said why,
    once)."""
    from torch.utils.data.dataloader import _DatasetKind
    if getattr(it, "_dataset_kind", None) != _DatasetKind.Map:
        _say("iterable", "an IterableDataset has no order to tell; it runs as before")
        return None
    mapper = _Mapper()
    if not mapper.known:
        _say("nomount", "no epochfs mount on this machine: nothing to tell")
        return None
    resolve = _resolver(loader.dataset)
    if resolve is None:
        _say("unmapped:%s" % type(loader.dataset).__name__,
             "%s: cannot map its indices to files (no samples/imgs/files); it runs as before"
             % type(loader.dataset).__name__)
        return None
    sampler = it._index_sampler
    how, n = sampler_plan(sampler)
    name = _sampler_name(sampler)
    if how is None:
        why = "it has no length" if n is None else "not one of torch's own samplers"
        _say("sampler:" + name, "%s: %s, so its indices cannot be had ahead without changing what it draws; "
             "no order for it, the job runs as before" % (name, why))
        return None
    if n > MAX_ORDER:
        _say("huge:" + name, "%s: an epoch of %d indices is more than an order holds (%d); it runs as before"
             % (name, n, MAX_ORDER))
        return None
    return how, resolve, mapper


def _publish(it, loader, indices, resolve, mapper):
    """Writes the files of this epoch's INDICES (iterator IT of LOADER) in
    order to the mount(s) they live on."""
    per_mount = {}
    outside = 0
    for i in _reading_order(it, indices):
        p = resolve(int(i))
        m = mapper(os.path.abspath(p)) if p is not None else None
        if m is None:
            outside += 1
            continue
        per_mount.setdefault(m[0], []).append(m[1])
    if outside and not per_mount:
        _say("outside", "the DataLoader's files are on no epochfs mount: nothing to tell")
        return
    base = _stream_name(loader)
    meter = _meter_of(loader)
    names = meter.setdefault("names", {})
    for mnt, rels in per_mount.items():
        name = names.get(mnt, base)
        try:
            try:
                _, fd = publish_order(mnt, name, rels, keep=True)
            except PermissionError:
                # The name is another user's stream (the directory is
                # shared, like /tmp): one of our own, kept for later epochs.
                name = "%s-u%d-%s" % (base[:40], os.getuid(), os.urandom(4).hex())
                _, fd = publish_order(mnt, name, rels, keep=True)
        except OSError as e:
            _say("nochannel:" + mnt, "%s takes no orders (%s); the job runs as before" % (mnt, e.strerror))
            continue
        names[mnt] = name
        old = meter["fds"].pop(mnt, None)
        if old is not None:
            _close(old)
        meter["fds"][mnt] = fd
        _end_with(loader, mnt, name)
        if _state["verbose"]:
            sys.stderr.write("epochfs-run: order of %d files written to %s/.epochfs/order/%s\n"
                             % (len(rels), mnt, name))
        else:
            _say("told:" + mnt, "DataLoader orders go to %s (prefetch ahead of the readers)" % mnt)


def _close(fd):
    try:
        os.close(fd)
    except OSError:
        pass


def _meter_of(loader):
    """The data-wait meter of LOADER: seconds its iterators waited in
    __next__, since when, and the streams' open descriptors to report to."""
    m = getattr(loader, "_epochfs_meter", None)
    if m is None:
        now = time.perf_counter()
        m = loader._epochfs_meter = {"wait": 0.0, "start": now, "reported": now, "fds": {}}
    return m


def _measure(it, t0, force=False):
    """After a step of iterator IT that began at T0: adds its wait to the
    loader's meter, and once a WAIT_REPORT_S reports it to the mounts."""
    loader = getattr(it, "_epochfs_loader", None)
    m = getattr(loader, "_epochfs_meter", None)
    if m is None or not m["fds"]:
        return
    now = time.perf_counter()
    m["wait"] += now - t0
    if now - m["reported"] < WAIT_REPORT_S and not force:
        return
    m["reported"] = now
    for mnt, fd in list(m["fds"].items()):
        try:
            report_wait(fd, m["wait"], now - m["start"])
        except OSError:
            m["fds"].pop(mnt, None)
            _close(fd)


def batch_bytes(batch, depth=0):
    """Bytes of the tensors and arrays in BATCH (nested tuples, lists and
    dicts, 8 levels at most: a batch that holds itself is not followed
    forever), what a worker process hands over in shared memory. What it
    cannot size counts 0."""
    if depth > 8:
        return 0
    if isinstance(batch, (tuple, list)):
        return sum(batch_bytes(x, depth + 1) for x in batch)
    if isinstance(batch, dict):
        return sum(batch_bytes(x, depth + 1) for x in batch.values())
    if isinstance(batch, (str, bytes, int, float, bool)) or batch is None:
        return 0
    try:
        n = getattr(batch, "nbytes", None)      # numpy, torch >= 2.1
        if isinstance(n, int):
            return n
        return int(batch.element_size()) * int(batch.nelement())
    except Exception:                           # a property of the job's own that raises
        return 0


def _declare_batches(it, batch):
    """Once per loader, after its first batch: tells the mounts how many
    bytes of batches its worker processes may hold at once (workers x
    prefetch_factor x this batch's bytes), so the daemon beside the job
    counts them in the job's peak before they all come. Nothing without
    workers: the main process makes its batches one at a time."""
    loader = getattr(it, "_epochfs_loader", None)
    m = getattr(loader, "_epochfs_meter", None)
    if m is None or not m["fds"] or m.get("batches") is not None:
        return
    workers = getattr(it, "_num_workers", 0) or 0
    m["batches"] = 0
    if workers < 1:
        return
    nbytes = workers * (getattr(it, "_prefetch_factor", None) or 2) * batch_bytes(batch)
    m["batches"] = nbytes
    for mnt, fd in list(m["fds"].items()):
        try:
            report_batches(fd, nbytes)
        except OSError:
            m["fds"].pop(mnt, None)
            _close(fd)


def _end_with(loader, mnt, name):
    """The stream ends with its DataLoader (or the process)."""
    ends = getattr(loader, "_epochfs_ends", None)
    if ends is None:
        ends = loader._epochfs_ends = set()
    if mnt in ends:
        return
    ends.add(mnt)
    path = os.path.join(mnt, ".epochfs", "order", name)
    fds = _meter_of(loader)["fds"]

    def end(path=path, mnt=mnt, fds=fds):
        fd = fds.pop(mnt, None)
        if fd is not None:
            _close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass
    weakref.finalize(loader, end)


def _patch(dataloader_module):
    base = getattr(dataloader_module, "_BaseDataLoaderIter", None)
    if base is None or getattr(base._next_index, "_epochfs", False):
        return
    orig = base._next_index

    def _next_index(self):
        it = self._sampler_iter
        if it is None or getattr(self, "_epochfs_iter", None) is it:
            return orig(self)
        # The first index of an epoch: looked at once, whatever is decided.
        self._epochfs_iter = it
        preset = getattr(self, "_epochfs_preset", None)
        if preset is not None:
            # epochfs-analyze's warm run drew this epoch already (before the
            # workers were forked); it is handed the same indices.
            self._epochfs_preset = None
            self._sampler_iter = self._epochfs_iter = iter(list(preset))
            return next(self._sampler_iter)     # StopIteration: an empty epoch, as before
        if not _state["publish"]:
            return orig(self)
        loader = self._epochfs_loader
        try:
            plan = _plan(self, loader)
        except Exception as e:                  # never let the hook break training
            _say("error:%s" % type(e).__name__, "order not told (%s: %s); the job runs as before"
                 % (type(e).__name__, e))
            plan = None
        if plan is None:
            return orig(self)
        how, resolve, mapper = plan
        if how == "take":
            # The sampler draws its randomness now, at this call, as it would
            # have; the rest of its epoch follows from that alone.
            first = next(it)                    # StopIteration: an empty epoch, as before
            indices = [first]
            indices.extend(it)
            self._sampler_iter = self._epochfs_iter = iter(indices)
        try:
            if how == "copy":
                indices = copy_order(self._index_sampler)
            _publish(self, loader, indices, resolve, mapper)
        except Exception as e:                  # never let the hook break training
            _say("error:%s" % type(e).__name__, "order not told (%s: %s); the job runs as before"
                 % (type(e).__name__, e))
        return next(self._sampler_iter)

    orig_reset = base._reset

    def _reset(self, loader, *args, **kwargs):
        self._epochfs_loader = loader
        # A persistent-workers loader starts its next epoch here, not in
        # __init__ (which calls _reset with first_iter=True).
        if not (args[:1] == (True,) or kwargs.get("first_iter")):
            _timer_epoch_start(self, loader)
        return orig_reset(self, loader, *args, **kwargs)

    orig_init = base.__init__

    def __init__(self, loader, *args, **kwargs):
        self._epochfs_loader = loader
        _timer_epoch_start(self, loader)
        orig_init(self, loader, *args, **kwargs)

    orig_next = base.__next__

    def __next__(self):
        if _state["timer"] is not None:
            return _timer_next(self, orig_next)
        if not _state["publish"]:
            return orig_next(self)
        t0 = time.perf_counter()
        try:
            batch = orig_next(self)
        except StopIteration:
            _guarded(_measure, self, t0, force=True)    # an epoch's end is always reported
            raise
        _guarded(_measure, self, t0)
        _guarded(_declare_batches, self, batch)
        return batch

    _next_index._epochfs = True
    base._next_index = _next_index
    base._reset = _reset
    base.__init__ = __init__
    base.__next__ = __next__


# ---- never the job's failure ------------------------------------------------
# What the hook adds to a step (its reports, the timer) runs beside torch's
# own code; an exception of its own is reported once and turns that part
# off, and the step goes on with torch's batch. Torch's own exceptions
# (StopIteration, a worker's error) reach the job as they would without it.

def _give_up(it, e):
    """The hook's reports for IT's loader end after error E (said once)."""
    _say("error:%s" % type(e).__name__, "stopped reporting to the mount (%s: %s); the job runs as before"
         % (type(e).__name__, e))
    m = getattr(getattr(it, "_epochfs_loader", None), "_epochfs_meter", None)
    if m is not None:
        for fd in m["fds"].values():
            _close(fd)
        m["fds"].clear()


def _guarded(fn, it, *args, **kwargs):
    """FN(IT, ...), the hook's own work after a step: an exception ends
    the loader's reports (_give_up), never the step."""
    try:
        fn(it, *args, **kwargs)
    except Exception as e:
        _give_up(it, e)


def _timer_failed(timer, e):
    """The armed TIMER raised E: disarmed, said once, on stderr."""
    if _state["timer"] is timer:
        _state["timer"] = None
    _say("timer:%s" % type(e).__name__, "the step timer failed (%s: %s) and is off; the job runs as before"
         % (type(e).__name__, e), who="epochfs")


def _timer_epoch_start(it, loader):
    timer = _state["timer"]
    if timer is None:
        return
    try:
        timer.epoch_start(it, loader)
    except Exception as e:
        _timer_failed(timer, e)


def _timer_next(it, orig_next):
    """The armed timer's next() in place of IT's __next__ (set_timer()). A
    failure of the timer's own disarms it: the batch it fetched is
    returned all the same, or fetched now if it had not been. What torch
    raises (StopIteration, a worker's error) passes through as it is, and
    so does a StopIteration of the timer's (it ends a replayed epoch)."""
    timer = _state["timer"]
    got = []
    raised = []

    def fetch(i):
        try:
            b = orig_next(i)
        except BaseException as e:
            raised.append(e)
            raise
        got.append(b)
        return b

    try:
        return timer.next(it, fetch)
    except StopIteration:
        raise                           # the epoch's end: torch's, or the timer's replay ending it
    except Exception as e:
        if raised and raised[-1] is e:
            raise                       # torch's own
        _timer_failed(timer, e)
    if got:
        return got[-1]
    if raised:
        raise raised[-1]                # torch's, which the timer swallowed and replaced
    return orig_next(it)


def install(publish=True, timer=None, dataloader=None):
    """Arms the hook in this process: PUBLISH tells mounts each epoch's
    order (epochfs-run); TIMER, a _timing.Timer, times each step
    (epochfs-analyze). DATALOADER is torch.utils.data.dataloader (imported
    here when not given). Arming twice only adds what the second call
    asks."""
    _state["publish"] = _state["publish"] or publish
    if timer is not None:
        set_timer(timer)
    if _state["installed"]:
        return
    if dataloader is None:
        import torch.utils.data.dataloader as dataloader
    _patch(dataloader)
    _state["installed"] = True


def boot(dataloader):
    """Called by the boot shim right after torch's DATALOADER module ran:
    arms what the environment asks for (epochfs-analyze's timer, which
    arms the order hook too with --order; else epochfs-run's order hook)."""
    if os.environ.get("EPOCHFS_ANALYZE_OUT"):
        from . import _timing
        _timing.install_from_env(dataloader)
    elif os.environ.get("EPOCHFS_RUN") == "1":
        install(dataloader=dataloader)
