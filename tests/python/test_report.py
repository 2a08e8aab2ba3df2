"""epochfs-analyze's report where memory is short (issue 32), from records
made through the timer's schema (_records), with made-up memory readings:
the memory stall's attribution from the pressure figures, a breakdown that
sums to the epoch, the whole dataset in memory predicted at the warm run's
epoch less its memory stall, advice never offering what the memory cannot
hold, stalls under the noise floor said to be none measurable, notes a user
can act on, and the scenarios echoed in the --what-if syntax. No torch
needed."""
import io
import json
import os
import re
import tempfile
import unittest
from contextlib import redirect_stdout

from epochfs import _records, analyze

MiB = 1 << 20


def snap(some_us=0, full_us=0, refaults=0, majflt=0, limit=711 * MiB, usage=709 * MiB, room=2 * MiB,
         scope="cgroup"):
    """A _memory.snapshot() as the timer records it."""
    return {"version": 1, "dir": "/sys/fs/cgroup/memory/job", "limit": limit, "usage": usage,
            "unmapped_file": 1 * MiB, "major_faults": majflt, "refaults": refaults, "available": 20 << 30,
            "room": room, "psi_scope": scope, "psi_dir": "/sys/fs/cgroup/unified/job" if scope == "cgroup" else None,
            "psi_some_us": some_us, "psi_full_us": full_us}


def start(mode, workers=2, cpus=2, steps=63, items=4000):
    return _records.START.make(
        mode=mode, workers=workers, workers_asked=None, batch_size=64, steps_per_epoch=steps, items_per_epoch=items,
        dataset_items=items, dataset="ImageFolder", mapped=True, files=[], mean_file_bytes=92e3, cpus=cpus,
        persistent_workers=False, warmup=1 if mode == "as-is" else 0, epochs=1, steps=0)


def window(mode, seconds, worker_cpu, after, before=None, faults=0, main_cpu=0.0, stats=None, room_min=0.0,
           steps=63, items=4000, shared=True):
    return _records.WINDOW.make(
        mode=mode, complete=True, seconds=seconds, wait=0.98 * seconds, compute=0.02 * seconds, steps=steps,
        items=items, epochs_complete=1, skip=2, worker_cpu=worker_cpu, main_cpu=main_cpu,
        daemon_cpu=0.4 if stats else None, stats_before=stats[0] if stats else None,
        stats_after=stats[1] if stats else None, worker_private_bytes=105e6, alternate=None,
        first_epoch=1 if mode == "as-is" else 0, first_step_compute=0.001, batch_shape=[64, 3, 224, 224],
        batch_dtype="float32", memory_before=before or snap(), memory_after=after, memory_room_min=room_min,
        major_faults=faults, daemon_rss_bytes=200 * MiB if stats else None,
        daemon_memory_shared=shared if stats else None)


def stats(storage=184e6, staging=64 * MiB):
    return ({"storage_read_bytes": 0, "cache_hit_bytes": 0, "peer_read_bytes": 0, "daemon_pid": 1},
            {"storage_read_bytes": storage, "cache_hit_bytes": 184e6, "peer_read_bytes": 0, "daemon_pid": 1,
             "prefetch_staging_limit_bytes": staging, "mem_room_bytes": 0})


def part7(asis_psi=(2.0e6, 0.3e6), warm_psi=(1.8e6, 0.25e6), room_min=0.0, storage=184e6, scope="cgroup",
          refaults=20000, faults=800):
    """Part 7's job as issue 32 saw it: 4,000 items of 92 KB (D = 368 MB),
    2 workers on 2 CPUs, a cache of D/2 and the daemon in the job's memory
    cgroup at its limit; as-is 9.39 s, warm 5.34 s, the compute nil."""
    before = snap(scope=scope)
    return {"as-is": (0, [start("as-is"), window("as-is", 9.39, 10.4, snap(*asis_psi, refaults, 900, scope=scope),
                                                  before, faults=faults, stats=stats(storage), room_min=room_min)]),
            "warm": (0, [start("warm"), window("warm", 5.34, 10.4, snap(*warm_psi, refaults, 700, scope=scope),
                                               before, faults=faults, room_min=room_min)]),
            "compute": (0, [start("compute"), window("compute", 0.06, 0.0, snap(scope=scope), main_cpu=0.05)])}


