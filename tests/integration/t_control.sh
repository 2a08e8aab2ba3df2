# .epochfs/ is hidden from the root listing yet readable, and its counters
# move by the right amounts.
. "$(dirname "$0")/lib.sh"
mkdir -p "$T/src/a"
head -c 300000 /dev/urandom > "$T/src/a/f1"
head -c 123457 /dev/urandom > "$T/src/a/f2"
mount_ep "$T/src" "$T/mnt"
ls -a "$T/mnt" | grep -q epochfs && fail ".epochfs listed in the root"
[ -d "$T/mnt/.epochfs" ] || fail ".epochfs not reachable"
[ "$(ls "$T/mnt/.epochfs" | sort | tr "\n" " ")" = "metrics order stats.json " ] || fail "control listing: $(ls "$T/mnt/.epochfs")"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); [d[k] for k in ("files","bytes_total","reads","read_bytes","storage_read_bytes","uptime_s")]' \
	"$T/mnt/.epochfs/stats.json" || fail "stats.json is not JSON with the keys"
for k in files bytes_total reads_total read_bytes_total storage_read_bytes_total uptime_s; do
	grep -q "^epochfs_$k " "$T/mnt/.epochfs/metrics" || fail "metrics lacks epochfs_$k"
done
[ "$(stat_of "$T/mnt" files)" = 2 ] || fail "files"
[ "$(stat_of "$T/mnt" bytes_total)" = 423457 ] || fail "bytes_total"
r0=$(stat_of "$T/mnt" read_bytes); s0=$(stat_of "$T/mnt" storage_read_bytes)
cat "$T/mnt/a/f1" > /dev/null
r1=$(stat_of "$T/mnt" read_bytes); s1=$(stat_of "$T/mnt" storage_read_bytes)
[ $((r1 - r0)) = 300000 ] || fail "read_bytes moved by $((r1 - r0))"
[ $((s1 - s0)) = 300000 ] || fail "storage_read_bytes moved by $((s1 - s0))"
cat "$T/mnt/a/f1" > /dev/null   # now from the kernel page cache: the daemon sees nothing
[ "$(stat_of "$T/mnt" read_bytes)" = "$r1" ] || fail "a page-cache hit reached the daemon"
ok "counters exact; warm re-read costs the daemon nothing"
u0=$(stat_of "$T/mnt" uptime_s); wait_for python3 -c "import sys; sys.exit(float('$(stat_of "$T/mnt" uptime_s)') <= $u0)" || true
u1=$(stat_of "$T/mnt" uptime_s)
python3 -c "import sys; sys.exit(not float('$u1') > float('$u0'))" || fail "stats.json is stale ($u0 then $u1)"
ok "each read of stats.json is a fresh snapshot"
umount_ep
