"""epochfs-analyze's model arithmetic, option parsing and report (no torch
needed). The report's records are made through the timer's schema
(_records), as the timer makes them."""
import unittest

from epochfs import _records, analyze
from epochfs._model import Profile, lru_hit, mva_throughput


class Mva(unittest.TestCase):
    def test_one_worker_is_serial(self):
        # One customer: no queueing, an item takes CPU plus disk.
        self.assertAlmostEqual(mva_throughput(1, 0.010, 1, 0.030), 1 / 0.040)

    def test_many_workers_reach_the_bottleneck(self):
        # Disk-bound: 1/m; CPU-bound on 2 cores: 2/q.
        self.assertAlmostEqual(mva_throughput(64, 0.010, 2, 0.030), 1 / 0.030, places=1)
        self.assertAlmostEqual(mva_throughput(64, 0.020, 2, 0.001), 2 / 0.020, places=0)

    def test_monotone_in_workers(self):
        xs = [mva_throughput(w, 0.02, 2, 0.01) for w in range(1, 9)]
        self.assertEqual(xs, sorted(xs))

    def test_no_disk_two_workers_two_cores(self):
        self.assertAlmostEqual(mva_throughput(2, 0.02, 2, 0.0), 2 / 0.02)


class Lru(unittest.TestCase):
    def test_ends(self):
        self.assertEqual(lru_hit(0.0), 0.0)
        self.assertEqual(lru_hit(1.0), 1.0)

    def test_shuffled_epochs_thrash_lru(self):
        # Every item once per epoch in a fresh order: LRU keeps the items
        # just read, which this epoch will not read again.
        h = lru_hit(0.5)
        self.assertLess(h, 0.5)
        self.assertGreater(h, 0.05)
        self.assertLessEqual(lru_hit(0.3), lru_hit(0.6))


def prof(**kw):
    base = dict(items=1000, steps=100, bytes_per_item=100e3, compute_per_step=0.0,
                prep_cpu_per_item=0.01, workers=2, cores=2, storage_bps=25e6, cache_frac=0.5)
    base.update(kw)
    return Profile(**base)