def report(recs, *asked, cache=184e6, **opts):
    o = {"what_if": [analyze.parse_what_if(a) for a in asked]}
    o.update(opts)
    return analyze.analyze(o, recs, 26.2e6, {"cache_capacity_bytes": cache})


class MemoryStall(unittest.TestCase):
    def test_attribution_from_pressure(self):
        # PSI of the job's cgroup over the as-is window: 2.0 s in which some
        # task waited for memory, 0.3 s in which none could work. Of two
        # workers, one waiting costs half the time: 0.3 + 1.7 / 2 = 1.15 s.
        rep = report(part7())
        self.assertAlmostEqual(rep["memory_stall_seconds"], 1.15, places=6)
        self.assertAlmostEqual(rep["memory"]["warm_stall_seconds"], 0.25 + 1.55 / 2, places=6)
        self.assertEqual(rep["memory"]["psi_scope"], "cgroup")
        self.assertAlmostEqual(rep["memory"]["refault_bytes_per_epoch"], 20000 * analyze.PAGE)
        self.assertEqual(rep["memory"]["major_faults_per_epoch"], 800)
        # The parts sum to the epoch; compute + prep is the warm epoch less
        # its memory stall (what an all-in-RAM run takes).
        parts = [rep[k] for k in ("compute_seconds", "prep_stall_seconds", "fetch_stall_seconds",
                                  "memory_stall_seconds")]
        self.assertAlmostEqual(sum(parts), rep["epoch_seconds"], places=6)
        self.assertAlmostEqual(rep["compute_seconds"] + rep["prep_stall_seconds"], 5.34 - 1.025, places=6)
        self.assertIn("memory stall", analyze.text_report(rep))
        # The model keeps the stall, anchored to the same epochs.
        self.assertAlmostEqual(rep["model"]["memory_stall_seconds"], 1.15)
        self.assertAlmostEqual(rep["model"]["as_is_seconds"], 9.39, places=2)
        self.assertAlmostEqual(rep["model"]["warm_seconds"], 5.34 - 1.025, places=2)

    def test_without_workers_some_is_the_stall(self):
        recs = part7()
        for m in recs:
            recs[m][1][0] = _records.START.make(**dict(recs[m][1][0], workers=0))
        rep = report(recs)
        self.assertAlmostEqual(rep["memory_stall_seconds"], 2.0, places=6)

    def test_the_machines_pressure_needs_the_jobs_own_evidence(self):
        # PSI of the whole machine (cgroup v1): another process's stalls
        # are not the job's unless its own cgroup refaulted or it faulted.
        rep = report(part7(scope="machine", refaults=0, faults=0))
        self.assertEqual(rep["memory_stall_seconds"], 0.0)
        self.assertTrue(rep["memory"]["psi_not_the_jobs"])
        self.assertIn("memory", rep["none_measurable"])
        rep = report(part7(scope="machine"))
        self.assertAlmostEqual(rep["memory_stall_seconds"], 1.15, places=6)

    def test_all_in_memory_and_the_memory_what_if(self):
        rep = report(part7(), "memory=+4G", "cache=100%", "cache=100%,memory=+1G")
        whole = rep["all_in_memory"]
        # No memory stall left: the warm epoch less its stall, with the
        # mount's costs; the memory for it is the cache's other half and
        # what the job is short of: at least the reserve the daemon keeps
        # (800 major faults a epoch are 3 MiB of pages, less than that).
        self.assertEqual(whole["memory_stall_seconds"], 0.0)
        self.assertLess(abs(whole["predicted_epoch_seconds"] - (5.34 - 1.025)) / (5.34 - 1.025), 0.15)
        self.assertAlmostEqual(whole["memory_needed_bytes"], 184e6 + analyze.MEM_RESERVE, delta=1e3)
        self.assertEqual(rep["model"]["memory_short_bytes"], analyze.MEM_RESERVE)
        # 40,000 major faults an epoch: 160 MiB of pages faulted back, at most.
        many = report(part7(faults=40000))
        self.assertEqual(many["model"]["memory_short_bytes"], 40000 * analyze.PAGE)
        more, cache, both = [w for w in rep["what_if"] if w.get("requested")]
        self.assertEqual(more["memory_stall_seconds"], 0.0)             # 4 GiB ends the squeeze
        self.assertAlmostEqual(rep["epoch_seconds"] - more["predicted_epoch_seconds"], 1.15, places=2)
        # cache = 100% implies the memory to hold it, and says so; the
        # squeeze the job is in stays.
        self.assertAlmostEqual(cache["memory_needed_bytes"], 184e6, delta=1e3)
        self.assertFalse(cache["fits"])
        self.assertAlmostEqual(cache["memory_stall_seconds"], 1.15, places=3)
        self.assertIn("given the 175 MiB more memory it needs", analyze.text_report(rep))
        self.assertEqual(both["memory_needed_bytes"], 0.0)
        self.assertAlmostEqual(both["predicted_epoch_seconds"], whole["predicted_epoch_seconds"], places=3)
        self.assertIn("most help: the whole dataset in memory (cache = 100%, memory=+", analyze.text_report(rep))

    def test_memory_same_and_less(self):
        # memory=same: the room the job has now, its limit moved by what
        # the scenario takes or gives back (part 8 sizes its memory so):
        # a smaller cache or fewer workers relieve nothing, a bigger cache
        # needs its memory and is given it. A fixed limit (no memory key):
        # what they give back is spare, and the stall shrinks.
        rep = report(part7(), "cache=25%", "cache=25%,memory=same", "workers=1,memory=same",
                     "cache=100%,memory=same", "memory=-100M")
        fixed, same, w1, full, less = [w for w in rep["what_if"] if w.get("requested")]
        self.assertEqual(fixed["memory_stall_seconds"], 0.0)            # 92 MB freed, more than S
        self.assertAlmostEqual(same["memory_stall_seconds"], 1.15, places=3)
        self.assertAlmostEqual(same["memory_added_bytes"], -92e6, delta=1e3)
        self.assertTrue(same["fits"])
        self.assertAlmostEqual(w1["memory_stall_seconds"], 1.15, places=3)
        self.assertAlmostEqual(full["memory_added_bytes"], 184e6, delta=1e3)
        self.assertEqual(full["memory_needed_bytes"], 0.0)
        self.assertFalse(full["fits"])
        self.assertAlmostEqual(full["memory_stall_seconds"], 1.15, places=3)
        # Less memory than a job short of it has: the model has no figure
        # for a deeper squeeze; the stall stays as measured.
        self.assertAlmostEqual(less["memory_stall_seconds"], 1.15, places=3)
        text = analyze.text_report(rep)
        self.assertIn("what if cache=25%, memory=same: ", text)
        self.assertIn("what if memory=-100M: ", text)

    def test_from_report_keeps_the_memory(self):
        rep = report(part7(), "cache=100%")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.json")
            with open(path, "w") as f:
                json.dump(rep, f)
            again = analyze.from_report(analyze.parse_args(["--from", path, "--what-if", "cache=100%"]))
        a = [w for w in rep["what_if"] if w.get("requested")][0]
        b = [w for w in again["what_if"] if w.get("requested")][0]
        self.assertEqual((a["predicted_epoch_seconds"], a["memory_needed_bytes"]),
                         (b["predicted_epoch_seconds"], b["memory_needed_bytes"]))
        self.assertAlmostEqual(again["all_in_memory"]["predicted_epoch_seconds"],
                               rep["all_in_memory"]["predicted_epoch_seconds"], places=6)


