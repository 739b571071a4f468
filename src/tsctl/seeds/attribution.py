"""Seeded samples by source, arm, age and prefix length: per-step statistics of the seeded samples, split four ways.

For every seeded sample of a step (cut-0 seeds included) the record gets, per split value ``v``:

- ``seeds/by_age/<v>/...``: ``v`` is the behaviour age ``step - behaviour_step`` in steps (0-based
  step of the rollout, as ``seeds/behaviour_age``), binned by powers of two: ``0``, ``1``, ``2-3``,
  ``4-7``, ``8-15``, ...;
- ``seeds/by_arm/<v>/...``: ``v`` is the selector's arm, the age of the snapshot in refresh windows
  when the window opened (0 = the latest; :mod:`tsctl.seeds.selectors`); seeds of the run's own
  snapshots only;
- ``seeds/by_prefix/<v>/...``: ``v`` is the prefix length in tokens, binned as the age;
- ``seeds/by_source/<v>/...``: ``v`` is ``self`` (the run's own snapshots), ``model`` (another model,
  ``seeds.source=model``) or ``traces`` (a trace file, ``seeds.source=traces``).

and under each: ``accuracy`` (share solved, reward >= 1, as ``accuracy``), ``advantage`` (mean
advantage; the group mean is 0, so a positive value means these seeded samples beat their groups)
and ``samples`` (how many). Splits without samples are left out; a step without seeded samples (every
``ratio=0`` step) adds nothing.

The source of a seed is written in its ``checkpoint`` (``step-N`` for the run's own snapshots,
``model:<path>`` or ``traces:<path>``), so shards and rollout shards carry it without a new column.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from tsctl.models.samples import Sample
from tsctl.seeds.base import arm_of
from tsctl.seeds.sources import SOURCES, source_of


def pow2_bin(x: int) -> str:
    """``0``, ``1``, ``2-3``, ``4-7``, ... : the power-of-two bin of a non-negative integer."""
    if x < 2:
        return str(x)
    lo = 1 << (int(x).bit_length() - 1)
    return f"{lo}-{2 * lo - 1}"


def attribution_metrics(samples: Sequence[Sample], advantages: torch.Tensor, step: int, length: int) -> dict[str, float]:
    """The ``seeds/by_*`` metrics of step ``step`` (0-based) from its samples and their advantages [B], in a run of refresh
    windows of ``length`` steps (:func:`~tsctl.config.knobs.window_length`)."""
    splits: dict[str, list[tuple[float, float]]] = {}
    for s, adv in zip(samples, advantages.tolist()):
        if not s.seeded:
            continue
        source = source_of(s.behaviour_checkpoint)
        keys = [f"by_age/{pow2_bin(max(0, step - s.behaviour_step))}", f"by_prefix/{pow2_bin(len(s.prefix_ids))}", f"by_source/{source}"]
        if SOURCES.needs(source).own:
            keys.append(f"by_arm/{arm_of(s.behaviour_step, step, length)}")
        for key in keys:
            splits.setdefault(key, []).append((float(s.reward >= 1.0), adv))
    out = {}
    for key, pairs in sorted(splits.items()):
        solved, adv = np.array(pairs).T
        out[f"seeds/{key}/accuracy"] = float(solved.mean())
        out[f"seeds/{key}/advantage"] = float(adv.mean())
        out[f"seeds/{key}/samples"] = float(len(pairs))
    return out


def arm_rewards(samples: Sequence[Sample], advantages: torch.Tensor, step: int, length: int) -> dict[int, tuple[float, int]]:
    """``{arm: (sum of advantages, seeded samples)}`` of the step's seeds from the run's own snapshots (windows of ``length`` steps)."""
    out: dict[int, tuple[float, int]] = {}
    for s, adv in zip(samples, advantages.tolist()):
        if s.seeded and SOURCES.needs(source_of(s.behaviour_checkpoint)).own:
            arm = arm_of(s.behaviour_step, step, length)
            total, count = out.get(arm, (0.0, 0))
            out[arm] = (total + adv, count + 1)
    return out