class Epoch(unittest.TestCase):
    def test_all_hits_cpu_bound(self):
        # 1,000 items x 10 ms on 2 workers and 2 cores: 5 s.
        self.assertAlmostEqual(prof(cache_frac=1.0).epoch_seconds(), 5.0, places=6)

    def test_storage_bound_with_prefetch(self):
        # Staging carved out of the 50 MB cache (a quarter: 12.5 MB, under
        # --prefetch-mem): 62.5 MB from storage at 25 MB/s = 2.5 s; CPU 5 s: 5 s.
        self.assertAlmostEqual(prof(prefetch=True).epoch_seconds(), 5.0, places=6)
        # At 5 MB/s the storage bounds: 12.5 s.
        self.assertAlmostEqual(prof(prefetch=True, storage_bps=5e6).epoch_seconds(), 12.5, places=6)
        # A cache that holds the dataset keeps it all; with none, nothing to carve.
        self.assertAlmostEqual(prof(prefetch=True, cache_frac=1.0).hit(), 1.0)
        self.assertAlmostEqual(prof(prefetch=True, cache_frac=0.0, storage_bps=5e6).epoch_seconds(), 20.0, places=6)

    def test_stalls_without_prefetch(self):
        t_no = prof().epoch_seconds()
        t_pf = prof(prefetch=True).epoch_seconds()
        self.assertGreater(t_no, t_pf)
        # Two workers can at best overlap the disk with the CPU fully.
        self.assertLess(t_no, 5.0 + 2.0 + 1e-6)

    def test_no_workers_serial(self):
        # 1,000 x (10 ms + 50 KB / 25 MB/s = 2 ms) + 100 x 5 ms = 12.5 s
        t = prof(workers=0, compute_per_step=0.005).epoch_seconds()
        self.assertAlmostEqual(t, 12.5, places=6)

    def test_compute_bound(self):
        self.assertAlmostEqual(prof(cache_frac=1.0, compute_per_step=0.2).epoch_seconds(), 20.0)

    def test_nodes_and_jobs(self):
        self.assertEqual(prof(nodes=2).hit(), 1.0)
        # Two jobs sharing prep: 5 ms of CPU each per item, both on 2 cores.
        self.assertAlmostEqual(prof(cache_frac=1.0, jobs=2).epoch_seconds(), 5.0, places=6)

    def test_page_cache_hits_less(self):
        self.assertLess(prof(cache_kind="pagecache").hit(), prof().hit())

    def test_calibrate_recovers_bandwidth(self):
        truth = prof(storage_bps=10e6)
        measured = truth.epoch_seconds()
        p = prof(storage_bps=25e6)
        p.calibrate(asis_seconds=measured)
        self.assertAlmostEqual(p.bw_scale, 0.4, places=3)
        self.assertAlmostEqual(p.epoch_seconds(), measured, places=3)

    def test_calibrate_cpu(self):
        p = prof()
        p.calibrate(warm_seconds=6.0)
        self.assertAlmostEqual(p.cpu_scale, 1.2, places=6)
        self.assertAlmostEqual(p.scenario(cache_frac=1.0).epoch_seconds(), 6.0, places=6)

    def test_reader_cost(self):
        # t = 2 ms per item read through the mount: in full on the cores'
        # bound (1,000 x 12 ms / 2 cores = 6 s at 2 workers); one worker on
        # two cores pays half of it in its cycle (1,000 x 11 ms).
        p = prof(cache_frac=1.0, reader_cpu_per_item=0.002)
        self.assertAlmostEqual(p.epoch_seconds(), 6.0, places=6)
        self.assertAlmostEqual(p.scenario(workers=1).epoch_seconds(), 11.0, places=6)
        # Read from memory (the warm run): no mount costs.
        self.assertAlmostEqual(p.scenario(via_mount=False).epoch_seconds(), 5.0, places=6)
        # The daemon's CPU counts on the cores, not in a lone worker's cycle.
        d = prof(cache_frac=1.0, serve_cpu_per_item=0.004)
        self.assertAlmostEqual(d.epoch_seconds(), 7.0, places=6)
        self.assertAlmostEqual(d.scenario(workers=1).epoch_seconds(), 10.0, places=6)

    def test_overlap(self):
        # One worker, half the data missed: 1,000 x (10 ms + 2 ms); with the
        # whole transfer overlapped, the decode alone (the disk, 2 s, is not
        # the bound).
        p = prof(workers=1)
        self.assertAlmostEqual(p.epoch_seconds(), 12.0, places=6)
        self.assertAlmostEqual(p.scenario(overlap=1.0).epoch_seconds(), 10.0, places=6)
        # The storage still bounds: at 1 MB/s the 50 MB take 50 s whatever overlaps.
        self.assertAlmostEqual(p.scenario(overlap=1.0, storage_bps=1e6).epoch_seconds(), 50.0, places=6)

    def test_calibrate_overlap_then_bandwidth_then_reader(self):
        truth = prof(workers=1, reader_cpu_per_item=0.002)
        truth.overlap = 0.5
        measured = truth.epoch_seconds()
        p = prof(workers=1, reader_cpu_per_item=0.002)
        p.calibrate(asis_seconds=measured)
        self.assertAlmostEqual(p.overlap, 0.5, places=4)
        self.assertEqual((p.bw_scale, p.tax_scale), (1.0, 1.0))
        # Slower than no overlap allows: the storage delivered less.
        slow = prof(workers=1, reader_cpu_per_item=0.002, storage_bps=10e6).epoch_seconds()
        p.calibrate(asis_seconds=slow)
        self.assertEqual(p.overlap, 0.0)
        self.assertAlmostEqual(p.bw_scale, 0.4, places=3)
        # Faster than a full overlap allows: t was over-measured.
        p.calibrate(asis_seconds=10.5)
        self.assertEqual(p.overlap, 1.0)
        self.assertAlmostEqual(p.tax_scale, 0.5, places=4)
        self.assertAlmostEqual(p.epoch_seconds(), 10.5, places=4)

    def test_crowd(self):
        # k = 0.2: 4 workers on 2 cores cost 1 + 0.2 x (4 - 2) / 2 = 1.2x
        # the CPU per item (1,000 x 12 ms / 2 = 6 s); 2 workers or fewer, nothing.
        p = prof(cache_frac=1.0)
        p.crowd = 0.2
        self.assertAlmostEqual(p.epoch_seconds(), 5.0, places=6)
        self.assertAlmostEqual(p.scenario(workers=4).epoch_seconds(), 6.0, places=6)
        self.assertAlmostEqual(p.scenario(workers=3).epoch_seconds(), 5.5, places=6)
        # The mount's cost in the reader grows with it; the daemon's does not.
        t = prof(cache_frac=1.0, reader_cpu_per_item=0.002, serve_cpu_per_item=0.002, workers=4)
        t.crowd = 0.2
        self.assertAlmostEqual(t.epoch_seconds(), 1000 * (0.012 * 1.2 + 0.002) / 2, places=6)

    def test_calibrate_crowd(self):
        # The warm run at 2 workers took 6 s (cpu_scale 1.2); in the crowd
        # run a step of its 2 workers on 1 CPU took 2.2x one on 2: k = 0.1
        # (1,000 x 12 ms x 1.1 on one core), and 4 workers on 2 CPUs are
        # predicted at 6.6 s.
        def crowd(ratio, workers=2, cores=1):
            return {"workers": workers, "cores": cores, "cores_full": 2, "ratio": ratio}
        p = prof()
        p.calibrate(warm_seconds=6.0, crowd=crowd(2.2))
        self.assertAlmostEqual(p.cpu_scale, 1.2, places=6)
        self.assertAlmostEqual(p.crowd, 0.1, places=4)
        self.assertAlmostEqual(p.scenario(cache_frac=1.0, workers=4).epoch_seconds(), 6.6, places=4)
        # A crowd run no slower per item than the warm run: k = 0, not less.
        q = prof()
        q.calibrate(warm_seconds=6.0, crowd=crowd(1.8))
        self.assertEqual(q.crowd, 0.0)
        # No crowd run, or one with no more workers than cores: k stays 0.
        r = prof()
        r.calibrate(warm_seconds=6.0, crowd=crowd(1.5, cores=2))
        self.assertEqual(r.crowd, 0.0)
        # A job crowded itself (3 workers on 2 CPUs): its warm run is fitted
        # with k, and the two phases keep their ratio.
        j = prof(workers=3)
        j.calibrate(warm_seconds=6.0, crowd=crowd(2.4, workers=3))
        self.assertGreater(j.crowd, 0.0)
        self.assertAlmostEqual(j.scenario(cache_frac=1.0).epoch_seconds(), 6.0, places=3)
        self.assertAlmostEqual(j.scenario(cache_frac=1.0, cores=1).epoch_seconds(), 14.4, places=3)

    def test_solve_either_direction(self):
        from epochfs._model import _solve
        self.assertAlmostEqual(_solve(lambda x: 10 - x, 4.0, 0.0, 10.0), 6.0, places=6)
        self.assertAlmostEqual(_solve(lambda x: 2 * x, 4.0, 0.0, 10.0), 2.0, places=6)
        self.assertEqual(_solve(lambda x: 2 * x, 40.0, 0.0, 10.0), 10.0)
        self.assertEqual(_solve(lambda x: 10 - x, 40.0, 0.0, 10.0), 0.0)

    def test_memory_stall_and_needs(self):
        # A job 1 s of memory stall an epoch short of 100 MB (no room):
        # added to the epoch; 50 MB more spare takes half of it, 100 MB all.
        p = prof(cache_frac=1.0)
        base = p.epoch_seconds()
        p.memory_stall, p.mem_short, p.mem_room, p.worker_bytes = 1.0, 100e6, 0.0, 30e6
        self.assertAlmostEqual(p.epoch_seconds(), base + 1.0)
        self.assertAlmostEqual(p.scenario(memory=50e6).epoch_seconds(), base + 0.5)
        self.assertAlmostEqual(p.scenario(memory=400e6).epoch_seconds(), base)
        # A worker more needs its memory: it does not fit, and its prediction
        # keeps the stall (the memory it needs given, no more).
        w3 = p.scenario(workers=3)
        self.assertEqual(w3.memory_needed(), 30e6)
        self.assertEqual(w3.memory_stall_seconds(), 1.0)
        # A worker fewer gives 30 MB back: 0.3 s less stall.
        self.assertAlmostEqual(p.scenario(workers=1).memory_stall_seconds(), 0.7)
        self.assertEqual(p.scenario(workers=1).memory_needed(), 0.0)
        # A bigger cache, the daemon in the job's cgroup: the job's memory.
        # In a cgroup of its own: the daemon's room decides.
        q = prof(cache_frac=0.5)
        q.mem_room = 20e6
        self.assertEqual(q.scenario(cache_frac=0.6).memory_needed(), 0.0)         # 10 MB of 20
        self.assertAlmostEqual(q.scenario(cache_frac=1.0).memory_needed(), 30e6)  # 50 MB of 20
        self.assertAlmostEqual(q.cache_fits_up_to(), 0.7, places=6)
        q.daemon_shared, q.daemon_room = False, 0.0
        self.assertAlmostEqual(q.scenario(cache_frac=0.6).memory_needed(), 10e6)
        # Prefetch: staging inside --cache-size; beside no RAM cache, its own.
        self.assertEqual(q.scenario(prefetch=True).memory_needed(), 0.0)
        r = prof(cache_frac=0.0)
        r.mem_room = 0.0
        self.assertAlmostEqual(r.scenario(prefetch=True).memory_needed(), 64 << 20)
        # Unknown room: everything fits.
        self.assertEqual(prof().scenario(cache_frac=1.0, workers=8, prefetch=True).memory_needed(), 0.0)

    def test_scenario_rejects_unknown(self):
        with self.assertRaises(KeyError):
            prof().scenario(colour=1)


