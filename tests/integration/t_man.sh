# The man pages (docs/man/, as make builds them into $BUILD/man/): each
# renders with groff and man(1) without a warning, has its sections and a
# NAME line apropos can index, and says what its program does: its OPTIONS
# and the program's --help name the same options (man_check.py). The sample
# /etc/epochfs/NAME.conf holds what the systemd unit reads, with options the
# daemon's parser takes.
. "$(dirname "$0")/lib.sh"
command -v groff >/dev/null && command -v man >/dev/null || skip "needs groff and man (groff-base, man-db)"
M=$ROOT/$BUILD/man
make -s -C "$ROOT" BUILD="$BUILD" man >"$T/make.out" 2>&1 || fail "make man: $(tail -3 "$T/make.out")"
pages=("$M"/man1/*.1 "$M"/man8/*.8)
want=$(ls "$ROOT"/docs/man | sort)
have=$(for p in "${pages[@]}"; do basename "$p"; done | sort)
[ "$want" = "$have" ] || fail "built pages differ from docs/man: $have"
[ "${#pages[@]}" -ge 10 ] || fail "only ${#pages[@]} pages"

for p in "${pages[@]}"; do
	n=$(basename "$p")
	out=$(groff -man -ww -z "$p" 2>&1)
	[ -z "$out" ] || fail "groff -ww $n: $out"
	out=$(LC_ALL=C.UTF-8 MANWIDTH=80 man -l "$p" 2>&1 >"$T/$n.txt")
	[ -z "$out" ] || fail "man -l $n: $out"
	for s in NAME SYNOPSIS DESCRIPTION OPTIONS "EXIT STATUS" FILES EXAMPLES "SEE ALSO"; do
		grep -q "^$s\$" "$T/$n.txt" || fail "man -l $n: no $s section"
	done
	w=$(lexgrog "$p" 2>&1) || fail "lexgrog $n (what apropos reads): $w"
	case $w in *": \"${n%.*} - "*) ;; *) fail "lexgrog $n: $w" ;; esac
done
ok "${#pages[@]} pages render (groff -ww, man -l) with no warning and have every section"

/usr/bin/python3 "$ROOT/tests/integration/man_check.py" "$ROOT" "$BUILD" "${pages[@]}" > "$T/check.out" 2>&1 ||
	fail "$(grep FAIL "$T/check.out" || tail -5 "$T/check.out")"
sed 's/^ok: //' "$T/check.out" | while read -r l; do ok "$l"; done

# The sample conf: SOURCE and OPTIONS, what epochfs@.service reads, and
# options the daemon takes (--version stops it once they are parsed).
C=$ROOT/tools/systemd/mnt-imagenet.conf
keys=$(grep -v '^#' "$C" | grep -v '^$' | cut -d= -f1 | sort | tr '\n' ' ')
[ "$keys" = "OPTIONS SOURCE " ] || fail "the sample conf sets: $keys"
grep -q '\${SOURCE}' "$ROOT/tools/systemd/epochfs@.service" && grep -q '\$OPTIONS' "$ROOT/tools/systemd/epochfs@.service" ||
	fail "the unit no longer reads SOURCE and OPTIONS"
grep '^#*OPTIONS=' "$C" | sed 's/^#*OPTIONS=//' | while read -r line; do
	# shellcheck disable=SC2086 # split at spaces, as systemd splits $OPTIONS
	out=$("$EPOCHFS" $line --version 2>&1) || fail "the sample's OPTIONS=$line: $out"
done || exit 1
grep -q "examples/mnt-imagenet.conf" "$T/epochfs.8.txt" || fail "epochfs(8) does not name the sample"
ok "the sample conf sets SOURCE and OPTIONS, and the daemon takes each of its OPTIONS lines"
