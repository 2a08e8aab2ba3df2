#!/usr/bin/env bash
# build.sh - builds the libfuse the daemon links when the system's is
# older than 3.17 (docs/install.md, "libfuse"): Debian's fuse3 source
# package, fetched once, checked, patched, built with meson into a static
# library.
#
#   tools/libfuse/build.sh VERSION DSC_SHA256 DEPSDIR
#
# VERSION is the Debian version (3.18.3-1) and DSC_SHA256 the sha256 of its
# .dsc, both pinned in the Makefile. Files:
#   DEPSDIR/download/       the .dsc and the tarballs it names: fetched when
#                           missing, kept by make clean and make distclean; put
#                           them there by hand to build offline
#   DEPSDIR/libfuse-VERSION/src, build   the unpacked source, meson's tree
#   DEPSDIR/libfuse-VERSION/root/usr     the install: include/fuse3,
#                           lib/libfuse3.a, lib/pkgconfig/fuse3.pc
#   DEPSDIR/libfuse-VERSION/build.log    what meson and ninja said
#
# DESIGN
# - The .dsc is checked against the pinned sha256, and every file it names
#   against the .dsc's own Checksums-Sha256 (dpkg-source checks them again),
#   so the pin covers every byte built; the archive's signatures add
#   nothing to that, and the maintainers' keyring is not needed.
# - Where from: the Debian archive this machine's apt already uses (the
#   site of its entries for this release), over https first, or
#   DEBIAN_MIRROR=URL. apt's own downloader fetches (its proxy settings
#   apply); curl where there is no apt. Nothing of apt's configuration
#   changes.
# - prefix=/usr, installed under root/ (DESTDIR): libfuse runs fusermount3
#   from its bindir when an unprivileged mount needs it, so it finds the
#   system's /usr/bin/fusermount3. Only the library is built: no
#   fusermount3, no examples, no tests, no udev rules or init script.
# - Debian's patches, then ours (tools/libfuse/*.patch, each saying why):
#   they keep the system's older fusermount3 working with this library.
# - Static: the daemon carries the library, so an installed epochfs needs
#   nothing from the build tree and cannot pick up the system's older
#   libfuse3.so.3.
# - The io_uring transport is built in (liburing, libnuma): it is off until
#   a mount asks for it (-o io_uring), so behaviour does not change.
set -euo pipefail

