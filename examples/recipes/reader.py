#!/usr/bin/env python3
"""Run a Python function's work under `rwdir read`, for readers written in Python.

usage: reader.py [--timeout SECS] DIR

rwdir holds a lock for as long as its COMMAND runs, so the work that must see a
consistent DIR/data runs in a child process: this script runs itself again as
`rwdir read --timeout SECS DIR -- python3 reader.py --under-lock`, and that child calls
`summarize()` and prints its result as JSON. The parent turns exit status 75 (lock not
obtained in time: a restore is running) into a `LockBusy` exception, here reported as
"busy" with exit status 75.

Copy `run_locked` and `LockBusy` into your code; replace `summarize` with your work.
"""

import json
import os
import subprocess
import sys

BUSY = 75  # rwdir's "not obtained in time" (EX_TEMPFAIL)


class LockBusy(Exception):
    """The lock was not obtained within the timeout."""


def run_locked(mode, directory, argv, timeout=None, **kwargs):
    """Run `argv` under `rwdir read|write [--timeout SECS] DIRECTORY -- argv...`.

    Returns the subprocess.CompletedProcess (any exit status but 75; check it).
    Raises LockBusy on 75, and FileNotFoundError if `rwdir` is not on PATH. The
    command itself must not exit 75, or its failure reads as "busy".
    """
    cmd = ["rwdir", mode]
    if timeout is not None:
        cmd += ["--timeout", str(timeout)]
    cmd += [os.fspath(directory), "--"]
    cmd += [os.fspath(a) for a in argv]
    proc = subprocess.run(cmd, check=False, **kwargs)
    if proc.returncode == BUSY:
        raise LockBusy(f"{directory}: no {mode} lock within {timeout} s")
    return proc


def summarize(data_dir):
    """The work that needs a consistent view of DIR/data: count files and bytes."""
    files = size = 0
    for root, dirs, names in os.walk(data_dir):
        dirs.sort()
        for name in sorted(names):
            files += 1
            size += os.path.getsize(os.path.join(root, name))
    return {"files": files, "bytes": size}


def main(argv):
    if argv == ["--under-lock"]:
        # We are rwdir's COMMAND: the read lock is held until we exit.
        if os.environ.get("RWDIR_MODE") != "read":
            print("reader.py: --under-lock is for rwdir to run", file=sys.stderr)
            return 64
        data = os.path.join(os.environ["RWDIR_DIR"], "data")
        json.dump(summarize(data), sys.stdout)
        return 0

    timeout = 60.0
    if argv[:1] == ["--timeout"] and len(argv) >= 2:
        timeout, argv = float(argv[1]), argv[2:]
    if len(argv) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 64
    directory = argv[0]

    me = [sys.executable, os.path.abspath(__file__), "--under-lock"]
    try:
        proc = run_locked("read", directory, me, timeout=timeout,
                          stdout=subprocess.PIPE, text=True)
    except LockBusy as e:
        print(f"reader.py: busy: {e}; try again later", file=sys.stderr)
        return BUSY
    if proc.returncode != 0:
        print(f"reader.py: failed with exit status {proc.returncode}", file=sys.stderr)
        return proc.returncode
    result = json.loads(proc.stdout)
    print(f"{directory}/data: {result['files']} files, {result['bytes']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
