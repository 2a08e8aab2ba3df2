#!/bin/sh
# epochfs-run: runs a command with epochfs's DataLoader order hook (the
# Python package next to this tree, or installed). See epochfs-run --help.
# This interpreter only works out the job's environment and then becomes
# the job (exec: the same process). It runs without site (-S), so that no
# sitecustomize, usercustomize or .pth file runs in it before it runs again
# in the job; the package goes on its own sys.path (in place of the working
# directory), never on the PYTHONPATH the job inherits.
PKG="@PYTHONDIR@"
exec "${EPOCHFS_PYTHON:-python3}" -S -c \
	'import sys; sys.path[0] = sys.argv.pop(1); from epochfs.run import main; sys.exit(main())' \
	"$PKG" "$@"
