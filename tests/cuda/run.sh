#!/usr/bin/env bash
# The GPU path's checks (make cuda-test, part of make test). Where nvcc is,
# builds libepochfs_gpu.so, epochfs-gpuprobe and gpu_check with CUDA=1 into
# build-cuda/ (CUDA_BUILD=DIR to change; never build/ or build-san/), then:
#   - epochfs-gpuprobe: figures as JSON, or its one "no CUDA device" line
#     and exit 77; bad options exit 2;
#   - gpu_check: real batches made by prep's code, read by the consumer on
#     the host backend and, with a GPU, on device 0: byte for byte the CPU
#     path's; with a GPU it also times both (GPU_CHECK_BENCH batches, 50);
#   - tests/python/test_gpu.py against this library.
# Environment: CUDA_BUILD (build-cuda), NVCC, PYTHON (the interpreter with
# torch, /usr/bin/python3), CUDA_NO_BUILD=1 (use the binaries already in
# CUDA_BUILD as they are, e.g. built on another machine for a GPU machine
# without the build's headers; no nvcc needed then).
# Exit: 0 passed, 77 skipped (no nvcc, or no GPU: the reason on the last
# line, after everything that runs without one passed), else failed.
cd "$(dirname "$0")/../.." || exit 1
B=${CUDA_BUILD:-build-cuda}
say() { echo "cuda-test: $*"; }
fail() { say "FAIL: $*"; exit 1; }

PY=${PYTHON:-/usr/bin/python3}
if [ "${CUDA_NO_BUILD:-}" = 1 ]; then
	for f in libepochfs_gpu.so epochfs-gpuprobe tests/gpu_check; do
		[ -x "$B/$f" ] || [ -f "$B/$f" ] || fail "CUDA_NO_BUILD=1 but $B/$f is missing"
	done
else
	NVCC=${NVCC:-nvcc}
	if ! command -v "$NVCC" > /dev/null 2>&1; then
		[ -x /usr/local/cuda/bin/nvcc ] || { say "SKIP: no nvcc (the CUDA toolkit): the GPU path is not built"; exit 77; }
		NVCC=/usr/local/cuda/bin/nvcc
	fi
	# SANITIZE= : the library is loaded by Python and uses the CUDA driver,
	# neither of which runs under ASan; the sanitizer builds cover its C half
	# through the unit tests.
	make -s --no-print-directory CUDA=1 SANITIZE= BUILD="$B" NVCC="$NVCC" \
		"$B/libepochfs_gpu.so" "$B/epochfs-gpuprobe" "$B/tests/gpu_check" || fail "make CUDA=1"
fi

T=$(mktemp -d /tmp/epochfs-cuda.XXXXXX) || exit 1
trap 'rm -rf "$T"' EXIT
skip=""

out=$(timeout 120 "$B/epochfs-gpuprobe" --batch 8 --height 64 --width 64 --reps 3 --json 2>&1)
case $? in
0)
	$PY - "$out" <<'PY' || fail "epochfs-gpuprobe --json: $out"
import json, sys
r = json.loads(sys.argv[1])
assert r["bytes"] == 8 * 64 * 64 * 3 and r["reps"] == 3, r
assert all(r[k] > 0 for k in ("h2d_pinned_gbps", "h2d_pageable_gbps", "kernel_gbps", "kernel_batches_per_s")), r
PY
	say "probe: $out"
	timeout 120 "$B/epochfs-gpuprobe" || fail "epochfs-gpuprobe (text)"
	;;
77)
	[ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && [[ $out == "epochfs-gpuprobe: no CUDA device: "* ]] ||
		fail "without a GPU the probe must print one 'no CUDA device' line, not: $out"
	skip=${out#epochfs-gpuprobe: }
	say "probe: $out (exit 77)"
	;;
*) fail "epochfs-gpuprobe: $out" ;;
esac
for bad in "--batch 0" "--channels 5" "--dtype int8" "--nope" "extra"; do
	# shellcheck disable=SC2086
	msg=$("$B/epochfs-gpuprobe" $bad 2>&1)
	[ $? = 2 ] && [[ $msg == "epochfs-gpuprobe: error: "* ]] || fail "epochfs-gpuprobe $bad: $msg"
done
say "probe: bad options exit 2 with one line"

timeout 300 "$B/tests/gpu_check" "$T" "${GPU_CHECK_BENCH:-50}" > "$T/check.log" 2>&1
rc=$?
sed 's/^/  /' "$T/check.log"
case $rc in
0) ;;
77) [ -n "$skip" ] || fail "gpu_check found no GPU, the probe did" ;;
*) fail "gpu_check (exit $rc)" ;;
esac
[ $rc = 0 ] && [ -n "$skip" ] && fail "gpu_check found a GPU, the probe did not"

if $PY -c 'import torch' 2> /dev/null; then
	EPOCHFS_GPU_LIB=$PWD/$B/libepochfs_gpu.so PYTHONPATH=$PWD/python timeout 300 \
		$PY -m unittest discover -s tests/python -t tests/python -p test_gpu.py > "$T/py.log" 2>&1 ||
		{ cat "$T/py.log"; fail "tests/python/test_gpu.py"; }
	say "python: $(tail -1 "$T/py.log")"
else
	say "python: no torch in $PY, test_gpu.py not run"
fi

if [ -n "$skip" ]; then
	say "SKIP: ${skip#no CUDA device: }; what needs a GPU was not run, the rest passed"
	exit 77
fi
say "passed"
