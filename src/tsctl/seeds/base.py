"""What a seed is, how many each group gets, and the refresh windows that say who wrote it.

This module is the one reader of the share ``ratio``: :func:`uses_seeds` says whether a run is a
Thinking Seeds run at all, :func:`seeded_count` how many of a group's ``n`` samples continue a seed.
A ratio that seeds no sample of a group (``ratio=5`` with ``n=8``: ``round(0.4) = 0``) is refused
when the config is checked (:func:`tsctl.stages.compose.check`), so every Thinking Seeds run
seeds at least one sample per group.

Refresh windows: with ``refresh = T > 0`` the steps ``w .. w+T-1`` (``w`` a multiple of ``T``) share
one behaviour policy, the weights at step ``w``; ``refresh=0`` makes the whole run one window.
A snapshot's *arm* is its age in windows when a window opens (0 = the window's own weights).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tsctl.config.schema import TsctlConfig

@dataclass(frozen=True)
class Seed:
    """A behaviour-policy prefix for one prompt.

    Attributes:
        prefix_ids: the cut behaviour response, shape [S] (never includes EOS).
        prefix_logprobs: pi_b log-probs of ``prefix_ids``, shape [S] (NaN where pi_b is unknown).
        behaviour_step: training step of the pi_b checkpoint.
        checkpoint: the pi_b checkpoint (``step-N``, a folder, ``model:<path>`` or ``traces:<path>``).
        behaviour_reward: the task's grade of the whole behaviour response (NaN when not graded).
        fraction: the prefix's share of the longest cut allowed, ``cut / span`` (NaN for an empty span).
        predicted: the seed controller's predicted success of the seeded sample (NaN when it did not place the seed).
    """

    prefix_ids: list[int]
    prefix_logprobs: list[float]
    behaviour_step: int
    checkpoint: str
    behaviour_reward: float = math.nan
    fraction: float = math.nan
    predicted: float = math.nan


def seeds_from_table(table: dict[str, list]) -> list[Seed]:
    """One :class:`Seed` per row of a seed shard (``read_shard(...).table.to_pydict()``): the cut prefix."""
    rows = zip(table["response_ids"], table["logprobs"], table["cut"], table["checkpoint_step"], table["checkpoint"],
               table["span"], table["behaviour_reward"], table["predicted"])
    return [
        Seed(prefix_ids=ids[:cut], prefix_logprobs=lps[:cut], behaviour_step=step, checkpoint=ckpt, behaviour_reward=reward,
             fraction=cut / span if span else math.nan, predicted=predicted)
        for ids, lps, cut, step, ckpt, span, reward, predicted in rows
    ]


def uses_seeds(cfg: TsctlConfig) -> bool:
    """Whether the run is a Thinking Seeds run: ``ratio > 0`` (see the module docstring)."""
    return cfg.ratio > 0


def seeded_count(cfg: TsctlConfig) -> int:
    """Samples per group that continue a seed: ``round(trainer.n * ratio / 100)`` (half to even)."""
    return int(round(cfg.trainer.n * cfg.ratio / 100.0))


def window(step: int, refresh: int, steps: int) -> tuple[int, int]:
    """First and one-past-last step of the refresh window holding ``step`` (0-based) in a run of ``steps``."""
    if refresh == 0:
        return 0, steps
    first = window_start(step, refresh)
    return first, min(first + refresh, steps)


def window_start(step: int, refresh: int) -> int:
    """First step of the refresh window holding ``step`` (0-based; ``refresh=0``: one window)."""
    return step - step % refresh if refresh else 0


def arm_of(behaviour_step: int, step: int, refresh: int) -> int:
    """The arm (age in windows at the window's start) of a snapshot from ``behaviour_step`` serving ``step``."""
    return (window_start(step, refresh) - behaviour_step) // refresh if refresh else 0
