"""epochfs-analyze [OPTIONS] DATADIR -- COMMAND [ARGS...]
       epochfs-analyze --from REPORT.json [--what-if K=V,...] [--json F] [--plot F]

Where a training job's time goes, and what more cache, workers, cores,
storage bandwidth, nodes, prefetch or shared prep would buy. COMMAND runs
unchanged, up to four times, each for a bounded window (the job is stopped
once its window is measured):
  as-is    as it is (the first --warmup epochs unmeasured: caches fill);
  warm     the window's files read into memory first: no fetch stall;
  compute  batches taken once and handed again: no fetch, no prep;
  crowd    warm, for one epoch (or --steps), its steps alternating in
           blocks between all the CPUs and half as many as the job has
           workers: what workers beyond the cores cost, with no more
           memory than the warm run (a job with one worker gets a second
           one, where memory allows). Only when the job has workers, fewer
           than twice its CPUs; its failure only leaves that cost out.
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
                     storage (MB/s), nodes, jobs, prefetch (on/off)
  --storage-mbps X   the storage's bandwidth (default: probed, O_DIRECT)
  --gpu-rate R       the training step's rate on the GPU, steps/s: the model's
                     compute (default: the compute run's, as measured here)
  --source DIR       where the data really is (default: the mount's SOURCE)
  --from FILE        no run: predict the --what-if scenarios (and the default
                     sweep) from a report written before with --json
  --json FILE        the report as JSON
  --plot FILE        what-if curves as .svg (or .png with matplotlib)
  -q, --quiet        only the report
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
WHAT_IF_KEYS = ("cache", "workers", "cores", "storage", "nodes", "jobs", "prefetch")


class UsageError(Exception):
    pass


def _size(s):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    s = s.strip().lower().rstrip("b") or "x"
    if s[-1] in mult:
        return float(s[:-1]) * mult[s[-1]]
    return float(s)


def parse_what_if(text):
    """'cache=50%,workers=4' -> {'cache': ('frac', 0.5), 'workers': 4}."""
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
         "gpu_rate": None}
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

def crowd_plan(results):
    """How the crowd run crowds the job, from the runs before it:
    ({"workers", "cpus", "worker_bytes"}, None), or (None, why not). The
    job keeps its W workers, and its pinned phases run on max(1, W // 2) of
    its CPUs: twice as many workers as cores (or more), in the memory the
    warm run had. A job with one worker gets a second (pinned: one CPU),
    which the timer adds only where worker_bytes (a worker's own memory in
    the warm run and two batches in flight) fit."""
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
    warm = _records.first((results.get("warm") or (0, []))[1], _records.WINDOW) or {}
    per = warm.get("worker_private_bytes") or 0
    dims, dtype = warm.get("batch_shape"), warm.get("batch_dtype") or ""
    if per and dims:
        n = 1
        for d in dims:
            n *= int(d)
        per += 2 * n * (1 if "int8" in dtype or "bool" in dtype else 2 if "16" in dtype else 8 if "64" in dtype
                        else 4)
    workers = max(w, 2)
    return {"workers": workers, "cpus": max(1, min(c, workers // 2)), "worker_bytes": per}, None


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
    for m, w in wins.items():
        if w:
            meas[m] = {"epoch_seconds": per_epoch(w, S), "wait_fraction": w["wait"] / w["seconds"]
                       if w["seconds"] > 0 else None, "steps": w["steps"], "complete": w.get("complete"),
                       "worker_cpu_per_item": w["worker_cpu"] / w["items"] if w.get("items") else None}
    epoch = T_a if T_a is not None else T_w
    compute_s = c * S if c is not None else None
    # The warm run is the as-is one without fetching: where it came out
    # slower (the machine's drift; one-time costs in its first steps), there
    # is no fetch stall, and the stall is prep's up to the as-is epoch: the
    # parts never add up to more than the epoch.
    t_w = min(T_w, T_a) if T_w is not None and T_a is not None else T_w
    prep = max(0.0, t_w - compute_s) if t_w is not None and compute_s is not None else None
    fetch = max(0.0, T_a - T_w) if T_a is not None and T_w is not None else None
    rep.update({"epoch_seconds": epoch, "compute_seconds": compute_s, "prep_stall_seconds": prep,
                "fetch_stall_seconds": fetch})
    # A warm run measured in its process's first epoch whose first step
    # took far longer than the others: one-time costs (a GPU's start) that
    # the as-is run's warm-up epoch keeps out of its own window.
    if warm and warm.get("first_epoch") == 0 and warm.get("first_step_compute") and c:
        first = warm["first_step_compute"]
        if first > 0.2 and first > 10 * c:
            rep.setdefault("notes", []).append(
                "the warm run's first step took %.2f s outside next() (a steady one %.1f ms): one-time costs "
                "of the job's start (CUDA, cuDNN's choices, compilation), in its window since the warm run "
                "measures its process's first epoch" % (first, 1e3 * c))
    if T_a is not None and T_w is not None and T_w > 1.05 * T_a:
        rep.setdefault("notes", []).append(
            "the warm run's epoch (%.2f s) came out %.0f%% longer than the as-is one: no fetch stall, and prep "
            "stall taken up to the as-is epoch (drift between the runs, or one-time costs in the warm run's "
            "first steps, which are its process's first)" % (T_w, 100 * (T_w / T_a - 1)))
    if asis:
        rep["as_is_wait_seconds"] = asis["wait"] / asis["steps"] * S if asis["steps"] else None
        sb = counter_delta(asis, "storage_read_bytes")
        if sb is not None and asis.get("steps"):
            per = sb / asis["steps"] * S
            rep["mount"] = {"storage_bytes_per_epoch": per,
                            "storage_fraction_of_data": per / (item_bytes * N) if item_bytes and N else None,
                            "storage_mbps": sb / asis["seconds"] / 1e6 if asis["seconds"] > 0 else None,
                            "cache_hit_bytes": counter_delta(asis, "cache_hit_bytes"),
                            "peer_read_bytes": counter_delta(asis, "peer_read_bytes"),
                            "prefetch_bytes": counter_delta(asis, "prefetch_bytes"),
                            "daemon_cpu_per_epoch": asis["daemon_cpu"] / asis["steps"] * S
                            if asis.get("daemon_cpu") is not None else None}
    rep["storage_mbps_probed"] = storage_bps / 1e6 if storage_bps else None
    if few:
        rep.setdefault("notes", []).append(
            "the crowd run measured %d and %d steps in its two phases, too few for a ratio (%d each: a phase's "
            "first steps carry batches begun in the other); the cost of workers beyond the cores is left out "
            "(more --steps, or --epochs)" % (few[0], few[1], CROWD_MIN_STEPS))
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
    if cache_bytes is not None:
        kind, frac = "minio", cache_bytes / data_bytes if data_bytes else 0.0
    else:
        kind, frac = "pagecache", min(1.0, _memory.room() / data_bytes) if data_bytes else 1.0
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
    frac_seen = (rep.get("mount") or {}).get("storage_fraction_of_data")
    if frac_seen is not None:
        prof.measured_hit = max(0.0, min(1.0, 1.0 - frac_seen))
    raw_asis = prof.epoch_seconds()
    # With nothing fetched (every byte a hit, measured), the as-is run is
    # the warm one run for real past its warm-up: where it came out faster,
    # the warm run's extra time is drift or its first steps' one-time costs,
    # and the CPU side is anchored to the as-is epoch instead.
    anchor, anchor_run = T_w, "warm"
    if (T_w is not None and T_a is not None and T_a < T_w and prof.measured_hit is not None
            and prof.measured_hit >= 0.999):
        anchor, anchor_run = T_a, "as-is"
    prof.calibrate(anchor, T_a, crowd)
    rep["model"] = {"prep_cpu_per_item": q, "compute_per_step": c, "main_cpu_per_step": u,
                    "serve_cpu_per_item": r, "startup_seconds": startup, "cache_kind": kind,
                    "cache_fraction": frac, "hit": prof.hit(), "hit_measured": prof.measured_hit is not None,
                    "reader_cpu_per_item": t, "cpu_scale": prof.cpu_scale, "overlap": prof.overlap,
                    "crowd": prof.crowd, "crowd_workers": crowd["workers"] if crowd else None,
                    "crowd_cpus": crowd["cores"] if crowd else None,
                    "crowd_step_ratio": crowd["ratio"] if crowd else None,
                    "reader_cpu_scale": prof.tax_scale,
                    "storage_bps_effective": storage_bps * prof.bw_scale, "storage_bps": storage_bps,
                    "bw_scale": prof.bw_scale, "prefetch": prof.prefetch,
                    "uncalibrated_as_is_seconds": raw_asis,
                    "cpu_anchor": anchor_run,
                    "as_is_seconds": prof.epoch_seconds(),
                    "warm_seconds": prof.scenario(cache_frac=1.0, cache_kind="minio",
                                                  via_mount=False).epoch_seconds()}
    dims, dtype = batch_shape(results)
    if dims:
        rep["job"]["batch_shape"], rep["job"]["batch_dtype"] = dims, dtype
    apply_gpu(rep, prof, gpu, opts.get("gpu_rate"))
    if T_w is None and T_a is not None and compute_s is not None:
        # No warm rate measured (too few steps fit in memory): the split
        # comes from the model's epoch with every item a hit.
        t_w = prof.scenario(cache_frac=1.0, cache_kind="minio", nodes=1).epoch_seconds()
        rep["prep_stall_seconds"] = max(0.0, min(t_w, T_a) - compute_s)
        rep["fetch_stall_seconds"] = max(0.0, T_a - t_w)
        rep["split_from"] = "model"
        rep.setdefault("notes", []).append(
            "the warm run measured %d steps past the start-up, too few for a rate (memory for the copies: "
            "--warm-mb, or free memory); prep and fetch stall are split by the model"
            % ((warm or {}).get("steady_steps") or 0))
    else:
        rep["split_from"] = "runs"
    rep["what_if"] = what_ifs(prof, opts.get("what_if", []), data_bytes)
    rep["advice"] = advice(prof, epoch or prof.epoch_seconds(), C, W)
    return rep


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
    rep["advice"] = advice(prof, rep.get("epoch_seconds") or prof.epoch_seconds(), j["cpus"], j["workers"])
    return rep


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
        else:
            kw[k] = v
            out[k] = ("on" if v else "off") if k == "prefetch" else v
    if "cache" in out and "cache_kind" not in out:
        out["cache_kind"] = "minio"
    p = prof.scenario(**kw)
    t, b = p.parts()
    out["predicted_epoch_seconds"] = round(t, 3)
    out["bottleneck"] = max(b, key=b.get)
    return out


def what_ifs(prof, asked, data_bytes):
    rows = []
    for s in asked:
        rows.append(dict(_scenario(prof, s, data_bytes), requested=True))
    for pct in range(0, 101, 10):
        for kind in ("minio", "pagecache"):
            rows.append(_scenario(prof, {"cache": ("frac", pct / 100), "_kind": kind}, data_bytes))
    top = max(2, int(2 * prof.cores))
    for w in range(1, top + 1):
        rows.append(_scenario(prof, {"workers": w}, data_bytes))
    for w in range(1, top + 1):
        rows.append(_scenario(prof, {"workers": w, "cores": max(prof.cores, w)}, data_bytes))
    return rows


def advice(prof, now, cpus, workers):
    """The single change that helps most, of a few a user can make; with
    "without_hardware": the best of those that need no more hardware
    (prefetch, the number of workers), when that is another change and
    helps by at least 5%."""
    base = prof.epoch_seconds()
    # The worker count: the fewest within 2% of the best of 1..2x the CPUs.
    top = max(1, 2 * int(cpus))
    times = {w: prof.scenario(workers=w).epoch_seconds() for w in range(1, top + 1)}
    fastest = min(times.values())
    best_w = min(w for w, t in times.items() if t <= fastest * 1.02)
    cands = [("prefetch on (run the job under epochfs-run)", {"prefetch": True}, False),
             ("cache the whole dataset (cache = 100%)", {"cache_frac": 1.0, "cache_kind": "minio"}, True),
             ("%d DataLoader workers" % best_w, {"workers": best_w}, False),
             ("twice the CPU cores (%g), workers to match" % (2 * cpus),
              {"cores": 2 * cpus, "workers": max(workers, 2 * int(cpus))}, True),
             ("storage twice as fast", {"storage_bps": prof.storage_bps * 2}, True),
             ("a second node with its cache (2 nodes)", {"nodes": 2}, True)]
    best = free = None
    for name, kw, hardware in cands:
        if kw.get("prefetch") and prof.prefetch:
            continue
        if kw.get("workers") == workers and len(kw) == 1:
            continue                            # the job's own count: no change
        t = prof.scenario(**kw).epoch_seconds()
        got = {"change": name, "predicted_epoch_seconds": t, "speedup": base / t if t > 0 else 1.0}
        if best is None or got["speedup"] > best["speedup"]:
            best = got
        if not hardware and (free is None or got["speedup"] > free["speedup"]):
            free = got
    if best is not None and free is not None and free is not best and free["speedup"] >= 1.05:
        best["without_hardware"] = free
    return best


# ---- output -----------------------------------------------------------------

def _fmt(x, unit="s"):
    return "-" if x is None else ("%.2f %s" % (x, unit))


def text_report(rep):
    if rep.get("error"):
        return "epochfs-analyze: %s%s\n" % (rep["error"], ("\nnote: " + rep["failed"]) if rep.get("failed") else "")
    L = []
    j = rep["job"]
    if not j["items_per_epoch"]:            # an infinite sampler (detectron2's): epochs are the job's to say
        size = "a sampler without a length (no epoch size)"
    else:
        size = "%d items in %d steps per epoch" % (j["items_per_epoch"], j["steps_per_epoch"] or 0)
    L.append("epochfs-analyze: %s, %s, %d DataLoader workers on %g CPUs" % (j["dataset"], size, j["workers"], j["cpus"]))
    e = rep.get("epoch_seconds")
    L.append("epoch: %s" % _fmt(e))
    parts = [("compute", rep.get("compute_seconds")), ("prep stall", rep.get("prep_stall_seconds")),
             ("fetch stall", rep.get("fetch_stall_seconds"))]
    for name, v in parts:
        share = (" (%3.0f%%)" % (100 * v / e)) if v is not None and e else ""
        L.append("  %-12s %s%s" % (name, _fmt(v), share))
    if rep.get("as_is_wait_seconds") is not None:
        L.append("  (the job waited in next() %s of it)" % _fmt(rep["as_is_wait_seconds"]))
    m = rep.get("mount")
    if m:
        L.append("mount: storage %s per epoch (%s of the data), %s; daemon CPU %s per epoch"
                 % (_fmt((m["storage_bytes_per_epoch"] or 0) / 1e6, "MB"),
                    "-" if m["storage_fraction_of_data"] is None else "%.2f" % m["storage_fraction_of_data"],
                    _fmt(m["storage_mbps"], "MB/s"), _fmt(m.get("daemon_cpu_per_epoch"))))
    if rep.get("storage_mbps_probed"):
        L.append("storage: %.1f MB/s probed (O_DIRECT)" % rep["storage_mbps_probed"])
    mod = rep.get("model", {})
    if mod.get("error"):
        L.append("what-if: %s" % mod["error"])
    else:
        L.append("model: prep %.1f ms CPU per item, reading %.1f ms more in the reader and %.1f ms in the "
                 "daemon, compute %.1f ms per step, hit %.2f (%s), effective storage %.1f MB/s, %.0f%% of a "
                 "miss overlapped; as-is %.2f s modelled"
                 % (1e3 * mod["prep_cpu_per_item"] * mod.get("cpu_scale", 1.0),
                    1e3 * mod.get("reader_cpu_per_item", 0.0) * mod.get("reader_cpu_scale", 1.0),
                    1e3 * mod.get("serve_cpu_per_item", 0.0), 1e3 * mod["compute_per_step"], mod["hit"],
                    mod["cache_kind"], mod["storage_bps_effective"] / 1e6, 100 * mod.get("overlap", 0.0),
                    mod["as_is_seconds"]))
        if mod.get("crowd_workers"):
            w2, c2 = mod["crowd_workers"], mod.get("crowd_cpus") or j["cpus"]
            L.append("       crowd run, %d workers on %g CPU%s in turn with all: %.2fx the time a step, %.0f%% more "
                     "CPU per item than with a core each" % (w2, c2, "" if c2 == 1 else "s",
                                                             mod.get("crowd_step_ratio") or 0.0,
                                                             100 * mod["crowd"] * (w2 - c2) / c2))
        g = rep.get("gpu") or {}
        if g.get("available"):
            L.append("GPU: %s: a batch (%.1f MB) in %.2f ms pinned (%.1f GB/s), %.2f ms pageable (%.1f GB/s); "
                     "the normalizing kernel %.0f batches/s"
                     % (g.get("device_name"), g["bytes"] / 1e6, 1e3 * g["h2d_pinned_s"], g["h2d_pinned_gbps"],
                        1e3 * g["h2d_pageable_s"], g["h2d_pageable_gbps"], g["kernel_batches_per_s"]))
        elif g:
            L.append("GPU: none here (%s)" % g.get("reason"))
        if g.get("modelled_steps_per_s"):
            L.append("     the what-ifs model the training step at %g steps/s (--gpu-rate)" % g["modelled_steps_per_s"])
        elif g and not g.get("available"):
            L.append("     the what-ifs take the compute measured here; --gpu-rate R models a GPU's steps/s")
        a = rep.get("advice")
        if a:
            L.append("most help: %s -> %.2f s per epoch (%.2fx)" % (a["change"], a["predicted_epoch_seconds"],
                                                                     a["speedup"]))
            f = a.get("without_hardware")
            if f:
                L.append("  with the hardware it has: %s -> %.2f s per epoch (%.2fx)"
                         % (f["change"], f["predicted_epoch_seconds"], f["speedup"]))
        asked = [w for w in rep.get("what_if", []) if w.get("requested")]
        for w in asked:
            keys = ", ".join("%s=%s" % (k, v) for k, v in w.items()
                             if k not in ("predicted_epoch_seconds", "bottleneck", "requested"))
            L.append("what if %s: %.2f s per epoch (bound: %s)" % (keys, w["predicted_epoch_seconds"],
                                                                   w["bottleneck"]))
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
    results, failed, notes = {}, None, []
    try:
        for mode in opts["runs"]:
            crowd = None
            if mode == "crowd":
                crowd, why = crowd_plan(results)
                if crowd is None:
                    say("no crowd run: %s" % why)
                    continue
            rc, recs = run_mode(opts, mode, mount, env, say, crowd)
            if rc != 0 and mode == "crowd":
                # More workers than the job chose is the analyzer's doing:
                # its failure (memory, most likely) fails nothing else.
                notes.append("the crowd run (%d workers on %d CPU%s) exited %d; workers past the CPUs are "
                             "modelled at no extra cost" % (crowd["workers"], crowd["cpus"],
                                                            "" if crowd["cpus"] == 1 else "s", rc))
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
    sys.stdout.write(text_report(rep))
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
