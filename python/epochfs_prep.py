"""The old name of epochfs.prep, which was tools/epochfs_prep.py.

`import epochfs_prep` gives the very module `epochfs.prep` (one module
object, so its classes are the same), and `python3 -m epochfs_prep FILE...`
still prints batch headers. New code should import epochfs.prep.
"""
import sys

from epochfs import prep as _prep

if __name__ == "__main__":
    sys.exit(_prep.main())
sys.modules[__name__] = _prep
