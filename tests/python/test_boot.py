"""The start-up hook is invisible (issue 29): a job run through the real
launcher (tools/epochfs-run.sh, made here over python/ or over a copy of
the package) sees the Python it sees without it. Each case runs the same job with and
without the launcher, in fresh processes of the system's python3, and
compares what the job saw: its sitecustomize (one on PYTHONPATH with its
attributes, the system's, a failing one, none at all), usercustomize run
once, sys.path byte for byte (an empty PYTHONPATH entry included), a dev
checkout ahead of an installed copy, the modules a job that never imports
torch has (none of epochfs's), the trigger's place in sys.meta_path and
its leaving once torch's DataLoader is imported, and a hook that fails to
load: one line, the job goes on."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

from epochfs.run import job_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG_ROOT = os.path.join(ROOT, "python")
PY = sys.executable

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:                     # pragma: no cover
    HAVE_TORCH = False


def clean_env(**extra):
    """The test process's environment without what this suite or a hook set."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("EPOCHFS_") and k not in ("PYTHONPATH", "PYTHONUSERBASE", "PYTHONSTARTUP")}
    env.update(extra)
    return env


class Boot(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="epochfs-boot-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.launcher = self.make_launcher(PKG_ROOT)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def write(self, rel, text):
        p = self.path(rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(textwrap.dedent(text))
        return p

    def make_launcher(self, pkg_root, name="epochfs-run"):
        with open(os.path.join(ROOT, "tools", "epochfs-run.sh")) as f:
            text = f.read().replace("@PYTHONDIR@", pkg_root)
        p = self.path("bin", name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, 0o755)
        return p

    def run_job(self, code, hooked, env=None, args=(), launcher=None, py=PY):
        """(rc, stdout, stderr) of CODE in a fresh python3 (PY), through the
        launcher when HOOKED."""
        env = dict(env if env is not None else clean_env(), EPOCHFS_PYTHON=PY)
        cmd = [py] + list(args) + ["-c", textwrap.dedent(code)]
        if hooked:
            cmd = [launcher or self.launcher, "--"] + cmd
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=120, cwd=self.tmp)
        return r.returncode, r.stdout, r.stderr

    def same(self, code, env=None, args=()):
        """Runs CODE without and with the hook; asserts both saw the same
        and returns what they saw."""
        plain = self.run_job(code, False, env, args)
        hooked = self.run_job(code, True, env, args)
        self.assertEqual(plain, hooked)
        return plain

    # ---- sitecustomize ----------------------------------------------------

    def test_sitecustomize_on_pythonpath_is_the_one_imported(self):
        self.write("pp/sitecustomize.py", "HELPER = 42\n")
        rc, out, err = self.same("""
            import sys, sitecustomize
            print(getattr(sitecustomize, "HELPER", "MISSING"), sys.modules["sitecustomize"] is sitecustomize)
            print(sitecustomize.__file__, sitecustomize.__spec__.name)
            """, env=clean_env(PYTHONPATH=self.path("pp")))
        self.assertEqual(out.split("\n")[0], "42 True")
        self.assertEqual(out.split()[2], self.path("pp", "sitecustomize.py"))

    def test_system_sitecustomize_still_runs(self):
        # Debian's is in the standard library's directory; any other Python
        # has none: either way, the same module (or none) with and without.
        self.same("""
            import sys
            m = sys.modules.get("sitecustomize")
            print(getattr(m, "__file__", None))
            try:
                import sitecustomize
                print(sitecustomize.__file__)
            except ImportError as e:
                print(type(e).__name__, e.name)
            """)

    def test_failing_sitecustomize_fails_as_without(self):
        self.write("bad/sitecustomize.py", """
            import sys
            sys.stderr.write("mine ran\\n")
            HALF = 1 / 0
            """)
        rc, out, err = self.same("""
            import sys
            print("sitecustomize" in sys.modules)
            try:
                import sitecustomize
            except ZeroDivisionError as e:
                print("again:", e)
            """, env=clean_env(PYTHONPATH=self.path("bad")))
        self.assertEqual(rc, 0)
        self.assertEqual(out, "False\nagain: division by zero\n")
        self.assertEqual(err, "mine ran\nError in sitecustomize; set PYTHONVERBOSE for traceback:\n"
                              "ZeroDivisionError: division by zero\nmine ran\n")

    def test_no_sitecustomize_anywhere(self):
        # The shim stands in for a sitecustomize that is not there, and leaves
        # sys.modules at the job's first import (usercustomize's, with a user
        # site). Debian's python always has one: another Python is needed.
        py = None
        for cand in (PY, shutil.which("python3"), "/usr/local/bin/python3", "/usr/bin/python3"):
            if cand and os.access(cand, os.X_OK) and subprocess.run(
                    [cand, "-c", "import sitecustomize"], env=clean_env(), stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL).returncode != 0:
                py = cand
                break
        if py is None:
            self.skipTest("no Python without a sitecustomize here")
        code = """
            import sys
            print("sitecustomize" in sys.modules)
            import json
            print("sitecustomize" in sys.modules, json.dumps(sys.path))
            try:
                import sitecustomize
            except ImportError as e:
                print(type(e).__name__, e.name)
            """
        plain, hooked = self.run_job(code, False, py=py), self.run_job(code, True, py=py)
        self.assertEqual(plain, hooked)
        self.assertIn("ModuleNotFoundError sitecustomize", hooked[1])
        # Without a user site the job's own first import is the first one.
        plain = self.run_job(code, False, args=("-s",), py=py)
        hooked = self.run_job(code, True, args=("-s",), py=py)
        self.assertEqual(plain[1].split("\n")[1:], hooked[1].split("\n")[1:])

    def test_usercustomize_runs_once(self):
        log = self.path("uc.log")
        for where in ("uc/usercustomize.py", "ub/lib/python%d.%d/site-packages/usercustomize.py" % sys.version_info[:2]):
            self.write(where, """
                import os
                with open(%r, "a") as f:
                    f.write("%%d\\n" %% os.getpid())
                """ % log)
        for env in (clean_env(PYTHONPATH=self.path("uc")), clean_env(PYTHONUSERBASE=self.path("ub"))):
            for hooked in (False, True):
                if os.path.exists(log):
                    os.unlink(log)
                rc, out, err = self.run_job("import sys", hooked, env)
                self.assertEqual((rc, err), (0, ""))
                with open(log) as f:
                    self.assertEqual(len(f.read().split()), 1, (hooked, env.get("PYTHONPATH")))

    # ---- the path ---------------------------------------------------------

    def test_sys_path_is_the_jobs_own(self):
        os.makedirs(self.path("a"))
        os.makedirs(self.path("b"))
        # An empty entry is the working directory: kept as the job gave it.
        pythonpath = self.path("a") + "::" + self.path("b")
        rc, out, err = self.same("import sys, json; print(json.dumps(sys.path))",
                                 env=clean_env(PYTHONPATH=pythonpath))
        path = json.loads(out)
        self.assertIn(self.path("a"), path)
        self.assertFalse([p for p in path if p.startswith(PKG_ROOT) or p.endswith("_boot")], path)

    def test_dev_checkout_wins_over_installed_copy(self):
        # An installed epochfs (copied, as pip or make install would), with a
        # package beside it that the job also has as a dev checkout.
        site = self.path("site")
        shutil.copytree(os.path.join(PKG_ROOT, "epochfs"), os.path.join(site, "epochfs"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        self.write("site/mylib/__init__.py", "WHO = 'installed'\n")
        self.write("dev/mylib/__init__.py", "WHO = 'dev'\n")
        launcher = self.make_launcher(site, "epochfs-run-installed")
        env = clean_env(PYTHONPATH=self.path("dev"))
        code = "import sys, json, mylib; print(mylib.WHO); print(json.dumps(sys.path))"
        plain = self.run_job(code, False, env)
        hooked = self.run_job(code, True, env, launcher=launcher)
        self.assertEqual(plain, hooked)
        self.assertEqual(hooked[1].split("\n")[0], "dev")
        self.assertNotIn(site, json.loads(hooked[1].split("\n")[1]))

    # ---- nothing until torch ----------------------------------------------

    def test_job_without_torch_loads_nothing(self):
        code = "import sys, json; print(json.dumps(sorted(sys.modules)))"
        for args in ((), ("-s",), ("-E",)):
            rc, out, err = self.same(code, args=args)
            mods = json.loads(out)
            self.assertFalse([m for m in mods if "epochfs" in m or m in ("threading", "socket")], mods)

    def test_trigger_waits_before_pathfinder_then_leaves(self):
        if not HAVE_TORCH:
            self.skipTest("torch is not installed")
        rc, out, err = self.run_job("""
            import sys, json
            from importlib.machinery import PathFinder
            trig = [i for i, f in enumerate(sys.meta_path) if getattr(f, "_epochfs_trigger", False)]
            at = sys.meta_path.index(PathFinder)
            print(json.dumps([trig, at]))
            import torch.utils.data.dataloader as dl
            print(json.dumps([
                [f for f in sys.meta_path if getattr(f, "_epochfs_trigger", False)] == [],
                getattr(dl._BaseDataLoaderIter._next_index, "_epochfs", False),
                "exec_module" in vars(dl.__loader__),
                sorted(m for m in sys.modules if "epochfs" in m)]))
            """, True, clean_env(EPOCHFS_RUN_QUIET="1"))
        self.assertEqual((rc, err), (0, ""))
        before, after = [json.loads(line) for line in out.split("\n")[:2]]
        self.assertEqual(before, [[before[1] - 1], before[1]])     # one, right before PathFinder
        self.assertEqual(after, [True, True, False, ["_epochfs_hook", "_epochfs_hook._hook",
                                                      "_epochfs_hook._mounts"]])

    def test_nested_launchers_arm_one_hook(self):
        env = dict(clean_env(), EPOCHFS_PYTHON=PY)
        r = subprocess.run([self.launcher, "--", self.launcher, "--", PY, "-c",
                            "import sys; print(sum(bool(getattr(f, '_epochfs_trigger', 0)) for f in sys.meta_path))"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "1\n", ""))

    def test_hook_that_fails_to_load_is_off_in_one_line(self):
        if not HAVE_TORCH:
            self.skipTest("torch is not installed")
        site = self.path("broken")
        shutil.copytree(os.path.join(PKG_ROOT, "epochfs"), os.path.join(site, "epochfs"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        with open(os.path.join(site, "epochfs", "_hook.py"), "w") as f:
            f.write("raise RuntimeError('boom')\n")
        launcher = self.make_launcher(site, "epochfs-run-broken")
        code = "import torch.utils.data; print('trained')"
        rc, out, err = self.run_job(code, True, launcher=launcher)
        self.assertEqual((rc, out), (0, "trained\n"))
        self.assertEqual(err, "epochfs-run: the order hook is off (RuntimeError: boom); the job runs as before\n")
        rc, out, err = self.run_job(code, True, clean_env(EPOCHFS_RUN_QUIET="1"), launcher=launcher)
        self.assertEqual((rc, out, err), (0, "trained\n", ""))

    def test_analyzer_timer_waits_for_torch_too(self):
        if not HAVE_TORCH:
            self.skipTest("torch is not installed")
        env = job_env(clean_env(EPOCHFS_ANALYZE_OUT=self.path("rec.jsonl")))
        rc, out, err = self.run_job("""
            import sys
            print(sorted(m for m in sys.modules if "epochfs" in m))
            import torch.utils.data
            print(sorted(m for m in sys.modules if "epochfs" in m))
            """, False, env)
        self.assertEqual((rc, err), (0, ""))
        self.assertEqual(out.split("\n")[0], "[]")
        self.assertIn("'_epochfs_hook._timing'", out.split("\n")[1])


if __name__ == "__main__":
    unittest.main()
