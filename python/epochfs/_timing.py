"""The step timer epochfs-analyze puts into a training process (armed by
the same start-up hook as epochfs-run's order hook, and only once the job
imports torch's DataLoader: see _boot/sitecustomize.py and _hook.py).

The first DataLoader the job iterates is measured; the others run as
before. Each step of it splits in two: the time inside the iterator's
__next__ (the data stall: the main process waits for a batch) and the rest,
from a batch's return to the next call (compute: the training step). An
epoch runs from its iterator's start (worker start-up included, a real
cost of every epoch without persistent workers) to its StopIteration.

The job runs in one of three modes (EPOCHFS_ANALYZE_MODE), each for a
bounded window, after which the timer writes its records, stops the
loader's workers and ends the process with status 0:
  as-is    the job as it is: WARMUP epochs pass unmeasured (the caches
           fill), then EPOCHS whole epochs or STEPS steps are measured;
  warm     before the epoch starts, up to WARM_FILES of the window's files
           (and WARM_BYTES), chosen across the sizes of its first
           WARM_POOL files, are copied to a tmpfs directory and every item
           of the window pointed at one of the copies, so the steps
           prepare real files with nothing to fetch: what is left of a
           step is compute and preparation (a dataset that cannot be
           pointed gets those files read into the page cache, and only
           their steps measured);
  crowd    the warm run again, its steps in blocks of ALT_BLOCK that
           alternate between all the job's CPUs and only PIN_CPUS (the
           main process and the workers, every thread of each): the steps
           of the two phases, a few seconds apart, give what more workers
           than cores cost each item's preparation without the machine's
           drift between runs. A loader with fewer workers than WORKERS
           gets that many where they fit (WORKER_BYTES each, in half the
           memory free then; a loader without workers is not changed);
  compute  the first REPLAY batches are taken from the loader, unmeasured,
           and its workers stopped; then every step of that epoch is
           handed one of them again, so nothing is fetched or prepared:
           what is left is compute (DS-Analyzer's synthetic-data run, with
           no change to the script).

Records go, one JSON object a line, to EPOCHFS_ANALYZE_OUT (appended);
their kinds and fields are declared in _records.py: "start" (the loader's
shape and a sample of its files), "warm", "epoch" (every epoch, measured
or not), "window" (the measured totals, with the CPU seconds of the
loader's workers and the main process, the mount's counters before and
after when EPOCHFS_ANALYZE_MOUNT is set, and the job's memory: its memory
cgroup and the pressure stall figures at each end of the window, the least
room seen in between, the major faults of the main process and its
workers, and the epochfs daemon's resident memory).

In as-is mode nothing here draws from any random stream, and no batch,
index or value the job sees changes. The warm run takes the measured
epoch's indices by the order hook's rules (_hook.sampler_plan), so a sampler
without a length or of the job's own is never drained. Standard library
only.
"""
import atexit
import json
import os
import sys
import threading
import time
import weakref

from . import _hook, _memory, _records

SAMPLE_FILES = 512          # files named in "start", for the storage probe (>= 4 s of a slow disk)
WARM_FILES = 64             # files the warm run copies to memory, at most
WARM_POOL = 1024            # of the window's first files, the sizes the copies are chosen across
ALT_BLOCK = 10              # crowd run: steps per phase
ALT_SETTLE = 4              # crowd run: steps after a switch not counted (batches made in the other phase)


def _length(x, default=None):
    """len(X), or DEFAULT where X has none (an infinite sampler) or will not
    say; also DEFAULT for X None."""
    if x is None:
        return default
    try:
        return len(x)
    except Exception:
        return default


def _worker_pids(it):
    """The process ids of DataLoader iterator IT's workers (none for an
    iterator without, or None)."""
    return [p for p in (getattr(w, "pid", None) for w in getattr(it, "_workers", None) or []) if p]


