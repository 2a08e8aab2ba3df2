"""epochfs_build: the PEP 517 build backend of the epochfs Python package.

`pip install ./python` must work offline, on a machine that has pip and
nothing else: no setuptools, no wheel, no index. pip's isolated build
environment installs the backend's requirements first; this backend has
none (pyproject.toml: requires = [], backend-path = ["_build"]), so pip
needs nothing from a network. It builds only what this package is: pure
Python, one tag (py3-none-any), the files of epochfs/ (sources and the
_boot/ directory that epochfs-run puts on a job's path) and the
compatibility module epochfs_prep.py.

Metadata comes from pyproject.toml's [project] table, read with tomllib
where Python has it (3.11+), else with the small reader below, which
takes the subset of TOML this project's file uses (tables, strings, string
lists, inline tables of strings); tests/python/test_build.py checks the two
agree. The version is epochfs/__init__.py's __version__ (one place; the
C side's fs/util/version.h is checked equal by the tests).

Hooks: build_wheel, build_sdist, build_editable (PEP 660: a .pth file that
points at this directory), and the metadata hooks pip asks for first.
"""
import base64
import hashlib
import io
import os
import re
import stat
import tarfile
import time
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # python/
PACKAGES = ["epochfs"]
MODULES = ["epochfs_prep.py"]
TAG = "py3-none-any"


# --- pyproject.toml -------------------------------------------------------

def _strip_comment(line):
    out, quote = [], None
    for ch in line:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            break
        out.append(ch)
    return "".join(out).strip()


def _value(text):
    """A TOML value of the subset: "string", 'string', [strings], {k = "v"}."""
    text = text.strip()
    if text[:1] in "\"'" and text[-1:] == text[:1] and len(text) >= 2:
        return text[1:-1]
    if text.startswith("[") and text.endswith("]"):
        return [_value(v) for v in re.findall(r'"[^"]*"|\'[^\']*\'', text[1:-1])]
    if text.startswith("{") and text.endswith("}"):
        return {k: _value(v) for k, v in
                re.findall(r'([A-Za-z0-9_-]+)\s*=\s*("[^"]*"|\'[^\']*\')', text[1:-1])}
    raise ValueError("pyproject.toml: a value this reader does not take: %r" % text)


def parse_toml_subset(text):
    """The subset of TOML that pyproject.toml uses, as nested dicts."""
    doc, pending = {}, None
    table = doc
    for raw in text.splitlines():
        line = _strip_comment(raw)
        if pending is not None:             # a list continued over lines
            pending[1].append(line)
            if line.endswith("]"):
                table[pending[0]] = _value(" ".join(pending[1]))
                pending = None
            continue
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            table = doc
            for part in line[1:-1].strip().split("."):
                table = table.setdefault(part.strip().strip('"'), {})
            continue
        key, sep, val = line.partition("=")
        if not sep:
            raise ValueError("pyproject.toml: cannot read %r" % raw)
        key, val = key.strip().strip('"'), val.strip()
        if val.startswith("[") and not val.endswith("]"):
            pending = (key, [val])
            continue
        table[key] = _value(val)
    if pending is not None:
        raise ValueError("pyproject.toml: an unterminated list")
    return doc


def _pyproject(root=HERE):
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        data = f.read()
    try:
        import tomllib
        return tomllib.loads(data.decode())
    except ImportError:
        return parse_toml_subset(data.decode())


def version(root=HERE):
    with open(os.path.join(root, "epochfs", "__init__.py")) as f:
        m = re.search(r'^__version__ = "([0-9]+\.[0-9]+\.[0-9]+)"$', f.read(), re.M)
    if not m:
        raise ValueError("epochfs/__init__.py: no __version__ = \"X.Y.Z\" line")
    return m.group(1)


