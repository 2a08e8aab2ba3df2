#!/usr/bin/env bash
# make bench, the GPU part (BENCH_PARTS=gpu; not in the default parts): the
# GPU path measured on a machine with an NVIDIA GPU. Without one (or without
# nvcc) it says why in one line and exits 0.
#   1. epochfs-gpuprobe for part 5's batch shape (64 x 224 x 224 x 3),
#      uint8 and float32: host-to-device bandwidth pinned and pageable, the
#      normalizing kernel's rate;
#   2. tests/cuda's gpu_check: real batches made by prep's code, read by the
#      consumer on the GPU, bit for bit the CPU path's; then the consumer
#      against the CPU path in C (GPUB_BATCHES batches, 200);
#   3. the same through PyTorch (tools/bench/gpu_consumer.py): one epoch of
#      a uint8 and of a float32 .prep/ group made by the mount over a
#      dataset of GPUB_FILES JPEGs, copied out of it, read by the CPU
#      reader, the CPU reader with pinning, and epochfs.gpu: wall and CPU
#      per batch, bit-exactness;
#   4. epochfs-analyze on an unmodified torchvision job training a resnet18
#      on the GPU over the mount (tools/bench/tv_train.py --model): the
#      report with the probed GPU in it;
#   5. that job measured at other worker counts (GPUB_CHECK_WORKERS, by
#      default 2, the job's, 2x and the CPUs less 2), each the median of
#      epochs 1 and 2 (epoch 0 holds the GPU's one-time start), beside the
#      analyzer's prediction from step 4's single run.
# Environment: CUDA_BUILD (build-cuda), CUDA_NO_BUILD=1 (use the binaries
# there as they are), PYTHON (the interpreter with torch and torchvision,
# /usr/bin/python3), GPUB_BATCHES (200), GPUB_WORKERS (the job's DataLoader
# workers, 4), GPUB_CHECK_WORKERS (step 5's counts), GPUB_STEPS (analyze's
# --steps, 60), GPUB_KEEP (a directory to keep the reports in), GPUB_FILES
# (6000), GPUB_DIR (build/bench-gpu).
set -eu -o pipefail
cd "$(dirname "$0")/../.."
CB=${CUDA_BUILD:-build-cuda}
PY=${PYTHON:-/usr/bin/python3}
FILES=${GPUB_FILES:-6000}
DATA=${GPUB_DIR:-build/bench-gpu}
NB=${GPUB_BATCHES:-200}
WORKERS=${GPUB_WORKERS:-4}
STEPS=${GPUB_STEPS:-60}
. tools/bench/lib.sh

if [ "${CUDA_NO_BUILD:-}" != 1 ]; then
	NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
	[ -x "$NVCC" ] || { echo "gpu: skipped: no nvcc (the CUDA toolkit)"; exit 0; }
	make -s --no-print-directory CUDA=1 SANITIZE= BUILD="$CB" NVCC="$NVCC" \
		"$CB/libepochfs_gpu.so" "$CB/epochfs-gpuprobe" "$CB/tests/gpu_check"
fi
set +e
why=$("$CB/epochfs-gpuprobe" --batch 1 --height 8 --width 8 --reps 1 2>&1)
rc=$?
set -e
if [ $rc = 77 ]; then echo "gpu: skipped: ${why#epochfs-gpuprobe: }"; exit 0; fi
[ $rc = 0 ] || { echo "gpu: epochfs-gpuprobe failed: $why" >&2; exit 1; }
"$PY" -c 'import torch, torchvision' 2>/dev/null || { echo "gpu: $PY has no torch and torchvision: parts 3 and 4 need them (PYTHON=...)" >&2; exit 1; }

bench_init gpu
KEEP=${GPUB_KEEP:-$W/keep}
mkdir -p "$KEEP"
echo "== GPU part: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'nvidia-smi not found'), $(nproc) CPUs"

echo "-- 1. ingestion probe (epochfs-gpuprobe), batch 64 x 224 x 224 x 3"
for dt in uint8 float32; do
	"$CB/epochfs-gpuprobe" --batch 64 --dtype $dt --reps 21 --json | tee "$KEEP/probe-$dt.json"
	"$CB/epochfs-gpuprobe" --batch 64 --dtype $dt --reps 21 | sed 's/^/   /'
done

