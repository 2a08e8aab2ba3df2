# Reads that span several cache items (a request larger than a chunk, or one
# crossing a chunk boundary) are served through the cache piece by piece:
# regression test for such reads going to storage every time, never cached
# (with 128 KiB chunks, cat's 256 KiB requests cached nothing at all).
. "$(dirname "$0")/lib.sh"
mkdir -p "$T/src/d"
head -c $((5 * 1048576 + 12345)) /dev/urandom > "$T/src/d/big.bin"
head -c 300000 /dev/urandom > "$T/src/d/mid.bin"
head -c 1000 /dev/urandom > "$T/src/d/small.bin"
D=$((5 * 1048576 + 12345 + 300000 + 1000))
m=$T/mnt
# The copy path's chunks are the subject: no kernel passthrough (a 5 MiB
# file would be read by the kernel from the cache, never reaching here).
mount_ep "$T/src" "$m" --cache-chunk 128K --cache-size 64M --passthrough off
snap() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join(str(d[k]) for k in sys.argv[2:]))' \
	"$m/.epochfs/stats.json" "$@"; }

cat "$m/d/big.bin" "$m/d/mid.bin" "$m/d/small.bin" > /dev/null    # cat's reads let requests grow
for f in big.bin mid.bin small.bin; do cmp "$T/src/d/$f" "$m/d/$f" || fail "$f differs on first read"; done
read -r items st0 <<< "$(snap cache_items storage_read_bytes)"
# 41 + 3 + 1 items: every byte was admitted, whatever the request sizes.
[ "$items" = 45 ] || fail "cache holds $items items, want 45: $(cat "$m/.epochfs/stats.json")"
[ "$st0" = "$D" ] || fail "first pass read $st0 bytes from storage, want $D"
# The kernel's copies of these files go (theirs only, not the machine's).
python3 -c 'import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "$m"/d/*
for f in big.bin mid.bin small.bin; do cmp "$T/src/d/$f" "$m/d/$f" || fail "$f differs from the cache"; done
read -r st1 hit rb hb mb <<< "$(snap storage_read_bytes cache_hit_bytes read_bytes cache_hit_bytes cache_miss_bytes)"
[ "$st1" = "$st0" ] || fail "second pass read $((st1 - st0)) bytes from storage"
[ "$hit" = "$D" ] || fail "second pass hit $hit bytes, want $D"
[ $((hb + mb)) = "$rb" ] || fail "read_bytes $rb != hit $hb + miss $mb"
ok "large requests over 128K chunks: all admitted, then all hits, bytes identical"

# O_DIRECT reads at offsets and lengths that cross item boundaries, compared
# with SOURCE byte for byte (every one reaches the daemon).
python3 - "$T/src/d/big.bin" "$m/d/big.bin" <<'PY' || fail "O_DIRECT reads differ"
import mmap, os, random, sys
src = open(sys.argv[1], "rb").read()
fd = os.open(sys.argv[2], os.O_RDONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 4 << 20)
rng = random.Random(5)
for _ in range(200):
    off = rng.randrange(0, len(src) // 4096) * 4096
    n = rng.choice([4096, 126976, 131072, 135168, 307200, 1 << 20, 3 << 20])
    got = os.preadv(fd, [memoryview(buf)[:n]], off)
    want = src[off:off + n]
    assert got == len(want) and buf[:got] == want, (off, n, got)
PY
[ "$(snap storage_read_bytes)" = "$st0" ] || fail "O_DIRECT reads of cached data went to storage: $(($(snap storage_read_bytes) - st0)) bytes"
ok "O_DIRECT reads across item boundaries identical, all from the cache"
check_stderr
umount_ep

# The spread (store/spread.h, docs/design.md "Spreading the cache through
# large files"): with --spread on, a cache of about half the dataset holds
# about half of every large file, spread through it, rather than the files
# read first whole, as the default (off) does. Four files of 16
# chunks; each read after the first pass: hits per file.
mkdir -p "$T/src2/s"
for i in 1 2 3 4; do head -c $((16 * 131072)) /dev/urandom > "$T/src2/s/shard$i.tar"; done
spread_case() { # spread_case MODE: sets HITS (the chunks each file hit on its second read), MISSES, TEXT
	local m2=$T/m2 i h0 h1 m0
	mount_ep "$T/src2" "$m2" --cache-chunk 128K --cache-size $((4 * 1048576 + 262144)) \
		--passthrough off --spread "$1"
	m=$m2
	for i in 1 2 3 4; do cat "$m2/s/shard$i.tar" > /dev/null; done
	python3 -c 'import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "$m2"/s/*
	HITS= m0=$(snap cache_misses)
	for i in 1 2 3 4; do
		h0=$(snap cache_hit_bytes)
		cmp "$T/src2/s/shard$i.tar" "$m2/s/shard$i.tar" || fail "spread $1: shard$i differs"
		h1=$(snap cache_hit_bytes)
		HITS="$HITS $(((h1 - h0) / 131072))"
	done
	MISSES=$(($(snap cache_misses) - m0))
	TEXT=$(snap cache_spread)
	umount_ep
	m=$T/mnt
}
spread_case on
[[ $TEXT == "on: 5"*"% of each of the 4 files"* ]] || fail "cache_spread: $TEXT"
for h in $HITS; do
	[ "$h" -ge 6 ] && [ "$h" -le 11 ] || fail "spread: chunks hit per file:$HITS (want about 8 of 16 each)"
done
# The chunks the spread leaves out are misses like any other (about 30).
[ "$MISSES" -ge 20 ] || fail "spread: the second pass counted $MISSES misses, want the ~30 chunks not cached"
ok "--spread on: a cache of half the dataset holds about half of each large file (chunks hit:$HITS; $MISSES misses)"
spread_case off
[[ $TEXT == "off: first come"* ]] || fail "cache_spread: $TEXT"
set -- $HITS
[ "$1" = 16 ] && [ "$4" = 0 ] || fail "--spread off: chunks hit per file:$HITS (want the first whole, the last none)"
ok "--spread off: the files read first whole, the last none (chunks hit:$HITS)"
