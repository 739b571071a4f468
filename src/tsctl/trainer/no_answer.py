"""The one line that says why a run learns nothing when its first steps' responses state no final answer at all.

A response without a final answer the grader can read scores 0; when no response has one, every group's rewards are
equal, every advantage is 0 and the update does nothing (``grad_norm`` 0), however long the run. The usual cause is a
prompt that does not ask for the answer in the grader's form (``task.file.instruction``).
"""

from __future__ import annotations

from tsctl.config.schema import TsctlConfig
from tsctl.tasks.registry import answer_hint

FIRST_STEPS = 3
"""Steps whose responses are watched (fewer when the run is shorter)."""


class NoAnswerWatch:
    """Watches ``reward/answer_found`` over the first :data:`FIRST_STEPS` steps a process trains (from a resume too)."""

    def __init__(self, cfg: TsctlConfig, steps: int) -> None:
        self.hint = answer_hint(cfg.task.name)
        self.left = min(FIRST_STEPS, steps)
        self.seen = 0
        self.found = 0.0

    def see(self, record: dict[str, float]) -> str | None:
        """The note to print once the watched steps are done and none of their responses stated an answer, else None."""
        if self.left <= 0:
            return None
        self.left -= 1
        self.seen += 1
        self.found += record["reward/answer_found"]
        if self.left or self.found:
            return None
        return (
            f"no response of the first {self.seen} step(s) states a final answer the grader can read (reward/answer_found 0), "
            f"so every reward is 0 and nothing is learned; {self.hint}"
        )