class SafeAdvice(unittest.TestCase):
    def test_nothing_offered_that_the_memory_cannot_hold(self):
        # At its limit (no room, a memory stall): a worker more needs its
        # own memory and two batches. It is not offered as "with the
        # hardware it has"; the report says what it needs.
        rep = report(part7(), "prefetch=on", "workers=4")
        a = rep["advice"]
        self.assertNotIn("without_hardware", a)
        one = 105e6 + 2 * 64 * 3 * 224 * 224 * 4
        self.assertEqual(a["short_of_memory"]["change"], "3 DataLoader workers")
        self.assertAlmostEqual(a["short_of_memory"]["memory_needed_bytes"], one)
        text = analyze.text_report(rep)
        self.assertIn("with the hardware it has: nothing that fits its memory; 3 DataLoader workers would need "
                      "174 MiB more", text)
        pf, w4 = [w for w in rep["what_if"] if w.get("requested")]
        self.assertFalse(w4["fits"])
        self.assertAlmostEqual(w4["memory_needed_bytes"], 2 * one)
        self.assertIn("what if workers=4: ", text)
        self.assertIn("given the 347 MiB more memory it needs", text)
        # Prefetch's staging is carved out of --cache-size (docs/prefetch.md):
        # it fits, and the cache holds a quarter of itself less (46 MB of
        # 184: under --prefetch-mem's 64 MiB), so the reads hit less.
        self.assertTrue(pf["fits"])
        self.assertEqual(pf["memory_needed_bytes"], 0.0)
        p = analyze.profile_from_report(rep)
        self.assertAlmostEqual(p.scenario(prefetch=True).hit(), 0.5 - 46e6 / 368e6)
        self.assertAlmostEqual(p.scenario(prefetch=True, cache_frac=1.0).hit(), 1.0)
        self.assertNotIn("prefetch=on: %.2f s per epoch (bound: storage), given" % pf["predicted_epoch_seconds"],
                         text)

    def test_prefetch_beside_no_ram_cache(self):
        # With no RAM cache (--cache-size 0), staging is memory of its own:
        # --prefetch-mem (stats.json's staging limit) more than the job has.
        rep = report(part7(), "prefetch=on", cache=0)
        pf = [w for w in rep["what_if"] if w.get("requested")][0]
        self.assertFalse(pf["fits"])
        self.assertEqual(pf["memory_needed_bytes"], 64 * MiB)
        self.assertIn("what if prefetch=on: ", analyze.text_report(rep))
        self.assertIn("given the 64 MiB more memory it needs", analyze.text_report(rep))
        self.assertNotIn("prefetch on", (rep["advice"].get("without_hardware") or {}).get("change", ""))

    def test_offered_where_it_fits(self):
        # The same job with 1 GiB of room and no memory stall: two workers
        # more fit and are offered with the hardware it has; so does
        # prefetch.
        recs = part7(asis_psi=(0, 0), warm_psi=(0, 0), room_min=1 << 30, refaults=0, faults=0)
        rep = report(recs, "prefetch=on", "workers=4")
        a = rep["advice"]
        self.assertTrue(a["hardware"])
        self.assertEqual(a["without_hardware"]["change"], "4 DataLoader workers")
        self.assertFalse(a["without_hardware"]["hardware"])
        self.assertIn("with the hardware it has: 4 DataLoader workers -> ", analyze.text_report(rep))
        pf, w4 = [w for w in rep["what_if"] if w.get("requested")]
        self.assertTrue(pf["fits"] and w4["fits"])
        self.assertEqual(pf["memory_needed_bytes"], 0.0)
        self.assertIsNone(rep["model"]["cache_fits_up_to"])             # 1 GiB holds the other half

    def test_the_daemon_in_a_cgroup_of_its_own(self):
        # The cache grows in the daemon's cgroup, whose room (stats.json's
        # mem_room_bytes) is 0: a bigger cache needs memory there, not in
        # the job's, and prefetch's staging too.
        recs = part7(asis_psi=(0, 0), warm_psi=(0, 0), room_min=1 << 30, refaults=0, faults=0)
        w = recs["as-is"][1][1]
        recs["as-is"][1][1] = _records.WINDOW.make(**dict(w, daemon_memory_shared=False))
        rep = report(recs, "cache=100%", "workers=3")
        cache, w3 = [w for w in rep["what_if"] if w.get("requested")]
        self.assertAlmostEqual(cache["memory_needed_bytes"], 184e6, delta=1e3)
        self.assertTrue(w3["fits"])                                     # a worker fits in the job's room
        self.assertAlmostEqual(rep["model"]["cache_fits_up_to"], 0.5, places=3)


