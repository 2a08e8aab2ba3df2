#!/usr/bin/env bash
# make bench part 7: data stalls of an unmodified torchvision job, end to end.
#
# One generated ImageFolder dataset of D bytes (the part 3 dataset, 4,000
# JPEGs), the job tools/bench/tv_train.py (ImageFolder + RandomResizedCrop +
# flip + ToTensor + Normalize, DataLoader batch 64, shuffle, W workers), the
# disk throttled to BPS bytes/s (blkio), and one memory cgroup of the
# pipeline's own memory plus D/2 around everything that runs:
#   ram     the dataset copied to /dev/shm, no memory limit: no fetch at all
#           (the pipeline's memory is measured here: the cgroup's peak);
#   native  the job on SOURCE (the kernel's page cache);
#   epochfs the job on an epochfs mount with --cache-size D/2, the daemon in
#           the same cgroup;
#   run     the same under epochfs-run (the job's order goes to the mount),
#           with the same total memory and --cache-size D/2 (the daemon
#           carves its staging, --prefetch-mem P, out of it; STALL_PREFETCH_MB,
#           default 16);
#   split, runsplit  epochfs and run with the daemon in a memory cgroup of
#           its own (a systemd unit, a DaemonSet beside the training pod):
#           the daemon's limit D/2 + STALL_DAEMON_SLACK_MB (32), the job's the
#           rest of the same total;
#   reader  fio-style, once per disk speed: one thread reading whole files
#           in a fresh shuffled order (tools/bench/order_reader.py) on the
#           run configuration's mount, without its order told ("reader")
#           and with it ("reader+order"), in memory for D/2 + 96 MiB;
#   analyze epochfs-analyze on the epochfs configuration, its breakdown set
#           against the direct measurement (RAM = compute + prep, the
#           analyzer's as-is epoch - RAM = fetch + memory stall), and its
#           prediction for the whole dataset in memory against RAM, with
#           issue 32's targets (medians over STALL_RUNS, run interleaved
#           with the ram and epochfs configurations: 25% and 20%); not in
#           the default list.
#   tier    the epochfs configuration plus an SSD tier of D (--cache-dir in
#           STALL_TIER_DIR, default the work directory); not in the default
#           list. Meant with STALL_LOOP=1: SOURCE is then copied into an ext4
#           image on a loop device and the throttle slows that device alone,
#           as a network filesystem would be slow while the node's own disk
#           (the tier's) is not.
# Per configuration, EPOCHS epochs; epochs >= 1 count (median seconds), with
# the bytes the daemon read from storage and the cgroup's device bytes
# beside the daemon's (the job's own: its libraries re-read under pressure).
# The fetch stall removed is (native - x) / (native - ram).
#
# Needs root, cgroup v1 memory and blkio, /dev/shm room for D, and Debian's
# python3-torchvision (installed when missing). Environment: STALL_BPS
# ("26214400 104857600"), STALL_WORKERS ("2 4"), STALL_EPOCHS (3),
# STALL_RUNS (1; medians over runs), STALL_CONFIGS ("ram native epochfs run reader"),
# STALL_FILES (4000), THRASH_DIR (the dataset, build/bench-thrash), BUILD,
# STALL_ROWS (a file to keep the per-epoch rows in), STALL_LOG (the daemon's log),
# STALL_EPOCHFS_ARGS / STALL_RUN_ARGS (the daemon's options in those
# configurations instead of the defaults above),
# The ram configuration runs again beside every run (the machine's speed
# drifts). A last column gives the CPU-seconds of job and daemon together
# per epoch (cpuacct), where a CPU tax shows through the wall clock's noise.
# STALL_LIMIT_MB (a fixed memory limit instead of the measured one),
# STALL_ANALYZE_KEEP (a path prefix: keep the analyze configuration's JSON
# reports there), STALL_ANALYZE_ARGS (more epochfs-analyze options, e.g.
# --what-if), STALL_CACHE_PCT (the cache, and the memory beside the
# pipeline, in % of D instead of 50), STALL_RAM_EACH (0: the ram configuration
# only once per worker count, for the pipeline's memory), STALL_TRACE (a file: every 0.25 s, the device bytes and the mount's
# counters, to see when the disk idles), STALL_SLACK_MB (88, issue 28's setup: the memory beside
# the pipeline and the cache), STALL_FUSE_URING (on, the default: the
# kernel's FUSE-over-io_uring switch is turned on for the run, as
# docs/install.md recommends for a host, and put back after, so the
# daemon's --fuse-uring auto uses it; keep: the host's switch as it is).
# STALL_SHARDS=K: the shard job instead (issue 33): the same images packed
# into K WebDataset-style tar shards (tools/bench/wds_pack.py, kept beside
# THRASH_DIR as THRASH_DIR.wdsK), SOURCE that directory, D the shards' bytes,
# and the job tools/bench/wds_train.py (shuffled shards dealt to the
# workers, each read front to back, a shuffle buffer, the same transforms
# and batches); the reader configurations are skipped (they read files),
# and run/runsplit run the job with --tell-order instead of under
# epochfs-run (whose hook sees no order in an IterableDataset: each worker
# tells its own shards, docs/prefetch.md). STALL_WDS_ARGS: the arguments
# of that job beyond these ("--shuffle-buffer 100" unless set: a buffer
# small against the 2,000 samples a worker reads an epoch at W = 2, as
# webdataset's 1,000 is against a worker's share of a real dataset, 160,000
# for ImageNet's 1.28 M images over 8 workers; the job's own 1,000 here is
# half a worker's epoch, read before the buffer hands out one for one).
# Where the cgroup v2 hierarchy is mounted beside v1 (/sys/fs/cgroup/unified),
# job and daemon also share a v2 cgroup: the memory pressure (PSI) the
# analyzer reads is then theirs, not the machine's.
set -eu
cd "$(dirname "$0")/../.."
FILES=${STALL_FILES:-4000}
EPOCHS=${STALL_EPOCHS:-3}
RUNS=${STALL_RUNS:-1}
BPSS=${STALL_BPS:-26214400 104857600}
WORKERSS=${STALL_WORKERS:-2 4}
CONFIGS=${STALL_CONFIGS:-ram native epochfs run reader}
PF=$((${STALL_PREFETCH_MB:-16} << 20))
DATA=${THRASH_DIR:-build/bench-thrash}
MEMROOT=/sys/fs/cgroup/memory
BLKROOT=/sys/fs/cgroup/blkio
PY=/usr/bin/python3
for d in $MEMROOT $BLKROOT; do
	[ -w "$d" ] || { echo "stalls: $d not writable (needs root and cgroup v1); skipped" >&2; exit 0; }
