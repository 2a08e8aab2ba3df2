"""epochfs-analyze's what-if model: the epoch time of a job from a few
measured rates, for a scenario (cache size, DataLoader workers, CPU cores,
storage bandwidth, nodes, concurrent jobs, prefetch on or off).

The job, per epoch: N items in S steps; the main process spends c seconds
of compute per step; a DataLoader worker spends q CPU-seconds preparing an
item (decode, augment, collate) and, on a miss, waits for its bytes from
storage. Items hit in a cache with probability h, so a worker's storage
demand per item is m = (1 - h) * bytes_per_item / B. The DataLoader's
workers and the storage form a closed queueing network: W workers (the
customers) cycle between the CPU (C cores) and the storage (one server),
and exact mean value analysis gives their throughput X (the CPU a
load-dependent station: j items on it run at min(j, C) times one core's
speed). Then

  epoch = startup + max(S*c, N/X, N*m, (S*u + N*(q + t + r))/C)

with u the main process's CPU per step (it shares the cores), and, where
a GPU was probed, S*g joins the max: g the seconds a batch takes into the
GPU (pinned copy plus the normalizing kernel, epochfs.gpu.probe).

Reading through the mount costs CPU a run from memory does not pay: t per
item in the reader's own process (system calls, the kernel's copy, page
cache, the FUSE round trips) and r per item in the daemon. Both count in
full towards the cores' bound. In a worker's cycle, r is left out (the
daemon is another process, on a core the workers leave free) and t is
scaled by the workers' share of the cores, min(1, W/C): t is measured at
the as-is run's load, where it includes what contention adds, and one
worker on two cores pays less of it. A worker also overlaps part of a
miss's transfer with its own decoding (the kernel's readahead delivers the
rest of a file while the first part decodes): the cycle's storage demand
is (1 - phi) * m, the storage's own bound stays N*m.

More workers than cores cost more CPU per item than fewer (the cores
switch between more processes, their caches hold less of each, and every
worker's batches wait longer in memory): q and t are multiplied by
1 + k * (W - C) / C for W > C. k is fitted to the crowd run (the warm run with
its steps alternating between all the CPUs and half as many as workers:
the ratio of the two phases' step times); without one, k is 0.

With prefetch (the order told, epochfs-run), storage waits leave the
workers' cycle and overlap everything: X is the CPU-only network's, and
the storage bound N*m remains. Its staging is carved out of a RAM cache
that cannot hold the dataset (min(--prefetch-mem, a quarter of the
cache)): the cache holds that much less, and hits that much less. Without workers, the main process prepares
and fetches in line: epoch = S*c + N*(q + t + r + (1 - phi)*m) (prefetch:
max(S*c + N*(q + t + r), N*m)).

Hits: the MinIO cache admits until full and never evicts, so h = the
fraction of D it holds, across k nodes min(1, k*f) (a peer's cache is read
over the network, assumed faster than storage); the kernel's page cache is
modelled as LRU over a fresh shuffle each epoch (lru_hit, simulated). k
jobs sharing coordinated prep (.prep/) prepare each item once: q/k each,
and read it from storage once: m/k each.

The as-is configuration keeps the hit ratio its run measured (the mount's
storage bytes: the kernel's page cache above the mount may hold more than
the MinIO cache alone); a scenario that changes the cache or the nodes
uses the rules above. Anchors, from the runs measured (calibrate()): the
CPU side (q scaled) from the warm run, which reads from memory and pays no
mount costs; t from the as-is run's worker CPU per item minus the warm
run's; k from the crowd run (the CPU side fitted again after it when
the job itself has more workers than cores); then phi, the storage bandwidth being the one probed, so the model
gives the measured as-is epoch. An as-is epoch slower than phi = 0 allows
lowers the bandwidth instead (B_eff < B: the storage delivered less than
its probe); one faster than phi = 1 allows scales t down. A scenario's
storage speed scales B_eff by scenario/probed.

Memory. A job short of memory loses time the queueing network does not
see: its tasks reclaim pages, and wait for pages of their own (a
library's, a batch's) read back after the kernel evicted them. That time
is measured (analyze.memory_of: the pressure stall figures over a run) and
added to the epoch as M, the as-is run's memory stall. It depends on the
memory a scenario leaves the job:
  need  bytes the scenario needs beyond what the job holds now: a bigger
        cache (in the job's memory cgroup when the daemon shares it, or
        the page cache is the cache; else in the daemon's), prefetch's
        staging where the mount has no RAM cache (with one, staging is
        carved out of --cache-size and the cache holds that much less:
        staging_share()), each worker more (its own memory and two
        batches);
        fewer workers, or a smaller cache, give memory back;
  spare the job's room now (0 when it is short of memory), plus the
        memory the scenario adds (memory=+X), less its need;
  M'  = M * max(0, 1 - spare / S), S the memory the job is short of now
        (analyze.memory_of): M where the scenario uses all that is added,
        0 once S more is spare. A job not short of memory (S = 0) keeps M
        (under the noise floor, 0).
A scenario whose need is more than the room (and the memory it adds)
does not fit: memory_needed() says how much more it needs, and the
prediction is for the job given that memory (spare = 0), never for a job
squeezed further: the model has no figure for a squeeze it did not see.
docs/analyze.md has the model's assumptions and its measured error.
Standard library only.
"""
import random

