"""Ctrl-C (SIGINT) while waiting raises KeyboardInterrupt within 0.1 s and leaves no
file of the interrupted acquisition behind; slicing the wait keeps the queue place."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import rwdir
from conftest import files, pending_of, queued, settled, wait_until, writer_pid

WAITER = """
import threading
lock = rwdir.DirLock({path!r})
main = threading.get_ident()

def wait():
    lock.{mode}()

def watch():
    # Says "waiting" once the main thread is inside wait(), i.e. in the lock's call.
    while getattr(sys._current_frames().get(main), "f_code", None) is not wait.__code__:
        time.sleep(0.001)
    say("waiting")

threading.Thread(target=watch, daemon=True).start()
try:
    say("start")
    wait()
    say("granted")
except KeyboardInterrupt:
    at = time.monotonic()
    say("interrupted", at)
"""


def interrupt(c, lock) -> float:
    """Sends SIGINT to child c; returns how long until it reported KeyboardInterrupt."""
    sent = time.monotonic()
    os.kill(c.pid, signal.SIGINT)
    line = c.expect("interrupted")
    c.finish()
    return float(line.split()[1]) - sent


def test_ctrl_c_while_queued_behind_a_writer(tmp_path, child):
    lock = rwdir.DirLock(tmp_path)
    w = lock.write()
    c = child(WAITER.format(path=str(tmp_path), mode="write"))
    c.expect("start")
    c.expect("waiting")
    queued(lock, c.pid)
    time.sleep(0.2)  # several slices of its wait pass (not a readiness guess)
    took = interrupt(c, lock)
    assert took < 0.1, f"KeyboardInterrupt after {took:.3f} s"
    assert files(tmp_path) == [".master_lock"], "the interrupted writer left a file"
    w.release()
    assert files(tmp_path) == []


def test_ctrl_c_while_waiting_for_readers_to_leave(tmp_path, child):
    lock = rwdir.DirLock(tmp_path)
    r = lock.read()
    c = child(WAITER.format(path=str(tmp_path), mode="write"))
    c.expect("start")
    c.expect("waiting")
    # First in line, it made .master_lock and waits for this reader.
    settled(lambda: writer_pid(lock) == c.pid, "the child's .master_lock")
    took = interrupt(c, lock)
    assert took < 0.1, f"KeyboardInterrupt after {took:.3f} s"
    st = lock.status()
    assert st.writer is None and st.pending == [], st
    assert files(tmp_path) == [os.path.basename(r.path)]
    r.release()


def test_ctrl_c_while_a_reader_waits(tmp_path, child):
    lock = rwdir.DirLock(tmp_path)
    w = lock.write()
    c = child(WAITER.format(path=str(tmp_path), mode="read"))
    c.expect("start")
    c.expect("waiting")  # a waiting reader owns no file: the child says it is in the call
    time.sleep(0.2)  # several slices of its wait pass (not a readiness guess)
    took = interrupt(c, lock)
    assert took < 0.1, f"KeyboardInterrupt after {took:.3f} s"
    assert files(tmp_path) == [".master_lock"]
    w.release()


def test_a_custom_sigint_handler_that_does_not_raise_keeps_waiting(tmp_path, child):
    lock = rwdir.DirLock(tmp_path)
    w = lock.write()
    c = child(f"""
        seen = []
        signal.signal(signal.SIGINT, lambda *a: seen.append(1) or say("handled"))
        lock = rwdir.DirLock({str(tmp_path)!r})
        say("start")
        g = lock.write()
        say("granted", len(seen))
    """)
    c.expect("start")
    q = queued(lock, c.pid)
    os.kill(c.pid, signal.SIGINT)
    c.expect("handled")
    # Still in the queue, with the same file: the handler ran between two slices.
    assert pending_of(lock, c.pid).path == q.path
    w.release()
    assert c.expect("granted").split()[1] == "1"
    c.finish()


def test_slices_keep_the_queue_place(tmp_path, child):
    """Two queued writers keep their files (and order) across many slices of their wait:
    the wait is one acquisition, not a loop of timed attempts."""
    lock = rwdir.DirLock(tmp_path)
    w = lock.write()
    code = """
        lock = rwdir.DirLock({path!r})
        say("start")
        with lock.write(timeout=60) as g:
            say("granted", time.monotonic())
            expect()
    """
    a = child(code.format(path=str(tmp_path)))
    a.expect("start")
    queued(lock, a.pid)
    b = child(code.format(path=str(tmp_path)))
    b.expect("start")
    queued(lock, b.pid)
    before = [e.path for e in lock.status().pending]
    time.sleep(0.5)  # ten slices of 50 ms
    assert [e.path for e in lock.status().pending] == before
    w.release()
    a.expect("granted")
    a.tell()
    b.expect("granted")
    b.tell()
    a.finish()
    b.finish()


def test_ctrl_c_under_asyncio_run(tmp_path, child):
    lock = rwdir.DirLock(tmp_path)
    w = lock.write()
    c = child(f"""
        import asyncio
        lock = rwdir.DirLock({str(tmp_path)!r})

        async def main():
            say("start")
            async with lock.write_async():
                say("granted")

        try:
            asyncio.run(main())  # SIGINT cancels the main task, then raises
        except KeyboardInterrupt:
            say("interrupted", time.monotonic())
    """)
    c.expect("start")
    wait_until(lambda: pending_of(lock, c.pid), "the task's queue file")
    took = interrupt(c, lock)
    assert took < 0.1, f"KeyboardInterrupt after {took:.3f} s"
    assert files(tmp_path) == [".master_lock"], "the cancelled task left a file"
    w.release()


def test_ctrl_c_where_a_wakeup_fd_is_set_already(tmp_path, child):
    """With Python's wakeup fd taken by someone else (an asyncio loop sets one), the
    wait looks at signals every 25 ms instead, and leaves that fd in place."""
    lock = rwdir.DirLock(tmp_path)
    w = lock.write()
    c = child(WAITER.format(path=str(tmp_path), mode="write").replace(
        "threading.Thread(target=watch",
        "r, wfd = os.pipe(); os.set_blocking(wfd, False); signal.set_wakeup_fd(wfd)\n"
        "threading.Thread(target=watch",
    ).replace(
        'say("interrupted", at)',
        'say("interrupted", at)\nassert signal.set_wakeup_fd(-1) == wfd, "the wakeup fd changed"',
    ))
    c.expect("start")
    c.expect("waiting")
    queued(lock, c.pid)
    took = interrupt(c, lock)
    assert took < 0.1, f"KeyboardInterrupt after {took:.3f} s"
    assert files(tmp_path) == [".master_lock"]
    w.release()


def test_the_wakeup_fd_is_given_back_after_a_wait(tmp_path, child):
    lock = rwdir.DirLock(tmp_path)
    w = lock.write()
    c = child(f"""
        import threading
        lock = rwdir.DirLock({str(tmp_path)!r})
        say("start")
        try:
            lock.write(timeout=0.2)
        except rwdir.Timeout:
            pass
        say("after", signal.set_wakeup_fd(-1))
    """)
    c.expect("start")
    assert c.expect("after").split()[1] == "-1"
    c.finish()
    w.release()
