"""The seeds' own test harnesses (shared/seeds), ported to rwdir.

- `threaded_test` of the GlobalDirectoryLock answer: slave (reader) threads and master
  (writer) threads taking the lock in loops with the seed's random holds and pauses,
  here with exclusion checked on every event, for RWDIR_PY_SOAK_SECONDS (default 20 s,
  the issue's duration).
- `test()` of dotlock.py: several processes released at once through a pipe, each
  appending the next number of a counter file under the write lock, with hung holders
  (they hold for a while) and, beyond the seed, holders SIGKILLed while they hold; the
  counter must come out gapless. RWDIR_PY_COUNTER_SECONDS (default 10 s).
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import threading
import time

import rwdir

SOAK_SECONDS = float(os.environ.get("RWDIR_PY_SOAK_SECONDS", "20"))
COUNTER_SECONDS = float(os.environ.get("RWDIR_PY_COUNTER_SECONDS", "10"))


class ThreadState:
    """The seed's ThreadState, plus the exclusion check made on every event."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.readers = 0
        self.writers = 0
        self.failed = False
        self.errors: list = []
        self.events = {"read": 0, "write": 0}
        self.max_readers = 0

    def set_error(self, err) -> None:
        with self.mutex:
            self.failed = True
            self.errors.append(err)

    def enter(self, kind: str) -> None:
        with self.mutex:
            if self.writers or (kind == "write" and self.readers):
                self.failed = True
                self.errors.append(
                    AssertionError(f"{kind} entered with {self.writers} writer(s) and {self.readers} reader(s) inside")
                )
            if kind == "write":
                self.writers += 1
            else:
                self.readers += 1
                self.max_readers = max(self.max_readers, self.readers)
            self.events[kind] += 1

    def leave(self, kind: str) -> None:
        with self.mutex:
            if kind == "write":
                self.writers -= 1
            else:
                self.readers -= 1
            if self.writers < 0 or self.readers < 0 or self.writers > 1:
                self.failed = True
                self.errors.append(AssertionError(f"left {kind}: {self.writers} writers, {self.readers} readers"))


def lock_master(path: str, state: ThreadState) -> None:
    # was: with GlobalDirectoryLock(path, LockUser.MASTER):
    try:
        with rwdir.DirLock(path).write():
            state.enter("write")
            time.sleep(random.uniform(0.0, 0.25))
            state.leave("write")
    except Exception as err:  # noqa: BLE001 - the seed's harness reports any error
        state.set_error(err)


def lock_slave(path: str, state: ThreadState) -> None:
    # was: with GlobalDirectoryLock(path, LockUser.SLAVE):
    try:
        with rwdir.DirLock(path).read():
            state.enter("read")
            time.sleep(random.uniform(0.0, 0.25))
            state.leave("read")
    except Exception as err:  # noqa: BLE001
        state.set_error(err)


def while_loop_lock_slave(path: str, state: ThreadState, end: float) -> None:
    while not state.failed and time.monotonic() < end:
        time.sleep(random.uniform(0.0, 0.25))
        lock_slave(path, state)


def while_loop_lock_master(path: str, state: ThreadState, end: float) -> None:
    while not state.failed and time.monotonic() < end:
        time.sleep(random.uniform(1, 2.5))
        lock_master(path, state)


def test_threaded_master_slave(tmp_path):
    path = str(tmp_path)
    rwdir.cleanup(path)  # "Probably best to do cleanup in a dedicated startup job"
    slaves, masters = 6, 3
    state = ThreadState()
    end = time.monotonic() + SOAK_SECONDS
    threads = [threading.Thread(target=while_loop_lock_slave, args=(path, state, end)) for _ in range(slaves)]
    threads += [threading.Thread(target=while_loop_lock_master, args=(path, state, end)) for _ in range(masters)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(SOAK_SECONDS + 60)
        assert not t.is_alive(), "a thread is stuck"
    assert not state.errors, state.errors[:3]
    # Masters were never starved by the stream of slaves, and slaves shared.
    assert state.events["write"] >= masters * max(1, int(SOAK_SECONDS / 4)), state.events
    assert state.events["read"] > 0 and state.max_readers >= 2, (state.events, state.max_readers)
    assert rwdir.DirLock(path).status().is_free()


# The DotLock counter test: each child appends the next number under the write lock.
COUNTER_CHILD = r"""
import os, random, socket, sys, time
import rwdir

path, counter, gate, report, end = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
# The first children hang at their first grant, so that every run has killed holders.
hang_first = sys.argv[6] == "1"
os.read(gate, 1)  # blocks until the parent closes the gate: "release the hounds"
time.sleep(random.random() * 0.1)  # give them all a different start time
lock = rwdir.DirLock(path)
id_ = "%s-%s" % (socket.gethostname(), os.getpid())
while time.time() < end:
    try:
        # was: lock.acquire(1) (one attempt), then time.sleep(1)
        guard = lock.write(timeout=1)
    except rwdir.Timeout:
        continue
    if hang_first or random.random() < 0.05:
        hang_first = False
        # simulate a hung process which doesn't release the lock: the parent may kill it
        os.write(report, b"hung %d\n" % os.getpid())
        time.sleep(0.5)
    if os.path.exists(counter):
        with open(counter) as f:
            lines = f.readlines()
        n = int(lines[-1].split()[0]) + 1 if lines else 1
    else:
        n = 1
    time.sleep(0.01)  # provide time for any race condition to show itself
    with open(counter, "a") as f:
        f.write("%s %s\n" % (n, id_))
    guard.release()
    time.sleep(random.uniform(0, 0.05))  # give someone else time to acquire the lock
os.write(report, b"done %d\n" % os.getpid())
"""


def test_dotlock_counter_with_hung_and_killed_holders(tmp_path):
    procs, kills_wanted = 6, 2
    counter = str(tmp_path / "counter")
    gate_r, gate_w = os.pipe()
    report_r, report_w = os.pipe()
    end = time.time() + COUNTER_SECONDS
    children = [
        subprocess.Popen(
            [sys.executable, "-c", COUNTER_CHILD, str(tmp_path), counter, str(gate_r), str(report_w), str(end),
             "1" if i < kills_wanted else "0"],
            pass_fds=(gate_r, report_w),
        )
        for i in range(procs)
    ]
    os.close(gate_r)
    os.close(report_w)
    os.close(gate_w)  # release the hounds
    killed, done, hung = [], [], 0
    buf = b""
    try:
        deadline = time.monotonic() + COUNTER_SECONDS + 60
        while len(killed) + len(done) < procs and time.monotonic() < deadline:
            ready, _, _ = select.select([report_r], [], [], 1)
            if not ready:
                continue
            chunk = os.read(report_r, 4096)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                word, pid = line.split()
                pid = int(pid)
                if word == b"done":
                    done.append(pid)
                elif word == b"hung":
                    hung += 1
                    # A holder killed while it holds: the next contender recovers at once.
                    if len(killed) < kills_wanted and len(killed) + len(done) < procs - 1:
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
        for c in children:
            c.wait(60)
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
                c.wait()
        os.close(report_r)
    for c in children:
        assert c.returncode in (0, -signal.SIGKILL), c.returncode
    assert sorted(killed + done) == sorted(c.pid for c in children)
    with open(counter) as f:
        numbers = [int(line.split()[0]) for line in f]
    assert numbers == list(range(1, len(numbers) + 1)), "the counter has a gap or a repeat"
    assert len(numbers) >= procs, numbers
    assert hung >= 1 and killed, (hung, killed)  # the run did include hung and killed holders
    assert rwdir.DirLock(tmp_path).status().is_free()
