# epochfs-stat (docs/cache.md, "Watching a mount"):
#   - the live table: one line of totals since the mount above the header,
#     then rows that each cover one interval; decimal MB everywhere; a header
#     that gains the orders set when a stream appears and keeps it after the
#     stream ends; jobwait% from a job's "#wait" report, "-" without one;
#     --json with its since-mount object, then interval objects;
#   - --file on a file before and after it is read: storage, then the RAM
#     cache and the kernel's page cache (--page-cache keep); a path off any
#     epochfs mount or a directory is an error, the other paths still shown;
#   - --mounts: the test's mount answering, one whose daemon got kill -9 not;
#   - --states / --free-states on a root of the test's own (a private
#     tmpfs): the killed daemon's state is listed dead with its memory and
#     freed (the directory gone, the tmpfs's usage down by as much), the live
#     daemon's state is listed alive and left alone;
#   - hostile, as root over every user's root, in a private mount namespace
#     with a /dev/shm of its own: links a user planted in the state roots are
#     never followed, a root named for another user is skipped, a state held
#     by a live process is never freed; the user cannot free root's states.
. "$(dirname "$0")/lib.sh"
STAT=$ROOT/$BUILD/epochfs-stat

# ---- hostile: run by the test itself in a private mount namespace ----------
if [ -n "${EPOCHFS_STAT_NS:-}" ]; then
	mount -t tmpfs -o size=256M,mode=1777 tmpfs /dev/shm || skip "cannot mount a private /dev/shm"
	# The FUSE mounts copied into this namespace would keep their daemons
	# (other tests') alive after those unmount them: let go of them here.
	findmnt -rn -o TARGET,FSTYPE | awk '$2 ~ /^fuse/ {print $1}' | while read -r t; do
		umount -l "$(printf '%b' "$t")" 2>/dev/null
	done
	U=epfs-stat-$$
	useradd -M -N -s /usr/sbin/nologin "$U" 2>/dev/null || skip "cannot add a user"
	UH=$(id -u "$U")
	holder=
	trap '[ -n "$holder" ] && kill "$holder" 2>/dev/null; cleanup; userdel "$U" 2>/dev/null' EXIT
	as_user() { runuser -u "$U" -- "$@"; }
	chmod 755 "$T"
	cp "$STAT" "$T/epochfs-stat" && chmod 755 "$T/epochfs-stat"
	STAT=$T/epochfs-stat
	# fake DIR MOUNTPOINT KB: the files a killed daemon leaves, KB of them in its arena.
	fake() {
		(umask 077 && mkdir "$1" && echo 1 > "$1/lock" && printf 'mountpoint=%s\nsource=/data\n' "$2" > "$1/owner" &&
			head -c "${3}K" /dev/urandom > "$1/arena")
	}
	export -f fake
	R0=/dev/shm/epochfs-0
	RU=/dev/shm/epochfs-$UH
	(umask 077 && mkdir "$R0")
	fake "$R0/dead" /mnt/a 4096
	fake "$R0/live" /mnt/b 1024
	flock -x --no-fork "$R0/live/lock" sleep 300 >/dev/null 2>&1 &
	holder=$!
	wait_for sh -c "! flock -n '$R0/live/lock' true" || fail "the stand-in daemon did not take its lock"
	echo "$holder" > "$R0/live/lock"
	# Root's own things a link could lead to: a dead-looking state elsewhere.
	mkdir -p "$T/victim" && fake "$T/victim/s" /mnt/v 64 && echo precious > "$T/victim/precious"
	as_user mkdir -m 700 "$RU"
	as_user bash -c 'fake "$1" /mnt/u 2048' _ "$RU/udead"
	as_user ln -s "$R0/live" "$RU/evil"                 # root's live state
	as_user ln -s "$T/victim/s" "$RU/evil2"             # a state of root's, unlocked
	as_user ln -s "$T/victim/precious" "$RU/udead/table"   # a link inside a state
	as_user mkdir -m 700 /dev/shm/epochfs-4242          # a root named for another user
	as_user bash -c 'fake "$1" /mnt/x 64' _ /dev/shm/epochfs-4242/x

	# The user sees its own root only, and cannot free root's states.
	out=$(as_user "$STAT" --states 2>"$T/u.err"); rc=$?
	[ $rc = 1 ] || fail "user --states: exit $rc with links in its root"
	echo "$out" | grep -q "^$RU/udead  *none .*/mnt/u" || fail "user --states: $out"
	echo "$out" | grep -q "$R0" && fail "the user's listing shows root's states: $out"
	grep -q "$RU/evil: a symlink: not followed" "$T/u.err" || fail "user --states stderr: $(cat "$T/u.err")"
	out=$(as_user "$STAT" --free-states "$R0" 2>&1) && fail "the user freed in root's root: $out"
	echo "$out" | grep -q "$R0 is owned by uid 0, not by $UH: not trusted" || fail "user --free-states $R0: $out"
	[ -e "$R0/dead/arena" ] || fail "the user freed root's state"
	ok "the user lists its own states only, links named and skipped; root's root refused ($(echo "$out" | head -1))"

	# Root, over every user's root.
	out=$("$STAT" --states 2>"$T/r.err"); rc=$?
	[ $rc = 1 ] || fail "root --states: exit $rc with untrusted entries"
	echo "$out" | grep -q "^root  *$R0/dead  *none  *4\.[0-9]*  *no  */mnt/a" || fail "root --states, dead: $out"
	echo "$out" | grep -q "^root  *$R0/live  *pid $holder " || fail "root --states, live: $out"
	echo "$out" | grep -q "^$U  *$RU/udead  *none" || fail "root --states, the user's: $out"
	grep -q "$RU/evil: a symlink: not followed (skipped)" "$T/r.err" &&
		grep -q "$RU/evil2: a symlink: not followed (skipped)" "$T/r.err" &&
		grep -q "/dev/shm/epochfs-4242 is owned by uid $UH, not by 4242: not trusted (skipped)" "$T/r.err" ||
		fail "root --states stderr: $(cat "$T/r.err")"
	before=$(df --output=used -B1 /dev/shm | tail -1)
	out=$("$STAT" --free-states 2>"$T/f.err"); rc=$?
	after=$(df --output=used -B1 /dev/shm | tail -1)
	[ $rc = 1 ] || fail "root --free-states: exit $rc with untrusted entries"
	echo "$out" | grep -q "^freed $R0/dead: 4\.[0-9]* MB given back" &&
		echo "$out" | grep -q "^freed $RU/udead: 2\.[0-9]* MB given back" &&
		echo "$out" | grep -q "^left  $R0/live: its daemon (pid $holder) is alive" &&
		echo "$out" | grep -q "^freed 2 states, " || fail "root --free-states: $out"
	[ ! -e "$R0/dead" ] && [ ! -e "$RU/udead" ] || fail "freed states are still there: $(ls -la "$R0" "$RU")"
	[ -f "$R0/live/arena" ] && [ -f "$R0/live/owner" ] || fail "a state a live process holds was touched"
	[ -L "$RU/evil" ] && [ -L "$RU/evil2" ] || fail "the planted links were removed"
	[ -f "$T/victim/s/lock" ] && [ -f "$T/victim/s/arena" ] && [ -f "$T/victim/s/owner" ] &&
		[ "$(cat "$T/victim/precious")" = precious ] || fail "freeing followed a planted link"
	[ -f /dev/shm/epochfs-4242/x/arena ] || fail "a root named for another user was freed in"
	[ $((before - after)) -ge 6000000 ] || fail "/dev/shm usage went from $before to $after bytes only"
	ok "root frees its and the user's dead states ($(((before - after) >> 20)) MiB back), follows no planted link, skips a root named for another user, leaves a held state alone"
	exit 0