done
if ! $PY -c "import torchvision" 2>/dev/null; then
	EPOCHFS_DEPS_EXTRA="python3-torchvision python3-numpy python3-pil" bash tools/install-deps.sh ||
		{ echo "stalls: needs python3-torchvision; skipped" >&2; exit 0; }
fi

. tools/bench/lib.sh
MEMCG=$MEMROOT/epochfs-stalls-$$
MEMCG_D=$MEMROOT/epochfs-stalls-daemon-$$       # split: the daemon's own
BLKCG=$BLKROOT/epochfs-stalls-$$
CPUCG=/sys/fs/cgroup/cpuacct/epochfs-stalls-$$   # CPU of job + daemon, when there
UNICG=/sys/fs/cgroup/unified/epochfs-stalls-$$   # their memory pressure (PSI), when there
SHM=/dev/shm/epochfs-stalls-$$
URING_SW=/sys/module/fuse/parameters/enable_uring
URING_WAS=
bench_cleanup_more() {
	[ -n "$EP_PID" ] && wait "$EP_PID" 2>/dev/null
	[ -n "$URING_WAS" ] && echo "$URING_WAS" > "$URING_SW"
	rm -rf "$SHM"
	[ -n "${LOOPMNT:-}" ] && { umount "$LOOPMNT" 2>/dev/null || umount -l "$LOOPMNT"; }
	for _ in $(seq 50); do
		rmdir "$MEMCG" "$MEMCG_D" "$BLKCG" "$CPUCG" "$UNICG" 2>/dev/null
		[ -d "$MEMCG" ] || [ -d "$MEMCG_D" ] || [ -d "$BLKCG" ] || [ -d "$CPUCG" ] || [ -d "$UNICG" ] || break
		sleep 0.1
	done
}
bench_init stalls
ROWS=${STALL_ROWS:-$W/rows}    # kept after the run when set
mkdir -p "$MEMCG" "$MEMCG_D" "$BLKCG"
mkdir "$CPUCG" 2>/dev/null || CPUCG=
{ [ -f /sys/fs/cgroup/unified/cgroup.procs ] && mkdir "$UNICG" 2>/dev/null; } || UNICG=
CGS="$MEMCG $BLKCG $CPUCG $UNICG"
DAEMON_CGS=$CGS                 # split: "$MEMCG_D $BLKCG $CPUCG"

