"""Atomic writes: a reader sees the old file or the complete new one, never half of it.

Everything written here follows the user's umask (``tempfile`` alone would give 0600 files and
0700 folders), so a team sharing a machine can read each other's runs. A write that fails because
the disk is full, the place is not writable or the file is too large (``ulimit -f``) raises :class:`WriteError`,
one line naming the path and the fix; the previous file (or checkpoint folder) is left as it was.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
"""errno values of a full disk or an exhausted quota."""

DENIED = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
"""errno values of a place that is not writable."""

TOO_LARGE = frozenset({errno.EFBIG})
"""errno value of a file past the process's file-size limit (``ulimit -f``) or the file system's largest file."""

_OS_ERROR = re.compile(r"os error (\d+)")
"""How Rust libraries (safetensors, tokenizers) quote an errno in their messages."""


class WriteError(OSError):
    """A write failed because the disk is full, the place is read-only or the file too large; the message says what to do."""


def write_problem(err: BaseException) -> int | None:
    """The errno (in :data:`FULL`, :data:`DENIED` or :data:`TOO_LARGE`) behind ``err`` or the errors it was raised from, else None.

    Libraries report a full disk in their own words: safetensors as ``SafetensorError(... (os error 28))``,
    so the messages of the whole chain are read as well as ``OSError.errno``.
    """
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        code = err.errno if isinstance(err, OSError) else None
        match = _OS_ERROR.search(str(err))
        code = code if code is not None else (int(match.group(1)) if match else None)
        if code in FULL | DENIED | TOO_LARGE:
            return code
        err = err.__cause__ or err.__context__
    return None


def write_error(code: int, path: Path | str) -> WriteError:
    """The one-line :class:`WriteError` for errno ``code`` while writing ``path``."""
    if code in FULL:
        text = (
            f"no space left on {path} (disk or quota full); free space there and rerun (with resume=true for a run: "
            "its last complete checkpoint is intact), or point runs_dir=... at a larger disk"
        )
    elif code in TOO_LARGE:
        text = (
            f"file too large while writing {path}: past this process's file-size limit (`ulimit -f` shows it; the shell's "
            "`ulimit -f unlimited` lifts it) or the file system's largest file; raise the limit and rerun (with resume=true for "
            "a run: its last complete checkpoint is intact), or point runs_dir=... at another file system"
        )
    else:
        text = f"cannot write {path}: {os.strerror(code).lower()}; make it writable (chmod u+w) or point runs_dir=... elsewhere"
    error = WriteError(text)
    error.errno = code
    return error


@contextlib.contextmanager
def writing(path: Path | str) -> Iterator[None]:
    """Turn a full-disk, not-writable or too-large failure inside the block into :class:`WriteError` about ``path``."""
    try:
        yield
    except WriteError:
        raise
    except Exception as err:  # noqa: BLE001 - libraries raise their own types for an OS error (see write_problem)
        code = write_problem(err)
        if code is None:
            raise
        raise write_error(code, path) from err


def umask() -> int:
    """The process's umask: from ``/proc`` where there is one (no race with other threads), else set and restored."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(path: Path) -> None:
    """Give ``path`` (and everything under it) the mode a plain ``open``/``mkdir`` would: 0666/0777 less the umask."""
    mask = umask()
    for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
        if not item.is_symlink():
            item.chmod((0o777 if item.is_dir() else 0o666) & ~mask)


def write_bytes(path: Path, data: bytes | memoryview) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder, fsync, rename, fsync the folder."""
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, 0o666 & ~umask())
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (POSIX; a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text(path: Path, text: str) -> None:
    """Atomically write ``text`` (UTF-8)."""
    write_bytes(path, text.encode())


def write_json(path: Path, data: Any) -> None:
    """Atomically write ``data`` as indented JSON."""
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def staged_dir(final: Path) -> Iterator[Path]:
    """Yield a temp folder beside ``final``; on success it is renamed to ``final``, on error removed.

    The folder's contents take the umask's modes before the rename; a full disk or a read-only
    place raises :class:`WriteError` (``final``, if it existed, is untouched).
    """
    with writing(final):
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp"))
        try:
            yield tmp
            follow_umask(tmp)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def remove_stale(folder: Path, pattern: str = ".*.tmp") -> list[Path]:
    """Delete what killed writers left in ``folder``: temp files and staged folders matching ``pattern``.

    Only call this while holding the lock that keeps other writers out of ``folder``.
    """
    removed = []
    for path in sorted(folder.glob(pattern)) if folder.is_dir() else []:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (created if missing), held for the ``with`` block."""
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a")
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