fi

"$GEN" "$T/src" --files 100 --classes 2 --seed 4 2>/dev/null || fail "gen"
D=$(find "$T/src" -type f -printf '%s\n' | awk '{s+=$1} END {print s}')
# The states of this test's daemons live on a tmpfs of its own: their
# memory can be measured there, and nothing of anyone else's is near.
mkdir -p "$T/shm"
mount -t tmpfs -o size=1G tmpfs "$T/shm" || skip "cannot mount a tmpfs"
SR=$T/shm/states
mkdir -m 700 "$SR"
M2=$T/m2
M2_PID=
# Both daemons and their mounts go before the tmpfs their states are on.
cleanup_stat() {
	fusermount3 -uz "$M2" 2>/dev/null          # a dead mount fails mountpoint -q
	[ -n "$M2_PID" ] && kill -9 "$M2_PID" 2>/dev/null
	[ -n "$EP_MNT" ] && fusermount3 -uz "$EP_MNT" 2>/dev/null
	[ -n "$EP_PID" ] && kill -9 "$EP_PID" 2>/dev/null && wait "$EP_PID" 2>/dev/null
	EP_PID=
	mountpoint -q "$T/shm" && umount -l "$T/shm"
	cleanup
}
trap cleanup_stat EXIT
mount_ep "$T/src" "$T/mnt" --cache-size 64M --state-dir "$SR/live" --page-cache keep
m=$T/mnt