thrash_dataset "$DATA" "$FILES"
SHARDS=${STALL_SHARDS:-0}
JOB=tools/bench/tv_train.py
if [ "$SHARDS" -gt 0 ]; then
	$PY tools/bench/wds_pack.py "$SRC" "${DATA%/}.wds$SHARDS" --shards "$SHARDS"
	SRC=$(realpath "${DATA%/}.wds$SHARDS")
	D=$(find "$SRC" -type f -name '*.tar' -printf '%s\n' | awk '{s+=$1} END {print s}')
	JOB=tools/bench/wds_train.py
	CONFIGS=$(echo " $CONFIGS " | sed 's/ reader / /g')
fi
if [ "${STALL_FUSE_URING:-on}" = on ] && [ -w "$URING_SW" ]; then
	URING_WAS=$(cat "$URING_SW")
	echo Y > "$URING_SW"
fi
if [ "${STALL_LOOP:-0}" = 1 ]; then
	# SOURCE on a device of its own: a loop-mounted ext4 copy of the dataset.
	LOOPMNT=$W/slow
	mkdir -p "$LOOPMNT"
	truncate -s $((D * 12 / 10 + (64 << 20))) "$W/source.img"
	mkfs.ext4 -q -F "$W/source.img"
	mount -o loop "$W/source.img" "$LOOPMNT"
	rmdir "$LOOPMNT/lost+found"     # ImageFolder would take it for an empty class
	cp -a "$SRC/." "$LOOPMNT/"
	sync
	SRC=$LOOPMNT
fi
CPCT=${STALL_CACHE_PCT:-50}
CACHE_B=$((D * CPCT / 100))   # the cache (and the memory beside the pipeline): D/2 by default
dev=$(stat -c '%d' "$SRC")
DEVNO="$((dev >> 8)):$((dev & 255))"
[ -e "/sys/dev/block/$DEVNO/partition" ] && DEVNO=$(cat "/sys/dev/block/$DEVNO/../dev")

