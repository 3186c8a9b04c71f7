"""Crash-safe reader-writer locks on a directory, shared by threads, processes and hosts.

The Python binding of the rwdir library (Rust): the same lock files in DIR/.rwdir/,
so Python programs, Rust programs and the `rwdir` command exclude each other.

    import rwdir

    lock = rwdir.DirLock("/srv/data")
    with lock.write(timeout=30) as guard:   # exclusive: a restore
        print("restoring with fencing token", guard.token)
    with lock.read():                       # shared: any number of readers
        ...
    print(lock.status())                    # who holds, who waits
    rwdir.cleanup("/srv/data")              # dead holders' files (a pre-startup job)

Errors are OSError subclasses: Busy (BlockingIOError) for timeout=0 on a held lock,
Timeout (TimeoutError), LockLost, WouldDeadlock, PermissionDenied (PermissionError),
NotADirectory (NotADirectoryError), NotFound (FileNotFoundError); all derive from
rwdir.Error. See docs/python.md for the migration from GlobalDirectoryLock and DotLock.
"""

from __future__ import annotations

import asyncio
import errno as _errno
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import TracebackType
from typing import Any, Dict, Generator, Generic, List, Optional, Tuple, TypeVar

from ._rwdir import DEFAULT_LEASE, DEFAULT_POLL, DirLock, ReadGuard, WriteGuard, cleanup
from . import _rwdir

__all__ = [
    "DEFAULT_LEASE",
    "DEFAULT_POLL",
    "AsyncAcquisition",
    "Busy",
    "DirLock",
    "Entry",
    "Error",
    "LockLost",
    "NotADirectory",
    "NotFound",
    "Owner",
    "PermissionDenied",
    "ReadGuard",
    "Status",
    "Timeout",
    "WouldDeadlock",
    "WriteGuard",
    "cleanup",
]

_ROLES = {
    "read": "reader",
    "write": "writer",
    "pending": "pending writer",
    "break": "lock breaker",
    "tmp": "file being created",
    "token": "token",
}


@dataclass(frozen=True)
class Entry:
    """One lock file: what it stands for, who made it, and whether that one lives.

    kind: "read" (a reader's .slave_lock-*), "write" (.master_lock), "pending" (a
    queued writer's .pending_lock-*), "break" or "tmp" (transient files).
    host, pid: the holder's host name and process id (None if the file is malformed).
    since: when the holder took (or queued for) the lock, a timezone-aware datetime
    (the file's mtime if it is malformed).
    alive: True (checked on this host), False (dead: the next contender removes the
    file), None (cannot be checked from here, e.g. another host; held until its lease
    runs out).
    path: the lock file. pgid: a process group that keeps the lock alive (the
    command's COMMAND), or None.
    """

    kind: str
    host: Optional[str]
    pid: Optional[int]
    since: datetime
    alive: Optional[bool]
    path: str
    pgid: Optional[int] = None

    def __str__(self) -> str:
        role = _ROLES.get(self.kind, self.kind)
        age = max(0, int((datetime.now(timezone.utc) - self.since).total_seconds()))
        if self.pid is None:
            return f"{role} with a malformed lock file `{self.path}` ({age} s old)"
        return f"{role} pid {self.pid} on host {self.host} ({age} s)"


def _entry(kind: str, host: Optional[str], pid: Optional[int], since: float,
           alive: Optional[bool], path: str, pgid: Optional[int]) -> Entry:
    return Entry(kind, host, pid, datetime.fromtimestamp(since, timezone.utc), alive, path, pgid)


@dataclass(frozen=True)
class Status:
    """Who holds and who waits for the lock on a directory (DirLock.status()).

    writer: the writer (an Entry) or None; pending: queued writers, in queue order;
    readers: the readers (oldest first); other: transient files (breakers, files being
    made). token: the last fencing token handed out, or None. dir, state_dir: the
    locked directory and its .rwdir.
    """

    dir: str
    state_dir: str
    token: Optional[int]
    writer: Optional[Entry]
    pending: List[Entry] = field(default_factory=list)
    readers: List[Entry] = field(default_factory=list)
    other: List[Entry] = field(default_factory=list)

    def is_free(self) -> bool:
        """Whether no writer holds or waits and no reader holds."""
        return self.writer is None and not self.pending and not self.readers


@dataclass(frozen=True)
class Owner:
    """The owner and mode of a file or directory that a PermissionDenied names."""

    uid: int
    user: Optional[str]
    gid: int
    group: Optional[str]
    mode: int

    def __str__(self) -> str:
        user = f"user {self.user} (uid {self.uid})" if self.user else f"uid {self.uid}"
        return f"{user}, group {self.group or self.gid}, mode {self.mode:04o}"


class Error(OSError):
    """Base of every exception rwdir raises (an OSError).

    str(e) is the whole message, as the rwdir command prints it: what failed, the path,
    and for a busy or timed-out lock the holder in the way (mode, pid, host, for how
    long). Attributes: errno, filename (the path the error is about: the directory, or
    a lock file), dir (the locked directory, where known), holder (the Entry in the
    way, for Busy, Timeout and WouldDeadlock, else None).
    """

    dir: Optional[str]
    holder: Optional[Entry]

    def __init__(self, message: str = "", *, errno: Optional[int] = None,
                 filename: Optional[str] = None, dir: Optional[str] = None,
                 holder: Optional[Entry] = None, **extra: Any) -> None:
        super().__init__(message)
        self.errno = errno
        self.filename = filename
        self.dir = dir
        self.holder = holder
        for k, v in extra.items():
            setattr(self, k, v)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> Tuple[Any, ...]:
        state = dict(self.__dict__, errno=self.errno, filename=self.filename)
        return (_rebuild, (type(self), self.args[0] if self.args else "", state))


