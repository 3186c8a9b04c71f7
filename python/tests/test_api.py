"""Every item of the Python API, one process (threads where a second holder is needed)."""

from __future__ import annotations

import errno
import gc
import inspect
import json
import os
import pathlib
import pickle
import pydoc
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from typing import Optional

import pytest

import rwdir
from conftest import files, pending_of, wait_until


def in_thread(fn):
    """Runs fn in another thread and returns its result (or raises its exception)."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


class Holder:
    """A thread that takes the lock, holds it until told, then releases it."""

    def __init__(self, lock: rwdir.DirLock, write: bool) -> None:
        self.lock, self.write = lock, write
        self.token: Optional[int] = None
        self.held = threading.Event()
        self.go = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self.run)
        self.thread.start()
        assert self.held.wait(10), self.error

    def run(self) -> None:
        try:
            g = self.lock.write() if self.write else self.lock.read()
            if isinstance(g, rwdir.WriteGuard):
                self.token = g.token  # made when first read, as the command does
        except BaseException as e:  # noqa: BLE001
            self.error = e
            return
        self.held.set()
        self.go.wait()
        g.release()

    def stop(self) -> None:
        self.go.set()
        self.thread.join(10)


def test_construction_and_properties(tmp_path):
    lock = rwdir.DirLock(tmp_path)
    assert lock.path == str(tmp_path)
    assert lock.lease == rwdir.DEFAULT_LEASE == 45.0
    assert lock.poll == rwdir.DEFAULT_POLL == (0.001, 0.1)
    lock = rwdir.DirLock(str(tmp_path), lease=3, poll=(0.002, 0.05))
    assert (lock.lease, lock.poll) == (3.0, (0.002, 0.05))
    assert repr(lock) == f"rwdir.DirLock({str(tmp_path)!r}, lease=3.0, poll=(0.002, 0.05))"
    assert rwdir.DirLock(pathlib.Path(tmp_path)).path == str(tmp_path)
    # Nothing is made before the first acquisition.
    assert not (tmp_path / ".rwdir").exists()
    # The override of the refusal of object-store mounts (issue #17) is keyword-only and
    # changes nothing on a filesystem that is not refused.
    with rwdir.DirLock(tmp_path, allow_unsafe_filesystem=True).write():
        pass
    with pytest.raises(TypeError):
        rwdir.DirLock(tmp_path, 45.0, (0.001, 0.1), True)
    # The cache window of a shared filesystem (keyword-only, seconds >= 0).
    with rwdir.DirLock(tmp_path, cache_window=0.0).read():
        pass
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="cache_window"):
            rwdir.DirLock(tmp_path, cache_window=bad)


@pytest.mark.parametrize(
    "kw",
    [dict(lease=0), dict(lease=-1), dict(lease=float("nan")), dict(lease=float("inf")),
     dict(poll=(0.1, 0.01)), dict(poll=(0, 0.1)), dict(poll=(-1, 0.1))],
)
def test_bad_options(tmp_path, kw):
    with pytest.raises(ValueError):
        rwdir.DirLock(tmp_path, **kw)


@pytest.mark.parametrize("timeout", [-1, float("nan")])
def test_bad_timeout(lock, timeout):
    with pytest.raises(ValueError):
        lock.read(timeout)
    with pytest.raises(ValueError):
        lock.write(timeout=timeout)


def test_missing_directory_and_not_a_directory(tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(FileNotFoundError) as e:
        rwdir.DirLock(missing)
    assert isinstance(e.value, rwdir.NotFound) and isinstance(e.value, rwdir.Error)
    assert e.value.errno == errno.ENOENT and e.value.filename == str(missing)
    assert str(e.value) == f"failed to open directory `{missing}`: No such file or directory (os error 2)"
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(NotADirectoryError) as e:
        rwdir.DirLock(f)
    assert isinstance(e.value, rwdir.NotADirectory)
    assert e.value.errno == errno.ENOTDIR and e.value.filename == str(f)
    assert str(e.value) == f"`{f}` is not a directory (a file)"
    # .rwdir that is not a real directory: at the first acquisition.
    (tmp_path / ".rwdir").write_text("")
    with pytest.raises(NotADirectoryError) as e:
        rwdir.DirLock(tmp_path).read()
    assert e.value.filename == str(tmp_path / ".rwdir")


def test_readers_share_and_a_writer_excludes(lock):
    r1 = lock.read()
    r2 = in_thread(lambda: lock.read(timeout=0))  # another thread shares
    with pytest.raises(BlockingIOError) as e:
        in_thread(lambda: lock.write(timeout=0))
    busy = e.value
    assert isinstance(busy, rwdir.Busy) and busy.errno == errno.EAGAIN
    assert busy.dir == lock.path and busy.filename == lock.path
    assert busy.holder.kind == "read" and busy.holder.pid == os.getpid()
    assert str(busy).startswith(f"lock on `{lock.path}` is busy: held by this process: reader pid {os.getpid()} on host ")
    r1.release()
    r2.release()
    w = in_thread(lambda: lock.write(timeout=0))
    assert isinstance(w, rwdir.WriteGuard)
    with pytest.raises(rwdir.Busy) as e:
        in_thread(lambda: lock.read(0))
    assert e.value.holder.kind == "write"
    w.release()
    assert lock.status().is_free()


def test_timeout_names_the_holder(lock):
    h = Holder(lock, write=True)
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError) as e:
            lock.read(timeout=0.2)
        took = time.monotonic() - t0
        assert 0.2 <= took < 2, took
        t = e.value
        assert isinstance(t, rwdir.Timeout) and t.errno == errno.ETIMEDOUT
        assert 0.2 <= t.waited < 2 and t.dir == lock.path
        assert t.holder.kind == "write" and t.holder.pid == os.getpid() and t.holder.alive is True
        assert str(t).startswith(f"timed out after 0.2 s waiting for lock on `{lock.path}`: held by this process: writer pid {os.getpid()} on host ")
        with pytest.raises(rwdir.Timeout):
            lock.write(timeout=0.05)
        # Nothing of the timed-out waits is left.
        st = lock.status()
        assert st.pending == [] and st.readers == [] and st.writer.pid == os.getpid()
    finally:
        h.stop()


def test_timeout_zero_is_one_attempt(lock):
    h = Holder(lock, write=True)
    try:
        t0 = time.monotonic()
        for _ in range(20):
            with pytest.raises(rwdir.Busy):
                lock.write(timeout=0)
        assert time.monotonic() - t0 < 1
    finally:
        h.stop()


def test_context_manager_releases_also_on_an_exception(lock):
    with lock.write(timeout=30) as guard:
        assert isinstance(guard, rwdir.WriteGuard) and guard.held
        assert lock.status().writer.path == guard.path == os.path.join(lock.path, ".rwdir", ".master_lock")
    assert not guard.held and lock.status().is_free()
    with pytest.raises(ZeroDivisionError):
        with lock.read() as r:
            1 / 0
    assert not r.held and lock.status().is_free()


def test_release_is_idempotent_and_a_released_guard_holds_nothing(lock):
    g = lock.read()
    assert repr(g).startswith("<rwdir.ReadGuard held ")
    g.release()
    g.release()
    assert not g.held and not g.is_lost()
    assert repr(g).startswith("<rwdir.ReadGuard released ")
    with pytest.raises(rwdir.LockLost) as e:
        g.check()
    assert e.value.reason == "the lock was already released" and e.value.filename == g.path
    with pytest.raises(rwdir.LockLost):
        g.refresh()
    with pytest.raises(rwdir.LockLost):
        with g:
            pass
    w = lock.write()
    w.release()
    with pytest.raises(rwdir.LockLost):
        w.downgrade()


def test_tokens_grow(lock):
    tokens = []
    for _ in range(5):
        with lock.write() as w:
            tokens.append(w.token)
    assert tokens == sorted(set(tokens)) and tokens[0] >= 1
    assert lock.status().token == tokens[-1]


def test_a_token_is_made_when_first_read_and_kept(lock):
    with lock.write() as w:
        assert "token=?" in repr(w)  # not read yet: nothing made
    assert lock.status().token is None
    w = lock.write()
    assert w.token == 1 and w.token == 1 and "token=1" in repr(w)
    w.release()
    assert w.token == 1  # kept after the release
    w = lock.write()
    w.release()
    with pytest.raises(rwdir.LockLost):  # released before it was ever read
        w.token
    assert lock.write().token == 2


@pytest.mark.parametrize("write", [False, True])
def test_a_removed_lock_file_is_a_lost_lock(lock, write):
    g = lock.write() if write else lock.read()
    g.check()
    assert not g.is_lost()
    os.remove(g.path)  # someone removes it
    with pytest.raises(rwdir.LockLost) as e:
        g.check()
    assert "removed or replaced by someone else" in e.value.reason
    assert str(e.value).startswith(f"lock lost: `{g.path}`: ")
    assert g.is_lost() and g.held
    assert repr(g).split()[1 + write] == "lost"
    # Released from a `with`, the loss is raised (the block raised nothing).
    with pytest.raises(rwdir.LockLost):
        with (lock.write() if write else lock.read()) as h:
            os.remove(h.path)
    assert h.is_lost() and not h.held
    with pytest.raises(rwdir.LockLost):  # release reports the loss too
        g.release()
    assert not g.held and g.is_lost()


def test_refresh_sets_the_mtime(lock):
    for take in (lock.read, lock.write):
        g = take()
        os.utime(g.path, (1_000_000_000, 1_000_000_000))
        g.refresh()
        assert os.stat(g.path).st_mtime > time.time() - 60
        g.release()


def test_downgrade_lets_no_writer_in(lock):
    w = lock.write()
    token = w.token
    r = w.downgrade()
    assert isinstance(r, rwdir.ReadGuard) and r.held and not w.held and w.token == token
    st = lock.status()
    assert st.writer is None and [e.path for e in st.readers] == [r.path]
    in_thread(lambda: lock.read(timeout=0)).release()  # readers share with it
    with pytest.raises(rwdir.Busy):
        in_thread(lambda: lock.write(timeout=0))
    r.release()
    assert lock.status().is_free()


def test_status_names_holders_and_waiters(lock):
    assert lock.status().is_free()
    assert lock.status().state_dir == os.path.join(lock.path, ".rwdir")
    writer = Holder(lock, write=True)
    queued = threading.Thread(target=lambda: lock.write().release())
    queued.start()
    try:
        # The queued writer's file: in the queue, behind the writer.
        pending = wait_until(lambda: lock.status().pending, "a queued writer")
        st = lock.status()
        assert st.writer.kind == "write" and [e.kind for e in pending] == ["pending"]
        host = socket.gethostname()
        now = datetime.now(timezone.utc)
        for e in (st.writer, *pending):
            assert e.pid == os.getpid() and e.host == host and e.alive is True
            assert e.since.tzinfo is not None and abs((now - e.since).total_seconds()) < 60
            assert os.path.dirname(e.path) == st.state_dir and e.pgid is None
        assert str(st.writer) == f"writer pid {os.getpid()} on host {host} (0 s)"
        assert st.token == writer.token and st.token is not None and not st.is_free()
    finally:
        writer.stop()
        queued.join(10)
    reader = Holder(lock, write=False)
    try:
        st = lock.status()
        assert st.writer is None and st.pending == [] and [e.kind for e in st.readers] == ["read"]
    finally:
        reader.stop()
    assert lock.status().is_free()


def test_cleanup_removes_dead_holders_only(tmp_path, child):
    lock = rwdir.DirLock(tmp_path)
    dead = child(f"""
        g = rwdir.DirLock({str(tmp_path)!r}).write()
        say("held " + str(g.token))
        time.sleep(600)
    """)
    assert dead.expect("held") == "held 1"
    dead.kill()
    plan = rwdir.cleanup(tmp_path, dry_run=True)
    assert [(e.kind, e.pid, e.alive) for e in plan] == [("write", dead.pid, False)]
    assert os.path.exists(plan[0].path)
    removed = rwdir.cleanup(tmp_path)
    assert [(e.kind, e.pid) for e in removed] == [("write", dead.pid)]
    assert not os.path.exists(plan[0].path) and lock.status().is_free()
    # A live holder's file is never removed by cleanup, only by cleanup(all=True).
    r = lock.read()
    assert rwdir.cleanup(tmp_path) == [] and lock.cleanup() == []
    assert [e.pid for e in lock.cleanup(all=True, dry_run=True)] == [os.getpid()]
    assert os.path.exists(r.path)
    assert [e.kind for e in rwdir.cleanup(tmp_path, all=True)] == ["read"]
    assert lock.status().is_free() and r.is_lost() is False  # not yet noticed
    with pytest.raises(rwdir.LockLost):
        r.check()
    # Tokens keep growing across cleanup(all=True).
    with lock.write() as w:
        assert w.token > 1
    assert rwdir.cleanup(tmp_path) == []
    with pytest.raises(FileNotFoundError):
        rwdir.cleanup(tmp_path / "missing")


def test_a_thread_asking_for_its_own_lock_is_refused(lock):
    with lock.read() as r:
        with pytest.raises(rwdir.WouldDeadlock) as e:
            lock.write()
        assert e.value.errno == errno.EDEADLK and e.value.dir == lock.path
        assert str(e.value) == (
            f"write lock on `{lock.path}` would wait for ever: this thread holds a read lock on it "
            f"(`{r.path}`), and a writer waits for every reader; release that guard first"
        )
    with lock.write():
        with pytest.raises(rwdir.WouldDeadlock):
            lock.read(timeout=5)
        with pytest.raises(rwdir.WouldDeadlock):
            lock.write(timeout=0)


def test_a_thread_asking_for_its_own_lock_is_refused_also_after_waiting(lock):
    # Guards taken after waiting (the binding drives the library's async wait for them)
    # count as the thread's too: no wait for ever on its own guard.
    h = Holder(lock, write=True)

    def waits_then_asks():
        w = lock.write(timeout=30)  # waits for the holder
        with pytest.raises(rwdir.WouldDeadlock) as e:
            lock.read(timeout=30)
        assert str(e.value).endswith("this thread holds the write lock on it "
                                     f"(`{w.path}`); release or downgrade that guard first")
        with pytest.raises(rwdir.WouldDeadlock):
            lock.write(timeout=0)
        r = w.downgrade()  # the reader counts as the thread's too
        with pytest.raises(rwdir.WouldDeadlock):
            lock.write()
        lock.read(timeout=0).release()  # readers share, no writer waits
        r.release()
        with lock.write(timeout=0):
            pass

    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", _catch(waits_then_asks)))
    t.start()
    wait_until(lambda: lock.status().pending, "the thread's queue file")
    h.stop()
    t.join(60)
    assert not t.is_alive()
    if result["r"] is not None:
        raise result["r"]
    assert lock.status().is_free()


def _catch(fn):
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - re-raised by the test
        return e
    return None


def test_a_guard_may_be_released_by_another_thread(lock):
    w = lock.write()
    in_thread(w.release)
    assert not w.held and lock.status().is_free()
    r = in_thread(lock.read)
    r.release()  # taken in another thread, released in this one
    assert lock.status().is_free()


def test_a_collected_guard_releases(lock):
    lock.write()  # dropped at once
    assert lock.status().is_free()
    g = lock.write()
    del g
    assert lock.status().is_free()
    # In a reference cycle: released when the cycle is collected.
    cycle = [lock.read()]
    cycle.append(cycle)
    del cycle
    gc.collect()
    assert lock.status().is_free()


def test_waiting_releases_the_gil(lock):
    # The holder runs Python code until it sees this thread's queue file, and only then
    # releases: with the GIL held by the waiter it would never see it. (Taken by
    # another thread: this thread's own would be refused with WouldDeadlock.)
    w = in_thread(lock.write)

    def release_when_queued():
        wait_until(lambda: pending_of(lock, os.getpid()), "the waiter's queue file")
        w.release()

    t = threading.Thread(target=release_when_queued)
    t.start()
    with lock.write(timeout=20):
        pass
    t.join()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to run a child as another user")
def test_permission_denied_names_the_path_and_owner():
    d = tempfile.mkdtemp(prefix="rwdir-perm-")  # root's, mode 0755 below
    try:
        os.chmod(d, 0o755)
        out = subprocess.run(
            [sys.executable, "-c", f"""
