"""The Python package's build backend (python/_build/epochfs_build.py): the
wheel it writes is one pip can trust (every file hashed in RECORD, the
package and the old epochfs_prep module, the console scripts), the sdist
builds the same wheel again, its TOML reader agrees with tomllib on our
pyproject.toml, and the version is the C side's. The install itself, with
pip in a venv, offline, is tests/integration/t_pypkg.sh."""
import base64
import hashlib
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import unittest
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = os.path.join(ROOT, "python")
sys.path.insert(0, os.path.join(PY, "_build"))
import epochfs_build  # noqa: E402

import epochfs  # noqa: E402


class Backend(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def test_version_is_the_c_sides(self):
        with open(os.path.join(ROOT, "fs", "util", "version.h")) as f:
            c = re.search(r'#define EPOCHFS_VERSION "([^"]+)"', f.read()).group(1)
        self.assertEqual(epochfs.__version__, c)
        self.assertEqual(epochfs_build.version(), c)
        self.assertEqual(epochfs.version_info, tuple(int(x) for x in c.split(".")))

    def test_toml_subset_reader_agrees_with_tomllib(self):
        try:
            import tomllib
        except ImportError:
            self.skipTest("no tomllib (Python < 3.11)")
        with open(os.path.join(PY, "pyproject.toml")) as f:
            text = f.read()
        self.assertEqual(epochfs_build.parse_toml_subset(text), tomllib.loads(text))
        with self.assertRaises(ValueError):
            epochfs_build.parse_toml_subset("[project]\nname = 3\n")
        with self.assertRaises(ValueError):
            epochfs_build.parse_toml_subset("[project]\nx = [\n\"a\",\n")

    def check_wheel(self, path):
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            dist = "epochfs-%s.dist-info" % epochfs.__version__
            record = z.read(dist + "/RECORD").decode().splitlines()
            listed = {}
            for line in record:
                name, h, size = line.rsplit(",", 2)
                listed[name] = (h, size)
            self.assertEqual(set(listed), set(names))
            for name in names:
                if name == dist + "/RECORD":
                    self.assertEqual(listed[name], ("", ""))
                    continue
                data = z.read(name)
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                self.assertEqual(listed[name], ("sha256=" + digest, str(len(data))), name)
            meta = z.read(dist + "/METADATA").decode()
            wheel = z.read(dist + "/WHEEL").decode()
            eps = z.read(dist + "/entry_points.txt").decode()
        self.assertIn("Name: epochfs\n", meta)
        self.assertIn("Version: %s\n" % epochfs.__version__, meta)
        self.assertIn("Tag: py3-none-any\n", wheel)
        self.assertIn("Root-Is-Purelib: true\n", wheel)
        self.assertIn("epochfs-run = epochfs.run:main\n", eps)
        self.assertIn("epochfs-analyze = epochfs.analyze:main\n", eps)
        for must in ("epochfs/__init__.py", "epochfs/prep.py", "epochfs/_boot/sitecustomize.py",
                     "epochfs_prep.py"):
            self.assertIn(must, names)
        self.assertFalse([n for n in names if "__pycache__" in n or n.endswith(".pyc")])
        return names

    def test_wheel(self):
        name = epochfs_build.build_wheel(self.tmp.name)
        self.assertEqual(name, "epochfs-%s-py3-none-any.whl" % epochfs.__version__)
        names = self.check_wheel(os.path.join(self.tmp.name, name))
        shipped = {n for n in names if not n.startswith("epochfs-")}
        on_disk = {os.path.relpath(os.path.join(d, f), PY).replace(os.sep, "/")
                   for d, _, fs in os.walk(os.path.join(PY, "epochfs")) if "__pycache__" not in d
                   for f in fs if not f.endswith(".pyc")}
        self.assertEqual(shipped, on_disk | {"epochfs_prep.py"})

    def test_wheels_are_reproducible(self):
        a = os.path.join(self.tmp.name, "a")
        b = os.path.join(self.tmp.name, "b")
        n = epochfs_build.build_wheel(a)
        epochfs_build.build_wheel(b)
        with open(os.path.join(a, n), "rb") as fa, open(os.path.join(b, n), "rb") as fb:
            self.assertEqual(fa.read(), fb.read())

    def test_sdist_builds_the_same_wheel(self):
        sd = epochfs_build.build_sdist(self.tmp.name)
        with tarfile.open(os.path.join(self.tmp.name, sd)) as t:
            t.extractall(os.path.join(self.tmp.name, "x"))
        src = os.path.join(self.tmp.name, "x", sd[:-len(".tar.gz")])
        self.assertTrue(os.path.exists(os.path.join(src, "PKG-INFO")))
        out = os.path.join(self.tmp.name, "w")
        # The unpacked sdist builds with its own backend, from nothing else.
        code = ("import sys; sys.path.insert(0, '_build'); import epochfs_build as b; "
                "print(b.build_wheel(%r))" % out)
        name = subprocess.check_output([sys.executable, "-I", "-c", code], cwd=src, text=True).strip()
        mine = epochfs_build.build_wheel(os.path.join(self.tmp.name, "mine"))
        self.assertEqual(name, mine)
        with open(os.path.join(out, name), "rb") as f1, \
                open(os.path.join(self.tmp.name, "mine", mine), "rb") as f2:
            self.assertEqual(f1.read(), f2.read())

    def test_editable_points_here(self):
        name = epochfs_build.build_editable(self.tmp.name)
        with zipfile.ZipFile(os.path.join(self.tmp.name, name)) as z:
            self.assertEqual(z.read("epochfs-editable.pth").decode(), PY + "\n")
            self.assertNotIn("epochfs/__init__.py", z.namelist())

    def test_metadata_hook(self):
        d = epochfs_build.prepare_metadata_for_build_wheel(self.tmp.name)
        with open(os.path.join(self.tmp.name, d, "METADATA")) as f:
            self.assertIn("Requires-Python: >=3.9", f.read())


class OldName(unittest.TestCase):
    def test_epochfs_prep_is_epochfs_prep_module(self):
        import epochfs_prep
        self.assertIs(epochfs_prep, epochfs.prep)
        self.assertIs(epochfs_prep.Batch, epochfs.Batch)

    def test_api_names_exist(self):
        for n in epochfs.__all__:
            self.assertTrue(hasattr(epochfs, n), n)


if __name__ == "__main__":
    unittest.main()