in_cg() { sh -c 'for g in $0; do echo $$ > "$g/cgroup.procs"; done; exec "$@"' "$CGS" "$@"; }
in_cg_io() { sh -c 'for g in $0; do echo $$ > "$g/cgroup.procs"; done; exec "$@"' "$BLKCG $CPUCG" "$@"; }
cg_cpu_ns() { if [ -n "$CPUCG" ]; then cat "$CPUCG/cpuacct.usage"; else echo 0; fi; }
throttle() { echo "$DEVNO ${1:-0}" > "$BLKCG/blkio.throttle.read_bps_device"; }
limit() { echo "${1:--1}" > "$MEMCG/memory.limit_in_bytes"; }
cg_dev_read() { awk -v d="$DEVNO" '$1 == d && $2 == "Read" {print $3}' "$BLKCG/blkio.throttle.io_service_bytes"; }
# OOM kills so far in the job's and the daemon's memory cgroups (cgroup v1's oom_control).
oom_kills() { awk '/^oom_kill / {s += $2} END {print s + 0}' "$MEMCG/memory.oom_control" "$MEMCG_D/memory.oom_control"; }
io_read() { awk '/^read_bytes/ {print $2}' "/proc/$1/io"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
mount_ep() {
	(exec sh -c 'for g in $0; do echo $$ > "$g/cgroup.procs"; done; exec "$@"' \
		"$DAEMON_CGS" "$BUILD/epochfs" -f --no-persist "$@" "$SRC" "$W/mnt" 2>>"$W/daemon.err") &
	EP_PID=$!
	wait_mount "$W/mnt"
}
umount_ep() {
	local rc=0
	fusermount3 -u "$W/mnt" 2>/dev/null || fusermount3 -uz "$W/mnt"
	wait "$EP_PID" || rc=$?
	EP_PID=
	# A daemon killed under the limit (137: the OOM killer) is a result,
	# not a reason to lose the run: say so and go on.
	[ "$rc" = 0 ] || echo "stalls: the daemon exited with $rc (137: killed, e.g. by the OOM killer)" >&2
}

# job NAME DIR WORKERS [run|reader|order]: EPOCHS epochs of the job in the
# cgroups (the torchvision job; under epochfs-run with "run"; the one-thread
# reader with "reader", telling its order with "order"); appends
# "NAME epoch seconds waited storage_bytes cg_dev_bytes daemon_dev_bytes cpu".
job() {
	local name=$1 dir=$2 workers=$3 cmd
	cmd=($PY "$JOB" "$dir" --workers "$workers" --epochs "$EPOCHS")
	if [ "$SHARDS" -gt 0 ]; then
		# shellcheck disable=SC2206
		cmd+=(${STALL_WDS_ARGS---shuffle-buffer 100})
	fi
	case "${4:-}" in
	run) if [ "$SHARDS" -gt 0 ]; then cmd+=(--tell-order); else cmd=("$BUILD/epochfs-run" -q -- "${cmd[@]}"); fi ;;
	reader) cmd=($PY tools/bench/order_reader.py "$dir" --epochs "$EPOCHS") ;;
	order) cmd=($PY tools/bench/order_reader.py "$dir" --epochs "$EPOCHS" --order) ;;
	esac
	: > "$W/epochs"
	local tr=
	if [ -n "${STALL_TRACE:-}" ]; then
		$PY tools/bench/trace.py "$STALL_TRACE" "$W/mnt/.epochfs/stats.json" \
			"$BLKCG/blkio.throttle.io_service_bytes" "$DEVNO" "${EP_PID:-0}" "$name" &
		tr=$!
	fi
	# One line per epoch, with the counters read as each epoch ends.
	in_cg "${cmd[@]}" |
	while read -r line; do
		local st=0 dd=0 cpu=0
		# Storage: what the daemon read, and the files it had the kernel read
		# from SOURCE itself (passthrough; none on builds before it).
		[ -n "$EP_PID" ] && st=$(($(stat_of storage_read_bytes) + $(stat0 passthrough_source_bytes))) &&
			dd=$(io_read "$EP_PID") &&
			cpu=$(cpu_ticks "$EP_PID")
		echo "$line $st $(cg_dev_read) $dd $cpu $(cg_cpu_ns)" >> "$W/epochs"
		if [ -n "${STALL_TRACE:-}" ]; then
			echo "$name epoch-end $(date +%s.%N) $line" >> "$STALL_TRACE"
		fi
	done
	if [ -n "$tr" ]; then kill "$tr"; wait "$tr" 2>/dev/null || true; fi
	python3 - "$W/epochs" "$name" >> "$ROWS" <<'PY'
import json, sys
prev = None
for line in open(sys.argv[1]):
    js, st, cg, dd, cpu, allcpu = line.rsplit(" ", 5)
    r = json.loads(js)
    cur = (int(st), int(cg), int(dd), int(cpu), int(allcpu))
    if prev is None:
        d = (0, 0, 0, 0, 0)
    else:
        d = tuple(c - p for c, p in zip(cur, prev))
    prev = cur
    print(sys.argv[2], r["epoch"], r["seconds"], r["waited"], *d)
PY
}

# A figure from the daemon's stats, 0 where it has none (an older build).
stat0() { stat_of "$1" 2>/dev/null || echo 0; }

: > "$ROWS"
if [ "$SHARDS" -gt 0 ]; then
	echo "== part 7, shards: a WebDataset-style job over $FILES images in $SHARDS tar shards, D = $((D / 1000000)) MB, $EPOCHS epochs (>= 1 count), device $DEVNO"
else
	echo "== part 7: data stalls of an unmodified torchvision job: $FILES files, D = $((D / 1000000)) MB, $EPOCHS epochs (>= 1 count), device $DEVNO"
fi
echo "FUSE over io_uring (the kernel's switch): $(cat "$URING_SW" 2>/dev/null || echo "not in this kernel")${URING_WAS:+ (turned on for this run; was $URING_WAS)}"
if case " $CONFIGS " in *" ram "*) true ;; *) false ;; esac; then
	cp -a "$SRC" "$SHM"