# ---- --file -----------------------------------------------------------------
f=$(cd "$m" && find . -name '*.jpg' | sort | head -1)
f=$m/${f#./}
size=$(stat -c %s "$f")
out=$("$STAT" --file "$f") || fail "--file: $out"
echo "$out" | grep -q "^$f: $size bytes, 1 item of [0-9]* bytes (SOURCE $T/src/" &&
	echo "$out" | grep -q "^  RAM cache  *0 bytes  *0.0%" &&
	echo "$out" | grep -q "^  from storage  *$size bytes  *100.0%" &&
	echo "$out" | grep -q "^  kernel page cache: 0 of $size bytes" || fail "--file before a read: $out"
cat "$f" > /dev/null
out=$("$STAT" --file "$f") || fail "--file: $out"
echo "$out" | grep -q "^  RAM cache  *$size bytes  *100.0%" &&
	echo "$out" | grep -q "^  from storage  *0 bytes" &&
	echo "$out" | grep -q "^  kernel page cache: $size of $size bytes (100.0%)" &&
	echo "$out" | grep -q "^  map (.*): R$" || fail "--file after a read: $out"
"$STAT" --file --json "$f" | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline())
size = int(sys.argv[1])
assert r["size"] == size and r["ram_bytes"] == size and r["storage_bytes"] == 0, r
assert r["page_cache_bytes"] == size and r["error"] is None and r["map"] == "R", r' "$size" ||
	fail "--file --json: $("$STAT" --file --json "$f")"
ok "--file: a file from storage before its read; after it, all in the RAM cache and the page cache"

out=$("$STAT" --file "$T/src/${f#$m/}" "$f" "$m" 2>"$T/file.err"); rc=$?
[ $rc = 1 ] || fail "--file with bad paths: exit $rc"
grep -q "^epochfs-stat: $T/src/${f#$m/}: not on an epochfs mount$" "$T/file.err" &&
	grep -q "^epochfs-stat: $m: a directory" "$T/file.err" || fail "--file errors: $(cat "$T/file.err")"
echo "$out" | grep -q "^$f: $size bytes" || fail "--file did not show the good path among bad ones: $out"
"$STAT" --file --json "$T/src/${f#$m/}" | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline())
assert r["error"] == "not on an epochfs mount", r' || fail "--file --json of a plain file"
ok "--file: a path off the mount and a directory are errors (exit 1), the others still shown"

# ---- the live table ---------------------------------------------------------
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
assert abs(first["read_mb_s"] * first["seconds"] * 1e6 - D) < 0.02 * D, first  # epoch 0 (and one file)
assert first["hit_ratio"] < 0.1, first                                         # it filled the cache
assert abs(r["seconds"] - 4) < 0.5, r
assert abs(r["read_mb_s"] * r["seconds"] * 1e6 - D) < 0.01 * D, r             # epoch 1, all of it
assert r["hit_ratio"] == 1.0 and r["storage_mb_s"] == 0, r                     # all from the cache
assert r["cache_items"] == 100 and r["cache_used_bytes"] <= r["cache_capacity_bytes"], r
assert r["data_wait"] is None, r                                               # no job reported
PY
ok "json: a since-mount object, then one interval holding a whole cached epoch (hit ratio 1)"

