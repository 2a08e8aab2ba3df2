#!/usr/bin/env python3
"""man_check.py ROOT BUILD PAGE...: the hand-written man pages (docs/man/)
against the programs they describe, so that neither drifts from the other.

For each page:
  - the sections every page has (NAME, SYNOPSIS, DESCRIPTION, OPTIONS,
    EXIT STATUS, FILES, EXAMPLES, SEE ALSO), a .TH and a NAME line for the
    page's own name and section, no @PLACEHOLDER@ left by the build;
  - its OPTIONS against the program's --help: every option the help lists
    (on an option line or in its usage lines) has an entry of its own under
    OPTIONS, with the same short letter; and every option an entry names is
    one the help mentions (--help and --version, which every program takes,
    excepted). So an option added to a program without its page, or a page
    that documents one the program lacks, fails here;
  - mount.fuse.epochfs(8): against the helper's own argument parsing
    (tools/mount.fuse.epochfs) and the daemon's list of the options mount(8)
    keeps for itself (mount_only() in fs/options.c);
  - SEE ALSO: every page of ours it names exists.

Prints one "ok: ..." line per page, or "FAIL: ..." lines and exits 1.
"""
import os
import re
import subprocess
import sys

REQUIRED = ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "FILES", "EXAMPLES", "SEE ALSO")
ALWAYS = {"--help", "--version"}
LONG = re.compile(r"(?<![\w-])(--[A-Za-z0-9][A-Za-z0-9-]*)")
SHORT = re.compile(r"(?<![\w-])(-[A-Za-z0-9])(?![\w-])")

failures = []


def fail(page, msg):
    failures.append("FAIL: %s: %s" % (page, msg))


def plain(line):
    """A roff line as the text it prints: font escapes, \\- and quotes gone."""
    line = re.sub(r"^\.(B|I|BR|RB|BI|IB|IR|RI|SM|SB)\s+", "", line)
    line = re.sub(r"\\f(\[[^]]*\]|\(..|.)", "", line)
    line = line.replace("\\-", "-").replace("\\&", "").replace("\\e", "\\").replace('"', "")
    return line


def sections(lines):
    """{section name: [lines]} of a page."""
    out, cur = {}, None
    for ln in lines:
        m = re.match(r'^\.SH\s+"?([^"]*)"?\s*$', ln)
        if m:
            cur = m.group(1).strip()
            out[cur] = []
        elif cur:
            out[cur].append(ln)
    return out


def tags(body):
    """The text of every .TP entry's tag in BODY (nested entries too)."""
    return [plain(body[i + 1]) for i, ln in enumerate(body[:-1]) if ln.startswith(".TP")]


def help_options(text):
    """(long options defined, short options defined, every long option
    mentioned) in a --help text. Defined: named in the usage lines (the
    first paragraph) or in the tag of an option line (a line that starts
    with '-' after at most 6 spaces; its tag ends at the first run of two
    spaces)."""
    lines = text.splitlines()
    usage = []
    for ln in lines:
        if not ln.strip():
            break
        usage.append(ln)
    longs = set(LONG.findall(" ".join(usage)))
    shorts = set()
    for ln in lines:
        if re.match(r"^ {0,6}-", ln):
            tag = re.split(r"(?<=\S) {2,}", ln.strip(), maxsplit=1)[0]
            longs |= set(LONG.findall(tag))
            shorts |= set(SHORT.findall(tag))
    return longs, shorts, set(LONG.findall(text))


def check_options(page, opt_body, helptext):
    h_long, h_short, h_mentioned = help_options(helptext)
    m_long, m_short = set(), set()
    for t in tags(opt_body):
        m_long |= set(LONG.findall(t))
        m_short |= set(SHORT.findall(t))
    for o in sorted(h_long - m_long - ALWAYS):
        fail(page, "%s is in --help but has no entry under OPTIONS" % o)
    for o in sorted(m_long - h_mentioned - ALWAYS):
        fail(page, "OPTIONS documents %s, which --help does not know" % o)
    for o in sorted(h_short - m_short):
        fail(page, "the short option %s of --help has no entry under OPTIONS" % o)
    for o in sorted(m_short - h_short - {"-h", "-V"}):
        fail(page, "OPTIONS documents the short option %s, which --help does not list" % o)
    return len(m_long)


