"""Schema-level checks of deploy/ for t_deploy.sh (kubectl and a Docker
daemon are not on the machine): the Kubernetes manifests parse and hold
what running epochfs in a pod needs, and the Dockerfile builds from Debian
packages only, with a runtime stage that has every library the binaries
link.

    deploy_check.py ROOT BUILD

Prints one "ok: ..." line per check, or "FAIL: ..." and exits 1.
"""
import os
import re
import shlex
import subprocess
import sys

import yaml

ROOT, BUILD = sys.argv[1], sys.argv[2]
K8S = os.path.join(ROOT, "deploy", "kubernetes")
IN_EVERY_IMAGE = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g", "liblzma5", "libzstd1"}


def fail(why):
    print("FAIL: " + why)
    sys.exit(1)


def check(cond, why):
    if not cond:
        fail(why)


def load(name):
    with open(os.path.join(K8S, name)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def version():
    with open(os.path.join(ROOT, "fs", "util", "version.h")) as f:
        return re.search(r'EPOCHFS_VERSION "([^"]+)"', f.read()).group(1)


def by_name(items, name):
    got = [x for x in items if x.get("name") == name]
    check(len(got) == 1, "no single entry named %s" % name)
    return got[0]


def daemonset(docs):
    kinds = {d["kind"]: d for d in docs}
    check(set(kinds) == {"ConfigMap", "DaemonSet"}, "epochfs.yaml holds %s" % sorted(kinds))
    ds, cm = kinds["DaemonSet"], kinds["ConfigMap"]
    check(ds["apiVersion"] == "apps/v1", "DaemonSet apiVersion %s" % ds["apiVersion"])
    check(cm["metadata"]["namespace"] == ds["metadata"]["namespace"], "ConfigMap and DaemonSet namespaces differ")
    spec = ds["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    check(all(labels.get(k) == v for k, v in spec["selector"]["matchLabels"].items()),
          "the selector does not match the pod's labels")
    check(pod.get("hostNetwork") is True, "not on the host network (peers, rank by host name)")
    check(pod.get("dnsPolicy") == "ClusterFirstWithHostNet", "hostNetwork without ClusterFirstWithHostNet")
    (c,) = pod["containers"]
    check(c.get("securityContext", {}).get("privileged") is True, "the container is not privileged")
    check(c["image"].endswith(":" + version()), "image %s is not version %s" % (c["image"], version()))
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    check(set(mounts) <= set(vols), "a volumeMount without a volume")

    # The command: sh -c "exec epochfs ... $EPOCHFS_OPTIONS SOURCE MOUNTPOINT".
    check(c["command"] == ["sh", "-c"] and len(c["args"]) == 1, "command is not sh -c ARGS")
    words = shlex.split(c["args"][0])
    check(words[:2] == ["exec", "epochfs"], "the shell does not exec epochfs")
    env = {e["name"]: e for e in c.get("env", [])}
    opts_key = env["EPOCHFS_OPTIONS"]["valueFrom"]["configMapKeyRef"]
    check(opts_key["name"] == cm["metadata"]["name"], "EPOCHFS_OPTIONS from another ConfigMap")
    words = [w for x in words[2:] for w in (cm["data"][opts_key["key"]].split() if x == "$EPOCHFS_OPTIONS" else [x])]
    source, mnt = words[-2:]
    check("--foreground" in words or "-f" in words, "epochfs not in the foreground")

    # /dev/fuse from the host.
    fuse = [n for n, v in vols.items() if v.get("hostPath", {}).get("path") == "/dev/fuse"]
    check(fuse and vols[fuse[0]]["hostPath"].get("type") == "CharDevice", "/dev/fuse is not a CharDevice hostPath")
    check(mounts[fuse[0]]["mountPath"] == "/dev/fuse", "/dev/fuse mounted elsewhere")
    # The mount point: a hostPath shared back to the host.
    m = [x for x in c["volumeMounts"] if x["mountPath"] == mnt]
    check(len(m) == 1, "MOUNTPOINT %s is not a volumeMount" % mnt)
    check(m[0].get("mountPropagation") == "Bidirectional", "MOUNTPOINT without Bidirectional propagation")
    host_mnt = vols[m[0]["name"]].get("hostPath", {})
    check(host_mnt.get("type") == "DirectoryOrCreate", "MOUNTPOINT is not a DirectoryOrCreate hostPath")
    # SOURCE: a read-only volume.
    s = [x for x in c["volumeMounts"] if x["mountPath"] == source]
    check(len(s) == 1 and s[0].get("readOnly") is True, "SOURCE %s is not a read-only volumeMount" % source)
    # The peers file and the secret come from their volumes.
    i = words.index("--secret-file")
    secret_path = words[i + 1]
    sm = [x for x in c["volumeMounts"] if secret_path.startswith(x["mountPath"].rstrip("/") + "/")]
    check(len(sm) == 1, "--secret-file %s is in no volumeMount" % secret_path)
    sv = vols[sm[0]["name"]].get("secret")
    check(sv is not None, "--secret-file is not from a Secret")
    check(sv.get("defaultMode") == 0o400, "the secret is not mode 0400")
    with open(os.path.join(K8S, "epochfs.yaml")) as f:
        text = f.read()
    check("create secret generic %s --from-file=%s=" % (sv["secretName"], os.path.basename(secret_path)) in text,
          "the instructions do not create secret %s with key %s" % (sv["secretName"], os.path.basename(secret_path)))
    peers_path = words[words.index("--peers-file") + 1]
    pm = [x for x in c["volumeMounts"] if peers_path.startswith(x["mountPath"].rstrip("/") + "/")]
    check(len(pm) == 1 and vols[pm[0]["name"]].get("configMap", {}).get("name") == cm["metadata"]["name"],
          "--peers-file is not from the ConfigMap")
    check(os.path.basename(peers_path) in cm["data"], "the ConfigMap has no %s" % os.path.basename(peers_path))
    # The cache state on the host's tmpfs: root's default state root, kept
    # across the pod's clean restarts (upgrades) as well as crashes.
    st = [x for x in c["volumeMounts"] if x["mountPath"] == "/dev/shm/epochfs-0"]
    check(len(st) == 1 and vols[st[0]["name"]].get("hostPath", {}).get("path", "").startswith("/dev/shm/"),
          "the cache state (/dev/shm/epochfs-0) is not on the host's /dev/shm")
    check("--persist" in words and words[words.index("--persist") + 1] == "always",
          "the DaemonSet does not keep its cache across pod restarts (--persist always)")
    # Probes read MOUNTPOINT/.epochfs/stats.json.
    stats = os.path.join(mnt, ".epochfs", "stats.json")
    for p in ("readinessProbe", "startupProbe", "livenessProbe"):
        check(stats in c.get(p, {}).get("exec", {}).get("command", []), "%s does not read %s" % (p, stats))
    # The options the daemon is given are options it takes: its own parser
    # reads them (--version stops it after parsing, before any check of paths).
    argv = [os.path.join(ROOT, BUILD, "epochfs")] + words[:-2] + ["--version"]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode and "more than this machine's RAM" in r.stderr:
        # A GPU node has more RAM than this machine: the size's syntax is
        # what can be checked here.
        i = argv.index("--cache-size")
        argv[i + 1] = "1" + re.sub(r"^[0-9.]+", "", argv[i + 1])
        r = subprocess.run(argv, capture_output=True, text=True)
    check(r.returncode == 0, "epochfs refuses the DaemonSet's options: %s" % r.stderr.strip())
    print("ok: DaemonSet: host network, privileged, /dev/fuse, Bidirectional %s, secret 0400, peers and "
          "options from the ConfigMap, state on the host's tmpfs, probes on %s, options the daemon takes"
          % (mnt, stats))
    return ds, host_mnt["path"]


def job(docs, ds, host_mnt):
    (j,) = docs
    check(j["kind"] == "Job" and j["apiVersion"] == "batch/v1", "train-job.yaml is not a batch/v1 Job")
    check(j["metadata"]["namespace"] == ds["metadata"]["namespace"], "the Job is in another namespace")
    pod = j["spec"]["template"]["spec"]
    check(pod.get("restartPolicy") in ("Never", "OnFailure"), "restartPolicy %s" % pod.get("restartPolicy"))
    sel = ds["spec"]["template"]["spec"]["nodeSelector"]
    check(pod.get("nodeSelector") == sel, "the Job may land where no daemon runs")
    vols = {v["name"]: v for v in pod["volumes"]}
    data = [n for n, v in vols.items() if v.get("hostPath", {}).get("path") == host_mnt]
    check(len(data) == 1, "no hostPath volume of the daemon's mount %s" % host_mnt)
    for c in pod.get("initContainers", []) + pod["containers"]:
        for m in c.get("volumeMounts", []):
            if m["name"] == data[0]:
                check(m.get("mountPropagation") == "HostToContainer",
                      "%s: the dataset mount without HostToContainer" % c["name"])
                # The job under epochfs-run writes its orders into
                # .epochfs/order/ (the dataset refuses writes whatever the
                # volume says): its mount must not be readOnly; the init
                # container's may.
                if c["command"][0] == "epochfs-run":
                    check(m.get("readOnly") is not True,
                          "%s: a readOnly dataset mount takes no orders from epochfs-run" % c["name"])
    (init,) = pod["initContainers"]
    check(".epochfs/stats.json" in " ".join(init["command"]), "the init container does not wait for the mount")
    (train,) = pod["containers"]
    check(train["command"][0] == "epochfs-run", "the job is not started under epochfs-run")
    print("ok: Job: on the daemon's nodes, the mount with HostToContainer (writable for the orders), waits "
          "for the mount, runs under epochfs-run")


def debian_packages(run_text):
    """The packages of the apt-get install lines in RUN_TEXT."""
    out = []
    for m in re.finditer(r"apt-get install ([^&]*)", run_text):
        out += [w for w in m.group(1).split() if not w.startswith("-") and w != "\\"]
    return out


def dockerfile():
    with open(os.path.join(ROOT, "deploy", "Dockerfile")) as f:
        text = f.read()
    logical = re.sub(r"\\\n", " ", text)
    lines = [x.strip() for x in logical.splitlines() if x.strip() and not x.strip().startswith("#")]
    args = dict(re.match(r"ARG (\w+)=(\S+)", x).groups() for x in lines if x.startswith("ARG ") and "=" in x)
    stages = []
    for x in lines:
        if x.startswith("FROM "):
            base = x.split()[1]
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
            check(base.startswith("debian:"), "stage from %s: not Debian" % base)
            stages.append([])
        elif stages:
            stages[-1].append(x)
    check(len(stages) == 2, "expected a build and a runtime stage, found %d" % len(stages))
    for x in lines:
        check(not x.startswith("ADD "), "ADD fetches or unpacks: %s" % x)
        if x.startswith("RUN "):
            for bad in ("curl", "wget", "pip ", "pip3", "npm", "git clone", "http://", "https://"):
                check(bad not in x, "a RUN fetches from outside Debian (%s): %s" % (bad, x))
    build_pkgs = debian_packages(" ".join(stages[0]))
    deps = open(os.path.join(ROOT, "tools", "install-deps.sh")).read()
    want = re.search(r'build="([^"]*)"', deps).group(1).split()
    check(sorted(build_pkgs) == sorted(want), "build stage packages %s, install-deps.sh build: %s"
          % (sorted(build_pkgs), sorted(want)))
    runtime = set(debian_packages(" ".join(stages[1])))
    # What the built binaries link, by package: each must be in the runtime
    # stage or in every Debian image already (what dpkg and apt themselves
    # need; debian:bookworm-slim holds them).
    need = {}
    bins = ["epochfs", "epochfs-gen", "epochfs-bench", "epochfs-stat", "epochfs-prep", "epochfs-manifest",
            "epochfs-warmup"]
    for b in bins:
        out = subprocess.run(["ldd", os.path.join(ROOT, BUILD, b)], capture_output=True, text=True).stdout
        for lib in re.findall(r"=> (/\S+)", out):
            if "libasan" in lib or "libubsan" in lib:
                continue
            r = subprocess.run(["dpkg", "-S", os.path.realpath(lib)], capture_output=True, text=True)
            if r.returncode:
                r = subprocess.run(["dpkg", "-S", lib], capture_output=True, text=True)
            check(r.returncode == 0, "%s links %s, which no Debian package holds" % (b, lib))
            pkg = r.stdout.split(":")[0]
            need.setdefault(pkg, set()).add(b)
    for pkg, who in sorted(need.items()):
        if pkg in runtime:
            continue
        check(pkg in IN_EVERY_IMAGE, "%s (linked by %s) is not in the runtime stage" % (pkg, ", ".join(sorted(who))))
    for must in ("fuse3", "python3", "mount"):
        check(must in runtime, "the runtime stage lacks %s" % must)
    # Every package named exists in Debian (the local package lists, when present).
    names = sorted(runtime | set(build_pkgs))
    if subprocess.run(["apt-cache", "show", "libc6"], capture_output=True).returncode == 0:
        out = subprocess.run(["apt-cache", "show", "--no-all-versions"] + names, capture_output=True,
                             text=True).stdout
        found = set(re.findall(r"^Package: (\S+)$", out, re.M))
        check(found >= set(names), "no Debian package %s" % sorted(set(names) - found))
    check(os.path.exists(os.path.join(ROOT, ".dockerignore")), "no .dockerignore: build/ would be sent")
    print("ok: Dockerfile: Debian stages only, nothing fetched outside apt, build packages = install-deps.sh "
          "build, the runtime stage has the %d packages the binaries link" % len(need))


def main():
    ds, host_mnt = daemonset(load("epochfs.yaml"))
    job(load("train-job.yaml"), ds, host_mnt)
    dockerfile()


if __name__ == "__main__":
    main()
