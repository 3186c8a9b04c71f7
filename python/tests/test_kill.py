"""A Python process SIGKILLed while it holds (or waits) is recovered at once by the next
contender, with no cleanup step."""

from __future__ import annotations

import os
import threading
import time

import pytest

import rwdir
from conftest import pending_of, wait_until, writer_pid

HOLD = """
lock = rwdir.DirLock(sys.argv[1] if len(sys.argv) > 1 else {path!r})
g = lock.{mode}()
say("held", g.path)
time.sleep(600)
"""


@pytest.mark.parametrize("mode", ["read", "write"])
def test_a_killed_holder_is_recovered_at_once_by_a_waiter(tmp_path, child, mode):
    lock = rwdir.DirLock(tmp_path)
    holder = child(HOLD.format(path=str(tmp_path), mode=mode))
    _, path = holder.expect("held").split()
    got = {}

    def contend():
        got["guard"] = lock.write(timeout=30)
        got["at"] = time.monotonic()

    waiter = threading.Thread(target=contend)
    waiter.start()
    # The waiter is waiting (its queue file, or its .master_lock waiting for the reader).
    wait_until(lambda: pending_of(lock, os.getpid()) or writer_pid(lock) == os.getpid(),
               "the waiter's file")
    killed_at = time.monotonic()
    holder.kill()
    waiter.join(30)
    assert "guard" in got, "the waiter did not get the lock"
    took = got["at"] - killed_at
    assert took < 0.5, f"recovered {took:.3f} s after the kill"  # at once, not after a lease
    assert not os.path.exists(path) or mode == "write"  # the dead reader's file is gone
    got["guard"].release()
    assert lock.status().is_free()


@pytest.mark.parametrize("mode", ["read", "write"])
def test_a_killed_holder_is_recovered_by_one_attempt(tmp_path, child, mode):
    lock = rwdir.DirLock(tmp_path)
    holder = child(HOLD.format(path=str(tmp_path), mode=mode))
    holder.expect("held")
    holder.kill()
    st = lock.status()
    assert [e.alive for e in ([st.writer] if st.writer else []) + st.readers] == [False]
    with lock.write(timeout=0) as w:  # the one attempt removes the dead file
        assert w.held
    assert lock.status().is_free()


def test_a_killed_queued_writer_does_not_block_the_queue(tmp_path, child):
    lock = rwdir.DirLock(tmp_path)
    w = lock.write()
    queued = child(f"""
        lock = rwdir.DirLock({str(tmp_path)!r})
        say("start")
        lock.write()
    """)
    queued.expect("start")
    wait_until(lambda: pending_of(lock, queued.pid), "the child's queue file")
    queued.kill()
    w.release()
    with lock.read(timeout=0):  # readers pass the dead writer's queue file at once
        pass
    assert lock.status().is_free()
