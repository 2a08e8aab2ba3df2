#!/bin/sh
# epochfs-analyze: where a training job's time goes (compute, prep stall,
# fetch stall) and what-if predictions; the Python package next to this
# tree, or installed. See epochfs-analyze --help.
# The package goes on the analyzer's own sys.path (in place of the working
# directory), never on the PYTHONPATH the job inherits.
PKG="@PYTHONDIR@"
exec "${EPOCHFS_PYTHON:-python3}" -c \
	'import sys; sys.path[0] = sys.argv.pop(1); from epochfs.analyze import main; sys.exit(main())' \
	"$PKG" "$@"