# Rows are intervals: an epoch read while the table runs adds up to the
# dataset over the rows, and a quiet interval reads 0.0; the totals since
# the mount are one labelled line above the header.
echo 3 > /proc/sys/vm/drop_caches
"$STAT" "$m" --interval 2 --count 3 > "$T/rate.txt" &
spid=$!
wait_for grep -q "read MB/s" "$T/rate.txt" || fail "no header"
"$BENCH" "$m" --epochs 1 --seed 8 > /dev/null || fail "epoch 2"
wait "$spid" || fail "epochfs-stat exited non-zero"
python3 - "$T/rate.txt" "$D" <<'PY' || fail "table: $(cat "$T/rate.txt")"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
D = int(sys.argv[2])
assert re.match(r"since mount \(\d+m\d\ds ago\): [\d.]+ MB read in \d+ reads, [\d.]+% of it from the RAM cache, "
                r"[\d.]+ MB from storage", lines[0]), lines[0]
total = float(re.search(r"([\d.]+) MB read", lines[0]).group(1))
assert abs(total * 1e6 - 2 * D) < 0.02 * D, (total, D)              # epochs 0 and 1 (and one file)
head = lines[1]
assert head.split() == ["read", "MB/s", "reads/s", "hit%", "storage", "MB/s", "cache", "MB", "items",
                        "errors", "corrupt"], head
rows = [l.split() for l in lines[2:]]
assert len(rows) == 3 and all(len(r) == 8 for r in rows), rows
read = sum(float(r[0]) for r in rows) * 2                            # MB in the three intervals
assert abs(read * 1e6 - D) < 0.05 * D + 0.3e6, (read, D)             # epoch 2 only
assert float(rows[-1][0]) == 0 and rows[-1][2] == "-", rows[-1]      # a quiet interval
busy = max(rows, key=lambda r: float(r[0]))
assert busy[2] == "100.0" and float(busy[3]) == 0, busy              # all from the RAM cache
assert re.fullmatch(r"\d+\.\d\d/67\.11", busy[4]), busy              # a 64 MiB cache, in MB
assert busy[5] == "100", busy                                        # 100 files, one item each
PY
ok "table: since-mount totals above the header, rows per interval adding up to the epoch, a quiet row 0.0"

# One unit family: decimal MB everywhere, in the table and in --help.
"$STAT" --help > "$T/help.txt"
grep -E 'GiB|MiB|GB|KiB' "$T/rate.txt" "$T/help.txt" && fail "another unit than MB"
for c in "read MB/s" "storage MB/s" "cache MB" "tier MB" "stage MB" "jobwait%" "served MB/s" "prep im/s"; do
	grep -q "^  $c " "$T/help.txt" || fail "--help does not say what column '$c' is"
done
ok "one unit family (MB, MB/s) in the table and --help; --help explains every column"

