"""What a seed is, and the refresh windows that say who wrote it.

How many of a group's samples a seed continues, and how long a refresh window is, are read from ``ratio`` and
``refresh`` by :mod:`tsctl.config.knobs` alone. Refresh windows: the steps ``w .. w+T-1`` (``w`` a multiple of the
window length ``T``, :func:`~tsctl.config.knobs.window_length`) share one behaviour policy, the weights at step ``w``.
A snapshot's *arm* is its age in windows when a window opens (0 = the window's own weights).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Seed:
    """A behaviour-policy prefix for one prompt.

    Attributes:
        prefix_ids: the cut behaviour response, shape [S] (never includes EOS).
        prefix_logprobs: pi_b log-probs of ``prefix_ids``, shape [S] (NaN where pi_b is unknown).
        behaviour_step: training step of the pi_b checkpoint.
        checkpoint: the pi_b checkpoint (``step-N``, a folder, ``model:<path>`` or ``traces:<path>``).
        behaviour_reward: the task's grade of the whole behaviour response (None when not graded).
        fraction: the prefix's share of the longest cut allowed, ``cut / span`` (None for an empty span).
        predicted: the seed controller's predicted success of the seeded sample (None when it did not place the seed).
    """

    prefix_ids: list[int]
    prefix_logprobs: list[float]
    behaviour_step: int
    checkpoint: str
    behaviour_reward: float | None = None
    fraction: float | None = None
    predicted: float | None = None


def seeds_from_table(table: dict[str, list]) -> list[Seed]:
    """One :class:`Seed` per row of a seed shard (``read_shard(...).table.to_pydict()``): the cut prefix."""
    rows = zip(table["response_ids"], table["logprobs"], table["cut"], table["checkpoint_step"], table["checkpoint"],
               table["span"], table["behaviour_reward"], table["predicted"])
    return [
        Seed(prefix_ids=ids[:cut], prefix_logprobs=lps[:cut], behaviour_step=step, checkpoint=ckpt, behaviour_reward=reward,
             fraction=cut / span if span else None, predicted=predicted)
        for ids, lps, cut, step, ckpt, span, reward, predicted in rows
    ]


def window(step: int, length: int, steps: int) -> tuple[int, int]:
    """First and one-past-last step of the refresh window holding ``step`` (0-based) in a run of ``steps``, whose
    windows are ``length`` steps (:func:`~tsctl.config.knobs.window_length`)."""
    first = window_start(step, length)
    return first, min(first + length, steps)


def window_start(step: int, length: int) -> int:
    """First step of the window of ``length`` steps holding ``step`` (0-based)."""
    return step - step % length


def arm_of(behaviour_step: int, step: int, length: int) -> int:
    """The arm (age in windows of ``length`` steps at the window's start) of a snapshot from ``behaviour_step`` serving ``step``."""
    return (window_start(step, length) - behaviour_step) // length
