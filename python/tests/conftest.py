"""Helpers for the rwdir tests: child processes that say when they are ready, and
bounded waits for what can only be observed by looking (a queue file appearing).

No test sleeps to decide pass or fail: children report readiness on a pipe (their
stdout), and conditions seen through `lock.status()` are polled with a bound.
"""

from __future__ import annotations

import os
import queue
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Callable, List, Optional

import pytest

import rwdir

# Imported by every child: `say` reports to the parent (one line on stdout),
# `expect` waits for the parent's word (one line on stdin).
CHILD_PRELUDE = """
import os, sys, time, signal, json
import rwdir
def say(*words):
    print(*words, flush=True)
def expect():
    return sys.stdin.readline().strip()
"""


class Child:
    """A Python child process running `code` (after CHILD_PRELUDE)."""

    def __init__(self, code: str, **kw) -> None:
        src = CHILD_PRELUDE + textwrap.dedent(code)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", src],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **kw,
        )
        self.pid = self.proc.pid
        # The child's lines, read by a thread (a select on the pipe would miss lines
        # already in the reader's buffer).
        self.lines: "queue.Queue[str]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for out in self.proc.stdout:
            self.lines.put(out)
        self.lines.put("")

    def line(self, timeout: float = 60) -> str:
        """The child's next line; fails (with its stderr) if it exits first, or says
        nothing for `timeout` seconds."""
        try:
            out = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"child {self.pid} said nothing for {timeout} s") from None
        if not out:
            self.proc.wait(10)
            raise AssertionError(
                f"child {self.pid} exited ({self.proc.returncode}) without a word: "
                f"{self.proc.stderr.read()}"
            )
        return out.strip()

    def expect(self, word: str) -> str:
        got = self.line()
        assert got.split()[0] == word, f"child said {got!r}, expected {word!r}"
        return got

    def tell(self, word: str = "go") -> None:
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def finish(self, timeout: float = 20) -> None:
        """Waits for the exit; fails on a non-zero exit."""
        self.proc.stdin.close()
        self.proc.wait(timeout)
        assert self.proc.returncode == 0, (
            f"child {self.pid} exited {self.proc.returncode}: {self.proc.stderr.read()}"
        )

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f:
                f.close()


@pytest.fixture
def child(request) -> Callable[..., Child]:
    """`child(code)` starts a Child; all are killed at the end of the test."""
    made: List[Child] = []

    def start(code: str, **kw) -> Child:
        c = Child(code, **kw)
        made.append(c)
        return c

    yield start
    for c in made:
        c.close()


def wait_until(cond: Callable[[], object], what: str, timeout: float = 10.0):
    """Polls `cond` (bounded) until it is true; returns its value."""
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.002)


def pending_of(lock: rwdir.DirLock, pid: int) -> Optional[rwdir.Entry]:
    """The queued writer of process `pid`, if any."""
    return next((e for e in lock.status().pending if e.pid == pid), None)


def queued(lock: rwdir.DirLock, pid: int) -> rwdir.Entry:
    """The queue file of a writer of process `pid` that waits, once it is there.

    A blocking write() first makes one attempt, which may queue and withdraw a file of
    its own within microseconds before the wait queues for good; so the file counts once
    two looks 20 ms apart see the same one."""
    while True:
        first = wait_until(lambda: pending_of(lock, pid), f"a queue file of pid {pid}")
        time.sleep(0.02)
        again = pending_of(lock, pid)
        if again is not None and again.path == first.path:
            return again


def stable_pending(lock: rwdir.DirLock, n: int) -> List[str]:
    """The paths of the queue, once it holds `n` files and two looks 20 ms apart agree
    (see `queued`)."""

    def look() -> Optional[List[str]]:
        paths = [e.path for e in lock.status().pending]
        return paths if len(paths) == n else None

    while True:
        first = wait_until(look, f"{n} queued writers")
        time.sleep(0.02)
        if look() == first:
            return first


def settled(look: Callable[[], object], what: str):
    """`look()`'s value once it is true and two looks 20 ms apart agree (a blocking
    acquisition's first attempt makes and removes files of its own before its wait
    makes them for good)."""
    while True:
        first = wait_until(look, what)
        time.sleep(0.02)
        if look() == first:
            return first


def writer_pid(lock: rwdir.DirLock) -> Optional[int]:
    """The pid of the writer (.master_lock), if any."""
    w = lock.status().writer
    return w.pid if w else None


def kept_by_a_live_process(state: Path, name: str) -> bool:
    """Whether `name` is a reader's file kept between reads (docs/protocol.md §2.1.1) by
    a live process: a `.tmp-` regular file with a reader's record whose pid exists. It
    goes when its DirLock goes, and is no lock."""
    if not name.startswith(".tmp-"):
        return False
    path = state / name
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):  # never open a FIFO
            return False
        text = path.read_text()
    except OSError:
        return False
    fields = dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
    pid = fields.get("pid", "")
    return fields.get("kind") == "read" and pid.isdigit() and os.path.exists(f"/proc/{pid}")


def files(d: Path) -> List[str]:
    """The lock files in d/.rwdir (token files and live processes' kept files aside)."""
    state = d / ".rwdir"
    if not state.exists():
        return []
    return sorted(
        n
        for n in os.listdir(state)
        if not n.startswith(".token-") and not kept_by_a_live_process(state, n)
    )


@pytest.fixture
def lock(tmp_path: Path) -> rwdir.DirLock:
    return rwdir.DirLock(tmp_path)


def _find_rwdir() -> Optional[str]:
    env = os.environ.get("RWDIR_BIN")
    if env:
        return env
    repo = Path(__file__).resolve().parents[2]
    targets = [Path(os.environ["CARGO_TARGET_DIR"])] if "CARGO_TARGET_DIR" in os.environ else []
    targets.append(repo / "target")
    for t in targets:
        for profile in ("release", "debug"):
            p = t / profile / "rwdir"
            if p.is_file():
                return str(p)
    return shutil.which("rwdir")


@pytest.fixture(scope="session")
def rwdir_bin() -> str:
    """The `rwdir` command (RWDIR_BIN, else target/{release,debug}/rwdir); in CI its
    absence fails the tests that need it instead of skipping them."""
    path = _find_rwdir()
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("the rwdir command was not found: set RWDIR_BIN")
        pytest.skip("the rwdir command was not found: build it (cargo build -p rwdir-cli) or set RWDIR_BIN")
    return path