import json, os, rwdir
os.setgroups([]); os.setgid(65534); os.setuid(65534)  # nobody, once rwdir is loaded
try:
    rwdir.DirLock({d!r}).read()
except PermissionError as e:
    print(json.dumps(dict(cls=type(e).__name__, errno=e.errno, filename=e.filename,
                          owner=str(e.owner), uid=e.owner.uid, msg=str(e))))
"""],
            capture_output=True, text=True, timeout=60,
        )
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout)
        assert got["cls"] == "PermissionDenied" and got["errno"] in (errno.EACCES, errno.EPERM)
        assert got["filename"] == os.path.join(d, ".rwdir") and got["uid"] == 0
        assert got["owner"].startswith("user root (uid 0), group ") and got["owner"].endswith("mode 0755")
        assert got["msg"].startswith(f"failed to create state directory `{d}/.rwdir`: this user may not create it in `{d}`, which belongs to user root (uid 0)")
    finally:
        os.rmdir(d)


def test_errors_pickle():
    e = rwdir.Busy("lock on `/x` is busy", errno=errno.EAGAIN, filename="/x", dir="/x", holder=None)
    f = pickle.loads(pickle.dumps(e))
    assert type(f) is rwdir.Busy and str(f) == str(e) and f.errno == e.errno and f.dir == "/x"


def test_every_public_item_has_a_docstring():
    for name in rwdir.__all__:
        item = getattr(rwdir, name)
        if callable(item):
            assert (item.__doc__ or "").strip(), name
    for cls in (rwdir.DirLock, rwdir.ReadGuard, rwdir.WriteGuard, rwdir.AsyncAcquisition,
                rwdir.Status):
        for name, member in inspect.getmembers(cls):
            if name.startswith("_") and name not in ("__enter__", "__exit__", "__aenter__", "__aexit__"):
                continue
            if callable(member) or isinstance(member, property) or inspect.isgetsetdescriptor(member):
                assert (member.__doc__ or "").strip(), f"{cls.__name__}.{name}"
    text = pydoc.render_doc(rwdir.DirLock, renderer=pydoc.plaintext)
    for word in ("read(self, /, timeout=None)", "write_async", "status", "cleanup", "Ctrl-C",
                 "`lease` (default 45.0)", "`poll` (default (0.001, 0.1))"):
        assert word in text, word
    if sys.version_info >= (3, 10):  # a class's signature is shown from 3.10 on (abi3)
        assert rwdir.DirLock.__text_signature__ == (
            "(path, *, lease=45.0, poll=(0.001, 0.1), allow_unsafe_filesystem=False, cache_window=None, "
            "share_readers=True)"
        )
        assert ("DirLock(path, *, lease=45.0, poll=(0.001, 0.1), allow_unsafe_filesystem=False, "
                "cache_window=None, share_readers=True)") in text


def test_reads_of_one_process_share_a_file_unless_told_not_to(tmp_path):
    shared = rwdir.DirLock(tmp_path)
    with shared.read() as a, shared.read() as b:
        assert a.path == b.path and len(shared.status().readers) == 1
        a.release()
        assert b.held and os.path.exists(b.path)
    assert shared.status().is_free()
    apart = rwdir.DirLock(tmp_path, share_readers=False)
    with apart.read() as a, apart.read() as b:
        assert a.path != b.path and len(apart.status().readers) == 2
    assert apart.status().is_free()
