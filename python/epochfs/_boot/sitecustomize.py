"""Put on PYTHONPATH by epochfs-run and epochfs-analyze: arms epochfs's
DataLoader hook in every Python process of the job (the order hook, and
epochfs-analyze's step timer when EPOCHFS_ANALYZE_OUT is set), then runs the sitecustomize this one hides, if
any (Debian ships one), so nothing else changes."""
import importlib.machinery
import importlib.util
import os
import sys

if os.environ.get("EPOCHFS_ANALYZE_OUT"):
    try:
        from epochfs import _timing
        _timing.install_from_env()
    except Exception as e:          # never break the job
        sys.stderr.write("epochfs-analyze: the step timer is off (%s)\n" % e)
elif os.environ.get("EPOCHFS_RUN") == "1":
    try:
        from epochfs import _hook
        _hook.install()
    except Exception as e:          # never break the job
        if os.environ.get("EPOCHFS_RUN_QUIET") != "1":
            sys.stderr.write("epochfs-run: the order hook is off (%s)\n" % e)

_here = os.path.dirname(os.path.abspath(__file__))
_rest = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.origin and os.path.dirname(os.path.abspath(_spec.origin)) != _here:
    _mod = importlib.util.module_from_spec(_spec)
    try:
        _spec.loader.exec_module(_mod)
    except Exception:
        pass