# A stable header: an order stream appears (with a job's #wait report) and
# ends; the orders set is added once, with its header, and stays.
"$STAT" "$m" --interval 0.25 --count 400 > "$T/tbl.txt" &
spid=$!
rows_after() { # rows_after PATTERN N: N rows printed after the last line matching PATTERN
	awk -v p="$1" '$0 ~ p {n = 0; next} /^ *[0-9]/ {n++} END {exit !(n >= '"$2"')}' "$T/tbl.txt"
}
wait_for rows_after "read MB/s" 2 || fail "no rows: $(cat "$T/tbl.txt")"
python3 -c 'import os, sys
fd = os.open(sys.argv[1] + "/.epochfs/order/j", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
os.write(fd, b"#wait 1.0 4.0\n")
os.close(fd)' "$m" || fail "writing a #wait report"
wait_for rows_after "jobwait%" 3 || fail "no orders set: $(cat "$T/tbl.txt")"
[ "$(stat_of "$m" order_streams)" = 1 ] || fail "no order stream"
rm "$m/.epochfs/order/j"
streams_gone() { [ "$(stat_of "$m" order_streams)" = 0 ]; }
wait_for streams_gone || fail "the order stream did not end"
wait_for rows_after "jobwait%" 8 || fail "rows stopped"
kill "$spid"; wait "$spid" 2>/dev/null
python3 - "$T/tbl.txt" <<'PY' || fail "header: $(cat "$T/tbl.txt")"
import sys
lines = open(sys.argv[1]).read().splitlines()
heads = [i for i, l in enumerate(lines) if "read MB/s" in l]
assert len(heads) == 2, heads                                      # the first, and once with orders
assert "jobwait%" not in lines[heads[0]] and lines[heads[1]].split()[-1] == "jobwait%", lines
base = lines[heads[1]].split("corrupt")[0]
assert lines[heads[0]].startswith(base.rstrip()), lines             # the base columns kept their place
before = [l.split() for l in lines[heads[0] + 1:heads[1]]]
after = [l.split() for l in lines[heads[1] + 1:]]
assert all(len(r) == 8 for r in before) and all(len(r) == 14 for r in after), lines
waits = [r[-1] for r in after]
assert "25.0" in waits and waits[-1] == "-", waits                 # the report's interval; none later
assert all(w in ("25.0", "-") for w in waits), waits
PY
"$STAT" "$m" --count 1 --interval 0.1 --columns none | grep "read MB/s" | grep -q "jobwait" && fail "--columns none"
"$STAT" "$m" --count 1 --interval 0.1 | grep "read MB/s" | grep -q "jobwait%$" || fail "a set used since the mount is not shown"
ok "header: the orders set added once when a stream appeared, kept after it ended; jobwait% 25.0 in the report's interval, - after"

# ---- --mounts, --states, --free-states --------------------------------------
mkdir -p "$M2"
"$EPOCHFS" -f --cache-size 64M --state-dir "$SR/dead" "$T/src" "$M2" 2>"$T/daemon2.err" &
M2_PID=$!
wait_for mountpoint -q "$M2" || fail "second mount"
"$BENCH" "$M2" --epochs 1 > /dev/null || fail "epoch on the second mount"
kill -9 "$M2_PID"; wait "$M2_PID" 2>/dev/null; M2_PID=
out=$("$STAT" --mounts); rc=$?
[ $rc = 1 ] || fail "--mounts: exit $rc with a dead mount"
echo "$out" | grep -q "^$m  *$T/src  *pid $EP_PID  .*/67\.11 " || fail "--mounts, the live mount: $out"
echo "$out" | grep -q "^$M2  *$T/src  *gone " &&
	echo "$out" | grep -q "^$M2: its daemon is gone (fusermount3 -u" || fail "--mounts, the dead mount: $out"
"$STAT" --mounts --json | python3 -c '
import json, sys
rows = {r["mountpoint"]: r for r in map(json.loads, sys.stdin)}
live, dead = rows[sys.argv[1]], rows[sys.argv[2]]
assert live["answers"] and live["daemon_pid"] == int(sys.argv[3]) and live["hit_ratio"] > 0.5, live
assert live["cache_capacity_bytes"] == 64 << 20 and live["source"] == sys.argv[4], live
assert not dead["answers"] and "gone" in dead["error"], dead' "$m" "$M2" "$EP_PID" "$T/src" ||
	fail "--mounts --json: $("$STAT" --mounts --json)"
ok "--mounts: the live mount with its pid, fill and hit ratio; the killed one said gone (exit 1)"

out=$("$STAT" --states "$SR") || fail "--states: $out"
echo "$out" | grep -q "^$SR/dead  *none  *[0-9.]*  *no  *$M2  *$T/src$" &&
	echo "$out" | grep -q "^$SR/live  *pid $EP_PID  *[0-9.]*  *no  *$m  *$T/src$" &&
	echo "$out" | grep -q "^2 states, .* MB; 1 held by a live daemon" || fail "--states: $out"
"$STAT" --states "$SR" --json > "$T/states.json" || fail "--states --json"
python3 - "$T/states.json" "$EP_PID" "$D" <<'PY' || fail "--states --json: $(cat "$T/states.json")"
import json, sys
rows = {r["state"].rsplit("/", 1)[1]: r for r in map(json.loads, open(sys.argv[1]))}
d, l = rows["dead"], rows["live"]
assert not d["daemon_alive"] and d["bytes"] >= int(sys.argv[3]) and d["arena_bytes"] <= d["bytes"], d
assert d["mountpoint"].endswith("/m2") and not d["kept"] and not d["skipped"], d
assert l["daemon_alive"] and l["pid"] == int(sys.argv[2]) and not l["freed"], l
PY
dead_bytes=$(python3 -c 'import json, sys
print([r for r in map(json.loads, open(sys.argv[1])) if r["state"].endswith("/dead")][0]["bytes"])' "$T/states.json")
ok "--states: the killed daemon's state dead with its memory ($dead_bytes bytes), the live one held by pid $EP_PID"

before=$(df --output=used -B1 "$T/shm" | tail -1)
out=$("$STAT" --free-states "$SR") || fail "--free-states: $out"
after=$(df --output=used -B1 "$T/shm" | tail -1)
echo "$out" | grep -q "^freed $SR/dead: [0-9.]* MB given back (mount point $M2, SOURCE $T/src)" &&
	echo "$out" | grep -q "^left  $SR/live: its daemon (pid $EP_PID) is alive" &&
	echo "$out" | grep -q "^freed 1 state, [0-9.]* MB; 1 left to its live daemon" || fail "--free-states: $out"
[ ! -e "$SR/dead" ] || fail "the freed state is still there: $(ls -la "$SR/dead")"
[ $((before - after)) -ge $((dead_bytes * 99 / 100)) ] ||
	fail "the tmpfs went from $before to $after bytes used, the state held $dead_bytes"
[ -f "$SR/live/arena" ] || fail "the live daemon's state was touched"
cmp -s "$f" "$T/src/${f#$m/}" && [ "$(stat_of "$m" cache_items)" = 100 ] || fail "the live mount after --free-states"
fusermount3 -uz "$M2"
ok "--free-states: the dead state freed ($(((before - after) >> 20)) MiB back to the tmpfs), the live one untouched"

err=$("$STAT" "$T/src" 2>&1) && fail "a plain directory was accepted"
echo "$err" | grep -q "not inside an epochfs mount" || fail "message: $err"
"$STAT" "$m" --interval 0 > /dev/null 2>&1; [ $? = 2 ] || fail "--interval 0 not a usage error"
"$STAT" "$m" --columns bogus > /dev/null 2>&1; [ $? = 2 ] || fail "--columns bogus not a usage error"
"$STAT" --mounts --states > /dev/null 2>&1; [ $? = 2 ] || fail "two modes not a usage error"
"$STAT" --mounts --count 2 > /dev/null 2>&1; [ $? = 2 ] || fail "--count with --mounts not a usage error"
"$STAT" 2>&1 | grep -q "exactly one MOUNTPOINT" || fail "no-argument message"
"$STAT" --help | grep -q "^usage: epochfs-stat" || fail "--help"
ok "clear errors for a non-mount, a bad interval or column set, two modes, a missing argument"
umount_ep
[ ! -e "$SR/live" ] || fail "a clean umount left its state"

# A daemon that forks into the background names itself in its state's lock,
# not the parent that opened the state and exited.
M3=$T/m3
mkdir -p "$M3"
"$EPOCHFS" --cache-size 16M --state-dir "$SR/bg" "$T/src" "$M3" 2>"$T/bg.err" || fail "background mount: $(cat "$T/bg.err")"
bgpid=$(stat_of "$M3" daemon_pid)
lockpid=$(tr -d '\n' < "$SR/bg/lock")
out=$("$STAT" --states "$SR")
fusermount3 -u "$M3"
for _ in $(seq 250); do kill -0 "$bgpid" 2>/dev/null || break; sleep 0.02; done
[ "$lockpid" = "$bgpid" ] || fail "the lock names pid $lockpid, the daemon is $bgpid"
echo "$out" | grep -q "^$SR/bg  *pid $bgpid " || fail "--states for a background daemon: $out"
ok "a daemon in the background: its lock and --states name it (pid $bgpid)"

# ---- hostile, in a private mount namespace ---------------------------------
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && command -v useradd >/dev/null; then
	EPOCHFS_STAT_NS=1 unshare -m --propagation private bash "$0"
	rc=$?
	if [ $rc = 77 ]; then
		echo "hostile part skipped"
	elif [ $rc != 0 ]; then
		fail "the hostile part failed"
	fi
else
	echo "hostile part skipped: needs root, unshare and useradd"
fi
