#!/bin/sh
# epochfs-run: runs a command with epochfs's DataLoader order hook (the
# Python package next to this tree, or installed). See epochfs-run --help.
PKG="@PYTHONDIR@"
PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}" exec "${EPOCHFS_PYTHON:-python3}" -m epochfs.run "$@"
