# make demo's script (smaller): the table it ends with says what the docs
# say: epoch 0 reads every byte from storage, the next epochs half of them
# with a D/2 cache, and the epoch after the restart the same half (the
# cache was adopted); it leaves no mount and no state behind.
. "$(dirname "$0")/lib.sh"
cd "$ROOT" || fail "cd"
out=$(DEMO_FILES=300 BUILD=$BUILD bash tools/demo.sh 2>&1) || fail "demo failed: $out"
echo "$out" | grep -q "^epoch  files/s" || fail "no table: $out"
python3 - <<PY || fail "table: $out"
import re
rows = {}
for line in """$out""".splitlines():
    m = re.match(r"\s+(\d+)\s+\d+\s+[\d.]+\s+([\d.]+)%\s+([\d.]+)\s+([\d.]+)\s+(\d+)", line)
    if m:
        rows[int(m.group(1))] = [float(x) for x in m.groups()[1:]]
assert sorted(rows) == [0, 1, 2, 3], rows
assert rows[0][0] < 1.0, rows[0]                       # epoch 0: all from storage
for e in (1, 2, 3):
    assert 40 <= rows[e][0] <= 55, (e, rows[e])        # about half hit: D/2
assert rows[3][1] <= rows[1][1] * 1.01, rows           # after the restart: no more from storage
PY
echo "$out" | grep -Eq "The restart adopted [1-9][0-9]* items" || fail "nothing adopted: $out"
[ "$(echo "$out" | wc -l)" -lt 25 ] || fail "the demo prints too much: $(echo "$out" | wc -l) lines"
echo "$out" | grep -q '"cache_hits"' && fail "counters printed without JSON=1"
dir=$(echo "$out" | sed -n 's/^== generating .* into \(.*\)\/src$/\1/p')
[ -n "$dir" ] && [ ! -e "$dir" ] || fail "demo directory left: $dir"
ls /dev/shm | grep -q "epochfs-demo" && fail "a demo state left in /dev/shm: $(ls /dev/shm)"
ok "demo: a short table (epoch 0 all storage, then half; kept across the restart), nothing left"
