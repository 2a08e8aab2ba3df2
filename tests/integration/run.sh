#!/usr/bin/env bash
# Runs every tests/integration/t_*.sh with a timeout; exit 77 means skipped.
# Prints one line per test and the closing "N passed, N failed, N skipped".
cd "$(dirname "$0")" || exit 1
[ "$(id -u)" = 0 ] || [ -w /dev/fuse ] || { echo "integration: /dev/fuse not writable, skipped"; exit 0; }
pass=0 failn=0 skipn=0 failed=""
for t in ${TESTS:-t_*.sh}; do
	start=$(date +%s%N)
	out=$(timeout -k 5 ${TEST_TIMEOUT:-240} bash "$t" 2>&1)
	rc=$?
	ds=$((($(date +%s%N) - start) / 100000000))
	dt="$((ds / 10)).$((ds % 10))"
	case $rc in
	0) pass=$((pass + 1)); echo "PASS $t (${dt}s)" ;;
	77) skipn=$((skipn + 1)); echo "SKIP $t: $(echo "$out" | grep SKIP | tail -1)" ;;
	*) failn=$((failn + 1)); failed="$failed $t"; echo "FAIL $t (rc=$rc, ${dt}s)"; echo "$out" | sed 's/^/    /' ;;
	esac
done
echo "integration: $pass passed, $failn failed, $skipn skipped"
[ $failn = 0 ]
