#!/usr/bin/env bash
# Installs the Debian packages epochfs needs, and only those that are
# missing:
#   install-deps.sh build   what building the daemon and tools needs (the
#                           container image, deploy/Dockerfile, uses this set);
#                           meson, ninja-build and libnuma-dev build libfuse
#                           where the system's is older than 3.17 (Makefile)
#   install-deps.sh test    the above, and what `make test` adds
#   install-deps.sh         the same as test
# Called by make when a check fails; safe to run by hand. Where it cannot
# install (not root, no apt-get) it prints the command to run instead and
# exits non-zero.
set -eu

build="build-essential pkg-config libfuse3-dev fuse3 liburing-dev libxxhash-dev
       libturbojpeg0-dev libjpeg62-turbo-dev libsodium-dev python3 meson ninja-build libnuma-dev"
test="libcriterion-dev fio procps clang libclang-rt-14-dev iproute2 util-linux nftables
      python3-torchvision python3-numpy python3-pil python3-venv python3-yaml groff-base man-db
      librsvg2-bin"
case ${1:-test} in
build) pkgs=$build ;;
test) pkgs="$build $test" ;;
*) echo "usage: install-deps.sh [build|test]" >&2; exit 2 ;;
esac
[ "${EPOCHFS_DEPS_EXTRA:-}" ] && pkgs="$pkgs $EPOCHFS_DEPS_EXTRA"

missing=""
for p in $pkgs; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0

echo "epochfs: installing missing packages:$missing" >&2
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
	echo "epochfs: cannot install as $(id -un); run: sudo apt-get install -y$missing" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Only refresh the package lists when an install fails for lack of them.
apt-get install -y -q --no-install-recommends $missing >/dev/null 2>&1 || {
	apt-get update -q >/dev/null
	apt-get install -y -q --no-install-recommends $missing
}
