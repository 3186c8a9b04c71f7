"""After os.fork() the child does not own the parent's guards: releasing or dropping them
there does nothing, and the parent still holds the lock. The child takes locks of its
own as any process does (blocking, and with asyncio on a runtime of its own)."""

from __future__ import annotations

import asyncio
import gc
import os
import time

import pytest

import rwdir


def in_child(fn) -> int:
    """Runs fn() in a forked child; returns its exit status (0: fn returned)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fn()
            code = 0
        except BaseException:  # noqa: BLE001 - reported through the exit status
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.parametrize("write", [False, True])
def test_the_child_does_not_own_the_parents_guard(lock, write):
    g = lock.write() if write else lock.read()
    parent = os.getpid()

    def child():
        g.release()  # does nothing here
        assert not g.held  # this copy is released ...
        st = lock.status()  # ... but the parent's lock is not
        holders = [st.writer] if write else st.readers
        assert [e.pid for e in holders] == [parent]
        assert os.path.exists(g.path)
        if write:
            with pytest.raises(rwdir.Busy):
                lock.read(timeout=0)

    assert in_child(child) == 0
    # The child's copy was dropped at its exit too: the parent still holds.
    assert g.held and not g.is_lost()
    g.check()
    assert os.path.exists(g.path)
    g.release()
    assert lock.status().is_free()


def test_a_guard_dropped_in_the_child_does_not_release(lock):
    g = lock.write()

    def child():
        del_me = [g]
        del_me.clear()
        gc.collect()
        assert lock.status().writer.pid == os.getppid()

    assert in_child(child) == 0
    assert lock.status().writer.pid == os.getpid()
    g.release()


def test_the_child_takes_its_own_locks_also_with_asyncio(lock):
    async def use():
        async with lock.write_async(timeout=10) as w:
            assert lock.status().writer.pid == os.getpid() and w.held

    asyncio.run(use())  # the parent's asyncio runtime exists now

    def child():
        with lock.write(timeout=10):
            assert lock.status().writer.pid == os.getpid()
        asyncio.run(use())  # a runtime of the child's own
        assert lock.status().is_free()

    assert in_child(child) == 0
    asyncio.run(use())


# A forked child's guards get a heartbeat thread of the child's own (the library's
# fix of the bug this test found: threads::a_forked_childs_guards_are_kept_fresh).
def test_a_forked_childs_guards_are_refreshed(tmp_path):
    (tmp_path / "other").mkdir()
    held = rwdir.DirLock(tmp_path / "other").read()  # the parent's heartbeat thread runs
    lock = rwdir.DirLock(tmp_path, lease=0.9)  # heartbeats every 0.3 s

    def child():
        with lock.write() as w:
            os.utime(w.path, (1e9, 1e9))
            time.sleep(1.0)  # three heartbeat periods
            assert os.stat(w.path).st_mtime > 1e9 + 1, "no heartbeat in the forked child"

    assert in_child(child) == 0
    held.release()
