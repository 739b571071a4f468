"""Append-only step logs: one JSON object per line, each with its integer ``step``.

A run keeps two: ``metrics.jsonl`` and, with the bandit selector, ``seeds/pool/arms.jsonl``. A line
that is not such an object (a write torn by a kill, a damaged disk block, an edit gone wrong) is
skipped when the log is read, never the lines after it. When a resume rewrites a log
(:func:`keep_through`), its damaged lines are first set aside byte for byte in
``<log>.damaged-<n>`` beside it (the next free ``n``, written atomically), so no line is ever lost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tsctl.io import atomic

ASIDE = ".damaged-"
"""What a set-aside file's name adds to its log's: ``metrics.jsonl.damaged-1``."""


@dataclass
class StepLog:
    """What one step log holds.

    Attributes:
        path: the log.
        records: its intact records, in file order.
        damaged: its other lines, as they are on disk (without their newline).
    """

    path: Path
    records: list[dict[str, Any]]
    damaged: list[bytes]

    def missing(self, first: int, last: int) -> list[int]:
        """The steps ``first..last`` that no intact record holds."""
        held = {r["step"] for r in self.records}
        return [s for s in range(first, last + 1) if s not in held]


def parse(data: bytes) -> tuple[list[dict[str, Any]], list[bytes]]:
    """The intact records of a log's bytes and its damaged lines; blank lines are neither."""
    records: list[dict[str, Any]] = []
    damaged: list[bytes] = []
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode())
        except (UnicodeDecodeError, json.JSONDecodeError):
            record = None
        step = record.get("step") if isinstance(record, dict) else None
        if isinstance(step, int) and not isinstance(step, bool):
            records.append(record)
        else:
            damaged.append(line)
    return records, damaged


def read_step_log(path: Path) -> StepLog:
    """The log at ``path`` (empty when there is no file)."""
    records, damaged = parse(path.read_bytes()) if path.is_file() else ([], [])
    return StepLog(path, records, damaged)


def set_aside(log: StepLog) -> Path | None:
    """Write ``log``'s damaged lines to its next free ``<log>.damaged-<n>``; that file, or None when there are none."""
    if not log.damaged:
        return None
    taken = [p.name[len(log.path.name) + len(ASIDE):] for p in log.path.parent.glob(log.path.name + ASIDE + "*")]
    n = 1 + max((int(t) for t in taken if t.isdigit()), default=0)
    aside = log.path.with_name(f"{log.path.name}{ASIDE}{n}")
    atomic.write_bytes(aside, b"".join(line + b"\n" for line in log.damaged))
    return aside


def keep_through(log: StepLog, after_step: int) -> Path | None:
    """Rewrite ``log`` with its intact records of steps up to ``after_step`` (those after it are retrained and
    written again), its damaged lines set aside first (:func:`set_aside`); returns where they went, or None."""
    aside = set_aside(log)
    kept = [r for r in log.records if r["step"] <= after_step]
    atomic.write_text(log.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))
    log.records, log.damaged = kept, []
    return aside