def metadata(root=HERE):
    """METADATA (core metadata 2.1) text, and the entry points text."""
    p = _pyproject(root)["project"]
    lines = ["Metadata-Version: 2.1", "Name: %s" % p["name"], "Version: %s" % version(root),
             "Summary: %s" % p["description"]]
    if "requires-python" in p:
        lines.append("Requires-Python: %s" % p["requires-python"])
    for u, addr in sorted(p.get("urls", {}).items()):
        lines.append("Project-URL: %s, %s" % (u, addr))
    for c in p.get("classifiers", []):
        lines.append("Classifier: %s" % c)
    body = ""
    readme = p.get("readme")
    if readme:
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(root, readme)) as f:
            body = f.read()
    meta = "\n".join(lines) + "\n\n" + body
    eps = ""
    scripts = p.get("scripts", {})
    if scripts:
        eps = "[console_scripts]\n" + "".join("%s = %s\n" % kv for kv in sorted(scripts.items()))
    return meta, eps


# --- files ----------------------------------------------------------------

def _sources(root=HERE):
    """(path in the archive, path on disk) of every file the package ships."""
    out = []
    for pkg in PACKAGES:
        for d, dirs, files in os.walk(os.path.join(root, pkg)):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            for name in sorted(files):
                if name.endswith((".pyc", ".pyo")):
                    continue
                full = os.path.join(d, name)
                out.append((os.path.relpath(full, root).replace(os.sep, "/"), full))
    for m in MODULES:
        out.append((m, os.path.join(root, m)))
    return out


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def _epoch():
    # Reproducible archives: SOURCE_DATE_EPOCH when set, else 1980 (zip's least).
    return max(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")), 315532800)


def _write_wheel(wheel_directory, files, dist_info_extra=None):
    """Writes a wheel of FILES ((archive name, bytes)); returns its name."""
    ver = version()
    dist = "epochfs-%s.dist-info" % ver
    meta, eps = metadata()
    info = [(dist + "/METADATA", meta.encode()),
            (dist + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: epochfs_build\n"
                               "Root-Is-Purelib: true\nTag: %s\n" % TAG).encode()),
            (dist + "/top_level.txt", "".join(p + "\n" for p in PACKAGES + [m[:-3] for m in MODULES]).encode())]
    if eps:
        info.append((dist + "/entry_points.txt", eps.encode()))
    info += dist_info_extra or []
    name = "epochfs-%s-%s.whl" % (ver, TAG)
    stamp = time.gmtime(_epoch())[:6]
    record = []
    os.makedirs(wheel_directory, exist_ok=True)
    tmp = os.path.join(wheel_directory, "." + name + ".part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in list(files) + info:
            zi = zipfile.ZipInfo(arc, stamp)
            zi.external_attr = (stat.S_IFREG | 0o644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
            record.append(_record_line(arc, data))
        record.append(dist + "/RECORD,,")
        zi = zipfile.ZipInfo(dist + "/RECORD", stamp)
        zi.external_attr = (stat.S_IFREG | 0o644) << 16
        z.writestr(zi, "\n".join(record) + "\n")
    os.replace(tmp, os.path.join(wheel_directory, name))
    return name


def _read(path):
    with open(path, "rb") as f:
        return f.read()


# --- PEP 517 / 660 hooks ----------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def _metadata_dir(metadata_directory):
    dist = "epochfs-%s.dist-info" % version()
    d = os.path.join(metadata_directory, dist)
    os.makedirs(d, exist_ok=True)
    meta, eps = metadata()
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write(meta)
    if eps:
        with open(os.path.join(d, "entry_points.txt"), "w") as f:
            f.write(eps)
    return dist


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _metadata_dir(metadata_directory)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return _metadata_dir(metadata_directory)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(arc, _read(full)) for arc, full in _sources()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # The sources stay where they are: a .pth line puts this directory on sys.path.
    return _write_wheel(wheel_directory, [("epochfs-editable.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    ver = version()
    base = "epochfs-%s" % ver
    name = base + ".tar.gz"
    meta, _ = metadata()
    members = [(base + "/PKG-INFO", meta.encode())]
    for rel in ["pyproject.toml", "README.md", "_build/epochfs_build.py"]:
        members.append((base + "/" + rel, _read(os.path.join(HERE, rel))))
    members += [(base + "/" + arc, _read(full)) for arc, full in _sources()]
    os.makedirs(sdist_directory, exist_ok=True)
    tmp = os.path.join(sdist_directory, "." + name + ".part")
    with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as t:
        for arc, data in members:
            ti = tarfile.TarInfo(arc)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, _epoch()
            t.addfile(ti, io.BytesIO(data))
    os.replace(tmp, os.path.join(sdist_directory, name))
    return name
