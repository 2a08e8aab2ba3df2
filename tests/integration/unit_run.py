"""Runs an installed epochfs@.service the way systemd would, where systemd
is not PID 1 (containers, CI): for t_systemd.sh.

    unit_run.py ROOT UNITFILE INSTANCE CHECKFILE

ROOT is the DESTDIR the unit was installed into (the unit's absolute paths
are looked up below it). What it takes from the unit, as systemd does:
specifiers %i %I %f %%; EnvironmentFile=; $VAR (split at whitespace) and
${VAR} (one word) in Exec lines; '-' prefixed ExecStartPre lines may fail;
Type=notify with NotifyAccess=main (only the main process may notify);
Restart=on-failure (a non-zero exit or an unclean signal restarts, after
RestartSec). Then the scenario, each step checked:

1. start: ExecStartPre, ExecStart with NOTIFY_SOCKET; READY=1 must come,
   and at that moment the mount serves (its stats.json names the main pid);
2. CHECKFILE (relative to the mount) read whole, while serving;
3. kill -9 the daemon: Restart=on-failure starts it again, and the new one
   comes up READY over the dead mount its predecessor left;
4. stop: SIGTERM; STOPPING=1 must come, the exit be clean (no restart)
   and the mount gone.
Prints one "ok: ..." line per step, or fails with a reason (exit 1).
"""
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def fail(why):
    print("FAIL: " + why)
    sys.exit(1)


def parse_unit(path):
    """{section: {key: [values in order]}}; an empty assignment resets."""
    out, sec = {}, None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("[") and line.endswith("]"):
                sec = out.setdefault(line[1:-1], {})
                continue
            k, _, v = line.partition("=")
            vals = sec.setdefault(k.strip(), [])
            if v.strip():
                vals.append(v.strip())
            else:
                vals.clear()
    return out


def unescape(instance):
    """systemd-escape --unescape --path."""
    s = instance.replace("-", "/")
    return re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), s)


def specifiers(text, instance):
    path = "/" + unescape(instance)
    table = {"i": instance, "I": unescape(instance), "f": path, "%": "%"}
    return re.sub(r"%(.)", lambda m: table[m.group(1)], text)


def env_file(path):
    env = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            k, _, v = line.partition("=")
            v = v.strip()
            if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
                v = v[1:-1]
            env[k.strip()] = v
    return env


def exec_argv(line, env, root):
    """(argv, may_fail) of an Exec line, as systemd expands it."""
    may_fail = False
    while line and line[0] in "-@:+!":
        may_fail |= line[0] == "-"
        line = line[1:]
    argv = []
    for w in shlex.split(line):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", w)
        if m:
            argv += env.get(m.group(1), "").split()
            continue
        argv.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""), w))
    exe = argv[0]
    if exe.startswith("/"):
        argv[0] = root + exe
    else:
        for d in PATH.split(":"):
            if os.access(os.path.join(d, exe), os.X_OK):
                argv[0] = os.path.join(d, exe)
                break
        else:
            fail("%s: not found on systemd's fixed PATH" % exe)
    return argv, may_fail


