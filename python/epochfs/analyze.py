"""epochfs-analyze [OPTIONS] DATADIR -- COMMAND [ARGS...]
       epochfs-analyze --from REPORT.json [--what-if K=V,...] [--json F] [--plot F]

Where a training job's time goes (compute, prep stall, fetch stall, memory
stall), and what more cache, memory, workers, cores, storage bandwidth,
nodes, prefetch or shared prep would buy. COMMAND runs unchanged, up to
four times, each for a bounded window (the job is stopped once its window
is measured):
  as-is    as it is (the first --warmup epochs unmeasured: caches fill);
  warm     the window's files read into memory first: no fetch stall;
  compute  batches taken once and handed again: no fetch, no prep;
  crowd    warm, for one epoch (or --steps), its steps alternating in
           blocks between all the CPUs and half as many as the job has
           workers: what workers beyond the cores cost, with no more
           memory than the warm run (a job with one worker gets a second
           one, where memory allows). Only when the job has workers, fewer
           than twice its CPUs, and a window (--steps, or an epoch) of the
           steps a ratio takes; its failure only leaves that cost out.
The first PyTorch DataLoader the job iterates is the one measured. DATADIR
is the directory its files are under: an epochfs mount (its counters are
read) or any directory (native).

options:
  --epochs N         whole epochs measured per run (default 1)
  --steps N          measure N steps instead of whole epochs
  --warmup N         epochs the as-is run lets pass first (default 1)
  --warm-mb N        at most N MiB of the job's files copied to memory for
                     the warm run (default 256; never over a quarter of the
                     memory free when the job starts)
  --runs LIST        which runs, of as-is,warm,compute,crowd (default all)
  --order            the as-is run tells the mount its order (as epochfs-run)
  --what-if K=V,...  a scenario to predict (repeatable); keys: cache (% of
                     the data, or bytes with K/M/G), workers, cores,
                     storage (MB/s), nodes, jobs, prefetch (on/off),
                     memory (+SIZE more for the job, -SIZE less, SIZE in
                     all, or same: the room it has now)
  --storage-mbps X   the storage's bandwidth (default: probed, O_DIRECT)
  --gpu-rate R       the training step's rate on the GPU, steps/s: the model's
                     compute (default: the compute run's, as measured here)
  --source DIR       where the data really is (default: the mount's SOURCE)
  --from FILE        no run: predict the --what-if scenarios (and the default
                     sweep) from a report written before with --json
  --json FILE        the report as JSON
  --plot FILE        what-if curves as .svg (or .png: rsvg-convert or
                     matplotlib draws it)
  -q, --quiet        only the report
  -v, --verbose      the model's fitted inputs and the memory pressure
                     figures in the report too
  -h, --help         this text
      --version      print the version
Exit status: 0, 2 for bad options, else COMMAND's when it failed (the
report then says what was measured before it did).
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import epochfs
from . import _memory, _mounts, _records
from ._model import Profile
from .run import job_env

MODES = _records.MODES
CROWD_MIN_STEPS = 12        # steps each crowd phase must measure for its ratio (two blocks past their settling)
CROWD_BLOCK, CROWD_SETTLE = 10, 4   # the timer's ALT_BLOCK and ALT_SETTLE (test_timing.py checks)
NOISE_FRACTION = 0.05       # a stall under this share of the epoch is none measurable (docs/analyze.md)
NOISE_MIN_SECONDS = 0.01    # ... or under this
MEM_RESERVE = 32 << 20     # the least a job short of memory is short of (the daemon's reserve, fs/core/memory.c)
try:
    PAGE = os.sysconf("SC_PAGE_SIZE")   # memory.stat counts pages
except (AttributeError, ValueError, OSError):
    PAGE = 4096
WHAT_IF_KEYS = ("cache", "workers", "cores", "storage", "nodes", "jobs", "prefetch", "memory")


class UsageError(Exception):
    pass


def _size(s):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    s = s.strip().lower().rstrip("b") or "x"
    if s[-1] in mult:
        return float(s[:-1]) * mult[s[-1]]
    return float(s)


def parse_what_if(text):
    """'cache=50%,workers=4,memory=+4G' -> {'cache': ('frac', 0.5),
    'workers': 4, 'memory': ('add', 4 << 30)}; memory=-1G is ('add',
    -1 << 30), memory=8G (no sign) ('total', 8 << 30): the job's memory in
    all, and memory=same ('same', 0): the room the job has now, its limit
    moved by what the scenario takes or gives back."""
    out = {}
    for part in text.split(","):
        if not part.strip():
            continue
        k, eq, v = part.partition("=")
        k, v = k.strip(), v.strip()
        if not eq or not v:
            raise UsageError("--what-if %s: expected KEY=VALUE" % part)
        if k not in WHAT_IF_KEYS:
            raise UsageError("--what-if: unknown key %r (keys: %s)" % (k, ", ".join(WHAT_IF_KEYS)))
        try:
            if k == "cache":
                out[k] = ("frac", float(v[:-1]) / 100) if v.endswith("%") else ("bytes", _size(v))
                if out[k][1] < 0:
                    raise ValueError
            elif k == "memory":
                if v == "same":
                    out[k] = ("same", 0.0)
                elif v[0] in "+-":
                    out[k] = ("add", _size(v[1:]) * (-1 if v[0] == "-" else 1))
                else:
                    out[k] = ("total", _size(v))
                    if out[k][1] <= 0:
                        raise ValueError
            elif k == "prefetch":
                if v not in ("on", "off", "1", "0", "yes", "no"):
                    raise ValueError
                out[k] = v in ("on", "1", "yes")
            elif k == "storage":
                out[k] = float(v) * 1e6
                if out[k] <= 0:
                    raise ValueError
            elif k == "cores":
                out[k] = float(v)
                if out[k] <= 0:
                    raise ValueError
            else:
                out[k] = int(v)
                if out[k] < (0 if k == "workers" else 1):
                    raise ValueError
        except ValueError:
            raise UsageError("--what-if %s=%s: not a valid value" % (k, v))
    if not out:
        raise UsageError("--what-if: empty scenario")
    return out


def parse_args(argv):
    o = {"epochs": 1, "steps": 0, "warmup": 1, "warm_mb": 256, "runs": list(MODES), "order": False, "what_if": [],
         "storage_bps": None, "source": None, "json": None, "plot": None, "quiet": False, "from": None,
         "gpu_rate": None, "verbose": False}
    argv = list(argv)
    pos = []
    while argv:
        a = argv.pop(0)
        if a == "--":
            break
        if a in ("-h", "--help"):
            return "help"
        if a == "--version":
            return "version"
        if a in ("-q", "--quiet"):
            o["quiet"] = True
        elif a in ("-v", "--verbose"):
            o["verbose"] = True
        elif a == "--order":
            o["order"] = True
        elif a.startswith("-"):
            name, eq, val = a.partition("=")
            if name not in ("--epochs", "--steps", "--warmup", "--warm-mb", "--runs", "--what-if", "--storage-mbps",
                            "--source", "--json", "--plot", "--from", "--gpu-rate"):
                raise UsageError("unknown option %s (see --help)" % a)
            if not eq:
                if not argv:
                    raise UsageError("%s needs a value" % name)
                val = argv.pop(0)
            try:
                if name in ("--epochs", "--steps", "--warmup", "--warm-mb"):
                    n = int(val)
                    if n < (1 if name in ("--epochs", "--warm-mb") else 0):
                        raise ValueError
                    o[name[2:].replace("-", "_")] = n
                elif name == "--gpu-rate":
                    o["gpu_rate"] = float(val)
                    if not 0 < o["gpu_rate"] < float("inf"):
                        raise ValueError
                elif name == "--storage-mbps":
                    o["storage_bps"] = float(val) * 1e6
                    if o["storage_bps"] <= 0:
                        raise ValueError
                elif name == "--runs":
                    runs = [r.strip() for r in val.split(",") if r.strip()]
                    if not runs or any(r not in MODES for r in runs):
                        raise ValueError
                    o["runs"] = [m for m in MODES if m in runs]
                elif name == "--what-if":
                    o["what_if"].append(parse_what_if(val))
                else:
                    o[name[2:]] = val
            except ValueError:
                raise UsageError("%s %s: not a valid value" % (name, val))
        else:
            pos.append(a)
    if o.get("from"):
        if pos or argv:
            raise UsageError("--from predicts from a report: no DATADIR or COMMAND with it")
        if o["plot"] and not o["plot"].endswith((".svg", ".png")):
            raise UsageError("--plot %s: the file must end in .svg or .png" % o["plot"])
        return o
    if len(pos) != 1:
        raise UsageError("expected one DATADIR before -- (usage: epochfs-analyze [OPTIONS] DATADIR -- COMMAND)")
    if not argv:
        raise UsageError("missing COMMAND after -- (usage: epochfs-analyze [OPTIONS] DATADIR -- COMMAND)")
    if o["plot"] and not o["plot"].endswith((".svg", ".png")):
        raise UsageError("--plot %s: the file must end in .svg or .png" % o["plot"])
    o["datadir"] = pos[0]
    o["command"] = argv
    return o


# ---- the runs -----------------------------------------------------------------

def run_mode(opts, mode, mount, env0, say, crowd=None):
    """Runs COMMAND once in MODE; CROWD: crowd_plan()'s dict for the crowd
    run. Returns (exit status, the timer's records)."""
    fd, out = tempfile.mkstemp(prefix="epochfs-analyze-", suffix=".jsonl")
    os.close(fd)
    env = dict(env0)
    env.update({"EPOCHFS_ANALYZE_OUT": out, "EPOCHFS_ANALYZE_MODE": mode,
                "EPOCHFS_ANALYZE_WARMUP": str(opts["warmup"] if mode == "as-is" else 0),
                "EPOCHFS_ANALYZE_EPOCHS": str(1 if mode == "crowd" else opts["epochs"]),
                "EPOCHFS_ANALYZE_STEPS": str(opts["steps"]),
                "EPOCHFS_ANALYZE_WARM_BYTES": str(opts["warm_mb"] << 20)})
    if crowd:
        env["EPOCHFS_ANALYZE_WORKERS"] = str(crowd["workers"])
        env["EPOCHFS_ANALYZE_WORKER_BYTES"] = str(int(crowd["worker_bytes"] or 0))
        env["EPOCHFS_ANALYZE_PIN"] = ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:crowd["cpus"]])
    if mount:
        env["EPOCHFS_ANALYZE_MOUNT"] = mount
    if mode == "as-is" and opts["order"]:
        env["EPOCHFS_RUN"] = "1"
    else:
        env.pop("EPOCHFS_RUN", None)
    say("run %s: %s" % (mode, " ".join(opts["command"])))
    t0 = time.monotonic()
    try:
        rc = subprocess.call(opts["command"], env=env)
    except OSError as e:
        os.unlink(out)
        raise UsageError("%s: %s" % (opts["command"][0], e.strerror))
    recs, bad = _records.read(out)
    os.unlink(out)
    # Not progress but a fault (the timer's or the file's): said even with -q.
    for b in bad[:5]:
        sys.stderr.write("epochfs-analyze: the %s run's records, %s; line left out\n" % (mode, b))
    if len(bad) > 5:
        sys.stderr.write("epochfs-analyze: the %s run's records: %d more lines left out\n" % (mode, len(bad) - 5))
    say("run %s: %.1f s, exit %d" % (mode, time.monotonic() - t0, rc))
    return rc, recs