fi
for workers in $WORKERSS; do
	# The pipeline's own memory: its peak in an unlimited cgroup, all data in RAM.
	# The cgroup is emptied first, so that pages the runs before left charged
	# to it (another worker count's native reads) cannot count in the peak.
	# (They were not what made part 8's four-worker peak large: emptied, it
	# is still 1,201 MiB on 2026-11-28, against 1,310 without; unlimited,
	# four workers' libraries and private copies take that much.)
	limit -1; throttle 0
	echo 0 > "$MEMCG/memory.force_empty" 2>/dev/null || true
	echo 0 > "$MEMCG/memory.max_usage_in_bytes" 2>/dev/null || true
	if [ -d "$SHM" ]; then
		job "ram/w$workers" "$SHM" "$workers"
		PIPE=$(cat "$MEMCG/memory.max_usage_in_bytes")
	else
		PIPE=${STALL_PIPE_MB:-1024}
		PIPE=$((PIPE << 20))
	fi
	SLACK=$((${STALL_SLACK_MB:-88} << 20))
	LIM=$((PIPE + CACHE_B + SLACK))
	if [ -n "${STALL_LIMIT_MB:-}" ]; then
		# The measured peak moves by 100+ MiB from run to run, and the
		# limit with it; a fixed one makes runs comparable.
		LIM=$((STALL_LIMIT_MB << 20))
		echo "workers $workers: the pipeline's memory $((PIPE >> 20)) MiB; memory limit fixed at $((LIM >> 20)) MiB (STALL_LIMIT_MB)"
	else
		echo "workers $workers: the pipeline's memory $((PIPE >> 20)) MiB; memory limit = that + $CPCT% of D + $((SLACK >> 20)) MiB = $((LIM >> 20)) MiB"
	fi
	first=1
	for bps in $BPSS; do
		for run in $(seq "$RUNS"); do
			# All in RAM again beside each run: this machine's speed
			# moves by 15% over minutes (CPU-seconds per epoch too), so a
			# ratio to a RAM epoch measured once at the start is noise.
			if [ -z "$first" ] && [ -d "$SHM" ] && [ "${STALL_RAM_EACH:-1}" = 1 ]; then
				limit -1; throttle 0
				job "ram/w$workers" "$SHM" "$workers"
			fi
			first=
			limit "$LIM"; throttle "$bps"
			tag="$((bps >> 20))MBps/w$workers"
			case " $CONFIGS " in *" native "*)
				drop; job "native@$tag" "$SRC/" "$workers" ;;
			esac
			for cfg in epochfs run split runsplit tier; do
				case " $CONFIGS " in *" $cfg "*) ;; *) continue ;; esac
				drop
				DAEMON_CGS=$CGS
				if [ "$cfg" = split ] || [ "$cfg" = runsplit ]; then
					# The same total: the daemon's share in a cgroup of its own.
					DL=$((CACHE_B + (${STALL_DAEMON_SLACK_MB:-32} << 20)))
					echo "$DL" > "$MEMCG_D/memory.limit_in_bytes"
					limit $((LIM - DL))
					DAEMON_CGS="$MEMCG_D $BLKCG $CPUCG"         # and the machine's PSI
				else
					limit "$LIM"
				fi
				if [ "$cfg" = tier ]; then
					TD=${STALL_TIER_DIR:-$W/tier}
					rm -rf "$TD"
					mount_ep --cache-size "$CACHE_B"B --cache-dir "$TD" --cache-dir-size $((D + D / 8))B
				elif [ "$cfg" = run ] && [ -n "${STALL_RUN_ARGS:-}" ]; then
					# shellcheck disable=SC2086
					mount_ep $STALL_RUN_ARGS
				elif [ "$cfg" = run ] || [ "$cfg" = runsplit ]; then
					mount_ep --cache-size "$CACHE_B"B --prefetch-mem "$PF"B
				elif [ -n "${STALL_EPOCHFS_ARGS:-}" ]; then
					# shellcheck disable=SC2086
					mount_ep $STALL_EPOCHFS_ARGS
				else
					mount_ep --cache-size "$CACHE_B"B
				fi
				jobkind=$cfg
				[ "$cfg" = runsplit ] && jobkind=run
				job "$cfg@$tag" "$W/mnt" "$workers" "$jobkind"
				echo "$cfg@$tag oom_kills=$(oom_kills) errors=$(stat_of read_errors)" \
					"guard_gives=$(stat0 mem_guard_gives) given_mib=$(($(stat0 cache_given_back_bytes) >> 20))" \
					"job_max_mib=$(($(stat0 mem_job_max_bytes) >> 20)) own_max_mib=$(($(stat0 mem_own_max_bytes) >> 20))" >> "$W/health.txt"
				[ "$cfg" = run ] && grep -h "prefetch\|order" <(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(" ".join("%s=%s" % (k, v) for k, v in s.items() if k.startswith(("prefetch", "order"))))' "$W/mnt/.epochfs/stats.json") >> "$W/prefetch.txt" || true
				umount_ep
				limit "$LIM"
			done
			# What follows (analyze, reader) runs the daemon in the job's
			# cgroup again, whichever configuration came last.
			DAEMON_CGS=$CGS
			if case " $CONFIGS " in *" analyze "*) true ;; *) false ;; esac; then
				# epochfs-analyze on the epochfs configuration: its breakdown
				# against the epochs measured directly (ram, epochfs).
				drop
				mount_ep --cache-size "$CACHE_B"B
				an="$W/analyze-${tag//\//-}-$run"
				# The analyzer's own process is in the blkio and cpuacct groups
				# (its storage probe sees the throttle) but not the memory
				# one: the job gets the memory the direct runs got, and the
				# analyzer's own 14 MiB (8 anonymous) do not squeeze it (its /dev/shm
				# copies are the job's and count).
				# shellcheck disable=SC2086
				EPOCHFS_PYTHON=$PY in_cg_io "$BUILD/epochfs-analyze" -q -v --json "$an.json" ${STALL_ANALYZE_ARGS:-} \
					"$W/mnt" -- sh -c 'for g in $0; do echo $$ > "$g/cgroup.procs"; done; exec "$@"' "$MEMCG $UNICG" \
					$PY "$JOB" "$W/mnt" --workers "$workers" \
					--epochs "$EPOCHS" > "$an.txt" 2>&1 ||
					echo "stalls: epochfs-analyze failed: $(tail -3 "$an.txt")" >&2
				sed 's/^/  analyze: /' "$an.txt"
				[ -n "${STALL_ANALYZE_KEEP:-}" ] && cp "$an.json" "$STALL_ANALYZE_KEEP-${tag//\//-}-$run.json"
				echo "analyze@$tag $an.json" >> "$W/analyze.list"
				umount_ep
			fi
			if [ "$workers" = "${WORKERSS%% *}" ] && case " $CONFIGS " in *" reader "*) true ;; *) false ;; esac; then
				# Memory for D/2 and the reader's own ~100 MiB: no room
				# beside the cache for the kernel to keep the dataset.
				limit $((CACHE_B + (96 << 20)))
				for mode in reader order; do
					drop
					mount_ep --cache-size $((CACHE_B - PF))B --prefetch-mem "$PF"B
					nm=reader; [ "$mode" = order ] && nm=reader+order
					job "$nm@$((bps >> 20))MBps/w1" "$W/mnt" 1 "$mode"
					umount_ep
				done
			fi
			limit -1; throttle 0
		done
	done
