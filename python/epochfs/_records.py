"""The step timer's records: what epochfs-analyze's timer (_timing.py)
writes inside the job, one JSON object a line, and what the analyzer
(analyze.py) reads back from it. Every kind of record is declared here
once, with its fields and what each means; the timer makes its records
with make(), the analyzer reads them with read(), and the tests build
theirs with make(), so the three cannot drift apart.

A record is {"ev": its kind, "pid": the process that wrote it, and the
kind's fields}, written by dumps() with its keys sorted. That is the
format epochfs-analyze has always written: files from before this module
read the same. The kinds, in the order a run writes them:
  start   the measured DataLoader, once, when its first iterator starts;
  warm    the warm run's preparation, once, at the measured epoch's start;
  epoch   every epoch of that loader, measured or not, at its end;
  window  the measured totals, once, when the window ends.

DESIGN: strict where the records are made, exact about what is wrong
where they are read. make() refuses a field not declared, a required one
left out, or a value of the wrong JSON type: a slip in the timer fails its
tests rather than a report later. parse() refuses a line that is not a
record of a known kind with its required fields of the right types, and
says which line and what is wrong with it; a field it does not know is
kept, not refused. No version field: a change that would make an old file
mean something else adds one ("v") rather than changing a field's meaning.
Values are checked for their type only; the timer's arithmetic is the
tests' to check. Standard library only.
"""
import json
import os

MODES = ("as-is", "warm", "compute", "crowd")


class RecordError(ValueError):
    """A record that make() will not make, or a line parse() will not read;
    the message names the record's kind and what is wrong."""


# JSON types: a field's TYPE is one of these names, ending in "?" where it
# may be null.
_TYPES = {
    "int": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "num": ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "str": ("a string", lambda v: isinstance(v, str)),
    "list": ("a list", lambda v: isinstance(v, list)),
    "dict": ("an object", lambda v: isinstance(v, dict)),
}


class Field:
    """One field of a kind: NAME, TYPE (see _TYPES), what it means;
    REQUIRED (every record of the kind has it) or not; CHOICES, the values
    a string may take; SUB, the Kind an object's fields follow."""

    def __init__(self, name, type_, meaning, required=True, choices=None, sub=None):
        self.nullable = type_.endswith("?")
        self.type = type_.rstrip("?")
        assert self.type in _TYPES, type_
        self.name, self.meaning, self.required = name, meaning, required
        self.choices, self.sub = choices, sub

    def problem(self, v):
        """What is wrong with value V for this field, or None."""
        if v is None:
            return None if self.nullable else "is null, expected %s" % _TYPES[self.type][0]
        what, ok = _TYPES[self.type]
        if not ok(v):
            return "is %s (%s), expected %s%s" % (type(v).__name__, _short(v), what,
                                                 " or null" if self.nullable else "")
        if self.choices is not None and v not in self.choices:
            return "is %s, expected one of %s" % (_short(v), ", ".join(self.choices))
        if self.sub is not None:
            bad = self.sub.problems(v)
            if bad:
                return "has " + "; ".join(bad)
        return None


def _short(v):
    s = json.dumps(v) if isinstance(v, (str, int, float, bool)) else repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


class Kind:
    """A kind of record (or of an object inside one, NAME None): its
    fields, declared once."""

    def __init__(self, name, meaning, fields):
        self.name, self.meaning = name, meaning
        self.fields = {f.name: f for f in fields}

    def problems(self, rec, strict=False):
        """What is wrong with REC as a record of this kind (a list, empty
        when nothing is); STRICT: a field not declared is wrong too."""
        missing = [repr(n) for n, f in self.fields.items() if f.required and n not in rec]
        bad = ["no field%s %s" % ("s" if len(missing) > 1 else "", ", ".join(missing))] if missing else []
        for n, v in rec.items():
            f = self.fields.get(n)
            if f is None:
                if strict:
                    bad.append("unknown field %r" % n)
                continue
            p = f.problem(v)
            if p:
                bad.append("field %r %s" % (n, p))
        return bad

    def make(self, **values):
        """A record of this kind from VALUES (pid: this process's unless
        given); RecordError where a field is missing, unknown or of the
        wrong type."""
        rec = {"ev": self.name, "pid": os.getpid()}
        rec.update(values)
        bad = self.problems(rec, strict=True)
        if rec["ev"] != self.name:
            bad.insert(0, "field 'ev' is %s" % _short(rec["ev"]))
        if bad:
            raise RecordError("%s record: %s" % (self.name, "; ".join(bad)))
        return rec

    def __repr__(self):
        return "<record kind %s>" % self.name