echo "-- 2. gpu_check: bit-exactness on real batches, then $NB batches in C"
mkdir -p "$W/check"
"$CB/tests/gpu_check" "$W/check" "$NB" | sed 's/^/   /'
rm -rf "$W/check"

echo "-- 3. through PyTorch: a .prep/ epoch of $FILES images read three ways"
prep_dataset "$DATA" "$FILES"
"$BUILD/epochfs" -f --no-persist --prep-mem 4G "$(realpath "$DATA")" "$W/mnt" 2>"$W/err" & EP_PID=$!
(wait_mount "$W/mnt") || { sed 's/^/   epochfs: /' "$W/err" >&2; exit 1; }
for g in u8 f32; do
	if [ $g = f32 ]; then opt="--dtype float32"; else opt=""; fi
	# shellcheck disable=SC2086
	"$BUILD/epochfs-prep" "$W/mnt" $g --batch 64 --seed 1 $opt > /dev/null
	# cat, not cp: a batch file's attributes change once it is made, which
	# cp takes for a file replaced under it.
	mkdir -p "$W/copy-$g/.prep/$g/epoch-0000"
	for f in "$W/mnt/.prep/$g/epoch-0000"/*; do cat "$f" > "$W/copy-$g/.prep/$g/epoch-0000/${f##*/}"; done
	"$BUILD/epochfs-prep" "$W/mnt" $g --remove > /dev/null 2>&1 || true
	echo "   $g group: $(find "$W/copy-$g/.prep/$g/epoch-0000" -type f | wc -l) batches, $(du -sh "$W/copy-$g" | cut -f1)"
	PYTHONPATH=$PWD/python EPOCHFS_GPU_LIB=$PWD/$CB/libepochfs_gpu.so \
		"$PY" tools/bench/gpu_consumer.py "$W/copy-$g/.prep/$g/epoch-0000" | tee "$KEEP/consumer-$g.jsonl" | sed 's/^/   /'
	rm -rf "$W/copy-$g"
done

echo "-- 4. epochfs-analyze: torchvision + resnet18 on the GPU, $WORKERS workers, $STEPS steps a run"
find "$W/mnt/" -name '*.jpg' -print0 | xargs -0 cat > /dev/null      # the images in the RAM cache
set +e
PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} EPOCHFS_PYTHON=$PY EPOCHFS_GPU_LIB=$PWD/$CB/libepochfs_gpu.so \
	timeout 900 "$PY" -m epochfs.analyze -q --steps "$STEPS" --json "$KEEP/analyze.json" --plot "$KEEP/analyze.svg" \
	"$W/mnt" -- "$PY" tools/bench/tv_train.py "$W/mnt" --workers "$WORKERS" --epochs 4 --model resnet18 \
	> "$KEEP/analyze.txt" 2>&1
rc=$?
set -e
sed 's/^/   /' "$KEEP/analyze.txt"
[ $rc = 0 ] || { echo "gpu: epochfs-analyze exited $rc" >&2; exit 1; }

CHECK=${GPUB_CHECK_WORKERS:-$(printf '%s\n' 2 "$WORKERS" $((2 * WORKERS)) $(($(nproc) - 2)) | sort -nu | tr '\n' ' ')}
echo "-- 5. the same job measured at $CHECK workers, against step 4's predictions"
printf '   %-8s %10s %10s %7s\n' workers measured predicted error
for w in $CHECK; do
	"$PY" tools/bench/tv_train.py "$W/mnt" --workers "$w" --epochs 3 --model resnet18 --trace 6 > "$KEEP/workers-$w.jsonl"
	"$PY" - "$KEEP/analyze.json" "$KEEP/workers-$w.jsonl" "$w" <<'PY'
import json, statistics, sys
rep = json.load(open(sys.argv[1]))
w = int(sys.argv[3])
eps = [json.loads(l) for l in open(sys.argv[2])]
got = statistics.median(e["seconds"] for e in eps[1:])
pred = [x["predicted_epoch_seconds"] for x in rep["what_if"] if set(x) - {"bottleneck", "predicted_epoch_seconds", "requested"} == {"workers"} and x["workers"] == w]
p = pred[0] if pred else None
print("   %-8d %9.2fs %9s %7s" % (w, got, "%.2fs" % p if p else "-", "%+.0f%%" % (100 * (p / got - 1)) if p else "-"))
PY
done