done
python3 - "$ROWS" "$D" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, epoch, sec, waited, st, cg, dd, cpu, allcpu = line.split()
    if int(epoch) >= 1:
        rows[name].append((float(sec), float(waited), int(st), int(cg), int(dd), int(cpu) / 100.0,
                           int(allcpu) / 1e9))
D = int(sys.argv[2])
med = {n: statistics.median(r[0] for r in v) for n, v in rows.items()}
print("%-26s %8s %8s %10s %12s %10s %9s %12s" % ("", "s/epoch", "waited", "storage/D", "job dev MB",
                                                  "daemon cpu", "all cpu", "stall gone"))
for n, v in rows.items():
    cfg, _, tag = n.partition("@")
    w = tag.split("/")[-1] if tag else n.split("/")[-1]
    ram = med.get("ram/" + w)
    nat = med.get("native@" + tag)
    gone = ""
    if ram is not None and nat is not None and nat > ram and cfg != "ram":
        gone = "%.0f%%" % (100 * (nat - med[n]) / (nat - ram))
    st = statistics.median(r[2] for r in v) / D
    job_dev = statistics.median(max(0, r[3] - r[4]) for r in v) / 1e6
    print("%-26s %8.2f %8.2f %10.3f %12.1f %10.2f %9.2f %12s" % (
        n, med[n], statistics.median(r[1] for r in v), st, job_dev, statistics.median(r[5] for r in v),
        statistics.median(r[6] for r in v), gone))
