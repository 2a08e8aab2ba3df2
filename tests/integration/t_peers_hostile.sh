#!/usr/bin/env bash
# Peers that cannot lie, and a daemon whose memory no peer input controls:
#   - frames altered in transit by someone without the secret (DATA bytes
#     changed and the END checksum fixed to match) fail their seal: the
#     reader gets storage's bytes, the fault is counted and logged;
#   - a node that holds the secret and lies consistently (bytes, checksum
#     and seal all match its lie) is caught by a manifest: 0 wrong bytes
#     reach readers, peer_lies counts it, one log line names it; without a
#     manifest the same liar would be believed (that is the trust model);
#   - a manifest that does not match SOURCE is reported at mount and its
#     unmatched files are read from storage only; one of another chunk size
#     is refused;
#   - a node that holds the secret and serves the files' previous version
#     (same size, mtime copied back) is not believed by a node whose
#     manifest was built before the change: records are bound to each
#     file's version (ctime, inode), so the changed files are unverified and
#     read from storage; lies a node cached before it had the manifest are
#     dropped when it restarts with it;
#   - an authenticated client that pipelines READs and never reads replies
#     holds the daemon's memory at the reply budget (16 MiB a connection);
#     the replies all arrive once it reads; one that floods past 256 is cut;
#   - 600 connections that never speak: at most 64 wait in their handshake,
#     the rest are closed at once, and the log stays short.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/peer_lib.sh"
PC="python3 $(dirname "$0")/peer_client.py"
MANIFEST=$ROOT/$BUILD/epochfs-manifest

"$GEN" "$T/src" --files 120 --classes 3 --seed 21 > /dev/null || fail "gen"
head -c 99328 /dev/urandom > "$T/src/big97k.bin"
head -c 32 /dev/urandom | base64 > "$T/secret"
chmod 600 "$T/secret"
export SRC=$T/src
read -r p0 p1 p1b p2 <<< "$(free_ports 4)"

# ---- altered in transit ------------------------------------------------
# Node 1 is listed at p1, where a proxy forwards to its real port p1b.
PEERS=127.0.0.1:$p0,127.0.0.1:$p1
echo pass > "$T/mode"
$PC proxy "$p1" "$p1b" "$T/mode" & PROXY=$!
start_node 0 -- --peers "$PEERS" --secret-file "$T/secret"
start_node 1 -- --peers "$PEERS" --secret-file "$T/secret" --peer-listen "127.0.0.1:$p1b"
[ "$(read_all 1 1)" = 0 ] || fail "node 1 read wrong bytes"        # node 1 loads its share
drop_caches
[ "$(read_all 0 2)" = 0 ] || fail "node 0 read wrong bytes through an honest proxy"
got=$(stat_of "$T/m0" peer_1_read_bytes)
[ "$got" -gt 0 ] && [ "$(stat_of "$T/m0" peer_errors)" = 0 ] || fail "the proxy path: $got bytes, $(stat_of "$T/m0" peer_errors) errors"
echo forge > "$T/mode"
sleep 0.3
drop_caches
[ "$(read_all 0 3)" = 0 ] || fail "node 0 served bytes forged in transit"
grep -q "fails its seal (forged or altered in transit)" "$T/err0" || fail "no seal failure logged: $(cat "$T/err0")"
[ "$(stat_of "$T/m0" peer_errors)" -gt 0 ] || fail "the forgery was not counted"
ok "frames altered in transit (bytes and checksum) fail their seal; node 0 read storage's bytes ($got bytes came honestly first)"
kill "$PROXY"
stop_node 1
stop_node 0

