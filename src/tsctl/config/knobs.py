"""The one reader of the Thinking Seeds knobs ``ratio`` and ``refresh``: every other module asks these functions what
they mean (their range checks, and the messages, names and shard metadata that echo a value, aside).

``ratio`` (the share, in %, of each group's samples that continue a behaviour-policy prefix):

- :func:`uses_seeds`: whether the run is a Thinking Seeds run at all (``ratio > 0``; ``ratio=0`` is plain DAPO);
- :func:`seeded_count`: how many of a group's ``trainer.n`` samples continue a seed, ``round(n * ratio / 100)``, the
  value a run records as ``seeded_per_group`` (:func:`tsctl.runconfig.checked`) and never reads back;
- :func:`inexact_ratio`: why a ratio is refused, when the config is checked (:func:`tsctl.runconfig.check`) before any
  model is built: one whose count is not what it says (``ratio=30`` with ``n=8``: ``round(2.4) = 2``, which is ratio
  25) or that seeds no sample of a group (``ratio=5`` with ``n=8``). So every Thinking Seeds run seeds at least one
  sample per group, and two ratios of one sweep never run the same experiment.

``refresh`` (T, the steps of one refresh window; ``refresh=0``: the whole run is one window):

- :func:`window_length`: the steps of one window, ``refresh`` (at most ``trainer.steps``), or ``trainer.steps`` with
  ``refresh=0``. The steps ``w .. w+T-1`` (``w`` a multiple of ``T``) share one behaviour policy, the weights at step
  ``w``; with ``refresh=0`` the initial model writes the seeds of every step and no snapshot is ever older than the
  window (arm 0);
- :func:`refreshes`: whether a later window can open (``refresh > 0``): what a selector choosing among older snapshots
  and the seed controller, which learns from earlier windows, need.
"""

from __future__ import annotations

import math
from fractions import Fraction

from tsctl.config.schema import TsctlConfig


def uses_seeds(cfg: TsctlConfig) -> bool:
    """Whether the run is a Thinking Seeds run: ``ratio > 0``."""
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


def window_length(cfg: TsctlConfig) -> int:
    """Steps of one refresh window: ``refresh``, or the whole run with ``refresh=0``; at most ``trainer.steps``."""
    return min(cfg.refresh or cfg.trainer.steps, cfg.trainer.steps)


def refreshes(cfg: TsctlConfig) -> bool:
    """Whether the behaviour policy is ever refreshed: ``refresh > 0`` (``refresh=0`` keeps the initial model)."""
    return cfg.refresh > 0