class NoiseFloor(unittest.TestCase):
    def test_small_stalls_are_none_measurable(self):
        # The warm run 2% shorter than the as-is one, 0.2 s: under 5% of the
        # epoch, a difference of two runs, not a stall.
        recs = part7(asis_psi=(0, 0), warm_psi=(0, 0), refaults=0, faults=0)
        w = recs["warm"][1][1]
        recs["warm"][1][1] = _records.WINDOW.make(**dict(w, seconds=9.19))
        rep = report(recs)
        self.assertAlmostEqual(rep["noise_floor_seconds"], 0.05 * 9.39)
        self.assertIn("fetch", rep["none_measurable"])
        self.assertIn("memory", rep["none_measurable"])
        text = analyze.text_report(rep)
        self.assertRegex(text, r"fetch stall +none measurable \(under 0\.47 s\)")
        self.assertNotRegex(text, r"fetch stall +0\.")
        # The parts still sum to the epoch in the JSON.
        self.assertAlmostEqual(rep["compute_seconds"] + rep["prep_stall_seconds"] + rep["fetch_stall_seconds"]
                               + rep["memory_stall_seconds"], rep["epoch_seconds"], places=6)

    def test_nothing_fetched_is_no_fetch_stall(self):
        # The mount read nothing from storage: whatever the warm run came
        # out shorter is the runs' drift, given to prep.
        recs = part7(asis_psi=(0, 0), warm_psi=(0, 0), storage=0, refaults=0, faults=0)
        rep = report(recs)
        self.assertEqual(rep["fetch_stall_seconds"], 0.0)
        self.assertIn("fetch", rep["none_measurable"])
        self.assertAlmostEqual(rep["compute_seconds"] + rep["prep_stall_seconds"], 9.39, places=6)
        self.assertIn("none measurable (nothing read from storage)", analyze.text_report(rep))

    def test_the_spread_of_a_runs_epochs(self):
        seen = [{"run": "as-is", "measured": True, "complete": True, "seconds": s} for s in (10.0, 11.2)]
        self.assertAlmostEqual(analyze.noise_floor(10.6, seen), 1.2)
        self.assertAlmostEqual(analyze.noise_floor(10.6, seen[:1]), 0.53)
        self.assertEqual(analyze.noise_floor(0.1, []), analyze.NOISE_MIN_SECONDS)

    def test_measurable_stalls_are_shown(self):
        text = analyze.text_report(report(part7()))
        self.assertRegex(text, r"fetch stall +3\.\d\d s \( *4\d%\)")
        self.assertRegex(text, r"memory stall +1\.15 s \( *12%\)")
        self.assertNotIn("none measurable", text)


