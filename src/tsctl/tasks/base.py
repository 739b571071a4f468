"""What a task is: problems with gold answers and worked solutions, a prompt format, a verifier.

Every task (synthetic generators, file-backed datasets, benchmarks) returns :class:`Problem` rows
and grades a decoded response text with :meth:`Task.reward`, a float in [0, 1] that never raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, Sequence

SOLVED = 1.0
"""Smallest reward that counts a response as solving its problem (everywhere: evaluation, metrics, the seed controller)."""

Split = Literal["train", "heldout"]


@dataclass(frozen=True)
class Problem:
    """One verifiable problem.

    Attributes:
        id: stable identifier, unique within the task (e.g. ``countdown-heldout-17``).
        question: the text the model sees (already formatted as the task's prompt body).
        answer: the gold final answer as text.
        solution: a worked solution the model should learn to write (warm-up target), ending with
            the final-answer line; None when the source has none.
    """

    id: str
    question: str
    answer: str
    solution: str | None = None


class Task(Protocol):
    """A source of problems plus their verifier."""

    name: str
    answer_marker: str | None
    """Text that starts the final-answer line of a response (``"Answer:"``), or None if the task has none."""

    def problems(self, split: Split) -> Sequence[Problem]:
        """All problems of a split, in a fixed order (deterministic for the task's config)."""
        ...

    def reward(self, problem: Problem, response: str) -> float:
        """Score a decoded response in [0, 1]; malformed output scores 0 and never raises."""
        ...
