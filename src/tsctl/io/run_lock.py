"""The lock a live run holds on its folder, and the temp files a killed run leaves behind.

A process training into a run folder holds an exclusive ``flock`` on ``<run>/.lock`` from the
moment it creates or reopens the folder until it exits; the kernel drops the lock when the process
dies, even by SIGKILL. The lock file names its holder (``pid N on <host>``). Hence:

- a second process that wants the same run folder (this host, or another one on a shared file
  system with working locks) is refused while the first is alive;
- the holder may delete the temp files and staged checkpoint folders left in the run folder,
  ``checkpoints/``, ``seeds/`` and ``rollouts/`` (:data:`TEMP_FOLDERS`) by a killed writer, since
  no other writer of them can be alive. ``eval/`` is left alone: ``tsctl eval`` writes there
  without taking the lock;
- ``tsctl report`` tells a live run (lock held) from a dead one whose manifest still says ``running``.

Where the file system has no locks (``ENOLCK``), the run goes on unlocked and leaves temp files alone.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import time
from pathlib import Path
from typing import IO

from tsctl.io import atomic

LOCK_FILE = ".lock"
TEMP_FOLDERS = ("", "checkpoints", "seeds", "rollouts")
"""Folders of a run (relative to it) whose ``.*.tmp`` entries only the lock holder writes."""

_NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS})


class RunBusy(RuntimeError):
    """Another live process holds the run's lock; the message names it."""


class RunLock:
    """The held lock of one run folder; :meth:`release` (or the process's end) lets it go.

    Attributes:
        held: False where the file system has no locks (the run goes on unlocked).
    """

    def __init__(self, handle: IO[str], held: bool) -> None:
        self._handle, self.held = handle, held

    @classmethod
    def acquire(cls, folder: Path, tries: int = 20) -> "RunLock":
        """Take ``folder``'s lock, retrying ``tries`` times 0.1 s apart (a report may probe it for an instant).

        Raises:
            RunBusy: another process holds it.
            atomic.WriteError: the folder is read-only or the disk is full.
        """
        path = folder / LOCK_FILE
        with atomic.writing(path):
            handle = open(path, "a+")
        for attempt in range(tries):
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt + 1 < tries:
                    time.sleep(0.1)
                    continue
                handle.seek(0)
                owner = handle.read().strip() or "another process"
                handle.close()
                raise RunBusy(owner) from None
            except OSError as err:
                if err.errno not in _NO_LOCKS:
                    handle.close()
                    raise
                return cls(handle, held=False)
        with atomic.writing(path):
            handle.truncate(0)
            handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
            handle.flush()
        return cls(handle, held=True)

    def release(self) -> None:
        """Let the lock go."""
        self._handle.close()


def is_held(folder: Path) -> bool | None:
    """Whether a live process holds ``folder``'s lock; None when that cannot be told (no locks here)."""
    try:
        handle = open(folder / LOCK_FILE)
    except FileNotFoundError:
        return False
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return None
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def clean_temp(folder: Path) -> list[Path]:
    """Delete the ``.*.tmp`` files and folders killed writers left in the run; call only while holding its lock."""
    return [path for sub in TEMP_FOLDERS for path in atomic.remove_stale(folder / sub)]