class Notes(unittest.TestCase):
    def test_crowd_run_left_out_of_a_short_epoch(self):
        # 13 steps an epoch: a crowd run could not measure its ratio (it
        # takes 42), so it is not run, and no note asks for what cannot be
        # given.
        recs = {"as-is": (0, [start("as-is", workers=1, steps=13, items=100)])}
        plan, why = analyze.crowd_plan(recs)
        self.assertIsNone(plan)
        self.assertIn("13 steps", why)
        self.assertEqual(analyze.crowd_steps_needed(2), 42)
        # --steps shorter than a ratio needs, in a long epoch: the note
        # names the --steps that would do.
        long = {"as-is": (0, [start("as-is", workers=2, steps=500, items=32000)])}
        self.assertIsNone(analyze.crowd_plan(long, steps=20)[0])
        self.assertIsNotNone(analyze.crowd_plan(long, steps=60)[0])
        self.assertIsNotNone(analyze.crowd_plan(long)[0])

    def test_a_small_jobs_report(self):
        # The whole analyzer on a 13-step job (runs faked): no crowd run,
        # no note, no stall under the floor shown as one.
        recs = part7(asis_psi=(0, 0), warm_psi=(0, 0), storage=0, refaults=0, faults=0)
        small = {}
        for m, (rc, rr) in recs.items():
            small[m] = (rc, [_records.START.make(**dict(rr[0], steps_per_epoch=13, items_per_epoch=100)),
                             _records.WINDOW.make(**dict(rr[1], steps=13, items=100, seconds=rr[1]["seconds"] / 40,
                                                         wait=rr[1]["wait"] / 40, compute=rr[1]["compute"] / 40))])
        ran = []

        def fake(opts, mode, mount, env, say, crowd=None):
            ran.append(mode)
            return small[mode]
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
        self.assertEqual(ran, ["as-is", "warm", "compute"])
        text = out.getvalue()
        self.assertNotIn("note:", text)
        self.assertNotIn("crowd", text)
        for line in text.splitlines():
            if re.match(r"  (fetch|memory) stall", line):
                self.assertIn("none measurable", line)