def _pin(pids, cpus):
    """Every thread of every process in PIDS to CPUS (quietly skipping
    the ones that are gone)."""
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir("/proc/%d/task" % pid)]
        except (OSError, ValueError):
            tids = [pid]
        for tid in tids:
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:
                pass


def _sample_by_size(pool, n, budget):
    """Up to N (index, path) pairs of POOL, of at most BUDGET bytes together
    (at least one), spread evenly across POOL's file sizes: the copies the
    warm run prepares over and over then cost what the window's files cost
    on average (a file's decode time follows its size), from few of them.
    The order of POOL is kept for the pairs chosen."""
    sized = sorted(((_file_size(p), k) for k, (_, p) in enumerate(pool)))
    if not sized:
        return []
    while n > 1:
        pick = sorted({sized[int((j + 0.5) * len(sized) / n)][1] for j in range(n)})
        total = sum(_file_size(pool[k][1]) for k in pick)
        if total <= budget:
            return [pool[k] for k in pick]
        n = max(1, min(n - 1, int(n * budget / total)))
    return [pool[sized[len(sized) // 2][1]]]


def _cpu_of(pid):
    """CPU seconds (user + system) of process PID, or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _mount_stats(mount):
    if not mount:
        return None
    try:
        with open(os.path.join(mount, ".epochfs", "stats.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _file_size(path):
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _read_all(paths, threads=4):
    """Reads PATHS whole (into the page cache, or the mount's caches)."""
    todo = list(paths)
    lock = threading.Lock()
    done = [0]

    def work():
        buf = bytearray(1 << 20)
        while True:
            with lock:
                if not todo:
                    return
                p = todo.pop()
            try:
                with open(p, "rb", buffering=0) as f:
                    while True:
                        n = f.readinto(buf)
                        if not n:
                            break
                        with lock:
                            done[0] += n
            except OSError:
                pass
    ts = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return done[0]


def _first_tensor(batch):
    """BATCH's first tensor-like member (the images of an (images, labels)
    batch), or what is left after four levels of lists and dicts."""
    x = batch
    for _ in range(4):
        if isinstance(x, (list, tuple)) and x:
            x = x[0]
        elif isinstance(x, dict) and x:
            x = next(iter(x.values()))
        else:
            break
    return x


def _batch_shape(batch):
    """([dims], dtype name) of BATCH's first tensor-like member, or None.
    Reads attributes only."""
    x = _first_tensor(batch)
    shape = getattr(x, "shape", None)
    if shape is None:
        return None
    try:
        dims = [int(d) for d in shape]
    except (TypeError, ValueError):
        return None
    return dims, str(getattr(x, "dtype", "")).replace("torch.", "")


def _batch_items(batch):
    """How many samples BATCH holds (the first dimension of its first
    tensor-like member), or None."""
    shape = getattr(_first_tensor(batch), "shape", None)
    if shape is not None and len(shape):
        return int(shape[0])
    return None


def _setter(ds):
    """A function (index, path) that points item INDEX of dataset DS at
    PATH (its label and the rest unchanged), or None. The same datasets
    as _hook._resolver: samples/imgs/files, Subset, ConcatDataset."""
    try:
        from torch.utils.data import ConcatDataset, Subset
    except ImportError:
        return None
    if isinstance(ds, Subset):
        inner = _setter(ds.dataset)
        return None if inner is None else (lambda i, p: inner(int(ds.indices[i]), p))
    if isinstance(ds, ConcatDataset):
        parts = [_setter(d) for d in ds.datasets]
        if any(x is None for x in parts):
            return None
        cum = list(ds.cumulative_sizes)

        def concat(i, p):
            k, j = _hook.concat_part(cum, i)
            parts[k](j, p)
        return concat
    lists = [getattr(ds, a) for a in ("samples", "imgs", "files") if isinstance(getattr(ds, a, None), list)]
    if not lists:
        return None

    def put(i, p):
        for seq in {id(x): x for x in lists}.values():
            old = seq[i]
            if isinstance(old, tuple):
                seq[i] = (p,) + old[1:]
            elif isinstance(old, list):
                seq[i] = [p] + old[1:]
            else:
                seq[i] = p
    return put


class Timer:
    """Times the steps of the first DataLoader a process iterates (see the
    module's text). Built from the environment by from_env()."""

    def __init__(self, out, mode="as-is", warmup=0, epochs=1, steps=0, warm_bytes=0,
                 replay=2, mount=None, exit_when_done=True, workers=0, worker_bytes=0, pin_cpus=None):
        if mode not in ("as-is", "warm", "compute", "crowd"):
            raise ValueError("unknown mode %r" % mode)
        self.out = out
        self.crowd = mode == "crowd"            # a warm run with WORKERS workers
        mode = "warm" if self.crowd else mode
        self.mode = mode
        self.workers = workers if self.crowd else 0
        self.worker_bytes = worker_bytes
        self.workers_asked = None               # the loader's own workers (crowd)
        self.pin_cpus = sorted(pin_cpus) if pin_cpus and self.crowd else None
        self.alt = None                         # the crowd run's phases
        self.warmup = warmup if mode == "as-is" else 0
        self.epochs = epochs
        self.steps = steps
        self.warm_bytes = warm_bytes
        self.replay_keep = max(1, replay)
        self.mount = mount
        self.exit_when_done = exit_when_done
        self.loader = None          # weakref to the measured DataLoader
        self.epoch = -1
        self.cur = None             # the epoch under way
        self.win = None             # the window's totals, once it began
        self.step_limit = 0         # steps the window measures (0: by epochs)
        self.replay = []
        self.replay_i = 0
        self.batch_shape = None     # (shape, dtype) of the first batch's first tensor
        self.finished = False
        self.cleanup = []           # directories to remove when the job ends
        self.lock = threading.Lock()

    @classmethod
    def from_env(cls, env=os.environ):
        return cls(env["EPOCHFS_ANALYZE_OUT"], env.get("EPOCHFS_ANALYZE_MODE", "as-is"),
                   int(env.get("EPOCHFS_ANALYZE_WARMUP", "0")),
                   int(env.get("EPOCHFS_ANALYZE_EPOCHS", "1")),
                   int(env.get("EPOCHFS_ANALYZE_STEPS", "0")),
                   int(env.get("EPOCHFS_ANALYZE_WARM_BYTES", "0")),
                   int(env.get("EPOCHFS_ANALYZE_REPLAY", "2")),
                   env.get("EPOCHFS_ANALYZE_MOUNT") or None,
                   workers=int(env.get("EPOCHFS_ANALYZE_WORKERS", "0")),
                   worker_bytes=int(env.get("EPOCHFS_ANALYZE_WORKER_BYTES", "0")),
                   pin_cpus=[int(c) for c in env.get("EPOCHFS_ANALYZE_PIN", "").split(",") if c.strip()])

    # ---- records ----------------------------------------------------------

    def _write(self, kind, **fields):
        """Appends a record of KIND (a _records kind) with FIELDS. One that
        cannot be made or written is said once on stderr and left out: the
        job goes on, and the report says what it lacks."""
        try:
            line = _records.dumps(kind.make(**fields)).encode()
            with self.lock:
                fd = os.open(self.out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, line)
                finally:
                    os.close(fd)
        except (_records.RecordError, TypeError, ValueError, OSError) as e:
            _hook._say("record:%s" % kind.name, "%s record not written (%s: %s)" % (kind.name, type(e).__name__, e),
                       who="epochfs-analyze")

    def _mine(self, loader):
        if self.loader is None:
            self.loader = weakref.ref(loader)
            if self.crowd:
                self._crowd(loader)
            self._start_record(loader)
        return self.loader() is loader

    def _crowd(self, loader):
        """crowd mode, before the loader's first iterator reads its worker
        count: WORKERS workers instead of the loader's own, as many of the
        extra ones as fit in half the memory free now at WORKER_BYTES each
        (none: the loader is left as it is, and the record says so)."""
        asked = getattr(loader, "num_workers", 0) or 0
        self.workers_asked = asked
        if asked <= 0 or self.workers <= asked:
            return
        target = self.workers
        if self.worker_bytes > 0:
            target = min(target, asked + int(_memory.room() * 0.5 // self.worker_bytes))
        if target > asked:
            try:
                loader.num_workers = target
            except (AttributeError, ValueError):
                pass

    def _start_record(self, loader):
        steps = _length(loader)
        items = _length(loader.sampler)
        files, sizes = [], []
        resolve = _hook._resolver(loader.dataset)
        n = len(loader.dataset) if hasattr(loader.dataset, "__len__") else 0
        if resolve is not None and n:
            k = min(SAMPLE_FILES, n)
            for j in range(k):                  # evenly spaced: no random draw
                p = resolve(j * n // k)
                if p is not None:
                    files.append(os.path.abspath(p))
                    sizes.append(_file_size(p))
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = os.cpu_count() or 1
        batch_size = getattr(loader, "batch_size", None)
        self._write(_records.START, mode="crowd" if self.crowd else self.mode,
                    workers=int(getattr(loader, "num_workers", 0) or 0), workers_asked=self.workers_asked,
                    batch_size=None if batch_size is None else int(batch_size), steps_per_epoch=steps,
                    items_per_epoch=items, dataset_items=n or None,
                    dataset=type(loader.dataset).__name__, mapped=resolve is not None,
                    files=files, mean_file_bytes=(sum(sizes) / len(sizes)) if sizes else None,
                    cpus=cpus, persistent_workers=bool(getattr(loader, "persistent_workers", False)),
                    warmup=self.warmup, epochs=self.epochs, steps=self.steps)

    # ---- called by the hook -----------------------------------------------

    def epoch_start(self, it, loader):
        if not self._mine(loader):
            return
        now = time.perf_counter()
        if self.cur is not None and not self.cur.get("ended"):
            self._end_epoch(now, complete=False)    # the job left an epoch half done
        self.epoch += 1
        self.cur = {"epoch": self.epoch, "t0": now, "last": None, "wait": 0.0, "compute": 0.0,
                    "steps": 0, "items": 0, "startup": None, "it": weakref.ref(it),
                    "measured": False, "replayed": 0}
        if self.win is None and self.epoch >= self.warmup and not self.finished:
            self._begin_window(it)
        if self.win is not None and not self.finished:
            self.cur["measured"] = True
            if self.mode == "warm" and not self.win.get("warmed"):
                self._warm(it, loader)

    def _warm(self, it, loader):
        """warm mode, at the measured epoch's start, before the loader's
        workers are forked (they take the dataset as it is then): learns the
        epoch's indices where the order hook's rules allow (_hook.sampler_plan:
        a "take" sampler is drawn here, from an iterator of its own, and the
        loader is handed the same list through the hook; a "copy" one is
        read from a copy and left to draw for itself), copies a sample of
        the window's files to memory, and points every item of the window
        at one of the copies (its label and transforms unchanged). The steps
        then prepare real files of the dataset's mix with nothing to fetch,
        for a whole epoch in little memory. A dataset that cannot be pointed
        elsewhere has the window's first files read into the page cache
        instead, and only those steps measured; a sampler whose indices
        cannot be had ahead (no length, or not torch's) is never drawn: the
        window is then measured unwarmed."""
        self.win["warmed"] = True
        t0 = time.perf_counter()
        resolve = _hook._resolver(loader.dataset)
        indices = None
        try:
            sampler = loader._index_sampler
            how, n = _hook.sampler_plan(sampler)
            if how is not None and n <= _hook.MAX_ORDER and resolve is not None:
                indices = list(iter(sampler)) if how == "take" else _hook.copy_order(sampler)
        except Exception:
            indices = None
        if resolve is None or indices is None:
            self._write(_records.WARM, mapped=False, files=0, bytes=0, steps=0, seconds=0.0)
            return
        if how == "take":
            it._epochfs_preset = indices
        # The copies are memory the job's cgroup pays for and cannot
        # reclaim: at most a quarter of what is free now (before the workers).
        budget = min(self.warm_bytes or (1 << 62), int(_memory.room() * 0.25))
        want = self.steps or len(indices)
        window, steps = [], 0
        for b in indices[:want]:
            group = b if isinstance(b, (list, tuple)) else [b]
            got = [(int(i), resolve(int(i))) for i in group]
            window.extend((i, p) for i, p in got if p is not None)
            steps += 1
        sample = _sample_by_size(window[:WARM_POOL], WARM_FILES, budget)
        method, nbytes, copies = self._to_memory(loader.dataset, sample, window)
        if method == "read":            # only the files read are warm: only their steps count
            steps, n = 0, 0
            for b in indices[:want]:
                n += len(b) if isinstance(b, (list, tuple)) else 1
                if n > len(sample):
                    break
                steps += 1
            steps = max(1, steps)
        self.step_limit = steps
        dt = time.perf_counter() - t0
        # The warming is not the job's: the epoch and the window start after
        # it, and so do the window's memory readings.
        self.cur["t0"] += dt
        self.win["t0"] += dt
        self._memory_mark(it)
        self._write(_records.WARM, mapped=True, files=copies, bytes=nbytes, steps=steps, items=len(window),
                    seconds=dt, of_steps=len(indices), method=method)

    def _to_memory(self, dataset, sample, window):
        """Copies the files of SAMPLE ((index, path) pairs) to a tmpfs
        directory and points every item of WINDOW at one of the copies in
        turn ("tmpfs"); where that cannot be done, reads SAMPLE's files
        into the page cache ("read"). Returns (method, bytes, files)."""
        setter = _setter(dataset)
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        if setter is not None and base is not None and sample:
            import shutil
            import tempfile
            d = tempfile.mkdtemp(prefix="epochfs-analyze-warm-", dir=base)
            self.cleanup.append(d)
            done = 0
            try:
                copies = []
                for k, (_, p) in enumerate(sample):
                    q = os.path.join(d, "%08d%s" % (k, os.path.splitext(p)[1]))
                    shutil.copyfile(p, q)
                    done += _file_size(q)
                    copies.append(q)
                for j, (i, _) in enumerate(window):
                    setter(i, copies[j % len(copies)])
                return "tmpfs", done, len(copies)
            except OSError:
                shutil.rmtree(d, ignore_errors=True)
        return "read", _read_all([p for _, p in sample]), len(sample)

    def next(self, it, orig):
        cur = self.cur
        if cur is None or cur["it"]() is not it:
            return orig(it)
        replaying = self.mode == "compute" and len(self.replay) >= self.replay_keep
        if self.finished and not replaying:
            return orig(it)
        t0 = time.perf_counter()
        if cur["last"] is not None:
            cur["compute"] += t0 - cur["last"]
            if self.win is not None and cur["measured"] and "first_compute" not in self.win:
                # The window's first step: in a process's first epoch it
                # holds one-time costs (CUDA's start, cuDNN's choices).
                self.win["first_compute"] = t0 - cur["last"]
        if replaying:
            # Once replay began, the job's epochs keep their length but
            # never fetch again (also after the window, if the job goes on).
            if it._num_yielded + cur["replayed"] >= _length(it, float("inf")):
                self._end_epoch(time.perf_counter(), complete=True)
                raise StopIteration
            batch = self.replay[self.replay_i % len(self.replay)]
            self.replay_i += 1
            cur["replayed"] += 1
            if self.finished:
                return batch
        else:
            try:
                batch = orig(it)
            except StopIteration:
                self._end_epoch(time.perf_counter(), complete=True)
                raise
            if self.mode == "compute" and self.win is not None:
                # Taken for replay; the steps that fetched them are not measured.
                self.replay.append(batch)
                if len(self.replay) == self.replay_keep:
                    # Nothing is fetched from here on: the workers, their
                    # memory and the batches they prepare ahead would only
                    # squeeze a job at its memory limit (a daemon beside it
                    # was killed for it). Their shutdown is not a step's
                    # compute: the window starts after it.
                    self._stop_workers(it)
                    self._restart_window(time.perf_counter())
                cur["last"] = time.perf_counter()
                return batch
        t1 = time.perf_counter()
        if cur["last"] is None:
            cur["startup"] = t1 - cur["t0"]
            cur["wait"] += t1 - cur["t0"]
        else:
            cur["wait"] += t1 - t0
        cur["last"] = t1
        cur["steps"] += 1
        if self.batch_shape is None:
            self.batch_shape = _batch_shape(batch)
        n = _batch_items(batch)
        cur["items"] += n if n is not None else (getattr(self.loader(), "batch_size", None) or 1)
        if self.win is not None and cur["measured"]:
            self.win["steps"] += 1
            if self.win["steps"] % 16 == 1:
                # A worker's memory, at its largest seen (the workers are
                # gone once an epoch ends): what one more would need. And
                # the job's room at its tightest (batches come and go).
                m = self._worker_private(it)
                if m is not None:
                    self.win["worker_private"] = max(m, self.win.get("worker_private") or 0)
                self._room_seen(_memory.room())
            if self.win["steps"] == self.win["skip"]:
                # The first batches come out of the workers together, one
                # each: past them, the loader runs at its steady rate.
                self.win["steady_t0"] = t1
            if self.pin_cpus and self.win["steps"] >= self.win["skip"]:
                self._alternate(it, t1)
            if self.step_limit and self.win["steps"] >= self.step_limit:
                self._finish(it, t1, complete=True)
        return batch

    # ---- the window -------------------------------------------------------

    def _alternate(self, it, t):
        """crowd mode, at each steady step's end (T): the step's time goes
        to the phase it ran in, past the first ALT_SETTLE steps after a
        switch; every ALT_BLOCK steps the job and its workers move to the
        other phase's CPUs."""
        a = self.alt
        if a is None:
            full = sorted(os.sched_getaffinity(0))
            a = self.alt = {"full": full, "phase": "full", "n": 0, "prev": t,
                            "acc": {"full": [0, 0.0], "pinned": [0, 0.0]}}
            return
        if a["n"] >= ALT_SETTLE:
            a["acc"][a["phase"]][0] += 1
            a["acc"][a["phase"]][1] += t - a["prev"]
        a["prev"] = t
        a["n"] += 1
        if a["n"] >= ALT_BLOCK:
            a["phase"] = "pinned" if a["phase"] == "full" else "full"
            a["n"] = 0
            _pin([os.getpid()] + _worker_pids(it), self.pin_cpus if a["phase"] == "pinned" else a["full"])

    @staticmethod
    def _worker_private(it):
        """The mean memory of its own (Private_Dirty: what it wrote, not
        what it shares with the process that forked it) of IT's worker
        processes, bytes, or None: what one more worker would need."""
        got = []
        for pid in _worker_pids(it):
            try:
                with open("/proc/%d/smaps_rollup" % pid) as f:
                    for line in f:
                        if line.startswith("Private_Dirty:"):
                            got.append(int(line.split()[1]) * 1024)
            except (OSError, ValueError):
                pass
        return sum(got) / len(got) if got else None

    def _room_seen(self, room):
        if room is not None and (self.win.get("room_min") is None or room < self.win["room_min"]):
            self.win["room_min"] = room

    @staticmethod
    def _faults_now(it):
        """Major faults so far: this process's, its reaped children's, and
        each live worker's."""
        me = _memory.faults() or (0, 0)
        workers = {}
        for pid in _worker_pids(it):
            f = _memory.faults(pid)
            if f is not None:
                workers[pid] = f[0]
        return {"self": me[0], "children": me[1], "workers": workers}

    def _memory_mark(self, it):
        """The window's memory readings start here (again): at its start,
        and past the warm run's copying, which is not the job's."""
        snap = _memory.snapshot()
        self.win["mem0"] = snap
        self.win["faults0"] = self._faults_now(it)
        self.win["room_min"] = None
        self._room_seen(snap.get("room"))

    def _cpu_now(self, it):
        t = os.times()
        workers = {}
        for pid in _worker_pids(it):
            c = _cpu_of(pid)
            if c is not None:
                workers[pid] = c
        return {"self": t.user + t.system, "children": t.children_user + t.children_system,
                "workers": workers}

    def _begin_window(self, it):
        self.step_limit = self.steps
        loader = self.loader()
        self.win = {"t0": self.cur["t0"], "steps": 0, "epochs": [], "cpu0": self._cpu_now(it),
                    "stats0": _mount_stats(self.mount),
                    "skip": max(1, getattr(loader, "num_workers", 0) or 0), "first_epoch": self.epoch}
        self.win["daemon_cpu0"] = self._daemon_cpu(self.win["stats0"])
        self._memory_mark(it)

    def _restart_window(self, t):
        """compute mode: the window starts once the replay batches are taken."""
        self.cur["t0"] = t
        self.cur["wait"] = self.cur["compute"] = 0.0
        self.cur["steps"] = self.cur["items"] = 0
        self.cur["startup"] = 0.0
        self.win["t0"] = t
        self.win["skip"] = 0                # replayed steps have no start-up
        self.win.pop("first_compute", None)
        self.win["steady_t0"] = t
        self._memory_mark(self.cur["it"]())
        # Within this epoch: a next epoch's iterator would start workers
        # again, and the compute per step needs no more than one epoch.
        n = _length(self.cur["it"](), 1)
        if n is not None:           # an epoch without a length ends with the job, or --steps
            left = max(1, n - self.replay_keep)
            self.step_limit = min(self.step_limit, left) if self.step_limit else left

    @staticmethod
    def _daemon_cpu(stats):
        pid = int((stats or {}).get("daemon_pid") or 0)
        return _cpu_of(pid) if pid else None

    def _end_epoch(self, now, complete):
        cur = self.cur
        if cur is None or cur.get("ended"):
            return
        cur["ended"] = True
        ep = {"epoch": cur["epoch"], "measured": cur["measured"], "complete": complete,
              "seconds": now - cur["t0"], "wait": cur["wait"], "compute": now - cur["t0"] - cur["wait"],
              "steps": cur["steps"], "items": cur["items"], "startup": cur["startup"]}
        self._write(_records.EPOCH, **ep)
        if cur["measured"] and complete and self.win is not None:
            self.win["epochs"].append(ep)
            if not self.step_limit and len(self.win["epochs"]) >= self.epochs:
                self._finish(cur["it"](), now, complete=True)

    def _finish(self, it, now, complete):
        if self.finished:
            return
        cur, win = self.cur, self.win
        if cur is not None and not cur.get("ended") and cur["measured"]:
            self._end_epoch(now, complete=False)
        self.finished = True
        cpu1 = self._cpu_now(it)
        cpu0 = win["cpu0"]
        worker_cpu = cpu1["children"] - cpu0["children"]
        for pid, c in cpu1["workers"].items():
            worker_cpu += c - cpu0["workers"].get(pid, 0.0)
        alt = None
        if self.alt is not None:
            a = self.alt
            _pin([os.getpid()] + _worker_pids(it), a["full"])
            alt = {"cpus_full": len(a["full"]), "cpus_pinned": len(self.pin_cpus),
                   "full_steps": a["acc"]["full"][0], "full_seconds": a["acc"]["full"][1],
                   "pinned_steps": a["acc"]["pinned"][0], "pinned_seconds": a["acc"]["pinned"][1]}
        stats1 = _mount_stats(self.mount)
        d1 = self._daemon_cpu(stats1)
        mem1 = _memory.snapshot()
        self._room_seen(mem1.get("room"))
        f0, f1 = win["faults0"], self._faults_now(it)
        # Reaped workers' faults are in "children" whole: those counted
        # at the start come off again.
        faults = (f1["self"] - f0["self"]) + (f1["children"] - f0["children"])
        faults += sum(n - f0["workers"].get(pid, 0) for pid, n in f1["workers"].items())
        faults -= sum(n for pid, n in f0["workers"].items() if pid not in f1["workers"])
        dpid = int((stats1 or {}).get("daemon_pid") or 0)
        eps = win["epochs"]
        wait = sum(e["wait"] for e in eps)
        steps = sum(e["steps"] for e in eps)
        items = sum(e["items"] for e in eps)
        if cur is not None and cur["measured"] and (not eps or eps[-1]["epoch"] != cur["epoch"]):
            wait += cur["wait"]
            steps += cur["steps"]
            items += cur["items"]
        secs = now - win["t0"]
        st0 = win.get("steady_t0")
        steady = {"steady_seconds": now - st0, "steady_steps": steps - win["skip"],
                  "startup_seconds": st0 - win["t0"]} if st0 is not None and steps > win["skip"] else {}
        self._write(_records.WINDOW, mode="crowd" if self.crowd else self.mode, complete=complete,
                    seconds=secs, worker_private_bytes=win.get("worker_private"), alternate=alt,
                    wait=wait, compute=secs - wait, steps=steps, items=items,
                    epochs_complete=len(eps), worker_cpu=worker_cpu,
                    main_cpu=cpu1["self"] - cpu0["self"],
                    daemon_cpu=(d1 - win["daemon_cpu0"]) if d1 is not None and
                    win["daemon_cpu0"] is not None else None,
                    stats_before=win["stats0"], stats_after=stats1, skip=win["skip"],
                    first_step_compute=win.get("first_compute"), first_epoch=win["first_epoch"],
                    batch_shape=self.batch_shape[0] if self.batch_shape else None,
                    batch_dtype=self.batch_shape[1] if self.batch_shape else None,
                    memory_before=win["mem0"], memory_after=mem1, memory_room_min=win.get("room_min"),
                    major_faults=max(0, faults), daemon_rss_bytes=_memory.rss(dpid) if dpid else None,
                    daemon_memory_shared=_memory.same_cgroup(dpid) if dpid else None, **steady)
        if self.exit_when_done:
            self._exit(it)

    def at_exit(self):
        """The job ends before its window did (it failed, or had fewer
        epochs): the epoch under way is recorded as cut short."""
        if not self.finished and self.cur is not None and not self.cur.get("ended"):
            self._end_epoch(time.perf_counter(), complete=False)
        self._clean()

    def _clean(self):
        import shutil
        for d in self.cleanup:
            shutil.rmtree(d, ignore_errors=True)
        self.cleanup = []

    @staticmethod
    def _stop_workers(*its):
        """Stops the DataLoader workers of the iterators ITS (their own
        shutdown, as at an epoch's end); quietly nothing where it cannot."""
        for obj in its:
            stop = getattr(obj, "_shutdown_workers", None)
            if stop is not None:
                try:
                    stop()
                except Exception:
                    pass

    def _exit(self, it):
        """The window is measured: the rest of the job is not needed."""
        self._stop_workers(it, self.cur and self.cur["it"]())
        try:
            self._clean()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(0)


def install_from_env(dataloader=None):
    """Arms the timer when epochfs-analyze asked for it (EPOCHFS_ANALYZE_OUT);
    DATALOADER as for _hook.install."""
    if not os.environ.get("EPOCHFS_ANALYZE_OUT"):
        return None
    timer = Timer.from_env()
    atexit.register(timer.at_exit)
    _hook.install(publish=os.environ.get("EPOCHFS_RUN") == "1", timer=timer, dataloader=dataloader)
    return timer
