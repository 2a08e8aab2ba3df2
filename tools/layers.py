#!/usr/bin/env python3
"""layers.py - checks the physical layers of the C tree (docs/design.md,
"Modules"), as `make test` runs it:

  fs/util/     includes nothing of fs/ or prep/ but util/ itself
  fs/store/    util/ and store/ only: never core/ or cluster/
  fs/cluster/  util/, store/, cluster/ and core/core.h + core/stats.h (the
               core's plugs), never the core's inside
  fs/core/     util/, store/, core/ and prep/'s headers; never cluster/
  prep/        prep/, util/ and store/path.h (confined opens): no fs/core
  tools/       no ops.h (tools link the core, never the adapter)
  FUSE         only fs/ops.c, fs/ops_session.c and their headers include it
  cycles       no include cycle among the headers of fs/ and prep/
  size         no C file of fs/, prep/ or tools/ over MAX_LINES lines (a file
               that long holds more than one module: split it)

Every include is by path from -Ifs -Iprep ("store/cache.h"), so where a
header lives is what the rule reads. Exit 0 and one line when the tree
obeys; else one line per breach and exit 1.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INC = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)
FUSE_OK = {"fs/ops.c", "fs/ops_session.c", "fs/ops.h", "fs/ops_int.h"}
MAX_LINES = 800


def sources():
    for top in ("fs", "prep", "tools"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith((".c", ".h", ".cu")):
                    path = os.path.join(d, f)
                    yield os.path.relpath(path, ROOT), open(path, encoding="utf-8").read()


def allowed(rel, inc):
    """None if REL may include INC (a quoted include), else why not."""
    top = inc.split("/")[0] if "/" in inc else ""
    if rel.startswith("fs/util/"):
        return None if top == "util" else "util/ includes nothing above it"
    if rel.startswith("fs/store/"):
        return None if top in ("util", "store") else "store/ never includes %s/" % (top or "fs/")
    if rel.startswith("fs/cluster/"):
        if top in ("util", "store", "cluster") or inc in ("core/core.h", "core/stats.h"):
            return None
        return "cluster/ uses the core's plugs (core/core.h) only"
    if rel.startswith("fs/core/"):
        if top == "cluster":
            return "core/ never includes cluster/ (peers plug in through core.h)"
        if top == "" and inc in ("ops.h", "ops_int.h", "options.h"):
            return "core/ never includes the adapter or the daemon's options"
        return None
    if rel.startswith("prep/"):
        if top in ("core", "cluster") or inc in ("ops.h", "ops_int.h", "options.h"):
            return "prep/ knows no mount"
        if top == "store" and inc != "store/path.h":
            return "prep/ uses store/path.h only"
        return None
    if rel.startswith("tools/") and inc in ("ops.h", "ops_int.h"):
        return "tools link the core, never the adapter"
    return None


def resolve(inc):
    for base in ("fs", "prep", "tools"):
        p = os.path.join(base, inc)
        if os.path.exists(os.path.join(ROOT, p)):
            return p
    return None


def main():
    bad = []
    graph = {}
    for rel, text in sources():
        if rel.endswith(".c") and text.count("\n") > MAX_LINES:
            bad.append("%s: %d lines, over %d: split it into modules (docs/design.md, Modules)"
                       % (rel, text.count("\n"), MAX_LINES))
        for m in INC.finditer(text):
            inc = m.group(1)
            quoted = text[m.start():m.end()].rstrip().endswith('"')
            if "fuse" in inc and not quoted and rel not in FUSE_OK and inc.startswith("fuse"):
                bad.append("%s: includes <%s>: only fs/ops.c and fs/ops_session.c speak FUSE" % (rel, inc))
            if not quoted:
                continue
            if resolve(inc) is None:
                bad.append("%s: includes \"%s\", which is not a path from -Ifs or -Iprep (include it by "
                           "its path: \"store/cache.h\")" % (rel, inc))
                continue
            why = allowed(rel, inc)
            if why:
                bad.append("%s: includes \"%s\": %s" % (rel, inc, why))
            if rel.endswith(".h"):
                target = resolve(inc)
                if target:
                    graph.setdefault(rel, set()).add(target)
    # Cycles among headers: a depth-first walk, colouring as it goes.
    state = {}

    def visit(node, stack):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cyc = stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt]
                bad.append("include cycle: %s" % " -> ".join(cyc))
            elif not state.get(nxt):
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if not state.get(node):
            visit(node, [node])
    if bad:
        for line in bad:
            print("layers: " + line)
        return 1
    print("layers: %d headers and their includes obey the layers (docs/design.md, Modules)" % len(graph))
    return 0


if __name__ == "__main__":
    sys.exit(main())
