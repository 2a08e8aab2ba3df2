# epochfs-gen is deterministic by seed whatever the thread count, writes
# ImageNet-like JPEGs; epochfs-bench reads every file once per epoch and
# reports the daemon's storage bytes inside a mount.
. "$(dirname "$0")/lib.sh"
"$GEN" "$T/a" --files 120 --classes 4 --seed 9 --threads 1 2>/dev/null || fail "gen a"
"$GEN" "$T/b" --files 120 --classes 4 --seed 9 --threads 3 2>/dev/null || fail "gen b"
"$GEN" "$T/c" --files 120 --classes 4 --seed 10 2>/dev/null || fail "gen c"
sum() { (cd "$1" && find . -type f | LC_ALL=C sort | xargs md5sum | md5sum); }
[ "$(sum "$T/a")" = "$(sum "$T/b")" ] || fail "same seed, different trees"
[ "$(sum "$T/a")" != "$(sum "$T/c")" ] || fail "different seeds, same tree"
[ "$(ls "$T/a" | tr '\n' ' ')" = "class_0000 class_0001 class_0002 class_0003 " ] || fail "class dirs"
python3 - "$T/a" <<'PY' || fail "not ImageNet-like"
import os, struct, sys
sizes = []
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        data = open(os.path.join(root, f), "rb").read()
        assert data[:2] == b"\xff\xd8" and data[-2:] == b"\xff\xd9", f
        i = 2
        while data[i] == 0xFF and data[i + 1] not in (0xC0, 0xC1, 0xC2):
            i += 2 + struct.unpack(">H", data[i + 2:i + 4])[0]
        h, w = struct.unpack(">HH", data[i + 5:i + 9])
        assert 300 <= w <= 500 and 300 <= h <= 500, (f, w, h)
        sizes.append(len(data))
mean = sum(sizes) / len(sizes)
assert 80e3 < mean < 150e3, mean
print("mean %.1f KB" % (mean / 1e3))
PY
out=$("$GEN" "$T/x" 2>&1) && fail "gen without --files succeeded"
echo "$out" | grep -q -- "--files N is required" || fail "gen error: $out"
ok "gen deterministic, JPEG sides 300-500, mean size ImageNet-like"

out=$("$BENCH" "$T/a" --epochs 2 --json) || fail "bench"
[ "$(echo "$out" | wc -l)" = 2 ] || fail "bench epochs: $out"
echo "$out" | python3 -c 'import json,sys; r=[json.loads(l) for l in sys.stdin]; assert all(x["files"]==120 and x["errors"]==0 and x["storage_read_bytes"]==-1 and x["daemon_cpu_us_per_file"]==-1 for x in r), r' || fail "bench json: $out"
total=$(du -sb --apparent-size "$T/a" | cut -f1)
mount_ep "$T/a" "$T/mnt"
sync; echo 3 > /proc/sys/vm/drop_caches
out=$("$BENCH" "$T/mnt" --epochs 2 --json) || fail "bench on mount"
python3 - "$out" "$T/a" <<'PY' || fail "bench storage bytes: $out"
import json, os, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines()]
files = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(sys.argv[2]) for f in fs)
assert rows[0]["bytes"] == files and rows[0]["storage_read_bytes"] == files, (rows[0], files)
assert rows[1]["storage_read_bytes"] == 0, rows[1]     # epoch 1 from the kernel page cache
PY
"$BENCH" "$T/mnt" --epochs x 2>&1 | grep -q "not a valid number" || fail "bench bad option"
# --drop-caches: each epoch reaches the daemon (its RAM cache: no storage),
# whose CPU a file is given.
r0=$(stat_of "$T/mnt" reads)
out=$("$BENCH" "$T/mnt" --epochs 2 --json --drop-caches) || fail "bench --drop-caches"
r1=$(stat_of "$T/mnt" reads)
python3 - "$out" <<'PY' || fail "bench --drop-caches: $out"
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines()]
assert all(r["storage_read_bytes"] == 0 and r["daemon_cpu_us_per_file"] > 0 for r in rows), rows
PY
[ $((r1 - r0)) -ge 240 ] || fail "--drop-caches: the daemon answered $((r1 - r0)) reads in 2 epochs of 120 files"
ok "bench: every byte once per epoch, storage delta from stats.json; --drop-caches reaches the daemon"
umount_ep