def _rebuild(cls: "type[Error]", message: str, state: Dict[str, Any]) -> Error:
    e = cls(message)
    for k, v in state.items():
        setattr(e, k, v)
    return e


class Busy(Error, BlockingIOError):
    """The lock is held (timeout=0 made its one attempt). .holder names who holds it."""


class Timeout(Error, TimeoutError):
    """The timeout ran out. .holder names who was in the way, .waited how long (s)."""

    waited: float


class LockLost(Error):
    """A held lock is no longer ours: its file was removed or replaced by someone else,
    or its filesystem went away (also raised for a guard that was already released).
    .reason says what was observed."""

    reason: str


class WouldDeadlock(Error):
    """The calling thread asked for a lock that only its own release could grant (a
    write while it holds a lock on the directory, a read while it holds the write lock
    or while a writer waits for its read lock). Nothing was created."""


class PermissionDenied(Error, PermissionError):
    """A lock file or the state directory could not be made, opened or removed for lack
    of permission. .filename is the path, .owner (an Owner, or None) whose it is.
    docs/multi-user.md says how to set a shared directory up."""

    owner: Optional[Owner]


class NotADirectory(Error, NotADirectoryError):
    """The locked directory, or its .rwdir, is not a real directory."""


class NotFound(Error, FileNotFoundError):
    """The directory (or a path on the way to it) does not exist."""


_ERRNO = {
    "busy": _errno.EAGAIN,
    "timeout": _errno.ETIMEDOUT,
    "notadir": _errno.ENOTDIR,
    "deadlock": _errno.EDEADLK,
    "cancelled": _errno.EINTR,
}


def _error(variant: str, message: str, errno: Optional[int], path: str, extra: Dict[str, Any]) -> Error:
    """The exception for one of the library's errors (called by the binding)."""
    errno = errno if errno is not None else _ERRNO.get(variant)
    cls: type[Error]
    if variant == "busy":
        cls = Busy
    elif variant == "timeout":
        cls = Timeout
    elif variant == "lost":
        cls = LockLost
    elif variant == "deadlock":
        cls = WouldDeadlock
    elif variant == "notadir" or errno == _errno.ENOTDIR:
        cls = NotADirectory
    elif variant == "permission" or errno in (_errno.EACCES, _errno.EPERM):
        cls = PermissionDenied
        extra.setdefault("owner", None)
    elif errno == _errno.ENOENT:
        cls = NotFound
    else:
        cls = Error
    extra.setdefault("dir", None)
    extra.setdefault("holder", None)
    return cls(message, errno=errno, filename=path, **extra)


def _wake(future: "asyncio.Future[None]") -> None:
    if not future.done():
        future.set_result(None)


_G = TypeVar("_G", ReadGuard, WriteGuard)


class AsyncAcquisition(Generic[_G]):
    """An acquisition for asyncio, from DirLock.read_async() or write_async().

    Use it as `async with lock.write_async(timeout=30) as guard: ...` (released when the
    block ends), or `guard = await lock.write_async()`. The wait runs on rwdir's own
    runtime thread, never on the event loop. If the awaiting task is cancelled (or the
    timeout runs out), the acquisition's files are removed before CancelledError (or
    rwdir.Timeout) reaches the caller; its place in the queue is given up then.
    """

    __slots__ = ("_lock", "_write", "_timeout", "_guard")

    def __init__(self, lock: DirLock, write: bool, timeout: Optional[float]) -> None:
        self._lock = lock
        self._write = write
        self._timeout = timeout
        self._guard: Optional[_G] = None

    async def _acquire(self) -> _G:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        op = _rwdir._start_async(self._lock, self._write, self._timeout)
        fd = op.fileno()
        # The pipe reads end-of-file once the wait is over (rwdir's thread never takes
        # the GIL).
        loop.add_reader(fd, _wake, done)
        try:
            await done
        except BaseException:
            op.cancel()
            raise
        finally:
            loop.remove_reader(fd)
        return op.result()  # type: ignore[return-value]  # read or write, as asked

    def __await__(self) -> Generator[Any, None, _G]:
        """`await lock.write_async()`: waits, then returns the guard (release it)."""
        return self._acquire().__await__()

    async def __aenter__(self) -> _G:
        """Waits for the lock; returns the guard."""
        self._guard = await self._acquire()
        return self._guard

    async def __aexit__(self, exc_type: Optional[type], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> bool:
        """Releases the lock (as the guard's __exit__ does)."""
        guard, self._guard = self._guard, None
        if guard is not None:
            return guard.__exit__(exc_type, exc, tb)
        return False

    def __repr__(self) -> str:
        mode = "write" if self._write else "read"
        return f"<rwdir.AsyncAcquisition {mode} {self._lock.path!r} timeout={self._timeout}>"