def check_mount_helper(page, opt_body, root):
    """The helper's argument cases and the daemon's mount(8)-only words."""
    with open(os.path.join(root, "tools", "mount.fuse.epochfs")) as f:
        helper = f.read()
    flags = set()
    for pat in re.findall(r"^\s*(-[^)\s]*)\)", helper, re.M):
        for alt in pat.split("|"):
            m = re.match(r"^-\[([A-Za-z]+)\]\*?$", alt)
            flags |= {"-" + c for c in m.group(1)} if m else {alt.rstrip("*")}
    text = " ".join(tags(opt_body))
    m_flags = set(LONG.findall(text)) | set(SHORT.findall(text))
    for o in sorted(flags - m_flags):
        fail(page, "the helper takes %s, which OPTIONS does not document" % o)
    for o in sorted(m_flags - flags):
        fail(page, "OPTIONS documents %s, which the helper does not take" % o)
    with open(os.path.join(root, "fs", "options.c")) as f:
        src = f.read()
    m = re.search(r"static int mount_only\(.*?\n\}", src, re.S)
    if not m:
        fail(page, "mount_only() not found in fs/options.c")
        return len(flags)
    words = set(re.findall(r'"([^"]+)"', m.group(0)))
    for w in sorted(words):
        w = w.rstrip("=")
        if not any(re.search(r"(?<![\w-])" + re.escape(w), t) for t in tags(opt_body)):
            fail(page, "mount(8)'s option %s (fs/options.c, mount_only) has no entry under OPTIONS" % w)
    return len(flags)


def main():
    root, build, pages = sys.argv[1], sys.argv[2], sys.argv[3:]
    names = {os.path.basename(p) for p in pages}
    for path in pages:
        page = os.path.basename(path)
        name, sec = page.rsplit(".", 1)
        with open(path) as f:
            lines = f.read().splitlines()
        left = [ln for ln in lines if not ln.startswith('.\\"') and re.search(r"@[A-Z]+@", ln)]
        if left:
            fail(page, "placeholders left: %s" % left[0])
        th = [ln for ln in lines if ln.startswith(".TH ")]
        if not th or plain(th[0]).split()[1:3] != [name.upper(), sec]:
            fail(page, ".TH should name %s %s: %s" % (name.upper(), sec, th[:1]))
        secs = sections(lines)
        for s in REQUIRED:
            if s not in secs:
                fail(page, "no %s section" % s)
        if "NAME" in secs:
            nm = plain(" ".join(secs["NAME"]))
            if not nm.startswith(name + " - "):
                fail(page, "NAME should read '%s - ...': %s" % (name, nm))
        if "SEE ALSO" in secs:
            for ref, rsec in re.findall(r"^\.BR\s+(\S+)\s+\((\d)\)", "\n".join(secs["SEE ALSO"]), re.M):
                ref = plain(ref)
                if ref.startswith(("epochfs", "mount.fuse.epochfs")) and "%s.%s" % (ref, rsec) not in names:
                    fail(page, "SEE ALSO names %s(%s), which is not one of the pages" % (ref, rsec))
        body = secs.get("OPTIONS", [])
        if page == "mount.fuse.epochfs.8":
            n = check_mount_helper(page, body, root)
            what = "the helper's %d arguments and mount(8)'s own options" % n
        else:
            prog = os.path.join(root, build, name)
            r = subprocess.run([prog, "--help"], capture_output=True, text=True, timeout=60)
            if r.returncode != 0 or not r.stdout.strip():
                fail(page, "%s --help: exit %d, %s" % (prog, r.returncode, r.stderr.strip()[:200]))
                continue
            n = check_options(page, body, r.stdout)
            what = "%d long options, the same as %s --help" % (n, name)
        if not any(f.startswith("FAIL: %s:" % page) for f in failures):
            print("ok: %s(%s): sections, %s" % (name, sec, what))
    for f in failures:
        print(f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