class Service:
    def __init__(self, root, unit, instance):
        self.root, self.u = root, parse_unit(unit)
        self.instance = instance
        svc = self.u.get("Service", {})
        one = lambda k, d=None: (svc.get(k) or [d])[-1]   # noqa: E731
        if one("Type") != "notify" or one("NotifyAccess") != "main":
            fail("the unit is not Type=notify, NotifyAccess=main")
        self.restart = one("Restart", "no")
        self.restart_sec = float(re.sub(r"s$", "", one("RestartSec", "0.1")))
        self.env = {}
        for ef in svc.get("EnvironmentFile", []):
            ef = specifiers(ef, instance)
            optional = ef.startswith("-")
            p = root + ef.lstrip("-")
            if os.path.exists(p):
                self.env.update(env_file(p))
            elif not optional:
                fail("EnvironmentFile %s missing" % p)
        self.pre = [exec_argv(specifiers(x, instance), self.env, root) for x in svc.get("ExecStartPre", [])]
        starts = svc.get("ExecStart", [])
        if len(starts) != 1:
            fail("a notify service needs exactly one ExecStart")
        self.argv = exec_argv(specifiers(starts[0], instance), self.env, root)[0]
        self.mount = "/" + unescape(instance)
        self.sockdir = tempfile.mkdtemp(prefix="unit-notify-")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sockpath = os.path.join(self.sockdir, "notify")
        self.sock.bind(self.sockpath)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.proc = None

    def start(self):
        for argv, may_fail in self.pre:
            rc = subprocess.call(argv, env=dict(os.environ, **self.env))
            if rc and not may_fail:
                fail("ExecStartPre %s: exit %d" % (argv, rc))
        env = dict(os.environ, **self.env)
        env["NOTIFY_SOCKET"] = self.sockpath
        self.proc = subprocess.Popen(self.argv, env=env, stdin=subprocess.DEVNULL)
        return self.wait_for("READY=1", 60)

    def wait_for(self, key, seconds):
        """The messages of the main process until one holds KEY; None if the
        process exits first or time runs out."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.sock.settimeout(0.1)
            try:
                data, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12))
            except socket.timeout:
                if self.proc.poll() is not None:
                    return None
                continue
            pid = None
            for level, typ, cdata in anc:
                if level == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS:
                    pid = int.from_bytes(cdata[:4], sys.byteorder)
            if pid != self.proc.pid:
                continue        # NotifyAccess=main: systemd ignores others
            lines = data.decode().split("\n")
            if key in lines:
                return lines
        return None

    def serving(self):
        with open(os.path.join(self.mount, ".epochfs", "stats.json")) as f:
            return json.load(f)

    def should_restart(self, rc):
        clean = rc == 0 or rc in (-signal.SIGTERM, -signal.SIGINT, -signal.SIGHUP, -signal.SIGPIPE)
        return self.restart in ("on-failure", "always") and not clean or self.restart == "always"


def main():
    root, unit, instance, check = sys.argv[1:5]
    s = Service(root, unit, instance)
    msgs = s.start()
    if msgs is None:
        fail("no READY=1 (exit %s)" % s.proc.poll())
    try:
        st = s.serving()            # at READY: the mount must answer at once
    except OSError as e:
        fail("READY=1 came before the mount served: %s" % e)
    if st["daemon_pid"] != s.proc.pid:
        fail("stats.json names pid %s, the main process is %d" % (st["daemon_pid"], s.proc.pid))
    status = [m for m in msgs if m.startswith("STATUS=")]
    print("ok: READY=1 once the mount serves (%s), pid %d" % (status[0] if status else "no STATUS", s.proc.pid))

    src = os.path.join(s.env["SOURCE"], check)
    with open(os.path.join(s.mount, check), "rb") as a, open(src, "rb") as b:
        if a.read() != b.read():
            fail("bytes differ: %s" % check)
    deadline = time.monotonic() + 10      # cached (and so recorded) once counted
    while s.serving()["cache_items"] < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    print("ok: %s read through the service's mount" % check)

    first = s.proc.pid
    s.proc.kill()
    rc = s.proc.wait()
    if not s.should_restart(rc):
        fail("Restart=%s would not restart after kill -9" % s.restart)
    time.sleep(s.restart_sec)
    if s.start() is None:
        fail("the restarted daemon never became ready (exit %s)" % s.proc.poll())
    st = s.serving()
    if st["daemon_pid"] == first or st["daemon_pid"] != s.proc.pid:
        fail("after the restart stats.json names pid %s" % st["daemon_pid"])
    print("ok: kill -9, Restart=%s: started again over the dead mount, READY, pid %d; adopted %d cached items"
          % (s.restart, s.proc.pid, st.get("persist_adopted", 0)))

    s.proc.terminate()
    if s.wait_for("STOPPING=1", 30) is None:
        fail("no STOPPING=1 after SIGTERM")
    rc = s.proc.wait(60)
    if rc != 0 or s.should_restart(rc):
        fail("SIGTERM: exit %d" % rc)
    with open("/proc/self/mountinfo") as f:
        if any(line.split()[4] == s.mount for line in f):
            fail("still mounted after the stop: %s" % [l for l in open("/proc/self/mountinfo") if " %s " % s.mount in l])
    print("ok: SIGTERM: STOPPING=1, exit 0, unmounted, no restart")


if __name__ == "__main__":
    main()