_lru_cache = {}


def lru_hit(frac, items=2000, epochs=4, seed=1):
    """Hit ratio of an LRU cache holding FRAC of the items when every epoch
    reads each item once in a fresh random order (epochs after the first)."""
    frac = max(0.0, min(1.0, frac))
    key = round(frac, 3)
    if key in _lru_cache:
        return _lru_cache[key]
    cap = int(round(frac * items))
    if cap >= items:
        return 1.0
    if cap <= 0:
        return 0.0
    rng = random.Random(seed)
    from collections import OrderedDict
    lru = OrderedDict()
    hits = reads = 0
    order = list(range(items))
    for e in range(epochs):
        rng.shuffle(order)
        for i in order:
            if i in lru:
                lru.move_to_end(i)
                if e:
                    hits += 1
            else:
                lru[i] = True
                if len(lru) > cap:
                    lru.popitem(last=False)
            if e:
                reads += 1
    _lru_cache[key] = hits / reads
    return _lru_cache[key]


def mva_throughput(workers, cpu_demand, cores, disk_demand):
    """Items per second of WORKERS customers cycling through the CPU (CORES
    servers, CPU_DEMAND s per item) and one disk (DISK_DEMAND s per item):
    exact mean value analysis, the CPU as a load-dependent station."""
    if workers <= 0:
        return 0.0
    n_max = int(workers)
    cores = max(1e-9, cores)

    def rate(j):                      # the CPU's speed with j items on it
        return min(float(j), cores)
    p = [1.0] + [0.0] * n_max         # p[j]: probability of j items at the CPU
    q_disk = 0.0
    x = 0.0
    for n in range(1, n_max + 1):
        r_cpu = sum(j / rate(j) * cpu_demand * p[j - 1] for j in range(1, n + 1))
        r_disk = disk_demand * (1 + q_disk)
        total = r_cpu + r_disk
        if total <= 0:
            return float("inf")
        x = n / total
        new = [0.0] * (n_max + 1)
        for j in range(1, n + 1):
            new[j] = cpu_demand / rate(j) * x * p[j - 1]
        new[0] = max(0.0, 1.0 - sum(new[1:]))
        p = new
        q_disk = x * r_disk
    return x


