#!/bin/sh
# mkman.sh PROGRAM SECTION SUMMARY > PAGE: a man page made from PROGRAM's own
# --help, so the page says exactly what the program does (make install runs
# it for every command; `man -l PAGE` renders it). PROGRAM runs from the
# build tree.
set -eu
prog=$1 sec=$2 summary=$3
name=$(basename "$prog")
help=$("$prog" --help 2>&1) || true
[ -n "$help" ] || { echo "mkman.sh: $prog --help printed nothing" >&2; exit 1; }
ver=$("$prog" --version 2>/dev/null | head -1 | awk '{print $NF}') || ver=
esc() { sed -e 's/\\/\\e/g' -e 's/^\./\\\&./' -e "s/^'/\\\\\\&'/"; }
cat <<MAN
.TH $(echo "$name" | tr a-z A-Z) $sec "$(date -u +%Y-%m-%d)" "epochfs ${ver:-}" "epochfs"
.SH NAME
$name \\- $summary
.SH SYNOPSIS
.nf
$(printf '%s\n' "$help" | sed -n '1,/^$/p' | sed 's/^usage: //' | esc)
.fi
.SH DESCRIPTION
.nf
$(printf '%s\n' "$help" | sed '1,/^$/d' | esc)
.fi
.SH SEE ALSO
epochfs(8), epochfs-stat(1), epochfs-warmup(1), epochfs-run(1), epochfs-analyze(1),
epochfs-prep(1); the documentation in the source tree's docs/ directory.
MAN