_COMMON = [Field("ev", "str", "the record's kind"),
           Field("pid", "int", "the process that wrote it")]

START = Kind("start", "the measured DataLoader, once, when its first iterator starts", _COMMON + [
    Field("mode", "str", "the run's mode", choices=MODES),
    Field("workers", "int", "the loader's worker processes (the crowd run: after those it added)"),
    Field("workers_asked", "int?", "the crowd run: the workers the loader had of its own; null in the others"),
    Field("batch_size", "int?", "the loader's batch size; null with a batch sampler"),
    Field("steps_per_epoch", "int?", "len(loader), the steps of an epoch; null for a sampler without a length"),
    Field("items_per_epoch", "int?", "len(sampler), the items of an epoch; null without a length"),
    Field("dataset_items", "int?", "len(dataset); null without one"),
    Field("dataset", "str", "the dataset's class name"),
    Field("mapped", "bool", "whether its indices map to files (_hook._resolver)"),
    Field("files", "list", "a sample of its files, evenly spaced, absolute: what the storage probe reads"),
    Field("mean_file_bytes", "num?", "those files' mean size; null with none"),
    Field("cpus", "int", "the CPUs the job may run on"),
    Field("persistent_workers", "bool", "the loader keeps its workers between epochs"),
    Field("warmup", "int", "epochs let pass unmeasured before the window"),
    Field("epochs", "int", "whole epochs the window measures"),
    Field("steps", "int", "steps the window measures instead (0: whole epochs)"),
])

WARM = Kind("warm", "the warm run's preparation, once, at the measured epoch's start", _COMMON + [
    Field("mapped", "bool", "whether the window's files could be had; false: nothing warmed, the window "
          "measured as it is"),
    Field("files", "int", "files copied to memory (or read into the page cache)"),
    Field("bytes", "int", "their bytes"),
    Field("steps", "int", "steps the window measures: all, or only those whose files were read"),
    Field("seconds", "num", "what the preparation took (kept out of the epoch and the window)"),
    Field("items", "int", "the window's items with a file", required=False),
    Field("of_steps", "int", "the steps of the epoch", required=False),
    Field("method", "str", "tmpfs: every item pointed at a copy; read: the files read into the page cache",
          required=False, choices=("tmpfs", "read")),
])

EPOCH = Kind("epoch", "an epoch of the measured loader, measured or not, at its end", _COMMON + [
    Field("epoch", "int", "its number in this process, from 0"),
    Field("measured", "bool", "it is in the window"),
    Field("complete", "bool", "it ran to StopIteration; false: cut short (the window or the job ended)"),
    Field("seconds", "num", "from its iterator's start (the workers' start-up included) to its end"),
    Field("wait", "num", "seconds inside the iterator's __next__: the data stall"),
    Field("compute", "num", "the rest of its seconds"),
    Field("steps", "int", "batches it returned"),
    Field("items", "int", "samples in them"),
    Field("startup", "num?", "seconds to its first batch; null: no batch"),
])

ALTERNATE = Kind(None, "the crowd run's two phases", [
    Field("cpus_full", "int", "the CPUs of the full phase (all the job's)"),
    Field("cpus_pinned", "int", "the CPUs of the pinned phase"),
    Field("full_steps", "int", "steps counted in the full phase"),
    Field("full_seconds", "num", "their seconds"),
    Field("pinned_steps", "int", "steps counted in the pinned phase"),
    Field("pinned_seconds", "num", "their seconds"),
])

MEMORY = Kind(None, "the job's memory at one moment (_memory.snapshot)", [
    Field("version", "int?", "its memory cgroup's version, 1 or 2; null: none readable"),
    Field("dir", "str?", "that cgroup's directory"),
    Field("limit", "num?", "its limit, bytes; null: none"),
    Field("usage", "num?", "its usage, bytes (page cache included)"),
    Field("unmapped_file", "num?", "of it, file pages no process maps (the kernel drops them first)"),
    Field("major_faults", "num?", "memory.stat's major faults so far, the whole cgroup"),
    Field("refaults", "num?", "memory.stat's refaults so far: pages read back soon after eviction"),
    Field("available", "num?", "the machine's MemAvailable, bytes"),
    Field("room", "num?", "bytes the job could still be given (_memory.room)"),
    Field("psi_scope", "str?", "whose pressure stall figures: cgroup (the job's v2 directory) or machine",
          choices=("cgroup", "machine")),
    Field("psi_dir", "str?", "that v2 directory"),
    Field("psi_some_us", "num?", "microseconds so far in which some task waited for memory"),
    Field("psi_full_us", "num?", "microseconds so far in which every task that could run waited for memory"),
])