PY
[ -f "$W/prefetch.txt" ] && sed 's/^/  prefetch counters: /' "$W/prefetch.txt"
[ -f "$W/health.txt" ] && sed 's/^/  health (cumulative): /' "$W/health.txt"
if [ -f "$W/analyze.list" ]; then
	# The analyzer against the direct measurement (medians of the runs,
	# which ran interleaved: ram, epochfs, analyze in each): all in RAM =
	# compute + prep; the analyzer's as-is epoch - RAM = fetch + memory
	# stall; its prediction for the whole dataset in memory = RAM. Issue
	# 32's targets: 25% and 20%.
	python3 - "$ROWS" "$W/analyze.list" <<'PY'
import collections, json, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if int(f[1]) >= 1:
        rows[f[0]].append(float(f[2]))
med = {n: statistics.median(v) for n, v in rows.items()}
got = collections.defaultdict(list)
for line in open(sys.argv[2]):
    name, path = line.split()
    try:
        got[name].append(json.load(open(path)))
    except (OSError, ValueError):
        pass
def m(reps, f):
    vals = [f(r) for r in reps]
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None
print("epochfs-analyze against the direct measurement (medians; f+m = fetch + memory stall):")
print("  %-8s %-16s %5s %8s %9s %7s %7s %7s %10s" % ("", "", "runs", "epoch", "comp+prep", "fetch", "memory", "f+m",
                                                   "all in mem"))
verdicts = []
for name, reps in got.items():
    if not reps:
        continue
    tag = name.partition("@")[2]
    w = tag.split("/")[-1]
    ep, ram = med.get("epochfs@" + tag), med.get("ram/" + w)
    a_ep = m(reps, lambda r: r.get("epoch_seconds"))
    a_cp = m(reps, lambda r: r["compute_seconds"] + r["prep_stall_seconds"])
    a_f = m(reps, lambda r: r["fetch_stall_seconds"])
    a_m = m(reps, lambda r: r.get("memory_stall_seconds") or 0.0)
    a_fm = m(reps, lambda r: r["fetch_stall_seconds"] + (r.get("memory_stall_seconds") or 0.0))
    a_all = m(reps, lambda r: (r.get("all_in_memory") or {}).get("predicted_epoch_seconds"))
    print("  %-8s %-16s %5d %8.2f %9.2f %7.2f %7.2f %7.2f %10s" % (
        "analyzer", tag, len(reps), a_ep, a_cp, a_f, a_m, a_fm, "-" if a_all is None else "%.2f" % a_all))
    if ram is not None:
        # The direct figures: RAM for compute + prep and for all in memory,
        # the analyzer's own as-is epoch less RAM for fetch + memory.
        print("  %-8s %-16s %5d %8s %9.2f %7s %7s %7.2f %10.2f" % (
            "direct", tag, len(rows.get("ram/" + w, [])), "%.2f" % ep if ep is not None else "-", ram, "", "",
            a_ep - ram, ram))
    scopes = sorted({(r.get("memory") or {}).get("psi_scope") or "none" for r in reps})
    print("  %-8s memory stall per run %s (warm runs' %s); PSI of the %s; epochfs configuration - RAM: %s" % (
        "", ", ".join("%.2f" % (r.get("memory_stall_seconds") or 0.0) for r in reps),
        ", ".join("%.2f" % ((r.get("memory") or {}).get("warm_stall_seconds") or 0.0) for r in reps),
        "/".join(scopes), "%.2f s" % (ep - ram) if ep is not None and ram is not None else "-"))
    if ram is None:
        continue
    if a_ep > ram:
        err = a_fm / (a_ep - ram) - 1
        verdicts.append(("fetch + memory stall %.2f s against as-is - RAM %.2f s (%s)" % (a_fm, a_ep - ram, tag),
                         err, 0.25))
    if a_all is not None:
        verdicts.append(("whole dataset in memory predicted %.2f s against RAM %.2f s (%s)" % (a_all, ram, tag),
                         a_all / ram - 1, 0.20))
for what, err, target in verdicts:
    print("target %s: %+.0f%% (within %.0f%%): %s" % (what, 100 * err, 100 * target,
                                                      "PASS" if abs(err) <= target else "FAIL"))
PY
fi
grep -hE "error|warning" "$W/daemon.err" >&2 || true
# (an if, not an &&: the script's status is its last command's)
if [ -n "${STALL_LOG:-}" ]; then cp "$W/daemon.err" "$STALL_LOG"; fi
