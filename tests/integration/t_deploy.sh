# deploy/: the Kubernetes manifests (DaemonSet, sample training Job) hold
# what a pod running epochfs needs, and the Dockerfile builds from Debian
# packages only with every library the binaries link; schema-level, as
# kubectl and a Docker daemon are not here (deploy_check.py says what).
. "$(dirname "$0")/lib.sh"
plain_pass_only "schema checks of deploy/, no daemon"
/usr/bin/python3 -c 'import yaml' 2>/dev/null || skip "needs python3-yaml"
/usr/bin/python3 "$ROOT/tests/integration/deploy_check.py" "$ROOT" "$BUILD" > "$T/out" 2>&1 ||
	fail "$(grep -h FAIL "$T/out" || tail -5 "$T/out")"
sed 's/^ok: //' "$T/out" | while read -r l; do ok "$l"; done
