# A flipped bit in a cached item is never served. Through the debug hook
# (EPOCHFS_DEBUG_HOOKS=1 + SIGUSR2) the daemon flips one bit of one cached
# item; (1) with --verify the next hit notices, (2) without it the background
# scrubber does. Either way cache_corrupt counts it and readers get SOURCE's
# bytes.
. "$(dirname "$0")/lib.sh"
EP_ALLOWED_STDERR='debug hook'
"$GEN" "$T/src" --files 60 --classes 3 --seed 5 2>/dev/null || fail "gen"
m=$T/mnt

fill_and_flip() { # reads everything (admitting it), then has one item flipped
	(cd "$T/src" && find . -type f) | while read -r f; do cat "$m/$f" > /dev/null; done
	[ "$(stat_of "$m" cache_items)" = 60 ] || fail "not all files cached: $(stat_of "$m" cache_items)"
	kill -USR2 "$EP_PID"
	wait_for grep -q "flipped one bit of cached item" "$T/daemon.err" || fail "debug hook did not run"
	flipped=$(sed -n 's/.*flipped one bit of cached item \(.*\) (chunk.*/\1/p' "$T/daemon.err" | tail -1)
	[ -f "$T/src/$flipped" ] || fail "hook named no file: '$flipped'"
}
compare_all() {
	echo 3 > /proc/sys/vm/drop_caches      # so reads reach the daemon again
	(cd "$T/src" && find . -type f) | while read -r f; do
		cmp -s "$T/src/$f" "$m/$f" || fail "$f differs after the flip"
	done
}

export EPOCHFS_DEBUG_HOOKS=1
mount_ep "$T/src" "$m" --verify --scrub-rate 0 --cache-size 64M   # room for a second copy
fill_and_flip
compare_all
[ "$(stat_of "$m" cache_corrupt)" = 1 ] || fail "cache_corrupt = $(stat_of "$m" cache_corrupt), want 1"
[ "$(stat_of "$m" cache_scrubbed_bytes)" = 0 ] || fail "scrubber ran with --scrub-rate 0"
ok "--verify: flipped item $flipped detected on the hit, correct bytes served"
# It was dropped and, budget remaining, admitted again from SOURCE.
[ "$(stat_of "$m" cache_items)" = 60 ] || fail "the good copy was not re-admitted: $(cat "$m/.epochfs/stats.json")"
umount_ep

: > "$T/daemon.err"
mount_ep "$T/src" "$m" --scrub-rate 1G
fill_and_flip
wait_for sh -c "[ \"\$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[\"cache_corrupt\"])' '$m/.epochfs/stats.json')\" = 1 ]" \
	|| fail "scrubber did not find the flipped item"
[ "$(stat_of "$m" cache_scrubbed_bytes)" -gt 0 ] || fail "cache_scrubbed_bytes is 0"
[ "$(stat_of "$m" cache_items)" = 59 ] || fail "corrupt item still counted as ready"
compare_all
ok "scrubber: flipped item $flipped dropped in the background, correct bytes served"
umount_ep