# ---- the storage's bandwidth ------------------------------------------------

def find_source(mount, stats):
    pid = int((stats or {}).get("daemon_pid") or 0)
    if not pid:
        return None
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith("/") and os.path.isdir(target) and not target.startswith(("/dev", "/proc")):
            return target
    return None


def probe_storage(paths, seconds=4.0, threads=4):
    """Bytes/s of whole-file O_DIRECT reads of PATHS (no page cache), or
    None where O_DIRECT is refused (tmpfs: the data is in memory)."""
    import mmap
    todo = list(paths)
    lock = threading.Lock()
    got = [0, 0]
    deadline = time.monotonic() + seconds
    refused = [False]

    def work():
        buf = mmap.mmap(-1, 1 << 20)
        while time.monotonic() < deadline:
            with lock:
                if not todo:
                    return
                p = todo.pop()
            try:
                fd = os.open(p, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
            except OSError as e:
                if e.errno == 22:
                    refused[0] = True
                continue
            try:
                off = 0
                while True:
                    n = os.preadv(fd, [buf], off)
                    if n <= 0:
                        break
                    off += n
                    if n < len(buf):
                        break
                with lock:
                    got[0] += off
                    got[1] += 1
            except OSError as e:
                if e.errno == 22:
                    refused[0] = True
            finally:
                os.close(fd)
    t0 = time.monotonic()
    ts = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.monotonic() - t0
    if refused[0] and not got[0]:
        return None
    return got[0] / dt if dt > 0 and got[0] else None


# ---- from records to a breakdown ----------------------------------------------

def crowd_steps_needed(workers):
    """Steps a crowd run of WORKERS workers needs for its ratio: the first
    batch from each worker (the start-up), one step to begin, then four
    blocks of CROWD_BLOCK (full, pinned, full, pinned), each counting its
    steps past the first CROWD_SETTLE."""
    per_block = CROWD_BLOCK - CROWD_SETTLE
    blocks = 2 * -(-CROWD_MIN_STEPS // per_block)
    return max(1, workers) + 1 + blocks * CROWD_BLOCK - 1


def worker_bytes(results):
    """The memory one more DataLoader worker takes, from the warm (else
    the as-is) run: its own memory (Private_Dirty, the largest mean seen)
    and two batches in flight; 0 where not measured."""
    for m in ("warm", "as-is"):
        win = _records.first((results.get(m) or (0, []))[1], _records.WINDOW) or {}
        per = win.get("worker_private_bytes") or 0
        if not per:
            continue
        dims, dtype = win.get("batch_shape"), win.get("batch_dtype") or ""
        if dims:
            n = 1
            for d in dims:
                n *= int(d)
            per += 2 * n * (1 if "int8" in dtype or "bool" in dtype else 2 if "16" in dtype else 8 if "64" in dtype
                            else 4)
        return per
    return 0


def crowd_plan(results, steps=0):
    """How the crowd run crowds the job, from the runs before it:
    ({"workers", "cpus", "worker_bytes"}, None), or (None, why not). The
    job keeps its W workers, and its pinned phases run on max(1, W // 2) of
    its CPUs: twice as many workers as cores (or more), in the memory the
    warm run had. A job with one worker gets a second (pinned: one CPU),
    which the timer adds only where worker_bytes (a worker's own memory in
    the warm run and two batches in flight) fit. No crowd run where its
    window (STEPS, else an epoch) is too short for a ratio: it would only
    cost the time of a run."""
    start = None
    for m in MODES:
        start = start or _records.first((results.get(m) or (0, []))[1], _records.START)
    if start is None:
        return None, "no run before it saw the job's DataLoader"
    w, c = start.get("workers") or 0, start.get("cpus") or 1
    if w <= 0:
        return None, "the DataLoader has no workers (it prepares in the main process)"
    if w >= 2 * c:
        return None, "the job has %d workers already, twice the %d CPUs or more" % (w, c)
    workers = max(w, 2)
    need = crowd_steps_needed(workers)
    window = steps or start.get("steps_per_epoch") or 0
    if window and window < need:
        return None, "its window would be %d steps, and a ratio takes %d" % (window, need)
    return {"workers": workers, "cpus": max(1, min(c, workers // 2)), "worker_bytes": worker_bytes(results)}, None


def per_epoch(win, steps_per_epoch):
    """Seconds per epoch from a window: whole epochs when it has them, else
    its per-step time times the epoch's steps."""
    if not win or not win.get("steps"):
        return None
    if win.get("epochs_complete") and win["steps"] % max(1, steps_per_epoch) == 0:
        return win["seconds"] / win["epochs_complete"]
    # A window of steps: the epoch's start-up (workers starting, the first
    # batch from each) once, the steady steps after it scaled to the rest.
    if win.get("steady_steps", 0) >= 2:
        skip = win.get("skip", 0)
        return win["startup_seconds"] + win["steady_seconds"] / win["steady_steps"] * max(
            0, steps_per_epoch - skip)
    return None                     # too few steps past the start-up to tell a rate


def counter_delta(win, name):
    a, b = (win or {}).get("stats_before"), (win or {}).get("stats_after")
    if not a or not b or name not in a or name not in b:
        return None
    return b[name] - a[name]


def batch_shape(results):
    """(dims, dtype) of the measured loader's batches, from the runs'
    window records, or (None, None)."""
    for m in MODES:
        for r in _records.of_kind((results.get(m) or (0, []))[1], _records.WINDOW):
            if r.get("batch_shape"):
                return r["batch_shape"], r.get("batch_dtype") or ""
    return None, None


def gpu_probe(results):
    """What the GPU path can do with the job's batches: epochfs.gpu.probe's
    dict with "available": True, or {"available": False, "reason": ...}."""
    try:
        from . import gpu
    except ImportError as e:                 # a partial install
        return {"available": False, "reason": "epochfs.gpu: %s" % e}
    why = gpu.unavailable_reason()
    if why:
        return {"available": False, "reason": why}
    dims, dtype = batch_shape(results)
    if not dims or len(dims) != 4:
        return {"available": False, "reason": "the job's batches are not images (N, C, H, W): %s" % (dims,)}
    if dims[1] in (1, 3, 4):
        n, c, h, w = dims
    else:
        n, h, w, c = dims
    try:
        got = gpu.probe(n, h, w, c, dtype="float32" if "float" in (dtype or "") else "uint8")
    except (gpu.GpuUnavailable, ValueError, OSError) as e:
        return {"available": False, "reason": str(e)}
    got["available"] = True
    return got


def memory_of(win, steps_per_epoch, workers):
    """What memory cost a run, from its window's readings (the timer's
    snapshots at each end, _memory.snapshot), per epoch; None where the
    window has none. The stall: PSI counts the time in which some task of
    the job's cgroup waited for memory ("some") and the time in which no
    task that could run did anything else ("full"). In "full" the job made
    no progress; in the rest of "some", a few of its tasks waited while
    the others worked. The W workers are interchangeable servers, so one of
    W waiting costs about 1/W of that time: lost = full + (some - full) / W
    (a job without workers: some). Where PSI is the machine's (cgroup v1,
    or a job in the root cgroup), other processes' stalls are in it too:
    it counts only when the job's own cgroup refaulted or its processes
    took major faults in the window, else it is not the job's (0)."""
    w = win or {}
    a, b = w.get("memory_before"), w.get("memory_after")
    if not a or not b:
        return None
    secs = w.get("seconds") or 0.0
    ep = per_epoch(w, steps_per_epoch) or secs
    scale = ep / secs if secs > 0 else 1.0

    def delta(k, same=("dir",)):
        if a.get(k) is None or b.get(k) is None or any(a.get(x) != b.get(x) for x in same):
            return None
        return max(0, b[k] - a[k])
    refaults = delta("refaults")
    cg_faults = delta("major_faults")
    out = {"limit_bytes": b.get("limit"), "cgroup_version": b.get("version"), "usage_bytes": b.get("usage"),
           "room_min_bytes": w.get("memory_room_min"), "psi_scope": b.get("psi_scope"),
           "refault_bytes_per_epoch": refaults * PAGE * scale if refaults is not None else None,
           "cgroup_major_faults_per_epoch": cg_faults * scale if cg_faults is not None else None,
           "major_faults_per_epoch": w["major_faults"] * scale if w.get("major_faults") is not None else None,
           "daemon_rss_bytes": w.get("daemon_rss_bytes"), "daemon_in_job_cgroup": w.get("daemon_memory_shared"),
           "psi_some_seconds": None, "psi_full_seconds": None, "stall_seconds": None}
    some = delta("psi_some_us", ("psi_scope", "psi_dir"))
    full = delta("psi_full_us", ("psi_scope", "psi_dir"))
    if some is None:
        return out
    some = min(secs, some / 1e6)
    full = min(some, (full or 0) / 1e6)
    out["psi_some_seconds"], out["psi_full_seconds"] = some * scale, full * scale
    lost = full + (some - full) / max(1, workers)
    if b.get("psi_scope") == "machine" and not (refaults or w.get("major_faults")):
        lost = 0.0
        out["psi_not_the_jobs"] = True
    out["stall_seconds"] = lost * scale
    return out


def noise_floor(epoch, seen):
    """The least stall that is measured rather than noise: NOISE_FRACTION
    of the epoch, or the spread of one run's epochs where it measured more
    than one whole (the same run's epochs differ by that much with nothing
    changed), or NOISE_MIN_SECONDS, whichever is largest."""
    spread = 0.0
    for run in ("as-is", "warm"):
        eps = [e["seconds"] for e in seen if e["run"] == run and e.get("measured") and e.get("complete")]
        if len(eps) >= 2:
            spread = max(spread, max(eps) - min(eps))
    return max(NOISE_FRACTION * (epoch or 0.0), spread, NOISE_MIN_SECONDS)


def analyze(opts, results, storage_bps, mount_stats, gpu=None):
    """The breakdown and what-ifs from the runs' records. RESULTS: mode ->
    (exit code, records); GPU: gpu_probe()'s dict, or None (not probed).
    Returns the report's dict."""
    start = None
    for m in MODES:
        if m in results:
            start = _records.first(results[m][1], _records.START)
            if start:
                break
    if not start:
        return {"error": "no DataLoader was iterated: nothing to measure", "measured": {}}
    seen = [dict(r, run=m) for m in MODES if m in results for r in _records.of_kind(results[m][1], _records.EPOCH)]
    S = start.get("steps_per_epoch") or 0
    N = start.get("items_per_epoch") or (S * (start.get("batch_size") or 1))
    W = start.get("workers") or 0
    C = start.get("cpus") or (os.cpu_count() or 1)
    item_bytes = start.get("mean_file_bytes") or 0.0
    wins = {m: _records.first(results[m][1], _records.WINDOW) for m in results}
    asis, warm, comp = wins.get("as-is"), wins.get("warm"), wins.get("compute")
    rep = {"job": {"items_per_epoch": N, "steps_per_epoch": S, "workers": W, "cpus": C,
                   "batch_size": start.get("batch_size"), "dataset": start.get("dataset"),
                   "bytes_per_item": item_bytes, "data_bytes": item_bytes * N},
           "measured": {}, "epochs_seen": [{k: e.get(k) for k in ("run", "epoch", "seconds", "wait", "steps",
                                                                    "measured", "complete")} for e in seen]}
    T_a = per_epoch(asis, S)
    T_w = per_epoch(warm, S)
    crowd = None            # the crowd run's phases: calibrate()'s CROWD
    cstart = _records.first((results.get("crowd") or (0, []))[1], _records.START)
    alt = (wins.get("crowd") or {}).get("alternate")
    few = None              # the crowd run's phases measured too few steps for a ratio
    if (cstart and alt and alt["full_seconds"] > 0 and (cstart.get("workers") or 0) > alt["cpus_pinned"]):
        if min(alt["full_steps"], alt["pinned_steps"]) >= CROWD_MIN_STEPS:
            crowd = {"workers": cstart["workers"], "cores": alt["cpus_pinned"], "cores_full": alt["cpus_full"],
                     "ratio": (alt["pinned_seconds"] / alt["pinned_steps"])
                     / (alt["full_seconds"] / alt["full_steps"])}
        else:
            few = (alt["full_steps"], alt["pinned_steps"])
    c = (comp["compute"] / comp["steps"]) if comp and comp.get("steps") else None
    if c is None and warm and warm.get("steps"):
        c = warm["compute"] / warm["steps"]          # no compute run: the warm run's non-wait time
    meas = rep["measured"]
    mem_runs = {}
    for m, w in wins.items():
        if w:
            meas[m] = {"epoch_seconds": per_epoch(w, S), "wait_fraction": w["wait"] / w["seconds"]
                       if w["seconds"] > 0 else None, "steps": w["steps"], "complete": w.get("complete"),
                       "worker_cpu_per_item": w["worker_cpu"] / w["items"] if w.get("items") else None}
            wstart = _records.first(results[m][1], _records.START) or start
            got = memory_of(w, S, wstart.get("workers") or 0)
            if got is not None:
                mem_runs[m] = got
                meas[m]["memory_stall_seconds"] = got["stall_seconds"]
    epoch = T_a if T_a is not None else T_w
    compute_s = c * S if c is not None else None
    # Memory: the as-is run's stall is a part of its epoch; the warm run's
    # is taken off the warm epoch, which then stands for compute + prep
    # with the memory the job would need (an all-in-RAM run's epoch).
    M_a = (mem_runs.get("as-is") or {}).get("stall_seconds") or 0.0
    M_w = (mem_runs.get("warm") or {}).get("stall_seconds") or 0.0
    if T_w is not None:
        M_w = min(M_w, T_w)
    floor = noise_floor(epoch, seen)
    mem = None
    if T_a is not None:
        mem = min(M_a, T_a - compute_s) if compute_s is not None else min(M_a, T_a)
        mem = max(0.0, mem)
    # The warm run is the as-is one without fetching: where it came out
    # slower (the machine's drift; one-time costs in its first steps), there
    # is no fetch stall, and the stall is prep's up to the as-is epoch: the
    # parts never add up to more than the epoch.
    base_w = T_w - M_w if T_w is not None else None
    prep = fetch = None
    if base_w is not None and T_a is not None:
        t_w = min(base_w, T_a - mem)
        if compute_s is not None:
            prep = max(0.0, t_w - compute_s)
            fetch = max(0.0, T_a - compute_s - prep - mem)
        else:
            fetch = max(0.0, T_a - mem - base_w)
    elif base_w is not None and compute_s is not None:
        prep = max(0.0, base_w - compute_s)
    rep.update({"epoch_seconds": epoch, "compute_seconds": compute_s, "prep_stall_seconds": prep,
                "fetch_stall_seconds": fetch, "noise_floor_seconds": floor,
                # null where the as-is run read no memory figures (its stall is then in the others)
                "memory_stall_seconds": mem if "as-is" in mem_runs else None})
    # A warm run measured in its process's first epoch whose first step
    # took far longer than the others: one-time costs (a GPU's start) that
    # the as-is run's warm-up epoch keeps out of its own window.
    if warm and warm.get("first_epoch") == 0 and warm.get("first_step_compute") and c:
        first = warm["first_step_compute"]
        if first > 0.2 and first > 10 * c:
            rep.setdefault("notes", []).append(
                "the warm run's first step took %.2f s (a steady one %.1f ms): the job's start (CUDA, cuDNN's "
                "choices, compilation), counted as prep; --epochs %d spreads it over that many epochs"
                % (first, 1e3 * c, max(2, opts.get("epochs", 1) * 2)))
    if T_a is not None and T_w is not None and T_w > 1.05 * T_a:
        rep.setdefault("notes", []).append(
            "the warm run's epoch (%.2f s) came out %.0f%% longer than the as-is one (the machine's drift, or "
            "one-time costs in its first steps): no fetch stall measurable; --epochs %d measures more and "
            "evens it out" % (T_w, 100 * (T_w / T_a - 1), max(2, opts.get("epochs", 1) * 2)))
    fetched = None          # bytes the as-is run fetched from storage or peers, where a mount says
    if asis:
        rep["as_is_wait_seconds"] = asis["wait"] / asis["steps"] * S if asis["steps"] else None
        sb = counter_delta(asis, "storage_read_bytes")
        if sb is not None and asis.get("steps"):
            per = sb / asis["steps"] * S
            fetched = sb + (counter_delta(asis, "peer_read_bytes") or 0)
            rep["mount"] = {"storage_bytes_per_epoch": per,
                            "storage_fraction_of_data": per / (item_bytes * N) if item_bytes and N else None,
                            "storage_mbps": sb / asis["seconds"] / 1e6 if asis["seconds"] > 0 else None,
                            "cache_hit_bytes": counter_delta(asis, "cache_hit_bytes"),
                            "peer_read_bytes": counter_delta(asis, "peer_read_bytes"),
                            "prefetch_bytes": counter_delta(asis, "prefetch_bytes"),
                            "daemon_cpu_per_epoch": asis["daemon_cpu"] / asis["steps"] * S
                            if asis.get("daemon_cpu") is not None else None}
    if fetched == 0 and fetch and prep is not None:
        # The mount fetched nothing: the as-is epoch is compute, prep and
        # memory, and what the warm run came out shorter is prep's.
        rep["prep_stall_seconds"], rep["fetch_stall_seconds"] = prep + fetch, 0.0
    rep["none_measurable"] = _quiet(rep, fetched)
    rep["storage_mbps_probed"] = storage_bps / 1e6 if storage_bps else None
    # The memory figures of the as-is run, the warm run's stall beside them.
    ma = mem_runs.get("as-is") or mem_runs.get("warm")
    if ma is not None:
        rep["memory"] = dict(ma, stall_seconds=rep["memory_stall_seconds"],
                             warm_stall_seconds=M_w if "warm" in mem_runs else None)
    # The model's inputs.
    q = None
    src = warm if warm and warm.get("items") else asis
    if src and src.get("items"):
        if W > 0:
            q = src["worker_cpu"] / src["items"]
        else:
            q = max(0.0, src["main_cpu"] - (c or 0) * src["steps"]) / src["items"]
    if None in (q, c) or not storage_bps or not N or not S:
        rep["what_if"] = []
        rep["model"] = {"error": "not enough measured for the what-if model (needs the warm run, the "
                        "compute run or the warm run's steps, and the storage's bandwidth)"}
        return rep
    cache_bytes = (mount_stats or {}).get("cache_capacity_bytes")
    data_bytes = item_bytes * N
    job_room = (ma or {}).get("room_min_bytes")
    if cache_bytes is not None:
        kind, frac = "minio", cache_bytes / data_bytes if data_bytes else 0.0
    else:
        # The data read natively: the page cache holds what the job's room
        # allows (its unmapped file pages count as room).
        room = job_room if job_room is not None else _memory.room()
        kind, frac = "pagecache", min(1.0, room / data_bytes) if data_bytes else 1.0
        job_room = max(0.0, room - frac * data_bytes)
    u = comp["main_cpu"] / comp["steps"] if comp and comp.get("steps") else 0.0
    r = 0.0
    if asis and asis.get("daemon_cpu") is not None and asis.get("items"):
        r = asis["daemon_cpu"] / asis["items"]
    startup = 0.0
    for m in ("warm", "as-is"):
        for e in _records.of_kind(results.get(m, (0, []))[1], _records.EPOCH):
            if e["measured"] and e["startup"] is not None and e["steps"]:
                startup = max(0.0, e["startup"] - e["seconds"] / e["steps"])
                break
        if startup:
            break
    # t: what reading through the mount (or the kernel, natively) costs the
    # reader beyond the warm run's reads from memory, per item.
    t = 0.0
    if asis and warm and asis.get("items") and warm.get("items"):
        key = "worker_cpu" if W > 0 else "main_cpu"
        t = max(0.0, asis[key] / asis["items"] - warm[key] / warm["items"])
    prof = Profile(N, S, item_bytes, c, q, W, C, storage_bps, frac, kind, u, r, startup,
                   prefetch=bool(opts.get("order")), reader_cpu_per_item=t)
    # Memory: the stall where it is measured, what the job is short of,
    # its room, the daemon's, and what more workers or staging take. The
    # shortfall: every page the job uses each epoch and cannot keep faults
    # back at least once an epoch, so its processes' major faults (else
    # its cgroup's) are at most that many pages; and at least the room the
    # daemon's memory watch keeps free (its reserve: batches come and go).
    # The cgroup's refaults are not used: most are the data's own pages
    # above the mount, read again each epoch, a cache's misses, not a need.
    stats_after = (asis or {}).get("stats_after") or {}
    short = 0.0
    if mem and mem >= floor:
        prof.memory_stall = mem
        lim = (ma or {}).get("limit_bytes") or 0
        faults = (ma or {}).get("major_faults_per_epoch")
        if faults is None:
            faults = (ma or {}).get("cgroup_major_faults_per_epoch") or 0.0
        short = max(faults * PAGE, MEM_RESERVE, lim / 32)
    prof.mem_short = short
    prof.mem_room = job_room
    shared = (ma or {}).get("daemon_in_job_cgroup")
    prof.daemon_shared = shared is not False
    if shared is False and stats_after.get("mem_room_bytes") is not None:
        prof.daemon_room = stats_after["mem_room_bytes"]
    prof.worker_bytes = worker_bytes(results)
    if stats_after.get("prefetch_staging_limit_bytes"):
        prof.staging_bytes = stats_after["prefetch_staging_limit_bytes"]
    prof.mem_total = _memory_total(ma)
    frac_seen = (rep.get("mount") or {}).get("storage_fraction_of_data")
    if frac_seen is not None:
        prof.measured_hit = max(0.0, min(1.0, 1.0 - frac_seen))
    raw_asis = prof.epoch_seconds()
    # With nothing fetched (every byte a hit, measured), the as-is run is
    # the warm one run for real past its warm-up: where it came out faster,
    # the warm run's extra time is drift or its first steps' one-time costs,
    # and the CPU side is anchored to the as-is epoch instead.
    anchor, anchor_run = base_w, "warm"
    if (T_w is not None and T_a is not None and T_a < T_w and prof.measured_hit is not None
            and prof.measured_hit >= 0.999):
        anchor, anchor_run = T_a - prof.memory_stall, "as-is"
    prof.calibrate(anchor, T_a, crowd)
    rep["model"] = {"prep_cpu_per_item": q, "compute_per_step": c, "main_cpu_per_step": u,
                    "serve_cpu_per_item": r, "startup_seconds": startup, "cache_kind": kind,
                    "cache_fraction": frac, "hit": prof.hit(), "hit_measured": prof.measured_hit is not None,
                    "reader_cpu_per_item": t, "cpu_scale": prof.cpu_scale, "overlap": prof.overlap,
                    "crowd": prof.crowd, "crowd_workers": crowd["workers"] if crowd else None,
                    "crowd_cpus": crowd["cores"] if crowd else None,
                    "crowd_step_ratio": crowd["ratio"] if crowd else None,
                    "crowd_too_few_steps": list(few) if few else None,
                    "reader_cpu_scale": prof.tax_scale,
                    "storage_bps_effective": storage_bps * prof.bw_scale, "storage_bps": storage_bps,
                    "bw_scale": prof.bw_scale, "prefetch": prof.prefetch,
                    "uncalibrated_as_is_seconds": raw_asis,
                    "cpu_anchor": anchor_run,
                    "memory_stall_seconds": prof.memory_stall, "memory_short_bytes": prof.mem_short,
                    "memory_room_bytes": prof.mem_room, "daemon_memory_shared": prof.daemon_shared,
                    "daemon_room_bytes": prof.daemon_room, "worker_bytes": prof.worker_bytes,
                    "staging_bytes": prof.staging_bytes, "memory_total_bytes": prof.mem_total,
                    "cache_fits_up_to": prof.cache_fits_up_to(),
                    "as_is_seconds": prof.epoch_seconds(),
                    "warm_seconds": prof.scenario(cache_frac=1.0, cache_kind="minio", via_mount=False,
                                                  memory_stall=0.0).epoch_seconds()}
    dims, dtype = batch_shape(results)
    if dims:
        rep["job"]["batch_shape"], rep["job"]["batch_dtype"] = dims, dtype
    apply_gpu(rep, prof, gpu, opts.get("gpu_rate"))
    if T_w is None and T_a is not None and compute_s is not None:
        # No warm rate measured (too few steps fit in memory): the split
        # comes from the model's epoch with every item a hit.
        t_w = prof.scenario(cache_frac=1.0, cache_kind="minio", nodes=1, memory_stall=0.0).epoch_seconds()
        rep["prep_stall_seconds"] = max(0.0, min(t_w, T_a - (mem or 0.0)) - compute_s)
        rep["fetch_stall_seconds"] = max(0.0, T_a - compute_s - rep["prep_stall_seconds"] - (mem or 0.0))
        rep["split_from"] = "model"
        rep.setdefault("notes", []).append(
            "the warm run measured %d steps past the start-up, too few for a rate (its copies need memory: "
            "a smaller --warm-mb, or more free memory); prep and fetch stall are split by the model"
            % ((warm or {}).get("steady_steps") or 0))
        rep["none_measurable"] = _quiet(rep, fetched)
    else:
        rep["split_from"] = "runs"
    rep["what_if"] = what_ifs(prof, opts.get("what_if", []), data_bytes)
    rep["all_in_memory"] = all_in_memory(prof)
    rep["advice"] = advice(prof, epoch or prof.epoch_seconds(), C, W)
    return rep


def _quiet(rep, fetched):
    """The stalls of REP that are none measurable: under its noise floor,
    and a fetch stall where the mount fetched nothing (FETCHED: bytes from
    storage and peers, 0; the two runs' drift, not a wait for bytes)."""
    floor = rep.get("noise_floor_seconds") or 0.0
    out = []
    for k in ("prep", "fetch", "memory"):
        v = rep.get(k + "_stall_seconds")
        if v is not None and (v < floor or (k == "fetch" and fetched == 0)):
            out.append(k)
    return out


def _memory_total(ma):
    """The memory the job may use in all now: its cgroup's limit, or with
    none, its usage and its room (the machine's); None where unknown."""
    if not ma:
        return None
    if ma.get("limit_bytes"):
        return ma["limit_bytes"]
    if ma.get("usage_bytes") is not None and ma.get("room_min_bytes") is not None:
        return ma["usage_bytes"] + ma["room_min_bytes"]
    return None


def apply_gpu(rep, prof, gpu, rate):
    """The GPU in the model and the report: a probed GPU's ingestion (the
    pinned copy and the normalizing kernel per batch) becomes a bound;
    --gpu-rate sets the compute per step the what-ifs use (the breakdown
    keeps what was measured here)."""
    g = dict(gpu) if gpu else {"available": False, "reason": "not probed"}
    if g.get("available") and g.get("h2d_pinned_s") is not None:
        prof.ingest_per_step = g["h2d_pinned_s"] + (g.get("kernel_s") or 0.0)
    if rate:
        prof.compute_per_step = 1.0 / rate
        g["modelled_steps_per_s"] = rate
    rep["gpu"] = g
    rep["model"]["model_compute_per_step"] = prof.compute_per_step
    rep["model"]["ingest_per_step"] = prof.ingest_per_step


def profile_from_report(rep):
    """The calibrated model a report was made with (its "job" and "model"
    sections), for new what-ifs without running the job again (--from)."""
    j, m = rep.get("job") or {}, rep.get("model") or {}
    need = ("prep_cpu_per_item", "compute_per_step", "storage_bps", "cache_fraction", "cache_kind")
    if m.get("error") or any(k not in m for k in need) or not j.get("items_per_epoch"):
        raise UsageError("the report holds no model to predict from (%s)"
                         % (m.get("error") or "made by an older epochfs-analyze, or without a warm run"))
    p = Profile(j["items_per_epoch"], j["steps_per_epoch"], j["bytes_per_item"],
                m.get("model_compute_per_step", m["compute_per_step"]),
                m["prep_cpu_per_item"], j["workers"], j["cpus"], m["storage_bps"], m["cache_fraction"],
                m["cache_kind"], m.get("main_cpu_per_step", 0.0), m.get("serve_cpu_per_item", 0.0),
                m.get("startup_seconds", 0.0), prefetch=bool(m.get("prefetch")),
                reader_cpu_per_item=m.get("reader_cpu_per_item", 0.0),
                ingest_per_step=m.get("ingest_per_step", 0.0))
    if m.get("hit_measured"):
        p.measured_hit = m["hit"]
    p.cpu_scale = m.get("cpu_scale", 1.0)
    p.bw_scale = m.get("bw_scale", 1.0)
    p.overlap = m.get("overlap", 0.0)
    p.tax_scale = m.get("reader_cpu_scale", 1.0)
    p.crowd = m.get("crowd", 0.0)
    # Memory (reports from before it was measured have none: no stall).
    p.memory_stall = m.get("memory_stall_seconds") or 0.0
    p.mem_short = m.get("memory_short_bytes") or 0.0
    p.mem_room = m.get("memory_room_bytes")
    p.daemon_shared = m.get("daemon_memory_shared", True) is not False
    p.daemon_room = m.get("daemon_room_bytes")
    p.worker_bytes = m.get("worker_bytes") or 0.0
    p.staging_bytes = m.get("staging_bytes") or p.staging_bytes
    p.mem_total = m.get("memory_total_bytes")
    return p


def from_report(opts):
    """--from FILE: the report again, with its what-ifs predicted anew."""
    try:
        with open(opts["from"]) as f:
            rep = json.load(f)
    except (OSError, ValueError) as e:
        raise UsageError("--from %s: %s" % (opts["from"], e))
    if not isinstance(rep, dict):
        raise UsageError("--from %s: not an epochfs-analyze report" % opts["from"])
    prof = profile_from_report(rep)
    if opts.get("gpu_rate"):
        prof.compute_per_step = 1.0 / opts["gpu_rate"]
        rep.setdefault("gpu", {"available": False, "reason": "not probed"})["modelled_steps_per_s"] = opts["gpu_rate"]
        rep["model"]["model_compute_per_step"] = prof.compute_per_step
    j = rep["job"]
    rep["what_if"] = what_ifs(prof, opts.get("what_if", []), j["bytes_per_item"] * j["items_per_epoch"])
    rep["all_in_memory"] = all_in_memory(prof)
    rep["advice"] = advice(prof, rep.get("epoch_seconds") or prof.epoch_seconds(), j["cpus"], j["workers"])
    return rep


def _mib(n):
    """N bytes for a person: MiB under a GiB, else GiB (the units --what-if
    memory= and cache= take)."""
    n = float(n or 0)
    return "%.0f MiB" % (n / (1 << 20)) if n < (1 << 30) else "%.1f GiB" % (n / (1 << 30))


def _size_opt(n):
    """N bytes as a --what-if size, rounded up: 310M, 1.3G."""
    n = float(n or 0)
    if n < (1 << 30):
        return "%dM" % -(-n // (1 << 20))
    return "%gG" % (-(-n * 10 // (1 << 30)) / 10)


def scenario_label(s):
    """A scenario as parse_what_if read it, in the --what-if syntax a user
    writes: cache=50%, storage=25MB/s, memory=+4G."""
    out = []
    for k, v in s.items():
        if k.startswith("_"):
            continue
        if k == "cache":
            out.append("cache=%g%%" % round(100 * v[1], 2) if v[0] == "frac" else "cache=%s" % _size_opt(v[1]))
        elif k == "storage":
            out.append("storage=%gMB/s" % round(v / 1e6, 3))
        elif k == "prefetch":
            out.append("prefetch=%s" % ("on" if v else "off"))
        elif k == "memory":
            out.append("memory=same" if v[0] == "same" else "memory=%s%s" % (
                ("+" if v[1] >= 0 else "-") if v[0] == "add" else "", _size_opt(abs(v[1]))))
        else:
            out.append("%s=%g" % (k, v))
    if s.get("_kind") == "pagecache":
        out.append("(the page cache)")
    return ", ".join(out)


def _scenario(prof, s, data_bytes):
    kw, out = {}, {}
    for k, v in s.items():
        if k == "cache":
            frac = v[1] if v[0] == "frac" else (v[1] / data_bytes if data_bytes else 0.0)
            kw["cache_frac"] = frac
            kw["cache_kind"] = s.get("_kind", "minio")
            out["cache"] = round(frac * 100, 2)
        elif k == "storage":
            kw["storage_bps"] = v
            out["storage_mbps"] = v / 1e6
        elif k == "_kind":
            out["cache_kind"] = v
        elif k == "memory":
            how, n = v
            if how == "total":
                n = n - (prof.mem_total if prof.mem_total is not None else n)
            kw["mem_added"] = n
        else:
            kw[k] = v
            out[k] = ("on" if v else "off") if k == "prefetch" else v
    if "cache" in out and "cache_kind" not in out:
        out["cache_kind"] = "minio"
    if s.get("memory", ("",))[0] == "same":
        # The room the job has now: its memory moves by what the rest of
        # the scenario takes (or gives back).
        kw["mem_added"] = prof.scenario(**{k: v for k, v in kw.items() if k != "mem_added"})._memory_needs()[0]
    if "mem_added" in kw:
        out["memory_added_bytes"] = kw["mem_added"]
    p = prof.scenario(**kw)
    t, b = p.parts()
    out["predicted_epoch_seconds"] = round(t, 3)
    ms = p.memory_stall_seconds()
    out["bottleneck"] = "memory" if ms > max(b.values()) else max(b, key=b.get)
    out["memory_stall_seconds"] = round(ms, 3)
    need = p.memory_needed()
    out["memory_needed_bytes"] = need
    out["fits"] = need <= 0 and kw.get("mem_added", 0) <= 0
    return out


def what_ifs(prof, asked, data_bytes):
    rows = []
    for s in asked:
        rows.append(dict(_scenario(prof, s, data_bytes), requested=True, asked=scenario_label(s)))
    for pct in range(0, 101, 10):
        for kind in ("minio", "pagecache"):
            rows.append(_scenario(prof, {"cache": ("frac", pct / 100), "_kind": kind}, data_bytes))
    top = max(2, int(2 * prof.cores))
    for w in range(1, top + 1):
        rows.append(_scenario(prof, {"workers": w}, data_bytes))
    for w in range(1, top + 1):
        rows.append(_scenario(prof, {"workers": w, "cores": max(prof.cores, w)}, data_bytes))
    return rows


def all_in_memory(prof):
    """The whole dataset in memory beside the job: cache = 100%, and the
    memory for it: the cache's growth where the job's (or the daemon's)
    room cannot take it, and what the job is short of now, so that the
    cache squeezes nothing. {predicted_epoch_seconds, memory_needed_bytes,
    memory_stall_seconds}."""
    kind = "pagecache" if prof.mem_base[1] == "pagecache" else "minio"
    extra = prof.memory_for_all()
    p = prof.scenario(cache_frac=1.0, cache_kind=kind, mem_added=extra)
    return {"predicted_epoch_seconds": p.epoch_seconds(), "memory_needed_bytes": extra,
            "memory_stall_seconds": p.memory_stall_seconds()}


def advice(prof, now, cpus, workers):
    """The single change that helps most, of a few a user can make; with
    "without_hardware": the best of those that need no more hardware
    (prefetch, the number of workers) and fit in the memory the job has,
    when that is another change and helps by at least 5%. A change that
    needs more memory than the job has says how much, and is hardware."""
    base = prof.epoch_seconds()
    # The worker count: the fewest within 2% of the best of 1..2x the CPUs;
    # and the same among the counts whose memory fits.
    top = max(1, 2 * int(cpus))
    scns = {w: prof.scenario(workers=w) for w in range(1, top + 1)}
    times = {w: p.epoch_seconds() for w, p in scns.items()}

    def fewest_best(ws):
        if not ws:
            return None
        fastest = min(times[w] for w in ws)
        return min(w for w in ws if times[w] <= fastest * 1.02)
    best_w = fewest_best(list(times))
    fit_w = fewest_best([w for w, p in scns.items() if p.memory_needed() <= 0])
    whole = prof.memory_for_all()
    kind = "pagecache" if prof.mem_base[1] == "pagecache" else "minio"
    cands = [("prefetch on (run the job under epochfs-run)", {"prefetch": True}, False),
             ("the whole dataset in memory (cache = 100%%%s)" % (", memory=+%s" % _size_opt(whole) if whole else ""),
              {"cache_frac": 1.0, "cache_kind": kind, "mem_added": whole}, True),
             ("%d DataLoader workers" % best_w, {"workers": best_w}, False),
             ("twice the CPU cores (%g), workers to match" % (2 * cpus),
              {"cores": 2 * cpus, "workers": max(workers, 2 * int(cpus))}, True),
             ("storage twice as fast", {"storage_bps": prof.storage_bps * 2}, True),
             ("a second node with its cache (2 nodes)", {"nodes": 2}, True)]
    if fit_w is not None and fit_w != best_w:
        cands.append(("%d DataLoader workers" % fit_w, {"workers": fit_w}, False))
    if prof.mem_short > 0 and prof.memory_stall > 0:
        cands.append(("%s more memory for the job (memory=+%s)" % (_mib(prof.mem_short), _size_opt(prof.mem_short)),
                      {"mem_added": prof.mem_short}, True))
    best = free = blocked = None
    for name, kw, hardware in cands:
        if kw.get("prefetch") and prof.prefetch:
            continue
        if kw.get("workers") == workers and len(kw) == 1:
            continue                            # the job's own count: no change
        p = prof.scenario(**kw)
        t = p.epoch_seconds()
        need = p.memory_needed()
        if need > 0:
            # Not with the memory the job has: the prediction is for the
            # job given that memory, and says so.
            if not hardware and base / t >= 1.05 and (blocked is None or t < blocked["predicted_epoch_seconds"]):
                blocked = {"change": name, "predicted_epoch_seconds": t, "memory_needed_bytes": need}
            name = "%s, needing %s more memory" % (name, _mib(need))
            hardware = True
        got = {"change": name, "predicted_epoch_seconds": t, "speedup": base / t if t > 0 else 1.0,
               "memory_needed_bytes": need + kw.get("mem_added", 0.0), "hardware": hardware}
        if best is None or got["speedup"] > best["speedup"]:
            best = got
        if not hardware and (free is None or got["speedup"] > free["speedup"]):
            free = got
    if best is not None and free is not None and free is not best and free["speedup"] >= 1.05:
        best["without_hardware"] = free
    elif best is not None and blocked is not None and not best["change"].startswith(blocked["change"]):
        # What would help without hardware but for memory: said, never offered.
        best["short_of_memory"] = blocked
    return best


# ---- output -----------------------------------------------------------------

def _fmt(x, unit="s"):
    return "-" if x is None else ("%.2f %s" % (x, unit))


PARTS = (("compute", "compute_seconds"), ("prep stall", "prep_stall_seconds"),
         ("fetch stall", "fetch_stall_seconds"), ("memory stall", "memory_stall_seconds"))


def _memory_line(mem):
    """The report's memory line: the limit, the room at its tightest, what
    the job read back after eviction, its major faults, the daemon's share."""
    bits = []
    lim = mem.get("limit_bytes")
    bits.append("limit %s" % _mib(lim) if lim else "no limit")
    if mem.get("room_min_bytes") is not None:
        bits.append("%s free at the tightest" % _mib(mem["room_min_bytes"]))
    rb = mem.get("refault_bytes_per_epoch")
    if rb:
        bits.append("%s read back after eviction per epoch" % _mib(rb))
    mf = mem.get("major_faults_per_epoch")
    if mf and mf >= 1:
        bits.append("%.0f major faults per epoch" % mf)
    if mem.get("daemon_rss_bytes"):
        bits.append("the epochfs daemon holds %s%s" % (
            _mib(mem["daemon_rss_bytes"]), {True: ", in the job's cgroup", False: ", in a cgroup of its own"}.get(
                mem.get("daemon_in_job_cgroup"), "")))
    return "memory: " + "; ".join(bits)


def _model_lines(rep):
    """--verbose: the model's fitted inputs, in words."""
    mod, j = rep.get("model", {}), rep["job"]
    L = ["model: preparing an item takes %.1f ms of CPU, reading it through the mount %.1f ms more (and %.1f ms "
         "in the daemon); a training step %.1f ms; the cache (%s) holds %.0f%% of the data and %.0f%% of the "
         "reads hit; the storage gives the job %.1f MB/s, and %.0f%% of a miss hides behind decoding; "
         "the model puts the epoch as it is at %.2f s"
         % (1e3 * mod["prep_cpu_per_item"] * mod.get("cpu_scale", 1.0),
            1e3 * mod.get("reader_cpu_per_item", 0.0) * mod.get("reader_cpu_scale", 1.0),
            1e3 * mod.get("serve_cpu_per_item", 0.0), 1e3 * mod["compute_per_step"],
            {"minio": "epochfs's", "pagecache": "the kernel's page cache"}.get(mod["cache_kind"], mod["cache_kind"]),
            100 * min(1.0, mod.get("cache_fraction") or 0.0), 100 * mod["hit"], mod["storage_bps_effective"] / 1e6,
            100 * mod.get("overlap", 0.0), mod["as_is_seconds"])]
    if mod.get("crowd_workers"):
        w2, c2 = mod["crowd_workers"], mod.get("crowd_cpus") or j["cpus"]
        L.append("       crowd run, %d workers on %g CPU%s in turn with all: %.2fx the time a step, %.0f%% more "
                 "CPU per item than with a core each" % (w2, c2, "" if c2 == 1 else "s",
                                                         mod.get("crowd_step_ratio") or 0.0,
                                                         100 * mod["crowd"] * (w2 - c2) / c2))
    if mod.get("memory_stall_seconds"):
        L.append("       memory: %.2f s of stall per epoch, the job %s short; it ends once that much more is "
                 "spare" % (mod["memory_stall_seconds"], _mib(mod.get("memory_short_bytes"))))
    return L


def text_report(rep, verbose=False):
    if rep.get("error"):
        return "epochfs-analyze: %s%s\n" % (rep["error"], ("\nnote: " + rep["failed"]) if rep.get("failed") else "")
    L = []
    j = rep["job"]
    if not j["items_per_epoch"]:            # an infinite sampler (detectron2's): epochs are the job's to say
        size = "a sampler without a length (no epoch size)"
    else:
        size = "%d items in %d steps per epoch" % (j["items_per_epoch"], j["steps_per_epoch"] or 0)
    L.append("epochfs-analyze: %s, %s, %d DataLoader worker%s on %g CPUs"
             % (j["dataset"], size, j["workers"], "" if j["workers"] == 1 else "s", j["cpus"]))
    e = rep.get("epoch_seconds")
    L.append("epoch: %s" % _fmt(e))
    quiet = rep.get("none_measurable") or []
    floor = rep.get("noise_floor_seconds")
    for name, key in PARTS:
        v = rep.get(key)
        if v is None and key == "memory_stall_seconds":
            continue                        # not measured (or a report from before it was, --from)
        if name.split()[0] in quiet:
            why = " (under %.2f s)" % floor if floor and v is not None and v > 0 else ""
            if name == "fetch stall" and (rep.get("mount") or {}).get("storage_bytes_per_epoch") == 0:
                why = " (nothing read from storage)"
            L.append("  %-13s none measurable%s" % (name, why))
            continue
        share = (" (%3.0f%%)" % (100 * v / e)) if v is not None and e else ""
        L.append("  %-13s %s%s" % (name, _fmt(v), share))
    if verbose and rep.get("as_is_wait_seconds") is not None:
        L.append("  (the job waited in next() %s of it)" % _fmt(rep["as_is_wait_seconds"]))
    m = rep.get("mount")
    if m:
        L.append("mount: storage %s per epoch (%s of the data), %s; daemon CPU %s per epoch"
                 % (_fmt((m["storage_bytes_per_epoch"] or 0) / 1e6, "MB"),
                    "-" if m["storage_fraction_of_data"] is None else "%.2f" % m["storage_fraction_of_data"],
                    _fmt(m["storage_mbps"], "MB/s"), _fmt(m.get("daemon_cpu_per_epoch"))))
    mem = rep.get("memory")
    if mem:
        L.append(_memory_line(mem))
        if verbose and mem.get("psi_some_seconds") is not None:
            L.append("        pressure (PSI, %s): some %.2f s, full %.2f s per epoch; the warm run's stall %s"
                     % ("the job's cgroup" if mem.get("psi_scope") == "cgroup" else "the machine's",
                        mem["psi_some_seconds"], mem["psi_full_seconds"], _fmt(mem.get("warm_stall_seconds"))))
    if rep.get("storage_mbps_probed"):
        L.append("storage: %.1f MB/s probed (O_DIRECT)" % rep["storage_mbps_probed"])
    mod = rep.get("model", {})
    if mod.get("error"):
        L.append("what-if: %s" % mod["error"])
    else:
        if verbose:
            L.extend(_model_lines(rep))
        g = rep.get("gpu") or {}
        if g.get("available"):
            L.append("GPU: %s: a batch (%.1f MB) in %.2f ms pinned (%.1f GB/s), %.2f ms pageable (%.1f GB/s); "
                     "the normalizing kernel %.0f batches/s"
                     % (g.get("device_name"), g["bytes"] / 1e6, 1e3 * g["h2d_pinned_s"], g["h2d_pinned_gbps"],
                        1e3 * g["h2d_pageable_s"], g["h2d_pageable_gbps"], g["kernel_batches_per_s"]))
        if g.get("modelled_steps_per_s"):
            gpu_how = "the what-ifs model the training step at %g steps/s (--gpu-rate)" % g["modelled_steps_per_s"]
        else:
            gpu_how = "the what-ifs take the compute measured here (--gpu-rate R models a GPU's steps/s)"
        if g.get("available"):
            if g.get("modelled_steps_per_s"):
                L.append("     " + gpu_how)
        elif g:
            # One line; why there is none (no driver, no device) only with --verbose.
            L.append("GPU: none here%s; %s" % (" (%s)" % g.get("reason") if verbose and g.get("reason") else "",
                                              gpu_how))
        a = rep.get("advice")
        if a:
            L.append("most help: %s -> %.2f s per epoch (%.2fx)" % (a["change"], a["predicted_epoch_seconds"],
                                                                     a["speedup"]))
            f = a.get("without_hardware")
            if f:
                L.append("  with the hardware it has: %s -> %.2f s per epoch (%.2fx)"
                         % (f["change"], f["predicted_epoch_seconds"], f["speedup"]))
            elif a.get("short_of_memory"):
                b = a["short_of_memory"]
                L.append("  with the hardware it has: nothing that fits its memory; %s would need %s more"
                         % (b["change"], _mib(b["memory_needed_bytes"])))
        asked = [w for w in rep.get("what_if", []) if w.get("requested")]
        for w in asked:
            label = w.get("asked") or ", ".join(
                "%s=%s" % (k, v) for k, v in w.items()
                if k not in ("predicted_epoch_seconds", "bottleneck", "requested", "cache_kind", "fits",
                             "memory_needed_bytes", "memory_stall_seconds", "memory_added_bytes"))
            need = w.get("memory_needed_bytes") or 0
            L.append("what if %s: %.2f s per epoch (bound: %s)%s"
                     % (label, w["predicted_epoch_seconds"], w["bottleneck"],
                        ", given the %s more memory it needs" % _mib(
                            need + max(0, w.get("memory_added_bytes") or 0)) if need > 0 else ""))
    for n in rep.get("notes", []):
        L.append("note: %s" % n)
    if rep.get("failed"):
        L.append("note: %s" % rep["failed"])
        for e in rep.get("epochs_seen", []):
            L.append("  %s run, epoch %d%s: %.2f s, %d steps, waited %.2f s"
                     % (e["run"], e["epoch"], "" if e["complete"] else " (cut short)", e["seconds"],
                        e["steps"], e["wait"]))
    return "\n".join(L) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts = parse_args(argv)
    except UsageError as e:
        sys.stderr.write("epochfs-analyze: %s\n" % e)
        return 2
    if opts == "help":
        sys.stdout.write(__doc__.lstrip())
        return 0
    if opts == "version":
        print("epochfs-analyze %s" % epochfs.__version__)
        return 0
    if opts.get("from"):
        try:
            rep = from_report(opts)
        except UsageError as e:
            sys.stderr.write("epochfs-analyze: %s\n" % e)
            return 2
        return _output(opts, rep)
    say = (lambda s: None) if opts["quiet"] else (lambda s: sys.stderr.write("epochfs-analyze: %s\n" % s))
    datadir = os.path.realpath(opts["datadir"])
    if not os.path.isdir(datadir):
        sys.stderr.write("epochfs-analyze: %s: not a directory\n" % opts["datadir"])
        return 2
    m = _mounts.mount_of(datadir)
    mount = m[0] if m else None
    stats = None
    if mount:
        try:
            with open(os.path.join(mount, ".epochfs", "stats.json")) as f:
                stats = json.load(f)
        except (OSError, ValueError):
            stats = None
    env = job_env(os.environ)
    results, failed, notes, no_crowd = {}, None, [], None
    try:
        for mode in opts["runs"]:
            crowd = None
            if mode == "crowd":
                crowd, why = crowd_plan(results, opts["steps"])
                if crowd is None:
                    say("no crowd run: %s" % why)
                    no_crowd = why
                    start = _records.first(results.get("as-is", (0, []))[1], _records.START) or {}
                    need = crowd_steps_needed(max(2, start.get("workers") or 0))
                    if opts["steps"] and opts["steps"] < need <= (start.get("steps_per_epoch") or need):
                        # Only --steps stands in the way: say what to give.
                        notes.append("what workers past the cores cost is not measured: the crowd run needs %d "
                                     "steps (--steps %d or more)" % (need, need))
                    continue
            rc, recs = run_mode(opts, mode, mount, env, say, crowd)
            if rc != 0 and mode == "crowd":
                # More workers than the job chose is the analyzer's doing:
                # its failure (memory, most likely) fails nothing else.
                notes.append("the crowd run (%d workers on %d CPU%s) exited %d%s; workers past the CPUs are "
                             "modelled at no extra cost (--runs as-is,warm,compute leaves that run out)"
                             % (crowd["workers"], crowd["cpus"], "" if crowd["cpus"] == 1 else "s", rc,
                                " (killed: most likely short of memory)" if rc in (137, -9) else ""))
                continue
            results[mode] = (rc, recs)
            if rc != 0:
                failed = (mode, rc)
                break
    except UsageError as e:
        sys.stderr.write("epochfs-analyze: %s\n" % e)
        return 127
    storage_bps = opts["storage_bps"]
    if storage_bps is None and not failed:
        start = None
        for mode in results:
            start = start or _records.first(results[mode][1], _records.START)
        files = (start or {}).get("files") or []
        if mount and files:
            src = opts["source"] or find_source(mount, stats)
            files = [os.path.join(src, os.path.relpath(os.path.realpath(f), mount)) for f in files] if src else []
        elif opts["source"] and files:
            files = [os.path.join(opts["source"], os.path.relpath(os.path.realpath(f), datadir)) for f in files]
        if files:
            say("probing the storage's bandwidth (%d files, O_DIRECT)" % len(files))
            storage_bps = probe_storage(files)
    rep = analyze(opts, results, storage_bps, stats, gpu_probe(results))
    if no_crowd and isinstance(rep.get("model"), dict):
        rep["model"]["crowd_skipped"] = no_crowd
    if notes:
        rep.setdefault("notes", []).extend(notes)
    if failed:
        rep["failed"] = "COMMAND exited %d in the %s run; the report holds what was measured before" % (
            failed[1], failed[0])
    rc = _output(opts, rep)
    if failed:
        return failed[1]
    return rc


def _output(opts, rep):
    """The report as text on stdout, and as --json / --plot asked."""
    sys.stdout.write(text_report(rep, opts.get("verbose")))
    if opts["json"]:
        with open(opts["json"], "w") as f:
            json.dump(rep, f, indent=1, sort_keys=True)
            f.write("\n")
    if opts["plot"] and rep.get("what_if"):
        from . import _plot
        try:
            _plot.write(opts["plot"], rep)
        except Exception as e:
            sys.stderr.write("epochfs-analyze: --plot %s: %s\n" % (opts["plot"], e))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