class Options(unittest.TestCase):
    def test_what_if(self):
        s = analyze.parse_what_if("cache=50%,workers=4,storage=100,prefetch=on,nodes=3,jobs=2")
        self.assertEqual(s["cache"], ("frac", 0.5))
        self.assertEqual(s["workers"], 4)
        self.assertEqual(s["storage"], 100e6)
        self.assertIs(s["prefetch"], True)
        self.assertEqual(analyze.parse_what_if("cache=2G")["cache"], ("bytes", 2 * (1 << 30)))

    def test_what_if_errors(self):
        for bad in ("colour=3", "cache", "workers=-1", "storage=0", "prefetch=maybe", "nodes=0", ","):
            with self.assertRaises(analyze.UsageError, msg=bad):
                analyze.parse_what_if(bad)

    def test_args(self):
        o = analyze.parse_args(["--steps", "20", "--what-if", "cache=100%", "/d", "--", "python3", "x.py"])
        self.assertEqual(o["steps"], 20)
        self.assertEqual(o["command"], ["python3", "x.py"])
        self.assertEqual(o["datadir"], "/d")
        self.assertEqual(analyze.parse_args(["-h"]), "help")

    def test_args_errors(self):
        for bad in (["/d"], ["--", "x"], ["--epochs", "0", "/d", "--", "x"], ["--bogus", "/d", "--", "x"],
                    ["--runs", "cold", "/d", "--", "x"], ["--plot", "a.pdf", "/d", "--", "x"],
                    ["--steps"], ["a", "b", "--", "x"]):
            with self.assertRaises(analyze.UsageError, msg=str(bad)):
                analyze.parse_args(bad)