WINDOW = Kind("window", "the measured totals, once, when the window ends", _COMMON + [
    Field("mode", "str", "the run's mode", choices=MODES),
    Field("complete", "bool", "the window ran all its epochs or steps"),
    Field("seconds", "num", "its length (the warm run's preparation not in it)"),
    Field("wait", "num", "seconds inside __next__"),
    Field("compute", "num", "the rest"),
    Field("steps", "int", "steps measured"),
    Field("items", "int", "samples in them"),
    Field("epochs_complete", "int", "whole epochs in it"),
    Field("skip", "int", "its first steps, left out of the steady rate (a batch from each worker, together)"),
    Field("worker_cpu", "num", "CPU seconds of the loader's workers in it"),
    Field("main_cpu", "num", "CPU seconds of the main process in it"),
    Field("daemon_cpu", "num?", "CPU seconds of the mount's daemon in it; null: no mount"),
    Field("stats_before", "dict?", "the mount's stats.json at its start; null: no mount"),
    Field("stats_after", "dict?", "the same at its end"),
    Field("worker_private_bytes", "num?", "a worker's own memory (Private_Dirty), the largest mean seen; "
          "null: no workers"),
    Field("alternate", "dict?", "the crowd run's phases; null in the others", sub=ALTERNATE),
    Field("first_epoch", "int", "the epoch it began in (0: the process's first, one-time costs and all)"),
    Field("first_step_compute", "num?", "its first step's compute; null: it had none"),
    Field("batch_shape", "list?", "the dimensions of the first batch's first tensor; null: no tensor"),
    Field("batch_dtype", "str?", "its element type (float32, uint8...)"),
    Field("memory_before", "dict?", "the job's memory at its start (past the warm run's copying)",
          required=False, sub=MEMORY),
    Field("memory_after", "dict?", "the same at its end", required=False, sub=MEMORY),
    Field("memory_room_min", "num?", "the least room the job had in it, bytes (sampled every 16 steps)",
          required=False),
    Field("major_faults", "int?", "major faults of the main process and its workers in it", required=False),
    Field("daemon_rss_bytes", "num?", "the mount's daemon's resident memory at its end; null: no mount",
          required=False),
    Field("daemon_memory_shared", "bool?", "the daemon's memory counts in the job's memory cgroup",
          required=False),
    Field("steady_seconds", "num", "seconds past the first SKIP steps (when it had more)", required=False),
    Field("steady_steps", "int", "steps past them", required=False),
    Field("startup_seconds", "num", "seconds to the end of the first SKIP steps", required=False),
])

KINDS = {k.name: k for k in (START, WARM, EPOCH, WINDOW)}


def dumps(rec):
    """REC as the line the timer appends to its file."""
    return json.dumps(rec, sort_keys=True) + "\n"


def parse(line):
    """The record on LINE (a dict, every field kept), or RecordError saying
    what is wrong with it."""
    try:
        rec = json.loads(line)
    except ValueError as e:
        raise RecordError("not JSON (%s)" % e)
    if not isinstance(rec, dict):
        raise RecordError("not a JSON object but %s" % type(rec).__name__)
    ev = rec.get("ev")
    kind = KINDS.get(ev) if isinstance(ev, str) else None
    if kind is None:
        raise RecordError("%s: not a step-timer record (kinds: %s)"
                          % ("no \"ev\" field" if "ev" not in rec else "\"ev\" is %s" % _short(ev),
                             ", ".join(KINDS)))
    bad = kind.problems(rec)
    if bad:
        raise RecordError("%s record: %s" % (kind.name, "; ".join(bad)))
    return rec


def read(path):
    """The records of file PATH, and what was wrong with the lines left
    out ("line N: ..."); blank lines are passed over, a file not there has
    neither."""
    recs, problems = [], []
    try:
        with open(path, errors="replace") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    recs.append(parse(line))
                except RecordError as e:
                    problems.append("line %d: %s" % (n, e))
    except OSError:
        pass
    return recs, problems


def of_kind(recs, kind):
    """The records of RECS of KIND (a Kind), in order."""
    return [r for r in recs if r.get("ev") == kind.name]


def first(recs, kind):
    """The first record of RECS of KIND, or None."""
    for r in recs:
        if r.get("ev") == kind.name:
            return r
    return None