class Profile:
    """What the runs measured, per epoch (see the module's text)."""

    def __init__(self, items, steps, bytes_per_item, compute_per_step, prep_cpu_per_item,
                 workers, cores, storage_bps, cache_frac=0.0, cache_kind="minio",
                 main_cpu_per_step=0.0, serve_cpu_per_item=0.0, startup=0.0, nodes=1, jobs=1,
                 prefetch=False, reader_cpu_per_item=0.0, ingest_per_step=0.0):
        self.items = items
        self.steps = steps
        self.bytes_per_item = bytes_per_item
        self.compute_per_step = compute_per_step
        self.prep_cpu_per_item = prep_cpu_per_item
        self.workers = workers
        self.cores = cores
        self.storage_bps = storage_bps
        self.cache_frac = cache_frac
        self.cache_kind = cache_kind
        self.main_cpu_per_step = main_cpu_per_step
        self.serve_cpu_per_item = serve_cpu_per_item
        self.startup = startup
        self.nodes = nodes
        self.jobs = jobs
        self.prefetch = prefetch
        self.reader_cpu_per_item = reader_cpu_per_item   # t: the mount's cost in the reader
        self.ingest_per_step = ingest_per_step           # a batch into the GPU (the probe), s
        self.via_mount = True       # False: the data read from memory, no mount costs (the warm run)
        self.overlap = 0.0          # phi (calibrate())
        self.tax_scale = 1.0        # t's factor when the as-is run needs less (calibrate())
        self.measured_hit = None    # the hit ratio the as-is run saw, while the cache is as it was
        self.bw_scale = 1.0         # B_eff / B probed (calibrate())
        self.cpu_scale = 1.0        # measured / modelled CPU-side time (calibrate())
        self.crowd = 0.0            # k: CPU per item grows by k * (W - C) / C past C workers
        # Memory (see the module's text). The as-is job's: its stall and
        # what it is short of, the room it had (None: unknown, plenty), the
        # daemon's room when the daemon has a cgroup of its own, what one
        # more worker and prefetch's staging take, and the configuration
        # those were measured in (cache, kind, workers, prefetch).
        self.memory_stall = 0.0     # M, s per epoch
        self.mem_short = 0.0        # S, bytes
        self.mem_room = None        # the job's room, bytes
        self.daemon_room = None     # the daemon's, when not in the job's cgroup
        self.daemon_shared = True   # the daemon's memory counts in the job's cgroup
        self.data_bytes = items * bytes_per_item
        self.worker_bytes = 0.0
        self.staging_bytes = 64 << 20
        self.mem_added = 0.0        # a scenario's memory=+X, bytes
        self.mem_total = None       # the memory the job may use in all now (memory=SIZE), bytes
        self.mem_base = (cache_frac, cache_kind, workers, prefetch)

    def scenario(self, **kw):
        """A copy with the scenario's keys changed: cache (fraction of D),
        workers, cores, storage (bytes/s), nodes, jobs, prefetch,
        cache_kind, memory (bytes added to the job's, mem_added)."""
        p = Profile.__new__(Profile)
        p.__dict__.update(self.__dict__)
        names = {"cache": "cache_frac", "storage": "storage_bps", "memory": "mem_added"}
        for k, v in kw.items():
            k = names.get(k, k)
            if k not in p.__dict__:
                raise KeyError(k)
            setattr(p, k, v)
            if k in ("cache_frac", "cache_kind", "nodes"):
                p.measured_hit = None
        return p

    def staging_share(self):
        """Bytes of the RAM cache's budget that prefetch's staging takes
        with this cache: while a job sends its order and the cache cannot
        hold the dataset, the daemon carves min(--prefetch-mem, a quarter
        of --cache-size) out of it (docs/prefetch.md); a cache that holds
        the dataset lends staging only what it has not filled, nothing
        once full. Whether prefetch is on or not: hit() and
        _memory_needs() ask."""
        if self.cache_kind != "minio" or self.data_bytes <= 0:
            return 0.0
        cap = max(0.0, self.cache_frac) * self.data_bytes
        if cap <= 0 or cap >= self.data_bytes:
            return 0.0
        return min(self.staging_bytes, cap / 4)

    def hit(self):
        carve = self.staging_share() / self.data_bytes if self.data_bytes > 0 else 0.0
        if self.measured_hit is not None:
            # The cache as measured (the same size): its hits with staging's
            # share taken out, or given back, where prefetch changes.
            pf0 = self.mem_base[3]
            h = self.measured_hit - (carve if self.prefetch and not pf0 else 0.0) \
                + (carve if pf0 and not self.prefetch else 0.0)
            return max(0.0, min(1.0, h))
        f = max(0.0, self.cache_frac - (carve if self.prefetch else 0.0))
        if self.cache_kind == "pagecache":
            return lru_hit(f)
        return min(1.0, f * max(1, self.nodes))

    def _memory_needs(self):
        """(bytes more the job's memory cgroup must hold, bytes more the
        daemon's must) in this scenario than in the configuration measured;
        negative where it gives memory back."""
        f0, kind0, w0, pf0 = self.mem_base
        job = daemon = 0.0

        def put(kind, nbytes):
            nonlocal job, daemon
            if kind == "pagecache" or self.daemon_shared:
                job += nbytes
            else:
                daemon += nbytes
        if (self.cache_frac, self.cache_kind) != (f0, kind0):
            put(kind0, -max(0.0, min(1.0, f0)) * self.data_bytes)
            put(self.cache_kind, max(0.0, min(1.0, self.cache_frac)) * self.data_bytes)
        if self.prefetch and not pf0 and not (self.cache_kind == "minio" and self.cache_frac > 0):
            # Staging beside no RAM cache: --prefetch-mem more. With one,
            # staging lives inside --cache-size (staging_share()).
            put("minio", self.staging_bytes)
        job += (self.workers - w0) * self.worker_bytes
        return job, daemon

    def memory_needed(self):
        """Bytes of memory this scenario needs beyond what the job and the
        daemon have now and the memory it adds (memory=+X): 0 where it fits."""
        job, daemon = self._memory_needs()
        room = float("inf") if self.mem_room is None else (0.0 if self.mem_short > 0 else self.mem_room)
        droom = float("inf") if self.daemon_room is None else self.daemon_room
        return max(0.0, job - room - self.mem_added) + max(0.0, daemon - droom)

    def memory_spare(self):
        """Bytes the job's cgroup has to spare in this scenario (0 where it
        does not fit: the prediction gives it what it needs, no more)."""
        job, _ = self._memory_needs()
        room = float("inf") if self.mem_room is None else (0.0 if self.mem_short > 0 else self.mem_room)
        return max(0.0, room + self.mem_added - job)

    def memory_for_all(self):
        """memory=+X for the whole dataset in memory beside the job (cache
        = 100%): the cache's growth where it does not fit, and what the job
        is short of now."""
        p = self.scenario(cache_frac=1.0, cache_kind="minio" if self.mem_base[1] == "minio" else "pagecache")
        return p.memory_needed() + self.mem_short

    def cache_fits_up_to(self):
        """The largest cache (a fraction of the data, of the kind measured)
        the memory the job and the daemon have now can hold, or None where
        the whole dataset fits."""
        kind = self.mem_base[1]

        def short(f):
            return self.scenario(cache_frac=f, cache_kind=kind).memory_needed() > 0
        if not short(1.0):
            return None
        lo, hi = max(0.0, min(1.0, self.mem_base[0])), 1.0
        if short(lo):
            return lo
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if short(mid) else (mid, hi)
        return lo

    def memory_stall_seconds(self):
        """M' for this scenario (see the module's text)."""
        if self.memory_stall <= 0:
            return 0.0
        if self.mem_short <= 0:
            return self.memory_stall
        return self.memory_stall * max(0.0, 1.0 - self.memory_spare() / self.mem_short)

    def parts(self):
        """(epoch seconds, dict of the bounds) for this scenario; the
        memory stall adds to the largest bound and is not one itself."""
        jobs = max(1, self.jobs)
        bw = self.storage_bps * self.bw_scale
        m = (1.0 - self.hit()) * self.bytes_per_item / bw / jobs if bw > 0 else float("inf")
        m_seen = m * (1.0 - self.overlap)
        cores = max(1e-9, self.cores)
        crowd = 1.0 + self.crowd * max(0.0, self.workers - cores) / cores
        q = self.prep_cpu_per_item * self.cpu_scale * crowd / jobs
        t = self.reader_cpu_per_item * self.tax_scale * crowd if self.via_mount else 0.0
        r = self.serve_cpu_per_item if self.via_mount else 0.0
        c = self.compute_per_step
        N, S = self.items, self.steps
        cpu_total = (S * self.main_cpu_per_step * jobs + N * (q + t + r) * jobs) / cores
        bounds = {"compute": S * c, "cpu": cpu_total, "storage": N * m}
        if self.ingest_per_step > 0:
            bounds["ingest"] = S * self.ingest_per_step
        if self.workers <= 0:
            if self.prefetch:
                bounds["pipeline"] = max(S * c + N * (q + t + r), N * m)
            else:
                bounds["pipeline"] = S * c + N * (q + t + r + m_seen)
        else:
            share = min(1.0, self.workers / cores)
            x = mva_throughput(self.workers, q + t * share, min(cores, self.workers),
                               0.0 if self.prefetch else m_seen)
            bounds["pipeline"] = N / x if x > 0 else float("inf")
        return self.startup + max(bounds.values()) + self.memory_stall_seconds(), bounds

    def epoch_seconds(self):
        return self.parts()[0]

    def _fit_cpu(self, warm_seconds):
        """cpu_scale: the model's epoch with every item a hit, nothing read
        through the mount and no memory stall is WARM_SECONDS (the warm
        run's epoch less its own memory stall)."""
        if warm_seconds:
            warm = self.scenario(cache_frac=1.0, cache_kind="minio", nodes=1, via_mount=False, memory_stall=0.0)
            got = warm.epoch_seconds()
            if got > 0 and warm.startup < warm_seconds:
                b = warm.parts()[1]
                cpu_side = max(b["cpu"], b["pipeline"])
                if cpu_side >= b["compute"] and cpu_side > 0:
                    # The CPU side is nearly linear in the scale (the main
                    # process's CPU is not scaled): a second step closes the rest.
                    for _ in range(2):
                        b = self.scenario(cache_frac=1.0, cache_kind="minio", nodes=1,
                                          via_mount=False, memory_stall=0.0).parts()[1]
                        cpu_side = max(b["cpu"], b["pipeline"])
                        if cpu_side <= 0:
                            break
                        self.cpu_scale = max(0.2, min(5.0, self.cpu_scale * (warm_seconds - self.startup)
                                                      / cpu_side))

    def calibrate(self, warm_seconds=None, asis_seconds=None, crowd=None):
        """Anchors the model to the runs measured: the CPU side to the warm
        run (all hits, no mount costs, its memory stall taken off by the
        caller), k to the crowd run (CROWD: a dict
        of its workers, its pinned phases' cores and the full ones'
        (cores_full), and the ratio of a pinned step's time to a full
        one's), then the overlap phi (else the storage
        bandwidth, else t's scale) to the as-is run. Returns (cpu_scale,
        bw_scale, overlap, tax_scale)."""
        self._fit_cpu(warm_seconds)
        if warm_seconds and crowd and crowd["workers"] > crowd["cores"] and crowd["ratio"] > 0:
            def warm_at(k):
                def at(cores):
                    return self.scenario(cache_frac=1.0, cache_kind="minio", nodes=1, via_mount=False,
                                         workers=crowd["workers"], cores=cores, crowd=k,
                                         memory_stall=0.0).epoch_seconds()
                # The phases' steps, without the start-up: their ratio.
                return (at(crowd["cores"]) - self.startup) / max(1e-9, at(crowd["cores_full"]) - self.startup)
            t2 = crowd["ratio"]
            # A job crowded itself (W > C) had k in its warm run too: the
            # two fits alternate until they agree.
            for _ in range(30 if self.workers > self.cores else 1):
                self.crowd = _solve(warm_at, t2, 0.0, 2.0)
                if self.workers <= self.cores:
                    break
                self._fit_cpu(warm_seconds)
        if asis_seconds:
            self.overlap, self.bw_scale, self.tax_scale = 0.0, 1.0, 1.0
            if self.scenario(overlap=1.0).epoch_seconds() > asis_seconds:
                # Faster than any overlap allows: the mount's costs were
                # over-measured (their share of contention); scale t.
                self.overlap = 1.0 if self.hit() < 1.0 else 0.0
                self.tax_scale = _solve(lambda k: self.scenario(tax_scale=k).epoch_seconds(), asis_seconds,
                                        0.0, 1.0)
            elif self.hit() < 1.0 and self.epoch_seconds() >= asis_seconds:
                self.overlap = _solve(lambda f: self.scenario(overlap=f).epoch_seconds(), asis_seconds, 0.0, 1.0)
            elif self.hit() < 1.0:
                # Slower than no overlap at all: the storage delivered less
                # than its probe (B_eff < B).
                self.bw_scale = _solve(lambda b: self.scenario(bw_scale=b).epoch_seconds(), asis_seconds,
                                       1e-3, 1.0, geometric=True)
        return self.cpu_scale, self.bw_scale, self.overlap, self.tax_scale


def _solve(f, target, lo, hi, geometric=False, steps=60):
    """X in [LO, HI] with F(X) = TARGET for a monotone F (bisection); the
    nearer end when TARGET is outside F's range."""
    flo, fhi = f(lo), f(hi)
    sign = 1.0 if flo >= fhi else -1.0          # decreasing: 1; increasing: -1
    if sign * (flo - target) <= 0:
        return lo
    if sign * (fhi - target) >= 0:
        return hi
    for _ in range(steps):
        mid = (lo * hi) ** 0.5 if geometric else (lo + hi) / 2
        if sign * (f(mid) - target) > 0:
            lo = mid
        else:
            hi = mid
    return (lo * hi) ** 0.5 if geometric else (lo + hi) / 2
