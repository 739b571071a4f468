"""The folder ``tsctl seed`` and ``tsctl rollout`` write a shard into, held while they do.

A command that writes a shard (:func:`tsctl.io.shards.write_shard`) holds the folder's lock (``.lock``,
:mod:`tsctl.io.run_lock`) from its start to its end (:func:`shard_place`). Holding it:

- a second writer of the same folder is refused in one line, not left to race for the same file;
- the hidden ``.*.tmp`` files a killed writer left are removed (no live writer can own them);
- a shard already there is refused unless ``shards.overwrite=true``, in words that say what is there: a
  complete shard, a shard without its checksum file (a write cut short, which no reader accepts), or a
  checksum file alone.

A folder this made for a command that wrote nothing is removed again.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from tsctl.config.errors import ConfigError
from tsctl.io import atomic
from tsctl.io.progress import console
from tsctl.io.run_lock import is_held
from tsctl.io.runs import held
from tsctl.io.shards import checksum_path


def refuse_existing(path: Path, overwrite: bool) -> None:
    """Refuse to write the shard ``path`` over what is there unless ``overwrite``.

    Raises:
        ConfigError: at ``shards.overwrite``, saying what is there and the fixes.
    """
    checksum = checksum_path(path)
    if overwrite or not (path.exists() or checksum.exists()):
        return
    if not checksum.exists():
        what = f"{path} is a write cut short (its checksum file {checksum.name} is missing, so no reader accepts it)"
        raise ConfigError("shards.overwrite", f"{what}; pass shards.overwrite=true to write it again")
    there = "already exists" if path.exists() else "already exists (its checksum file does)"
    raise ConfigError("shards.overwrite", f"{path} {there}; pass shards.overwrite=true to replace it or shards.out_dir=... to keep it")


@contextlib.contextmanager
def shard_place(path: Path, overwrite: bool) -> Iterator[None]:
    """Hold the lock of the folder of the shard ``path`` for the ``with`` block (see the module docstring).

    Raises:
        RunError: another process holds the folder.
        ConfigError: a shard is there and ``overwrite`` is off (:func:`refuse_existing`).
    """
    folder = path.parent
    with held(folder, f"{folder} is in use by {{owner}} (another tsctl seed or rollout writing there); wait for it to end, then rerun", make=True):
        removed = atomic.remove_stale(folder) if is_held(folder) else []
        if removed:
            console.print(f"removed {len(removed)} temp file(s) an interrupted write left in {folder}", highlight=False)
        refuse_existing(path, overwrite)
        yield
