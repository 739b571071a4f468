"""What a seed is, how many each group gets, and the refresh windows that say who wrote it.

This module is the one reader of the share ``ratio``: :func:`uses_seeds` says whether a run is a
Thinking Seeds run at all, :func:`seeded_count` how many of a group's ``n`` samples continue a seed.
A ratio whose seeded count is not what it says (``ratio=30`` with ``n=8``: ``round(2.4) = 2``, which is
ratio 25) or that seeds no sample of a group (``ratio=5`` with ``n=8``) is refused when the config is
checked (:func:`tsctl.runconfig.check`, with :func:`inexact_ratio`), so every Thinking Seeds run
seeds at least one sample per group and two ratios of one sweep never run the same experiment.

Refresh windows: with ``refresh = T > 0`` the steps ``w .. w+T-1`` (``w`` a multiple of ``T``) share
one behaviour policy, the weights at step ``w``; ``refresh=0`` makes the whole run one window.
A snapshot's *arm* is its age in windows when a window opens (0 = the window's own weights).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from tsctl.config.schema import TsctlConfig

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


def uses_seeds(cfg: TsctlConfig) -> bool:
    """Whether the run is a Thinking Seeds run: ``ratio > 0`` (see the module docstring)."""
    return cfg.ratio > 0


def seeded_count(cfg: TsctlConfig) -> int:
    """Samples per group that continue a seed: ``round(trainer.n * ratio / 100)`` (half to even)."""
    return int(round(cfg.trainer.n * cfg.ratio / 100.0))


EXACT_WITHIN = 0.05
"""How far (in percentage points) a ratio may lie from an exact one, ``100 * k / n``, and still name it (``33.3`` is 1 of 3)."""


def inexact_ratio(cfg: TsctlConfig) -> str | None:
    """Why ``cfg.ratio`` does not seed what it says at ``trainer.n`` (with the nearest exact ratios and a group size at
    which it is exact), or None when it does: ratio 0, or ``n * ratio / 100`` within :data:`EXACT_WITHIN` of a whole count > 0."""
    ratio, n = cfg.ratio, cfg.trainer.n
    count = seeded_count(cfg)
    if not uses_seeds(cfg) or (count > 0 and abs(ratio - 100 * count / n) <= EXACT_WITHIN):
        return None
    said = "so no sample is seeded" if count == 0 else f"which is ratio={100 * count / n:g}, not {ratio:g}"
    exact = sorted({100 * math.floor(n * ratio / 100) / n, 100 * math.ceil(n * ratio / 100) / n})
    options = " or ".join(f"ratio={r:g}" + (" (plain DAPO)" if r == 0 else "") for r in exact)
    group = (Fraction(str(ratio)) / 100).denominator
    other = f", or trainer.n={group} where ratio={ratio:g} is exact" if group <= 64 else ""
    return (f"ratio={ratio:g} seeds round({n} x {ratio:g} / 100) = {count} of the trainer.n={n} samples of each group, {said}; "
            f"use a ratio that is exact at trainer.n={n}: {options}{other}")


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
