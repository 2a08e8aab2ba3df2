"""The boot shim: the one file of the one directory epochfs-run and
epochfs-analyze put first on a job's PYTHONPATH. Python imports the first
`sitecustomize` it finds at start-up, so this one runs in every Python
process of the job; it arms epochfs's DataLoader hook (the order hook, or
epochfs-analyze's step timer when EPOCHFS_ANALYZE_OUT is set) and otherwise
leaves the process as it would have been without it.

DESIGN: the job must not be able to tell, short of looking at its
environment, that this ran.
- Its directory leaves sys.path (and the importer cache) first, so sys.path
  is the job's own: the user's PYTHONPATH, verbatim, then the standard
  library, then site-packages. Nothing else is ever added to it.
- The sitecustomize it hides (a cluster's on PYTHONPATH, Debian's in the
  standard library) is then imported by Python's own machinery, under its
  own name: `import sitecustomize` returns it, with its attributes. An
  exception it raises is raised on to site.py, which reports it exactly as
  it would have ("Error in sitecustomize; ..."). When there is none, this
  module takes itself out of sys.modules at the next import, as if nothing
  had been found. usercustomize is left to site.py, which imports it once.
- Nothing of epochfs is imported here, and nothing that start-up has not
  imported already (sys and os only). A finder waits for
  torch.utils.data.dataloader: a name comparison per import, placed right
  before PathFinder so that builtin and frozen modules, and any finder the
  site put first, are never slowed or reordered. When it fires it removes
  itself, lets the module run, then loads the package from its location next
  to this directory under a private name (_epochfs_hook), never as
  `epochfs`: a job's own `import epochfs` (another version, a dev checkout)
  is answered by the job's path alone.
- Any failure turns the hook off with one line on stderr; the job goes on.
"""
import os
import sys

_TARGET = "torch.utils.data.dataloader"
_PKG_NAME = "_epochfs_hook"             # the package, as the hook loads it
_HERE = os.path.dirname(os.path.abspath(__file__))


def _is_here(p):
    return bool(p) and os.path.abspath(p) == _HERE


def _off(who, what, e):
    if who == "epochfs-run" and os.environ.get("EPOCHFS_RUN_QUIET") == "1":
        return
    sys.stderr.write("%s: the %s is off (%s: %s); the job runs as before\n" % (who, what, type(e).__name__, e))


class _Trigger:
    """A meta path finder that answers no import: it sees torch's DataLoader
    module being found, wraps its loader so that the hook is armed right
    after the module ran, and leaves sys.meta_path."""
    __module__ = "_epochfs_boot"       # not the sitecustomize a job imports
    _epochfs_trigger = True             # a nested epochfs-run arms one hook, not two

    def __init__(self, who, what, shim):
        self.who, self.what = who, what
        self.shim = shim                # this module, while it stands in for a missing sitecustomize
        self.dead = False

    def find_spec(self, name, path=None, target=None):
        if self.shim is not None:
            # The first import after start-up: site.py is done with us.
            if sys.modules.get("sitecustomize") is self.shim:
                del sys.modules["sitecustomize"]
            self.shim = None
        if name != _TARGET or self.dead:
            return None
        self.dead = True                # fires once, whatever happens below
        try:
            i = sys.meta_path.index(self)
            spec = None
            for finder in sys.meta_path[i + 1:]:
                find = getattr(finder, "find_spec", None)
                spec = find(name, path, target) if find is not None else None
                if spec is not None:
                    break
            if spec is None or not hasattr(spec.loader, "exec_module"):
                return None             # let the finders after us say what they say
            loader = spec.loader
            real = loader.exec_module

            def exec_module(module):
                try:
                    real(module)
                finally:
                    # The loader's own method again: the wrapper served once.
                    try:
                        del loader.exec_module
                    except AttributeError:
                        pass
                self.fire(module)
            loader.exec_module = exec_module
            # The import system walks sys.meta_path live: leaving it is safe
            # only now that we return a spec and its walk stops here.
            del sys.meta_path[i]
            return spec
        except Exception as e:          # never break the job's import
            _off(self.who, self.what, e)
            return None

    def fire(self, dataloader):
        """Loads the package from beside the boot directory and arms the hook
        on DATALOADER, torch's module, just executed."""
        try:
            import importlib
            import importlib.util
            from importlib.machinery import ModuleSpec
            if _PKG_NAME not in sys.modules:
                # A package over epochfs/ whose __init__ does not run: the hook
                # needs only its own modules, not the prep reader.
                spec = ModuleSpec(_PKG_NAME, None, is_package=True)
                spec.submodule_search_locations = [os.path.dirname(_HERE)]
                sys.modules[_PKG_NAME] = importlib.util.module_from_spec(spec)
            importlib.import_module(_PKG_NAME + "._hook").boot(dataloader)
        except Exception as e:          # never break the job
            _off(self.who, self.what, e)


def _arm(shim):
    if os.environ.get("EPOCHFS_ANALYZE_OUT"):
        who, what = "epochfs-analyze", "step timer"
    elif os.environ.get("EPOCHFS_RUN") == "1":
        who, what = "epochfs-run", "order hook"
    else:
        return
    if any(getattr(f, "_epochfs_trigger", False) for f in sys.meta_path):
        return
    trigger = _Trigger(who, what, shim)
    loaded = sys.modules.get(_TARGET)
    if loaded is not None:              # the hidden sitecustomize imported torch
        trigger.shim = None
        trigger.dead = True
        trigger.fire(loaded)
        return
    ext = sys.modules.get("_frozen_importlib_external")
    path_finder = getattr(ext, "PathFinder", None)
    at = next((k for k, f in enumerate(sys.meta_path) if f is path_finder), 0)
    sys.meta_path.insert(at, trigger)


def _boot():
    """Returns the exception the hidden sitecustomize raised, or None."""
    sys.path[:] = [p for p in sys.path if not _is_here(p)]
    for p in [p for p in sys.path_importer_cache if _is_here(p)]:
        del sys.path_importer_cache[p]
    if __name__ != "sitecustomize":     # imported by hand: nothing to stand in for
        _arm(None)
        return None
    me = sys.modules.pop(__name__)
    failed = None
    standing_in = False
    try:
        # The import lock of this name is ours already, and re-entrant.
        __import__(__name__)
    except ImportError as e:
        # What site.py takes for "there is none" it ignores; so do we.
        if e.name != __name__:
            failed = e
        else:
            sys.modules[__name__] = me
            standing_in = True
    except BaseException as e:          # site.py reports Exception; the rest ends Python
        failed = e
    _arm(me if standing_in else None)
    return failed


_failed = _boot()
if _failed is not None:
    raise _failed
