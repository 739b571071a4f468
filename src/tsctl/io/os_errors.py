"""One line for a file-system error that reaches the command line from below tsctl (the OS, a library).

tsctl's own errors already name the problem and the fix, and a full disk or a read-only place becomes
:class:`tsctl.io.atomic.WriteError`. What is left (a path through a file, a folder where a file was
expected, a broken link, an I/O error of the disk) is put in the same form: the OS's words, the path,
and what to check.
"""

from __future__ import annotations

import errno
import os

_HINTS = {
    errno.ENOTDIR: "a part of that path is a file, not a folder; point the setting that names it at a folder",
    errno.EISDIR: "it is a folder where a file is expected; point the setting that names it at a file",
    errno.ENOENT: "it does not exist; check the path (and runs_dir=, model.path=, task.file.*_path=)",
    errno.ELOOP: "a symbolic link on that path points back at itself; fix or remove the link",
    errno.ENAMETOOLONG: "the name is longer than the file system allows; choose a shorter name=... or experiment=...",
    errno.EIO: "the disk reported an I/O error; check the disk (dmesg), then rerun (with resume=true for a run)",
}


def one_line(err: OSError) -> str:
    """``<what the OS said>: <path>; <what to check>`` for ``err``."""
    what = (err.strerror or type(err).__name__).lower()
    path = err.filename if err.filename is not None else "a file"
    if err.filename2 is not None:
        path = f"{path} -> {err.filename2}"
    hint = _HINTS.get(err.errno or 0, "check that path and its permissions, then rerun (with resume=true for a run)")
    return f"{what}: {os.fsdecode(path) if isinstance(path, bytes) else path}; {hint}"
