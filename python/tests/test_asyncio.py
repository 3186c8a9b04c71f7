"""asyncio: `async with lock.write_async(timeout=...)`, without blocking the event loop;
a cancelled task withdraws its files before CancelledError reaches the caller."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

import rwdir
from conftest import files, pending_of, stable_pending, writer_pid


def run(coro):
    return asyncio.run(coro)


async def until(cond, what: str, timeout: float = 10.0):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.002)


def test_async_with_and_await(lock):
    async def main():
        async with lock.write_async(timeout=5) as w:
            assert isinstance(w, rwdir.WriteGuard) and w.held and w.token >= 1
            assert lock.status().writer.path == w.path
        assert not w.held and lock.status().is_free()
        async with lock.read_async() as r1, lock.read_async(timeout=1) as r2:
            # Reads of one process share one reader's file (share_readers=True).
            assert len(lock.status().readers) == 1 and r1.held and r2.held
            assert r1.path == r2.path
        r = await lock.read_async()
        assert isinstance(r, rwdir.ReadGuard)
        r.release()
        acq = lock.write_async(timeout=3)
        assert isinstance(acq, rwdir.AsyncAcquisition) and "write" in repr(acq)
        with pytest.raises(ValueError):
            lock.write_async(timeout=-1)

    run(main())
    assert lock.status().is_free()


def test_waiting_does_not_block_the_event_loop(lock):
    async def main():
        w = lock.write()
        task = asyncio.ensure_future(lock.write_async(timeout=30).__aenter__())
        ticks = 0
        # The loop runs other coroutines (this one) while the task waits.
        await until(lambda: pending_of(lock, os.getpid()), "the task's queue file")
        for _ in range(20):
            await asyncio.sleep(0.005)
            ticks += 1
        assert ticks == 20 and not task.done()
        w.release()
        got = await asyncio.wait_for(task, 10)
        assert got.held
        got.release()

    run(main())


@pytest.mark.parametrize("stage", ["queued", "draining"])
def test_a_cancelled_task_leaves_no_files(lock, stage):
    async def main():
        holder = lock.write() if stage == "queued" else lock.read()
        task = asyncio.ensure_future(lock.write_async().__aenter__())
        if stage == "queued":
            await until(lambda: pending_of(lock, os.getpid()), "the task's queue file")
        else:
            await until(lambda: writer_pid(lock) == os.getpid(), "the task's .master_lock")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # At once, no polling: nothing of the cancelled acquisition is left.
        assert files(lock_dir) == [os.path.basename(holder.path)]
        holder.release()

    lock_dir = Path(lock.path)
    run(main())
    assert lock.status().is_free()


def test_wait_for_timeout_cancels_cleanly(lock):
    async def main():
        with lock.write():
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(lock.read_async(), 0.1)
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(lock.write_async(), 0.1)
            assert files(Path(lock.path)) == [".master_lock"]

    run(main())
    assert lock.status().is_free()


def test_timeouts(lock):
    async def main():
        with lock.write():
            t0 = time.monotonic()
            with pytest.raises(rwdir.Timeout) as e:
                async with lock.write_async(timeout=0.2):
                    pass
            assert 0.2 <= time.monotonic() - t0 < 2
            assert e.value.holder.kind == "write" and e.value.holder.pid == os.getpid()
            assert e.value.holder.path.endswith(".master_lock")
            with pytest.raises(rwdir.Busy):
                await lock.read_async(timeout=0)
            st = lock.status()
            assert st.pending == [] and st.readers == []

    run(main())


def test_writers_are_served_in_order_across_threads_and_tasks(lock):
    order = []

    async def main():
        w = lock.write()
        def thread():
            with lock.write(timeout=30):
                order.append("thread")  # while it holds: recorded before the task's turn

        t = threading.Thread(target=thread)
        t.start()
        # The thread's wait queued for good (not its first attempt's passing file).
        await asyncio.get_running_loop().run_in_executor(None, stable_pending, lock, 1)

        async def task():
            async with lock.write_async(timeout=30):
                order.append("task")

        fut = asyncio.ensure_future(task())
        await until(lambda: len(lock.status().pending) == 2, "the task's queue file")
        w.release()
        await asyncio.wait_for(fut, 30)
        t.join(30)

    run(main())
    assert order == ["thread", "task"]


def test_many_tasks_wait_without_threads_each(lock):
    async def main():
        w = lock.write()
        threads_before = threading.active_count()

        async def reader():
            async with lock.read_async(timeout=30):
                await asyncio.sleep(0.01)

        tasks = [asyncio.ensure_future(reader()) for _ in range(50)]
        await asyncio.sleep(0.05)
        assert threading.active_count() <= threads_before + 1  # rwdir's runtime thread at most
        w.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)

    run(main())
    assert lock.status().is_free()
