#!/bin/sh
# epochfs-analyze: where a training job's time goes (compute, prep stall,
# fetch stall) and what-if predictions; the Python package next to this
# tree, or installed. See epochfs-analyze --help.
PKG="@PYTHONDIR@"
PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}" exec "${EPOCHFS_PYTHON:-python3}" -m epochfs.analyze "$@"
