# The counters over HTTP (--metrics-addr; docs/design.md, "Counters"):
# a real HTTP client (curl) scrapes /metrics and /stats.json; they hold the
# same samples as MOUNTPOINT/.epochfs/; stats.json names its SOURCE, mount
# point and the options in force; HEAD works, other methods and paths are
# refused with their status; clients that connect and say nothing neither
# block the server nor keep it; the port is closed at umount.
. "$(dirname "$0")/lib.sh"
command -v curl >/dev/null || skip "no curl"
"$GEN" "$T/src" --files 20 --classes 2 --seed 8 >/dev/null || fail "epochfs-gen"
M=$T/mnt
mount_ep "$T/src" "$M" --cache-size 16M --metrics-addr 127.0.0.1:0
port=$(sed -n 's/.*metrics at http:.*(port \([0-9]*\)).*/\1/p' "$T/daemon.err")
[ -n "$port" ] || fail "no line saying where the metrics are: $(cat "$T/daemon.err")"
U=http://127.0.0.1:$port
cat "$M"/class_*/*.jpg >/dev/null

code=$(curl -s -o "$T/metrics" -w '%{http_code} %{content_type}' "$U/metrics") || fail "curl /metrics"
[ "${code%% *}" = 200 ] && case "$code" in *"text/plain; version=0.0.4"*) true ;; *) false ;; esac ||
	fail "/metrics: $code"
grep -q '^epochfs_version_info{version="' "$T/metrics" && grep -q '^epochfs_files 20$' "$T/metrics" ||
	fail "/metrics lacks its samples: $(head -5 "$T/metrics")"
# The same samples as the file inside the mount (values move; names do not).
names() { grep -v '^#' "$1" | sed 's/[{ ].*//' | sort -u; }
cat "$M/.epochfs/metrics" > "$T/file-metrics"
[ "$(names "$T/metrics")" = "$(names "$T/file-metrics")" ] || fail "HTTP and .epochfs/metrics differ: $(diff <(names "$T/metrics") <(names "$T/file-metrics"))"
curl -sf "$U/stats.json" > "$T/stats.json" || fail "curl /stats.json"
python3 - "$T/stats.json" "$T/src" "$M" <<'PY' || fail "stats.json over HTTP: $(head -c 300 "$T/stats.json")"
import json, os, sys
s = json.load(open(sys.argv[1]))
assert s["source"] == os.path.realpath(sys.argv[2]), s["source"]
assert s["mountpoint"] == os.path.realpath(sys.argv[3]), s["mountpoint"]
assert "cache-size=16777216" in s["options"] and "persist=crash" in s["options"], s["options"]
assert s["files"] == 20
PY
ok "curl $U/metrics and /stats.json: the samples of .epochfs/, with source, mountpoint and options"

[ "$(curl -s -o /dev/null -w '%{http_code}' -I "$U/metrics")" = 200 ] || fail "HEAD /metrics"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$U/nope")" = 404 ] || fail "an unknown path was not 404"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST -d x "$U/metrics")" = 405 ] || fail "POST was not 405"
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "X-Big: $(head -c 5000 /dev/zero | tr '\0' a)" "$U/metrics")" = 431 ] ||
	fail "a 5 KB request was not 431"
ok "HEAD 200, an unknown path 404, POST 405, an oversized request 431"

# Twenty clients that connect and never speak: the server keeps 16 at most,
# each for 5 s, and serves again once they are gone.
python3 - 127.0.0.1 "$port" <<'PY' &
import socket, sys, time
socks = [socket.create_connection((sys.argv[1], int(sys.argv[2]))) for _ in range(20)]
time.sleep(7)
PY
idle=$!
sleep 0.5
start=$(date +%s.%N)
curl -s -m 10 -o /dev/null "$U/metrics" || true
wait_for sh -c "curl -sf -m 2 -o /dev/null '$U/metrics'" || fail "the server stopped serving after idle clients"
kill $idle 2>/dev/null; wait $idle 2>/dev/null
kill -0 "$EP_PID" || fail "the daemon died"
ok "20 silent clients: the server serves again within $(python3 -c "import time; print('%.1f' % (time.time() - $start))") s"

umount_ep
curl -s -m 2 -o /dev/null "$U/metrics" && fail "the port still answers after umount"
if "$EPOCHFS" -f --metrics-addr nonsense "$T/src" "$M" 2>"$T/bad.err"; then fail "--metrics-addr nonsense accepted"; fi
grep -q -- "--metrics-addr nonsense: expected HOST:PORT" "$T/bad.err" || fail "bad address: $(cat "$T/bad.err")"
ok "the port closes at umount; a malformed address is refused in one line"
