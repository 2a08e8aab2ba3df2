"""epochfs-run [OPTIONS] -- COMMAND [ARGS...]

Runs COMMAND unchanged, with epochfs's hook in every Python process it
starts: each PyTorch DataLoader whose files are on an epochfs mount tells
the mount its epoch's order, and the daemon fetches what its caches lack
ahead of the readers (docs/prefetch.md). Not a Python job, or no epochfs
mount: it runs as it would without epochfs-run.

options:
  -q, --quiet     no epochfs-run line on stderr
  -v, --verbose   one line per order written
  -h, --help      this text
      --version   print the version
Exit status: COMMAND's.
"""
import os
import sys

import epochfs

BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_boot")


def job_env(environ):
    """The environment a job runs in under epochfs-run and epochfs-analyze:
    ENVIRON with the boot shim's directory, and nothing else, put first on
    PYTHONPATH. The rest of PYTHONPATH stays as it was, byte for byte (an
    empty entry there is the working directory). The package itself is not
    put on the path: the shim finds it beside its own directory, so that
    site-packages never lands ahead of the standard library, nor an
    installed copy of anything ahead of the job's own."""
    env = dict(environ)
    rest = env.get("PYTHONPATH")
    env["PYTHONPATH"] = BOOT_DIR + (os.pathsep + rest if rest else "")
    return env


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    env = os.environ.copy()
    while argv and argv[0].startswith("-"):
        a = argv.pop(0)
        if a == "--":
            break
        if a in ("-h", "--help"):
            sys.stdout.write(__doc__.lstrip())
            return 0
        if a == "--version":
            print("epochfs-run %s" % epochfs.__version__)
            return 0
        if a in ("-q", "--quiet"):
            env["EPOCHFS_RUN_QUIET"] = "1"
        elif a in ("-v", "--verbose"):
            env["EPOCHFS_RUN_VERBOSE"] = "1"
        else:
            sys.stderr.write("epochfs-run: unknown option %s (see --help)\n" % a)
            return 2
    if not argv:
        sys.stderr.write("epochfs-run: missing COMMAND (usage: epochfs-run [OPTIONS] -- COMMAND [ARGS...])\n")
        return 2
    env = job_env(env)
    env["EPOCHFS_RUN"] = "1"
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        sys.stderr.write("epochfs-run: %s: %s\n" % (argv[0], e.strerror))
        return 127


if __name__ == "__main__":
    sys.exit(main())
