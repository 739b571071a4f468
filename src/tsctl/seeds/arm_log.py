"""The bandit selector's state: what each arm's seeded samples earned, one JSON line per step.

``seeds/pool/arms.jsonl`` gets one line per training step, ``{"step": N, "arms": {"<arm>": [sum of
advantages, samples]}}`` (``N`` counted from 1, as in ``metrics.jsonl``). The statistics a window's
choice sees are the sums over every line so far (:meth:`ArmLog.totals`), so the state is the file:
on resume the lines of steps after the checkpoint are dropped (:meth:`ArmLog.truncate`) and those
steps are redone, exactly as ``metrics.jsonl`` is. A damaged line (a kill mid-write) is skipped, and set
aside when the log is rewritten (:mod:`tsctl.io.step_logs`).
"""

from __future__ import annotations

import json
from pathlib import Path

from tsctl.io.step_logs import keep_through, read_step_log


class ArmLog:
    """Per-step advantage sums and counts of each arm, appended to ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def records(self) -> list[dict]:
        """Every intact line, in order."""
        return read_step_log(self.path).records

    def append(self, step: int, arms: dict[int, tuple[float, int]]) -> None:
        """Record step ``step``'s ``{arm: (advantage sum, samples)}`` and flush it to disk."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = {"step": step, "arms": {str(a): [float(s), int(n)] for a, (s, n) in sorted(arms.items())}}
        with open(self.path, "a") as f:
            f.write(json.dumps(line, sort_keys=True) + "\n")
            f.flush()

    def truncate(self, after_step: int) -> None:
        """Drop the lines of steps after ``after_step`` (work a killed run did past its checkpoint)."""
        if self.path.is_file():
            keep_through(read_step_log(self.path), after_step)

    def totals(self) -> dict[int, tuple[int, float]]:
        """``{arm: (samples, advantage sum)}`` over every line (summed in file order)."""
        out: dict[int, tuple[int, float]] = {}
        for record in self.records():
            for arm, (total, count) in record["arms"].items():
                n, s = out.get(int(arm), (0, 0.0))
                out[int(arm)] = (n + count, s + total)
        return out
