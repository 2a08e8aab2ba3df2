"""epochfs: the Python side of the epochfs filesystem.

What lives inside a training process, standard library only (numpy and
torch are used when the job has them):

- the prep reader (epochfs.prep, also at the top level): declare a shared
  group of pre-augmented minibatches in a mount's .prep/ and read it;
      epochfs.declare(mount, name, **spec)       join or start group NAME
      epochfs.torch_batches(mount, name, epoch)  (images, labels) tensors
      epochfs.batches(mount, name, epoch)        Batch objects (no torch)
      epochfs.read_batch(path)                   one batch file
- the hook that tells a mount the order a PyTorch DataLoader will read its
  files in (installed by `epochfs-run`, never imported by a training
  script), and the timer behind `epochfs-analyze`;
- helpers to find mounts:
      epochfs.mounts()            the epochfs mounts of this machine
      epochfs.mount_of(path)      (mountpoint, relative path) of PATH, or None
      epochfs.publish_order(mount, stream, paths)   write an order by hand

The names in __all__ are the API; it changes only with __version__ (the
release of the filesystem it ships with: `epochfs --version` prints the
same), following semantic versioning: within one major version, new names
may come, none go. epochfs.gpu (the GPU consumer) is imported on its own.
"""
from . import prep
from ._mounts import mount_of, mounts, publish_order
from .prep import Batch, BatchError, batches, declare, read_batch, torch_batches

__version__ = "0.2.0"
version_info = tuple(int(x) for x in __version__.split("."))
__all__ = ["Batch", "BatchError", "batches", "declare", "mount_of", "mounts", "prep",
           "publish_order", "read_batch", "torch_batches", "version_info", "__version__"]