[ $# = 3 ] || { echo "usage: build.sh VERSION DSC_SHA256 DEPSDIR" >&2; exit 2; }
ver=$1 dsc_sha=$2 deps=$3
here=$(cd "$(dirname "$0")" && pwd)
dl=$deps/download
dir=$deps/libfuse-$ver
dsc=fuse3_$ver.dsc
log=$dir/build.log
mkdir -p "$dl" "$dir"
deps=$(cd "$deps" && pwd) dl=$(cd "$dl" && pwd) dir=$(cd "$dir" && pwd) log=$dir/build.log

# Two makes at once (build/ and build-san/) share this tree: one builds.
exec 9>"$dir/.lock"
flock 9
[ -f "$dir/.built" ] && exit 0

say() { echo "epochfs: libfuse $ver: $*" >&2; }
die() { say "$*"; exit 1; }

sha_ok() { # sha_ok FILE SHA256
	[ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

# The Debian archive's base URLs to try, best first.
mirrors() {
	if [ -n "${DEBIAN_MIRROR:-}" ]; then
		echo "${DEBIAN_MIRROR%/}"
		return
	fi
	command -v apt-get >/dev/null || return 0
	local codename sites
	codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
	sites=$(apt-get indextargets --no-release-info --format '$(SITE) $(RELEASE)' 2>/dev/null |
		awk -v c="$codename" '$2 == c { print $1 }' | sort -u)
	local s
	for s in $sites; do
		case $s in http://*) echo "https://${s#http://}" ;; esac
		echo "$s"
	done
}

# fetch NAME SHA256: DEPSDIR/download/NAME with that sha256, fetched if
# missing or different.
fetch() {
	local name=$1 sha=$2 path=$dl/$1 pool=pool/main/f/fuse3 m got=""
	sha_ok "$path" "$sha" && return 0
	rm -f "$path" "$path.part"
	for m in $(mirrors); do
		if [ -x /usr/lib/apt/apt-helper ]; then
			/usr/lib/apt/apt-helper -o APT::Sandbox::User=root download-file \
				"$m/$pool/$name" "$path.part" "SHA256:$sha" >>"$log" 2>&1 || continue
		elif command -v curl >/dev/null; then
			curl -fsSL --retry 2 -o "$path.part" "$m/$pool/$name" >>"$log" 2>&1 || continue
		else
			break
		fi
		sha_ok "$path.part" "$sha" && { mv "$path.part" "$path"; got=1; break; }
		echo "$m/$pool/$name: sha256 differs from the pin" >>"$log"
	done
	rm -f "$path.part"
	[ -n "$got" ] && return 0
	say "cannot fetch $name (sha256 $sha)."
	say "Put Debian's fuse3 $ver source package (the .dsc and the files it names) in $dl,"
	say "or set DEBIAN_MIRROR=URL of a Debian archive, or install libfuse >= 3.17 (docs/install.md)."
	[ -s "$log" ] && tail -5 "$log" | sed 's/^/  /' >&2
	exit 1
}

: >"$log"
fetch "$dsc" "$dsc_sha"
# The files the .dsc names, with its sha256 of each.
files=$(awk '/^Checksums-Sha256:/ { on = 1; next } on && /^ / { print $1, $3; next } { on = 0 }' "$dl/$dsc")
[ -n "$files" ] || die "$dl/$dsc names no files"
while read -r sha name; do
	fetch "$name" "$sha"
done <<<"$files"

# Unpack with Debian's patches applied (dpkg-source checks the files against
# the .dsc once more); without dpkg-source, by hand the same way. Then ours.
rm -rf "$dir/src" "$dir/build" "$dir/root"
if command -v dpkg-source >/dev/null; then
	dpkg-source --no-copy -x "$dl/$dsc" "$dir/src" >>"$log" 2>&1 || { tail -20 "$log" >&2; die "dpkg-source -x failed"; }
else
	orig=$(awk '$2 ~ /\.orig\.tar\.[a-z0-9]+$/ { print $2 }' <<<"$files")
	debian=$(awk '$2 ~ /\.debian\.tar\.[a-z0-9]+$/ { print $2 }' <<<"$files")
	[ -n "$orig" ] && [ -n "$debian" ] || die "$dsc: not a 3.0 (quilt) source package"
	mkdir -p "$dir/src"
	tar -xf "$dl/$orig" -C "$dir/src" --strip-components=1
	tar -xf "$dl/$debian" -C "$dir/src"
	if [ -f "$dir/src/debian/patches/series" ]; then
		grep -v '^\s*#' "$dir/src/debian/patches/series" | while read -r p _; do
			[ -n "$p" ] && patch -d "$dir/src" -p1 -s <"$dir/src/debian/patches/$p"
		done
	fi
fi

for p in "$here"/*.patch; do
	[ -e "$p" ] || continue
	echo "applying $(basename "$p")" >>"$log"
	patch -d "$dir/src" -p1 -s --forward <"$p" >>"$log" 2>&1 || die "$(basename "$p") does not apply to $ver"
done

command -v meson >/dev/null && command -v ninja >/dev/null ||
	die "needs meson and ninja (apt-get install meson ninja-build; tools/install-deps.sh build)"
# The library alone, the same whatever flags the make that called us had.
run() {
	if [ "${V:-0}" != 0 ]; then
		echo "$*" >&2
		env -u CFLAGS -u CPPFLAGS -u LDFLAGS -u CXXFLAGS "$@" 2>&1 | tee -a "$log" >&2
	else
		env -u CFLAGS -u CPPFLAGS -u LDFLAGS -u CXXFLAGS "$@" >>"$log" 2>&1
	fi || { [ "${V:-0}" != 0 ] || tail -30 "$log" >&2; die "failed: $* (the whole log: $log)"; }
}
run meson setup "$dir/build" "$dir/src" --prefix=/usr --libdir=lib --wrap-mode=nodownload \
	-Ddefault_library=static -Dutils=false -Dexamples=false -Dtests=false -Duseroot=false \
	-Dinitscriptdir= -Denable-io-uring=true
run ninja -C "$dir/build"
run env DESTDIR="$dir/root" meson install -C "$dir/build" --no-rebuild
[ -f "$dir/root/usr/lib/libfuse3.a" ] && [ -f "$dir/root/usr/lib/pkgconfig/fuse3.pc" ] ||
	die "meson installed no libfuse3.a and fuse3.pc under $dir/root"
touch "$dir/.built"
