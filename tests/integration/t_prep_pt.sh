# Coordinated prep with kernel passthrough: t_prep.sh again, on mounts with
# --passthrough on, where every open of a .prep/ batch waits for the batch
# to be made and is handed its file (prep/group_pt.c): the kernel reads it,
# the daemon copies nothing. Everything t_prep.sh checks must still hold
# (k consumers get the same bytes, every batch made once and freed,
# --prep-mem, a dead consumer dropped, bad specs and images), plus: all of
# the first 60 opens handed the file, no byte copied.
# Skipped (77) where this kernel or user cannot use passthrough.
# The sanitizer pass (BUILD=build-san) skips it: t_passthrough.sh runs the
# passthrough path of .prep/ under the sanitizers, and CI's 20 minutes are
# spent.
case ${BUILD:-build} in *san*) echo "SKIP: the plain pass runs it; t_passthrough.sh covers .prep/ by passthrough under the sanitizers"; exit 77 ;; esac
EP_EXTRA_ARGS="--passthrough on" exec bash "$(dirname "$0")/t_prep.sh" "$@"
