# MinIO on a real mount: with a budget of half the dataset, after epoch 0 the
# admitted items and only those hit, every epoch; counters add up; bytes stay
# identical; the budget is never exceeded; a changed file is served anew.
. "$(dirname "$0")/lib.sh"
"$GEN" "$T/src" --files 200 --classes 4 --seed 3 2>/dev/null || fail "gen"
D=$(find "$T/src" -type f -printf '%s\n' | awk '{s+=$1} END {print s}')
mount_ep "$T/src" "$T/mnt" --cache-size $((D / 2))B
m=$T/mnt
[ "$(stat_of "$m" cache_capacity_bytes)" = $((D / 2)) ] || fail "capacity"
# The background thread makes the whole budget resident right after the mount
# (in whole pages: at most one page past the budget's last byte).
prefaulted_ok() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); c=d["cache_capacity_bytes"]; sys.exit(not c <= d["cache_prefaulted_bytes"] < c + 4096)' "$m/.epochfs/stats.json"; }
wait_for prefaulted_ok || fail "prefaulted $(stat_of "$m" cache_prefaulted_bytes) of $((D / 2))"
epoch() { # epoch SEED: one shuffled epoch with the kernel's caches dropped first
	echo 3 > /proc/sys/vm/drop_caches
	"$BENCH" "$m" --epochs 1 --seed "$1" --json > "$T/e.json" || fail "bench epoch"
}
snap() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join(str(d[k]) for k in sys.argv[2:]))' \
	"$m/.epochfs/stats.json" "$@"; }
epoch 1
read used items hit0 st0 <<< "$(snap cache_used_bytes cache_items cache_hit_bytes storage_read_bytes)"
# Epoch 0 read everything from storage: bytes that fill an item are misses.
# Only a second request into an item another request is loading may hit.
[ "$st0" = "$D" ] || fail "epoch 0 read $st0 bytes from storage, dataset is $D"
[ $((hit0 * 10)) -lt "$D" ] || fail "epoch 0 counted $hit0 of $D bytes as cache hits"
[ "$used" -le $((D / 2)) ] || fail "used $used > budget $((D / 2))"
[ "$used" -ge $((D / 2 - 200000)) ] || fail "budget not filled: $used of $((D / 2))"
ok "epoch 0 admitted $items items, $used of $((D / 2)) bytes"
prev_hit=
for seed in 2 3 4; do
	read h0 s0 <<< "$(snap cache_hit_bytes storage_read_bytes)"
	epoch $seed
	read h1 s1 rb hb mb items2 <<< "$(snap cache_hit_bytes storage_read_bytes read_bytes cache_hit_bytes cache_miss_bytes cache_items)"
	hit=$((h1 - h0)); st=$((s1 - s0))
	[ "$items2" = "$items" ] || fail "items changed: $items -> $items2 (evicted or admitted past the budget)"
	[ "$hit" -le "$used" ] && [ "$hit" -ge $((used - 64 * items)) ] || fail "epoch hit $hit bytes, cache holds $used"
	[ $((hit + st)) = "$D" ] || fail "hit $hit + storage $st != dataset $D"
	[ -z "$prev_hit" ] || [ "$hit" = "$prev_hit" ] || fail "hit bytes vary between epochs: $prev_hit then $hit"
	[ $((hb + mb)) = "$rb" ] || fail "read_bytes $rb != hit $hb + miss $mb"
	prev_hit=$hit
done
ok "epochs 1-3: exactly the admitted bytes hit ($prev_hit), the rest from storage, counters add up"
echo 3 > /proc/sys/vm/drop_caches
(cd "$T/src" && find . -type f) | while read -r f; do cmp -s "$T/src/$f" "$m/$f" || fail "$f differs"; done
ok "bytes identical through the cache"
rss=$(awk '/VmRSS/ {print $2 * 1024}' /proc/$EP_PID/status)
[ "$rss" -le $((D / 2 + 64 * 1024 * 1024)) ] || fail "daemon RSS $rss over budget + 64 MB"
ok "daemon RSS $rss <= budget + 64 MB"
# A cached file rewritten under the mount: new bytes, never the cached ones.
f=$(ls "$T/src/class_0000" | head -1)
cat "$m/class_0000/$f" > /dev/null
printf 'rewritten' > "$T/src/class_0000/$f"
wait_for sh -c "[ \"\$(cat '$m/class_0000/$f')\" = rewritten ]" || fail "cached file served old bytes after a rewrite"
ok "rewritten file served new bytes"
umount_ep

# --prefault 0: memory becomes resident only as items are filled. A budget
# larger than the dataset is made resident only as far as the data can fill.
mount_ep "$T/src" "$T/mnt" --cache-size $((D / 2))B --prefault 0 --no-persist   # a fresh arena
sleep 0.3   # give a (wrongly) running prefault time to show
[ "$(stat_of "$m" cache_prefaulted_bytes)" = 0 ] || fail "--prefault 0 prefaulted"
umount_ep
# A window: resident memory keeps a step ahead of the fill, all the way.
mount_ep "$T/src" "$T/mnt" --cache-size $((D / 2))B --prefault 1M --no-persist
"$BENCH" "$m" --epochs 1 > /dev/null || fail "epoch with a prefault window"
wait_for sh -c "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d[\"cache_prefaulted_bytes\"] < min(d[\"cache_used_bytes\"] + (1 << 20), d[\"cache_capacity_bytes\"]))' '$m/.epochfs/stats.json'" \
	|| fail "window prefault fell behind: $(cat "$m/.epochfs/stats.json")"
umount_ep
D=$(find "$T/src" -type f -printf '%s\n' | awk '{s+=$1} END {print s}')   # one file was rewritten
mount_ep "$T/src" "$T/mnt" --cache-size $((4 * D))B --no-persist
wait_for sh -c "[ \"\$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[\"cache_prefaulted_bytes\"])' '$m/.epochfs/stats.json')\" -gt 0 ]" || fail "no prefault"
sleep 0.3
p=$(stat_of "$m" cache_prefaulted_bytes)
[ "$p" -ge "$D" ] && [ "$p" -le $((D + D / 10)) ] || fail "prefaulted $p for a dataset of $D (budget $((4 * D)))"
ok "prefault: whole budget at mount, off with --prefault 0, never past what the data can fill ($p of $((4 * D)))"
umount_ep