# ---- a consistent liar, and the manifest --------------------------------
"$MANIFEST" -q -o "$T/src.manifest" "$T/src" 2> "$T/manifest.err" || fail "epochfs-manifest: $(cat "$T/manifest.err")"
PEERS=127.0.0.1:$p0,127.0.0.1:$p1,127.0.0.1:$p2
start_node 1 EPOCHFS_DEBUG_HOOKS=1 EPOCHFS_DEBUG_PEER_LIE=consistent -- --peers "$PEERS" --secret-file "$T/secret"
start_node 0 -- --peers "$PEERS" --secret-file "$T/secret" --manifest "$T/src.manifest"
start_node 2 -- --peers "$PEERS" --secret-file "$T/secret"
grep -q "manifest .*every byte from storage or a peer is checked" "$T/err0" || fail "manifest not reported: $(cat "$T/err0")"
[ "$(read_all 1 11)" = 0 ] || fail "the liar's own reads"
drop_caches
[ "$(read_all 0 12)" = 0 ] || fail "node 0 (with the manifest) served a consistent liar's bytes"
lies=$(stat_of "$T/m0" peer_lies)
[ "$lies" -gt 0 ] && [ "$(stat_of "$T/m0" peer_1_lies)" = "$lies" ] || fail "lies not counted: $lies"
[ "$(grep -c "do not match the manifest (a lying node)" "$T/err0")" = 1 ] || fail "the liar not logged once: $(grep -c manifest "$T/err0")"
# Without a manifest the same lie passes every other check: the hook lies.
bad=$(read_all 2 13)
[ "$bad" -gt 0 ] || fail "the debug liar did not lie (node 2 read every file right without a manifest)"
ok "a consistent liar (secret, checksum and seal): caught by the manifest, $lies lies counted and logged once; 0 wrong bytes (without a manifest: $bad files wrong)"
stop_node 2
stop_node 0
stop_node 1

# A manifest that does not match SOURCE: reported at mount, its files used.
printf 'new\n' > "$T/src/added.txt"
head -c 1000 /dev/urandom >> "$T/src/big97k.bin"
start_node 0 -- --peers "$PEERS" --secret-file "$T/secret" --manifest "$T/src.manifest"
grep -q "does not match SOURCE: 1 files not in it (first: added.txt), 1 at another version (size, inode, mtime or ctime) (first: big97k.bin)" "$T/err0" ||
	fail "mismatch not reported: $(cat "$T/err0")"
[ "$(stat_of "$T/m0" manifest_unverified)" = 2 ] || fail "manifest_unverified $(stat_of "$T/m0" manifest_unverified)"
[ "$(read_all 0 21)" = 0 ] || fail "reads with a partial manifest"
stop_node 0
"$MANIFEST" -q --chunk 128K -o "$T/small.manifest" "$T/src" 2>/dev/null || fail "manifest --chunk 128K"
out=$("$EPOCHFS" -f --manifest "$T/small.manifest" "$T/src" "$T/m0" 2>&1) && fail "a 128K manifest was used on a 256K mount"
echo "$out" | grep -q "built with 131072-byte chunks.*--chunk 262144" || fail "chunk mismatch: $out"
ok "a manifest that does not match SOURCE is reported, its 2 unmatched files storage-only; another chunk size is refused"
rm "$T/src/added.txt"

# ---- a stale node: the files' previous version, same size and mtime -----
"$MANIFEST" -q -o "$T/src.manifest" "$T/src" 2> "$T/manifest.err" || fail "epochfs-manifest: $(cat "$T/manifest.err")"
cp -a "$T/src" "$T/old"
python3 - "$T/src" <<'PY'
import os, sys
for d, _, fs in os.walk(sys.argv[1]):
    for f in fs:
        if not f.endswith(".jpg"):
            continue
        p = os.path.join(d, f)
        st = os.stat(p)
        b = bytearray(open(p, "rb").read())
        b[len(b) // 2] ^= 0xff                      # same size, other bytes
        open(p, "wb").write(bytes(b))
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))   # the old mtime back
PY
NODE_SRC=$T/old start_node 1 -- --peers "$PEERS" --secret-file "$T/secret" --no-persist
start_node 0 -- --peers "$PEERS" --secret-file "$T/secret" --manifest "$T/src.manifest" --no-persist
start_node 2 -- --peers "$PEERS" --secret-file "$T/secret" --cache-remote
changed=$(find "$T/src" -name '*.jpg' | wc -l)
[ "$(stat_of "$T/m0" manifest_unverified)" -ge "$changed" ] || fail "manifest_unverified $(stat_of "$T/m0" manifest_unverified) < $changed changed files"
drop_caches
[ "$(read_all 0 41)" = 0 ] || fail "node 0 (manifest made before the change) served the old version"
# Without a manifest the stale node is believed: that is what the manifest is for.
old=$(read_all 2 42)
[ "$old" -gt 0 ] || fail "the stale node was not asked (node 2 read every file right without a manifest)"
kill_node 2
start_node 2 -- --peers "$PEERS" --secret-file "$T/secret" --cache-remote --manifest "$T/src.manifest"
dropped=$(stat_of "$T/m2" persist_dropped_unverified)
[ "$dropped" -gt 0 ] || fail "the lies node 2 cached were adopted under the manifest (dropped $dropped)"
drop_caches
[ "$(read_all 2 43)" = 0 ] || fail "node 2, restarted with the manifest, served old bytes"
ok "a stale node serving the previous version (same size, mtime copied): 0 old files past the manifest (without it: $old of $changed); a restart with it dropped the $dropped items it had cached and could not verify"
stop_node 2
stop_node 0
stop_node 1
rm -rf "$T/old"

