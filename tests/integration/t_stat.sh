# epochfs-stat: its first line averages since the mount, each later line is
# the delta of one interval; an epoch read inside one interval shows up there
# with the dataset's bytes and the cache's share of them.
. "$(dirname "$0")/lib.sh"
STAT=$ROOT/$BUILD/epochfs-stat
"$GEN" "$T/src" --files 100 --classes 2 --seed 4 2>/dev/null || fail "gen"
D=$(find "$T/src" -type f -printf '%s\n' | awk '{s+=$1} END {print s}')
mount_ep "$T/src" "$T/mnt" --cache-size 64M
m=$T/mnt
"$BENCH" "$m" --epochs 1 > /dev/null || fail "epoch 0"          # fills the cache
echo 3 > /proc/sys/vm/drop_caches                                # the next epoch reaches the daemon

"$STAT" "$m" --json --count 2 --interval 4 > "$T/stat.json" &
spid=$!
wait_for sh -c "[ -s '$T/stat.json' ]" || fail "no first line"
"$BENCH" "$m" --epochs 1 --seed 7 > /dev/null || fail "epoch 1"
wait "$spid" || fail "epochfs-stat exited non-zero"
python3 - "$T/stat.json" "$D" <<'PY' || fail "stat lines: $(cat "$T/stat.json")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
D = int(sys.argv[2])
assert len(rows) == 2 and rows[0]["since_mount"] and not rows[1]["since_mount"], rows
first, r = rows
assert abs(first["read_mb_s"] * first["seconds"] * 1e6 - D) < 0.01 * D, first   # epoch 0
assert first["hit_ratio"] < 0.1, first                                         # it filled the cache
assert abs(r["seconds"] - 4) < 0.5, r
assert abs(r["read_mb_s"] * r["seconds"] * 1e6 - D) < 0.01 * D, r             # epoch 1, all of it
assert r["hit_ratio"] == 1.0 and r["storage_mb_s"] == 0, r                     # all from the cache
assert r["cache_items"] == 100 and r["cache_used_bytes"] <= r["cache_capacity_bytes"], r
assert r["data_wait"] is None, r                                               # no job reported
PY
ok "json: since-mount line, then one interval holding a whole cached epoch (hit ratio 1)"

out=$("$STAT" "$m" --count 2 --interval 0.1) || fail "table"
echo "$out" | head -1 | grep -q "read MB/s.*hit.*storage MB/s.*fill" || fail "header: $out"
[ "$(echo "$out" | wc -l)" = 3 ] || fail "table lines: $out"
echo "$out" | sed -n 2p | grep -q "^mount " || fail "first row is not the since-mount row: $out"
ok "table: header, since-mount row, interval rows"

# A job's "#wait" report (as epochfs-run writes them) shows as its data-wait share.
"$STAT" "$m" --json --count 2 --interval 2 > "$T/w.json" &
spid=$!
wait_for sh -c "[ -s '$T/w.json' ]" || fail "no first line"
python3 -c 'import os, sys
fd = os.open(sys.argv[1] + "/.epochfs/order/j", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
os.write(fd, b"#wait 1.0 4.0\n")
os.close(fd)' "$m" || fail "writing a #wait report"
wait "$spid" || fail "epochfs-stat exited non-zero"
python3 -c 'import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][1]
assert r["data_wait"] == 0.25, r' "$T/w.json" || fail "data_wait: $(cat "$T/w.json")"
out=$("$STAT" "$m" --count 1)
echo "$out" | head -1 | grep -q " wait$" || fail "no wait column with a stream: $out"
rm "$m/.epochfs/order/j"
ok "a job's data-wait report: data_wait 0.25 in its interval, a wait column"

err=$("$STAT" "$T/src" 2>&1) && fail "a plain directory was accepted"
echo "$err" | grep -q "not inside an epochfs mount" || fail "message: $err"
"$STAT" "$m" --interval 0 > /dev/null 2>&1; [ $? = 2 ] || fail "--interval 0 not a usage error"
"$STAT" 2>&1 | grep -q "exactly one MOUNTPOINT" || fail "no-argument message"
"$STAT" --help | grep -q "^usage: epochfs-stat" || fail "--help"
ok "clear errors for a non-mount, a bad interval, a missing argument"
umount_ep