class Names(unittest.TestCase):
    def test_what_if_echo_in_the_users_words(self):
        rep = report(part7(), "cache=50%,storage=25", "prefetch=on,workers=3", "memory=+4G", "cache=1G",
                     "memory=2G,cores=4")
        text = analyze.text_report(rep)
        for want in ("what if cache=50%, storage=25MB/s: ", "what if prefetch=on, workers=3: ",
                     "what if memory=+4G: ", "what if cache=1G: ", "what if memory=2G, cores=4: "):
            self.assertIn(want, text)
        for internal in ("storage_mbps", "cache_kind", "minio", "memory_added_bytes", "100.0,"):
            self.assertNotIn(internal, "\n".join(l for l in text.splitlines() if l.startswith("what if")))
        self.assertEqual(analyze.parse_what_if("memory=+4G")["memory"], ("add", 4 << 30))
        self.assertEqual(analyze.parse_what_if("memory=6g")["memory"], ("total", 6 << 30))
        self.assertEqual(analyze.parse_what_if("memory=-100M")["memory"], ("add", -100 << 20))
        self.assertEqual(analyze.parse_what_if("memory=same")["memory"], ("same", 0.0))
        for bad in ("memory=", "memory=lots", "memory=-x", "memory=0", "memory=+"):
            with self.assertRaises(analyze.UsageError, msg=bad):
                analyze.parse_what_if(bad)

    def test_model_line_behind_verbose(self):
        rep = report(part7())
        self.assertNotIn("model:", analyze.text_report(rep))
        verbose = analyze.text_report(rep, verbose=True)
        self.assertIn("model: preparing an item takes", verbose)
        self.assertIn("pressure (PSI, the job's cgroup): some 2.00 s, full 0.30 s", verbose)
        self.assertTrue(analyze.parse_args(["-v", "/d", "--", "x"])["verbose"])
        self.assertTrue(analyze.parse_args(["--verbose", "/d", "--", "x"])["verbose"])


if __name__ == "__main__":
    unittest.main()