def remake(rec, **change):
    """REC with CHANGE, made again through the schema: every record the
    analyzer is handed here is one the timer could have written."""
    return _records.KINDS[rec["ev"]].make(**dict(rec, **change))


class Report(unittest.TestCase):
    def records(self):
        """Each run's start and window records: an epoch of 100 steps of 10
        items on 2 workers and 2 CPUs, measured whole (no mount)."""
        def start(mode):
            return _records.START.make(
                mode=mode, workers=2, workers_asked=None, batch_size=10, steps_per_epoch=100, items_per_epoch=1000,
                dataset_items=1000, dataset="ImageFolder", mapped=True, files=[], mean_file_bytes=100e3, cpus=2,
                persistent_workers=False, warmup=1 if mode == "as-is" else 0, epochs=1, steps=0)

        def win(mode, seconds, wait, worker_cpu, main_cpu=0.0):
            return _records.WINDOW.make(
                mode=mode, complete=True, seconds=seconds, wait=wait, compute=seconds - wait, steps=100, items=1000,
                epochs_complete=1, skip=2, worker_cpu=worker_cpu, main_cpu=main_cpu, daemon_cpu=None,
                stats_before=None, stats_after=None, worker_private_bytes=None, alternate=None,
                first_epoch=1 if mode == "as-is" else 0, first_step_compute=(seconds - wait) / 100,
                batch_shape=None, batch_dtype=None)
        return {"as-is": (0, [start("as-is"), win("as-is", 8.0, 7.5, 10.0)]),
                "warm": (0, [start("warm"), win("warm", 5.5, 5.0, 10.0)]),
                "compute": (0, [start("compute"), win("compute", 0.5, 0.01, 0.0, 0.4)])}

    def test_breakdown_and_schema(self):
        rep = analyze.analyze({"what_if": [analyze.parse_what_if("cache=100%")]}, self.records(), 25e6,
                              {"cache_capacity_bytes": 50e6})
        self.assertAlmostEqual(rep["epoch_seconds"], 8.0)
        self.assertAlmostEqual(rep["compute_seconds"], 0.49, places=6)
        self.assertAlmostEqual(rep["prep_stall_seconds"], 5.5 - 0.49, places=6)
        self.assertAlmostEqual(rep["fetch_stall_seconds"], 2.5, places=6)
        self.assertAlmostEqual(rep["model"]["as_is_seconds"], 8.0, places=2)
        asked = [w for w in rep["what_if"] if w.get("requested")]
        self.assertEqual(len(asked), 1)
        self.assertEqual(asked[0]["cache"], 100.0)
        self.assertIn("predicted_epoch_seconds", asked[0])
        self.assertTrue(any("workers" in w for w in rep["what_if"]))
        self.assertIn("most help", analyze.text_report(rep))

    def test_warm_slower_than_asis_with_nothing_fetched(self):
        # Every byte a hit (the mount's counters say so) and the warm run
        # slower than the as-is one (one-time costs in its first steps, as
        # a GPU job's): no fetch stall, the parts add up to the epoch at
        # most, the CPU side is anchored to the as-is epoch, and a note says so.
        recs = self.records()
        nothing = {"storage_read_bytes": 0, "cache_hit_bytes": 0}
        asis = remake(recs["as-is"][1][1], seconds=5.0, wait=4.5, compute=0.5, stats_before=nothing,
                    stats_after=dict(nothing, cache_hit_bytes=100e6))
        recs["as-is"] = (0, [recs["as-is"][1][0], asis])
        rep = analyze.analyze({"what_if": []}, recs, 25e6, {"cache_capacity_bytes": 200e6})
        self.assertAlmostEqual(rep["epoch_seconds"], 5.0)
        self.assertEqual(rep["fetch_stall_seconds"], 0.0)
        self.assertAlmostEqual(rep["prep_stall_seconds"], 5.0 - 0.49, places=6)
        self.assertLessEqual(rep["compute_seconds"] + rep["prep_stall_seconds"], rep["epoch_seconds"] + 1e-9)
        self.assertEqual(rep["model"]["cpu_anchor"], "as-is")
        self.assertAlmostEqual(rep["model"]["as_is_seconds"], 5.0, places=2)
        self.assertTrue(any("10% longer than the as-is" in n for n in rep["notes"]), rep.get("notes"))
        self.assertFalse(any("one-time costs of the job's start" in n for n in rep["notes"]))
        # Its first step, in the process's first epoch, took 1 s: said so.
        warm = remake(recs["warm"][1][1], first_epoch=0, first_step_compute=1.0)
        recs["warm"] = (0, [recs["warm"][1][0], warm])
        rep = analyze.analyze({"what_if": []}, recs, 25e6, {"cache_capacity_bytes": 200e6})
        self.assertTrue(any("first step took 1.00 s" in n for n in rep["notes"]), rep.get("notes"))
        # With bytes fetched, the warm run stays the anchor.
        asis["stats_after"] = dict(nothing, storage_read_bytes=50e6)
        rep = analyze.analyze({"what_if": []}, recs, 25e6, {"cache_capacity_bytes": 50e6})
        self.assertEqual(rep["model"]["cpu_anchor"], "warm")

    def test_advice_without_hardware(self):
        # Prep-bound on 2 of 8 CPUs: twice the cores helps most, and the
        # report also names the best change with the CPUs the job has.
        recs = self.records()
        for m in recs:
            recs[m] = (0, [remake(recs[m][1][0], cpus=8)] + recs[m][1][1:])
        rep = analyze.analyze({"what_if": []}, recs, 25e6, {"cache_capacity_bytes": 200e6})
        a = rep["advice"]
        self.assertIn("twice the CPU cores", a["change"])
        free = a["without_hardware"]
        self.assertRegex(free["change"], r"^\d+ DataLoader workers$")
        self.assertGreater(free["speedup"], 1.05)
        self.assertLess(free["speedup"], a["speedup"])
        self.assertIn("with the hardware it has: " + free["change"], analyze.text_report(rep))

    def test_crowd_run(self):
        # The crowd run's phases: a step of its 2 workers on 1 CPU took
        # 2.4x one on 2 CPUs: k fitted, in the report and its text; a crowd run the loader kept at its
        # own workers (no memory for more) fits nothing.
        recs = self.records()
        start = remake(recs["warm"][1][0], mode="crowd", workers=2, workers_asked=2, cpus=1)
        win = remake(recs["warm"][1][1], mode="crowd", alternate={
            "cpus_full": 2, "cpus_pinned": 1, "full_steps": 20, "full_seconds": 1.0, "pinned_steps": 20,
            "pinned_seconds": 2.4})
        recs["crowd"] = (0, [start, win])
        rep = analyze.analyze({"what_if": []}, recs, 25e6, {"cache_capacity_bytes": 50e6})
        self.assertEqual((rep["model"]["crowd_workers"], rep["model"]["crowd_cpus"]), (2, 1))
        self.assertGreater(rep["model"]["crowd"], 0.0)
        self.assertIn("crowd", rep["measured"])
        self.assertIn("crowd run, 2 workers on 1 CPU in turn with all: 2.40x", analyze.text_report(rep, verbose=True))
        self.assertNotIn("crowd run", analyze.text_report(rep))     # the model's inputs: --verbose
        p = analyze.profile_from_report(rep)
        warm = p.scenario(cache_frac=1.0, via_mount=False)
        self.assertAlmostEqual((warm.scenario(cores=1).epoch_seconds() - p.startup)
                               / (warm.epoch_seconds() - p.startup), 2.4, places=3)
        w4 = [w for w in rep["what_if"] if w.get("workers") == 4 and "cores" not in w][0]
        no_rate = remake(win, alternate=dict(win["alternate"], pinned_steps=analyze.CROWD_MIN_STEPS - 1))
        recs["crowd"] = (0, [start, no_rate])
        few = analyze.analyze({"what_if": []}, recs, 25e6, {})
        self.assertIsNone(few["model"]["crowd_workers"])
        # Said in the JSON; no note a user could not act on.
        self.assertEqual(few["model"]["crowd_too_few_steps"], [20, analyze.CROWD_MIN_STEPS - 1])
        self.assertFalse(few.get("notes"))
        recs["crowd"] = (0, [start, remake(win, alternate=None)])
        rep = analyze.analyze({"what_if": []}, recs, 25e6, {"cache_capacity_bytes": 50e6})
        self.assertIsNone(rep["model"]["crowd_workers"])
        self.assertEqual(rep["model"]["crowd"], 0.0)
        plain = [w for w in rep["what_if"] if w.get("workers") == 4 and "cores" not in w][0]
        self.assertGreater(w4["predicted_epoch_seconds"], plain["predicted_epoch_seconds"] * 1.05)

    def test_crowd_run_failing_fails_nothing(self):
        # The crowd run killed (137: memory): the report is made from the
        # other three, with a note, and the analyzer exits 0.
        import io
        import tempfile
        from contextlib import redirect_stdout
        recs = self.records()
        asked = []

        def fake(opts, mode, mount, env, say, crowd=None):
            asked.append((mode, crowd))
            return (137, []) if mode == "crowd" else recs[mode]
        real = analyze.run_mode
        analyze.run_mode = fake
        try:
            with tempfile.TemporaryDirectory() as d:
                out = io.StringIO()
                with redirect_stdout(out):
                    rc = analyze.main(["-q", "--storage-mbps", "25", d, "--", "job"])
        finally:
            analyze.run_mode = real
        self.assertEqual(rc, 0)
        self.assertEqual([m for m, _ in asked], ["as-is", "warm", "compute", "crowd"])
        self.assertEqual((asked[-1][1]["workers"], asked[-1][1]["cpus"]), (2, 1))
        self.assertIn("the crowd run (2 workers on 1 CPU) exited 137", out.getvalue())
        self.assertIn("fetch stall", out.getvalue())

    def test_crowd_plan(self):
        # 2 workers on 2 CPUs: pinned to 1. One worker: a second one, sized
        # by the warm run's worker and two batches in flight.
        recs = self.records()
        self.assertEqual(analyze.crowd_plan(recs), ({"workers": 2, "cpus": 1, "worker_bytes": 0}, None))
        recs["warm"][1][1] = remake(recs["warm"][1][1], worker_private_bytes=5e7, batch_shape=[10, 3, 8, 8],
                                    batch_dtype="float32")
        for r in recs.values():
            r[1][0] = remake(r[1][0], workers=1)
        self.assertEqual(analyze.crowd_plan(recs)[0], {"workers": 2, "cpus": 1, "worker_bytes": 5e7 + 2 * 7680})
        for r in recs.values():
            r[1][0] = remake(r[1][0], workers=6, cpus=8)
        self.assertEqual(analyze.crowd_plan(recs)[0]["cpus"], 3)
        for w in (0, 4):
            recs = self.records()
            recs["as-is"][1][0] = remake(recs["as-is"][1][0], workers=w)
            got, why = analyze.crowd_plan({"as-is": recs["as-is"]})
            self.assertIsNone(got)
            self.assertTrue(why)
        self.assertIsNone(analyze.crowd_plan({})[0])

    def test_partial_window(self):
        # 10 steps: 2 of start-up in 3 s, then 8 steady in 4 s; an epoch of
        # 100 steps is 3 s + 98 x 0.5 s.
        w = {"seconds": 7.0, "steps": 10, "skip": 2, "startup_seconds": 3.0, "steady_seconds": 4.0,
             "steady_steps": 8, "epochs_complete": 0}
        self.assertAlmostEqual(analyze.per_epoch(w, 100), 52.0)
        w.update(steady_steps=1, steady_seconds=0.5)
        self.assertIsNone(analyze.per_epoch(w, 100))     # no rate from one step
        self.assertAlmostEqual(analyze.per_epoch({"seconds": 9.0, "steps": 200, "epochs_complete": 2},
                                                 100), 4.5)

    def test_from_report(self):
        import json
        import os
        import tempfile
        rep = analyze.analyze({"what_if": [analyze.parse_what_if("cache=100%")]}, self.records(), 25e6,
                              {"cache_capacity_bytes": 50e6})
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.json")
            with open(path, "w") as f:
                json.dump(rep, f)
            o = analyze.parse_args(["--from", path, "--what-if", "cache=100%", "--what-if", "workers=1"])
            again = analyze.from_report(o)
            asked = [w for w in again["what_if"] if w.get("requested")]
            self.assertEqual(len(asked), 2)
            # The same calibrated model: the same prediction as the run's own.
            first = [w for w in rep["what_if"] if w.get("requested")][0]
            self.assertAlmostEqual(asked[0]["predicted_epoch_seconds"], first["predicted_epoch_seconds"], places=3)
            self.assertEqual(again["epoch_seconds"], rep["epoch_seconds"])
            with open(path, "w") as f:
                f.write("{not json")
            with self.assertRaises(analyze.UsageError):
                analyze.from_report(o)
            with open(path, "w") as f:
                json.dump({"model": {"error": "no warm run"}, "job": {}}, f)
            with self.assertRaises(analyze.UsageError):
                analyze.from_report(o)
        with self.assertRaises(analyze.UsageError):
            analyze.parse_args(["--from", "r.json", "/d", "--", "x"])

    GPU = {"available": True, "device_name": "Test GPU", "bytes": 9.6e6, "h2d_pinned_s": 0.1,
           "h2d_pageable_s": 0.2, "h2d_pinned_gbps": 96.0, "h2d_pageable_gbps": 48.0, "kernel_s": 0.05,
           "kernel_batches_per_s": 20.0}

    def test_gpu_probed_is_a_bound(self):
        # 100 steps x (0.1 s copy + 0.05 s kernel) = 15 s: the GPU's intake bounds.
        rep = analyze.analyze({"what_if": [analyze.parse_what_if("cache=100%")]}, self.records(), 25e6,
                              {"cache_capacity_bytes": 50e6}, gpu=self.GPU)
        self.assertAlmostEqual(rep["model"]["ingest_per_step"], 0.15)
        asked = [w for w in rep["what_if"] if w.get("requested")][0]
        self.assertEqual(asked["bottleneck"], "ingest")
        self.assertGreaterEqual(asked["predicted_epoch_seconds"], 15.0)
        self.assertEqual(rep["epoch_seconds"], 8.0)           # the breakdown is what was measured
        self.assertIn("GPU: Test GPU", analyze.text_report(rep))

    def test_gpu_rate_models_the_compute(self):
        rep = analyze.analyze({"what_if": [analyze.parse_what_if("cache=100%")], "gpu_rate": 2.0},
                              self.records(), 25e6, {"cache_capacity_bytes": 50e6},
                              gpu={"available": False, "reason": "no CUDA device"})
        asked = [w for w in rep["what_if"] if w.get("requested")][0]
        self.assertEqual(asked["bottleneck"], "compute")       # 100 steps x 0.5 s
        self.assertAlmostEqual(asked["predicted_epoch_seconds"] - rep["model"]["startup_seconds"], 50.0, places=3)
        self.assertAlmostEqual(rep["compute_seconds"], 0.49, places=6)   # measured, unchanged
        text = analyze.text_report(rep)
        self.assertIn("GPU: none here; the what-ifs model the training step at 2 steps/s (--gpu-rate)", text)
        self.assertIn("GPU: none here (no CUDA device); ", analyze.text_report(rep, verbose=True))
        o = analyze.parse_args(["--gpu-rate", "4", "/d", "--", "x"])
        self.assertEqual(o["gpu_rate"], 4.0)
        for bad in ("0", "-1", "fast", "inf"):
            with self.assertRaises(analyze.UsageError, msg=bad):
                analyze.parse_args(["--gpu-rate", bad, "/d", "--", "x"])

    def test_gpu_probe_without_a_gpu(self):
        # No library or no device here: a reason, never an exception.
        import os
        old = os.environ.get("EPOCHFS_GPU_LIB")
        os.environ["EPOCHFS_GPU_LIB"] = "/nonexistent/libepochfs_gpu.so"
        try:
            g = analyze.gpu_probe(self.records())
        finally:
            if old is None:
                del os.environ["EPOCHFS_GPU_LIB"]
            else:
                os.environ["EPOCHFS_GPU_LIB"] = old
        self.assertFalse(g["available"])
        self.assertTrue(g["reason"])

    def test_no_loader(self):
        rep = analyze.analyze({}, {"as-is": (1, [])}, None, None)
        self.assertIn("error", rep)


if __name__ == "__main__":
    unittest.main()