# ---- memory: a client that never reads replies --------------------------
start_node 0 -- --peers "$PEERS" --secret-file "$T/secret" --cache-remote
pid=${NODE_PID[0]}
$PC flood 127.0.0.1 "$p0" "$T/secret" "$PEERS" 1 big97k.bin "$(stat -c %s "$T/src/big97k.bin")" 250 "$pid" > "$T/flood1" ||
	fail "flood: $(cat "$T/flood1")"
growth=$(awk '/rss_growth_mb/ {print $2}' "$T/flood1")
peak=$(stat_of "$T/m0" peer_reply_peak_bytes)
[ "$peak" -le $(((16 << 20) + 200000)) ] && [ "$peak" -ge $((8 << 20)) ] || fail "reply bytes peaked at $peak (budget 16 MiB)"
# RSS as well, but for a sanitizer build, whose freed memory waits in a quarantine.
case $BUILD in *san*) rss_bound=256 ;; *) rss_bound=24 ;; esac
python3 -c "import sys; sys.exit(0 if float('$growth') <= $rss_bound else 1)" || fail "250 unread replies grew the daemon by $growth MB (bound $rss_bound)"
[ "$(awk '/replies_ok/ {print $2}' "$T/flood1")" = 250 ] || fail "not every parked reply arrived: $(cat "$T/flood1")"
$PC flood 127.0.0.1 "$p0" "$T/secret" "$PEERS" 1 big97k.bin "$(stat -c %s "$T/src/big97k.bin")" 3000 "$pid" > "$T/flood2" ||
	fail "flood: $(cat "$T/flood2")"
growth2=$(awk '/rss_growth_mb/ {print $2}' "$T/flood2")
python3 -c "import sys; sys.exit(0 if float('$growth2') <= $rss_bound else 1)" || fail "3000 READs grew the daemon by $growth2 MB"
[ "$(stat_of "$T/m0" peer_reply_peak_bytes)" -le $(((16 << 20) + 200000)) ] || fail "the flood passed the reply budget"
grep -q "too many requests in flight" "$T/err0" || fail "the flood was not cut: $(tail -3 "$T/err0")"
ok "250 unread replies: $peak reply bytes at most (budget 16 MiB), RSS +$growth MB, then all 250 arrived; 3000 pipelined READs: +$growth2 MB, the connection cut"

# ---- 600 silent connections --------------------------------------------
lines0=$(wc -l < "$T/err0")
$PC loris 127.0.0.1 "$p0" 600 > "$T/loris" || fail "loris: $(cat "$T/loris")"
closed=$(awk '/closed_at_once/ {print $2}' "$T/loris")
[ "$closed" -ge 500 ] || fail "only $closed of 600 silent connections closed at once"
sleep 2.5                               # past --peer-timeout: the 64 waiting are dropped
lines=$(($(wc -l < "$T/err0") - lines0))
[ "$lines" -le $((2 * 20 + 4)) ] || fail "600 silent connections logged $lines lines"
[ "$(read_all 0 31)" = 0 ] || fail "node 0 after the silent connections"
kill -0 "$pid" || fail "node 0 died"
ok "600 silent connections: $closed closed at once (64 may wait), $lines log lines"
stop_node 0
! grep -E "AddressSanitizer|runtime error" "$T"/err* || fail "sanitizer reports above"
