"""Pass@k Training, an advantage estimator of ``algo.adv_estimator``: the analytic pass@k group advantage.

Chen, Qin, Wu, Ling, Ye, Zhao and Shi, "Pass@k Training for Adaptively Balancing Exploration and Exploitation of Large
Reasoning Models" (arXiv 2508.10751), Pass@k Training with Analytical Derivation: the reward of ``k`` responses is the
best of theirs, and each response's advantage is its expected advantage over every ``k`` of the group's ``N`` rollouts
that contain it. For binary rewards, ``N_pos`` correct and ``N_neg = N - N_pos`` wrong (the paper's equations, as in its
reference code ``passk_adv.py``)::

    R     = 1 - C(N_neg, k) / C(N, k),          sigma = sqrt(R (1 - R))
    A_pos = (1 - R) / sigma
    A_neg = (1 - R - C(N_neg - 1, k - 1) / C(N - 1, k - 1)) / sigma

(a wrong response's ``k``-set fails when its other ``k - 1`` members are wrong too). The advantages of a group sum to
0 (``N_neg C(N_neg - 1, k - 1) / C(N - 1, k - 1) = N C(N_neg, k) / C(N, k)``), and ``k = 1`` is GRPO's
``(r - mean) / std`` with the population std: ``R = N_pos / N``, ``A_pos = (1 - R) / sigma``, ``A_neg = -R / sigma``.
``1 - R`` is computed as ``C(N_neg, k) / C(N, k)`` from exact integers. ``sigma = 0`` (no correct response, ``R = 0``;
or fewer than ``k`` wrong ones, ``R = 1``) gives every sample of the group exactly 0 (the reference code's
``sigma + 1e-6`` gives the same zeros); no epsilon is added otherwise, so ``algo.norm_adv_by_std`` and ``algo.adv_eps``
are not read (the entry declares ``reads=()``).

Its setting is ``algo.passk.k`` (:class:`PasskSettings`). Refused at composition (:func:`check`): ``k`` at or above the
samples each group's statistics are taken over (``trainer.n``, or its plain samples with ``seeds.adv_group=plain``:
there ``R`` is 0 or 1 and every advantage 0), and ``algo.overlong=penalty`` (a fractional reward). The rewards must be
0 or 1, as every built-in task grades and ``task.reward`` controls give; any other raises a one-line ValueError.

Seeded samples: with ``seeds.adv_group=all`` (the default) seeded and plain samples are the group's ``N`` rollouts
alike, since the reward grades the whole response. With ``plain`` the ``N`` rollouts of ``R``, ``sigma``, ``N_pos``,
``N_neg`` are the group's plain samples; a plain sample gets ``A_pos`` or ``A_neg`` above, and a seeded one, outside
the ``N``, its expected advantage in a ``k``-set with ``k - 1`` plain samples (as an RLOO seeded sample's baseline is
every plain sample): ``A_pos`` when correct, else ``(1 - R - C(N_neg, k - 1) / C(N, k - 1)) / sigma``. Where the plain
samples' ``sigma`` is 0, the group's statistics are taken over all its samples (so a seeded sample that solves a
problem no plain sample solves is still rewarded, as :func:`~tsctl.algo.advantages.group_advantages` falls back to
the whole group's std); where that is 0 too, every advantage of the group is 0.

Metrics: none of its own (an estimator gives advantages only; ``trainer.save_rollouts`` writes them to the rollout
shards' ``advantage`` column).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from tsctl.algo.advantages import ADVANTAGES, GroupIndex, group_ids
from tsctl.config.errors import ConfigError
from tsctl.config.ranges import positive
from tsctl.config.schema import TsctlConfig


@dataclass
class PasskSettings:
    """``algo.passk.*``: the settings of the ``passk`` advantage estimator."""

    k: int = 4
    """Responses per pass@k set (>= 1 and below the samples of each group's statistics, ``trainer.n``); 1 is GRPO with
    the population std."""

    def __post_init__(self) -> None:
        positive("algo.passk.k", self.k)


def check(cfg: TsctlConfig, settings: PasskSettings, stats: int) -> None:
    """Refuse ``k`` at or above ``stats`` (the samples of each group's statistics) and a non-binary reward shaping."""
    if settings.k >= stats:
        plain = stats < cfg.trainer.n
        where = f"the {stats} plain samples of each group (seeds.adv_group=plain)" if plain else f"the trainer.n={stats} samples of each group"
        fix = "lower algo.passk.k, raise trainer.n" + (" or use seeds.adv_group=all" if plain else "")
        raise ConfigError("algo.passk.k", f"{settings.k} must be below {where}: pass@k of at most k samples is 0 or 1, so every advantage would be 0; {fix}")
    if cfg.algo.overlong == "penalty":
        raise ConfigError("algo.overlong", "'penalty' makes rewards fractional and algo.adv_estimator=passk needs rewards 0 or 1; use algo.overlong=none or mask")


@ADVANTAGES.register("passk", settings=PasskSettings, check=check)
def passk_advantages(rewards: Tensor, group_index: GroupIndex, *, stats_mask: Optional[Tensor] = None, settings: PasskSettings) -> Tensor:
    """Analytic pass@k advantages (the module docstring).

    Args:
        rewards: ``[B]`` rewards, each 0 or 1.
        group_index: ``[B]`` integer group id of each sample (any ids).
        stats_mask: ``[B]`` bool, samples that enter the group statistics (None: all); every group needs more than ``k``.
        settings: ``algo.passk``.

    Returns:
        ``[B]`` advantages, ``rewards``' dtype when it is floating.
    """
    ids = group_ids(rewards, group_index)
    r = rewards.to(torch.float64)
    fractional = (r != 0) & (r != 1)
    if bool(fractional.any()):
        raise ValueError(f"algo.adv_estimator=passk needs rewards 0 or 1; got {r[fractional][0].item():g}")
    stats = torch.ones_like(r, dtype=torch.bool) if stats_mask is None else stats_mask.bool()
    out = torch.zeros_like(r)
    for group in range(int(ids.max()) + 1 if ids.numel() else 0):
        members = ids == group
        correct, chosen = r[members] == 1, stats[members]
        adv = _group(correct, chosen, settings.k, group)
        if adv is None and not bool(chosen.all()):
            adv = _group(correct, torch.ones_like(chosen), settings.k, group)
        if adv is not None:
            out[members] = adv
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()
    return out.to(out_dtype)


def _group(correct: Tensor, stats: Tensor, k: int, group: int) -> Optional[Tensor]:
    """One group's ``[M]`` float64 advantages from whether each sample is correct ``[M]`` and in the statistics ``[M]``
    (bool); None when the statistics' sigma is 0. ``group`` names the group (its place in order of ids) in errors."""
    n, neg = int(stats.sum()), int((stats & ~correct).sum())
    if n <= k:
        raise ValueError(f"algo.passk.k={k} needs more than {k} statistics samples in each group; group {group} has {n}")
    if neg < k or neg == n:  # R = 1 or R = 0
        return None
    fail = math.comb(neg, k) / math.comb(n, k)  # 1 - R, in (0, 1)
    sigma = math.sqrt(fail * (1.0 - fail))
    values = torch.tensor([
        fail / sigma,  # A_pos
        (fail - math.comb(neg - 1, k - 1) / math.comb(n - 1, k - 1)) / sigma,  # A_neg of a statistics sample
        (fail - math.comb(neg, k - 1) / math.comb(n, k - 1)) / sigma,  # A_neg of a sample outside them
    ], dtype=torch.float64, device=correct.device)
    return torch.where(correct, values[0], torch.where(stats, values[1], values[2]))
