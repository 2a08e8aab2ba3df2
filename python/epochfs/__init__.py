"""epochfs: the Python side of the epochfs filesystem.

What lives inside a training process: the hook that tells an epochfs mount
the order a PyTorch DataLoader will read its files in (installed by
`epochfs-run`, never imported by a training script), and helpers to find
epochfs mounts. Standard library only; torch is used when the job has it.

    epochfs.mounts()            the epochfs mounts of this machine
    epochfs.mount_of(path)      (mountpoint, relative path) of PATH, or None
    epochfs.publish_order(mount, stream, paths)   write an order by hand
"""
from ._mounts import mount_of, mounts, publish_order

__version__ = "0.2.0"
__all__ = ["mount_of", "mounts", "publish_order", "__version__"]
