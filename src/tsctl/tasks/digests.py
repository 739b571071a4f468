"""Digests of a task's data: what keys the built-in model's warm-up cache, and what a run's manifest records.

A data path's digest is that of its content, wherever it lies: the sha256 of a file's bytes; of a folder written by
``save_to_disk``, the sha256 of its files' names and bytes; of a hub dataset, the fingerprint ``datasets`` gives the
loaded split. Rows rewritten at the same path give another digest; the same rows at another path the same one. A
split's digest is that of its problems as a command uses them (id, question, answer, worked solution, in order).
A resume compares the digests its manifest recorded with the data's now (:func:`data_changes`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tsctl.config.schema import TaskConfig
from tsctl.tasks.base import Problem, Split
from tsctl.tasks.hf_datasets import is_hub_id, load_hub_dataset, parse_hub_id
from tsctl.tasks.records import DataError
from tsctl.tasks.registry import TASKS, build_task, task_content

BLOCK = 1 << 20
"""Bytes hashed at a time."""


def data_digest(path: str, path_key: str) -> str:
    """The digest of the content a data path names (``path_key`` is the setting that names it).

    Raises:
        DataError: the path does not exist; a hub dataset that cannot be loaded.
    """
    if is_hub_id(path):
        hub = parse_hub_id(path)
        return "datasets:" + load_hub_dataset(hub.repo, hub.config, hub.split, f"{path_key}={path}", path_key)._fingerprint
    place = Path(path)
    digest = hashlib.sha256()
    if place.is_dir():
        for file in sorted(f for f in place.rglob("*") if f.is_file()):
            digest.update(file.relative_to(place).as_posix().encode() + b"\0")
            hash_file(file, digest)
    elif place.is_file():
        hash_file(place, digest)
    else:
        raise DataError(f"data file not found: {path} (resolved to {place.resolve()}); point {path_key} at it")
    return "sha256:" + digest.hexdigest()


def problems_digest(problems: Sequence[Problem]) -> str:
    """The sha256 of a split's problems, in order (each one's id, question, answer and worked solution)."""
    digest = hashlib.sha256()
    for p in problems:
        digest.update(json.dumps([p.id, p.question, p.answer, p.solution]).encode() + b"\n")
    return "sha256:" + digest.hexdigest()


def data_digests(cfg: TaskConfig) -> dict[str, Any]:
    """A run manifest's ``data``: ``source``, what the task's problems are made of, as it keys the built-in model's
    warm-up (:func:`~tsctl.tasks.registry.task_content`: a file task's data digests and the settings that shape its
    rows; a generated task's settings, which are its content); for a task that reads data, also ``train`` and
    ``heldout``: each split's problem count and digest as the task reads them (:func:`problems_digest`; before
    ``task.overlong_prompts=drop`` leaves any out)."""
    out: dict[str, Any] = {"source": task_content(cfg)}
    if TASKS.needs(cfg.name).data_files:
        task = build_task(cfg)
        splits: tuple[Split, ...] = ("train", "heldout")
        for split in splits:
            problems = task.problems(split)
            out[split] = {"problems": len(problems), "sha256": problems_digest(problems)}
    return out


SOURCE_WORDS = {"train": "task.file.train_path's content", "heldout": "task.file.heldout_path's content"}
"""How a changed entry of ``data.source`` is named (any other entry by its key)."""


def data_changes(recorded: dict[str, Any] | None, now: dict[str, Any]) -> list[str]:
    """What differs between a manifest's ``recorded`` data (:func:`data_digests`; None: a run from before they were
    recorded, nothing to compare) and the data's digests ``now``, each in words: ``the train split (20 problems,
    sha256:1a2b3c4d -> 18 problems, sha256:5e6f7a8b)``, ``task.file.train_path's content (sha256:... -> sha256:...)``.
    Only what ``recorded`` holds is compared."""
    if not recorded:
        return []
    changes = []
    for split in ("train", "heldout"):
        was, is_ = recorded.get(split), now.get(split)
        if split in recorded and was != is_:
            changes.append(f"the {split} split ({_split_words(was)} -> {_split_words(is_)})")
    was_source, source = recorded.get("source") or {}, now.get("source") or {}
    for key in was_source:
        if was_source[key] != source.get(key):
            changes.append(f"{SOURCE_WORDS.get(key, key)} ({_short(was_source[key])} -> {_short(source.get(key))})")
    return changes


def _split_words(split: dict[str, Any] | None) -> str:
    """A recorded split as words: ``20 problems, sha256:1a2b3c4d`` (``none`` where it is missing)."""
    return "none" if not split else f"{split.get('problems')} problems, {_short(split.get('sha256'))}"


def _short(value: Any) -> str:
    """A digest shortened to its first 8 hex digits (``sha256:1a2b3c4d``); any other value as it is."""
    return value[: len("sha256:") + 8] if isinstance(value, str) and value.startswith("sha256:") else str(value)


def hash_file(path: Path, digest: Any) -> None:
    """Feed the bytes of file ``path`` to ``digest`` (a ``hashlib`` object), a block at a time."""
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(BLOCK), b""):
            digest.update(block)
