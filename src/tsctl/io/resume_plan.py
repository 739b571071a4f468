"""Where a resumed run starts, chosen so that no step's record is lost.

A run's step logs (:mod:`tsctl.io.step_logs`) hold one record per step up to its newest checkpoint.
Where one is missing there (its line was damaged or removed), the resume starts from the newest
checkpoint before that step, so the step is retrained and its record written again, equal to the one
lost; the records after that checkpoint are replaced the same way, and the newer checkpoints are
removed (the retrained steps write them again; left, they would be pruned in place of the new ones
and end as the newest checkpoint with records missing before it). A missing step that no checkpoint
precedes any more cannot be recomputed: the resume starts from the newest checkpoint and its one line
names the step. Everything else the logs hold is kept, their damaged lines set aside.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from tsctl.io.checkpoints import list_checkpoints
from tsctl.io.step_logs import StepLog, keep_through, read_step_log

ARM_LOG = Path("seeds") / "pool" / "arms.jsonl"
"""The bandit selector's log in a run folder (:mod:`tsctl.seeds.arm_log`), whose records start at step 1."""


@dataclass
class ResumePlan:
    """A resume's start and its step logs.

    Attributes:
        start: the checkpoint ``(step, path)`` it continues from, or None to train from step 0.
        logs: ``metrics.jsonl`` and, where the run has one, the arm log, as read before the resume.
        retrained: steps missing from a log that the resume retrains from ``start``.
        lost: steps missing from a log that no remaining checkpoint precedes.
        superseded: the checkpoints newer than ``start`` where the resume retrains a missing step.
    """

    start: tuple[int, Path] | None
    logs: list[StepLog]
    retrained: list[int]
    lost: list[int]
    superseded: list[Path]

    def apply(self) -> str:
        """Keep each log's records up to the start (damaged lines set aside) and remove the superseded
        checkpoints; the one line saying what was found and kept."""
        after = self.start[0] if self.start else -1
        parts = []
        for log in self.logs:
            damaged = len(log.damaged)
            aside = keep_through(log, after)
            part = f"{log.path.name}: {len(log.records)} record(s) kept"
            parts.append(part + (f", {damaged} damaged line(s) set aside in {aside.name}" if aside else ""))
        for path in self.superseded:
            shutil.rmtree(path)
        if self.retrained:
            newer = f" (newer checkpoints {', '.join(p.name for p in self.superseded)} removed, written again)" if self.superseded else ""
            parts.append(f"step(s) {_steps(self.retrained)} missing, retrained from checkpoint step-{after}{newer}")
        if self.lost:
            parts.append(
                f"step(s) {_steps(self.lost)} missing and not recomputable (no checkpoint before them is left): "
                "their records stay missing; train anew under another name=... to have them"
            )
        return "; ".join(parts)


def plan_resume(run: Path, eval_at_start: bool) -> ResumePlan:
    """The start of a resume of the run folder ``run`` (see the module docstring); ``eval_at_start``:
    whether the run logs a step-0 record (``trainer.eval_every > 0``)."""
    logs = [read_step_log(run / "metrics.jsonl")]
    firsts = [0 if eval_at_start else 1]
    if (run / ARM_LOG).is_file():
        logs.append(read_step_log(run / ARM_LOG))
        firsts.append(1)
    found = list_checkpoints(run / "checkpoints")
    if not found:
        return ResumePlan(None, logs, [], [], [])
    newest = found[-1][0]
    missing = sorted({s for log, first in zip(logs, firsts) for s in log.missing(first, newest)})
    lost = [s for s in missing if s <= found[0][0]]
    retrained = [s for s in missing if s > found[0][0]]
    start = max(c for c in found if c[0] < retrained[0]) if retrained else found[-1]
    return ResumePlan(start, logs, retrained, lost, [path for step, path in found if step > start[0]])


def _steps(steps: list[int]) -> str:
    """``3, 5..7``: the steps with runs of consecutive ones joined."""
    runs: list[list[int]] = []
    for s in steps:
        if runs and s == runs[-1][-1] + 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}..{r[-1]}" for r in runs)
