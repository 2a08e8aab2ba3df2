# The systemd unit, installed by make install: systemd-analyze verifies it,
# then it runs as systemd would run it (systemd is not PID 1 here; see
# unit_run.py): its EnvironmentFile and command line mount SOURCE, READY=1
# comes once the mount serves, a kill -9 is restarted over the dead mount
# and adopts the cache, SIGTERM is a clean stop (STOPPING=1, exit 0,
# unmounted, no restart).
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || skip "needs root (a system unit's paths)"
command -v systemd-escape >/dev/null || skip "needs systemd-escape (package systemd)"
R=$T/root
MK=(make -s -C "$ROOT")
case $BUILD in build-san*) MK+=(SANITIZE=address,undefined) ;; esac
STATE=/dev/shm/epochfs-t-systemd-$$
trap 'mountpoint -q "$T/m" && umount -l "$T/m"; rm -rf "$STATE"; cleanup' EXIT
"${MK[@]}" install DESTDIR="$R" PREFIX=/usr/local SYSCONFDIR=/etc >"$T/install.out" 2>&1 ||
	fail "make install: $(tail -5 "$T/install.out")"
UNIT=$R/usr/local/lib/systemd/system/epochfs@.service
[ -f "$UNIT" ] || fail "the unit was not installed"
grep -q "^ExecStart=/usr/local/bin/epochfs --foreground --persist always \$OPTIONS \${SOURCE} %f$" "$UNIT" || fail "ExecStart: $(grep ExecStart= "$UNIT")"
grep -q "^EnvironmentFile=/etc/epochfs/%i.conf$" "$UNIT" || fail "EnvironmentFile: $(grep EnvironmentFile= "$UNIT")"

"$GEN" "$T/src" --files 30 --classes 2 >/dev/null || fail "epochfs-gen"
inst=$(systemd-escape --path "$T/m")
mkdir -p "$R/etc/epochfs"
printf 'SOURCE=%s\nOPTIONS=--cache-size 16M --state-dir %s\n' "$T/src" "$STATE" > "$R/etc/epochfs/$inst.conf"
if command -v systemd-analyze >/dev/null; then
	mkdir -p "$T/units"
	# (its executables checked where they are staged)
	sed "s|=/usr/local/bin/|=$R/usr/local/bin/|" "$UNIT" > "$T/units/epochfs@$inst.service"
	out=$(systemd-analyze verify --man=no "$T/units/epochfs@$inst.service" 2>&1) ||
		fail "systemd-analyze verify: $out"
	[ -z "$out" ] || fail "systemd-analyze verify warns: $out"
	ok "systemd-analyze verify: no complaint"
fi

f=$(cd "$T/src" && find . -name '*.jpg' | head -1)
python3 "$ROOT/tests/integration/unit_run.py" "$R" "$UNIT" "$inst" "${f#./}" > "$T/run.out" 2> "$T/run.err" ||
	fail "$(grep FAIL "$T/run.out") $(tail -5 "$T/run.err")"
sed 's/^ok: //' "$T/run.out" | while read -r l; do ok "$l"; done
grep -q "a dead epochfs mount was there (its daemon died); unmounted it" "$T/run.err" ||
	fail "the restart did not say it cleared the dead mount: $(cat "$T/run.err")"
grep -q "adopted [1-9]" "$T/run.out" || fail "the restarted daemon adopted nothing: $(cat "$T/run.out")"
bad=$(grep -E "error|warning" "$T/run.err" | grep -v "a dead epochfs mount was there" || true)
[ -z "$bad" ] || fail "daemon messages: $bad"
