"""Cross-language: Python and the `rwdir` command take the same lock."""

from __future__ import annotations

import os
import select
import subprocess
import threading

import pytest

import rwdir
from conftest import settled, wait_until, writer_pid


def no_output_yet(proc: subprocess.Popen) -> bool:
    ready, _, _ = select.select([proc.stdout], [], [], 0)
    return not ready


def test_python_reader_and_rwdir_write_exclude_each_other(tmp_path, rwdir_bin):
    lock = rwdir.DirLock(tmp_path)
    reader = lock.read()
    # One attempt: the command sees the Python reader and names it.
    out = subprocess.run([rwdir_bin, "write", "--no-wait", str(tmp_path), "true"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 75, out
    assert f"reader pid {os.getpid()} on host" in out.stderr, out.stderr
    # A waiting command writer: queued behind the reader, COMMAND not started.
    writer = subprocess.Popen(
        [rwdir_bin, "write", "--quiet", str(tmp_path), "--", "sh", "-c", "echo in; exec cat"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        def files_of_writers():
            st = lock.status()
            return ([st.writer] if st.writer else []) + st.pending

        # (Maybe still its first attempt's file: the command tries once, then waits.)
        waiting = wait_until(files_of_writers, "the command's queue file")
        assert {e.pid for e in waiting} == {writer.pid}
        assert no_output_yet(writer), "COMMAND ran while a Python reader held the lock"
        reader.release()
        assert writer.stdout.readline() == "in\n"
        # Now the command holds the write lock: Python readers and writers are kept out.
        with pytest.raises(rwdir.Busy) as e:
            lock.read(timeout=0)
        assert e.value.holder.kind == "write" and e.value.holder.pid == writer.pid
        with pytest.raises(rwdir.Timeout):
            lock.write(timeout=0.1)
        writer.stdin.close()  # COMMAND (cat) ends, the command releases
        assert writer.wait(30) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    with lock.read(timeout=5):
        pass
    assert lock.status().is_free()


def test_rwdir_read_and_a_python_writer_exclude_each_other(tmp_path, rwdir_bin):
    lock = rwdir.DirLock(tmp_path)
    reader = subprocess.Popen(
        [rwdir_bin, "read", "--quiet", str(tmp_path), "--", "sh", "-c", "echo in; exec cat"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert reader.stdout.readline() == "in\n"
        with pytest.raises(rwdir.Busy) as e:
            lock.write(timeout=0)
        assert e.value.holder.kind == "read" and e.value.holder.pid == reader.pid
        # A waiting Python writer gets in once the command's reader leaves.
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("w", lock.write(timeout=30)))
        t.start()
        settled(lambda: writer_pid(lock) == os.getpid(), "the Python writer's .master_lock")
        assert "w" not in got
        out = subprocess.run([rwdir_bin, "read", "--no-wait", str(tmp_path), "true"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 75 and f"writer pid {os.getpid()}" in out.stderr, out
        reader.stdin.close()
        assert reader.wait(30) == 0
        t.join(30)
        assert got["w"].held
        got["w"].release()
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    assert lock.status().is_free()
