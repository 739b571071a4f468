"""RLOO, an advantage estimator of ``algo.adv_estimator``: a leave-one-out baseline within each group.

``A_i = r_i - mean_{j in S_g, j != i} r_j``, where ``S_g`` is the samples of ``i``'s group that enter the
statistics (Ahmadian et al., 2024; verl's ``rloo``). No scaling: ``algo.norm_adv_by_std`` and
``algo.adv_eps`` are not read (the entry declares ``reads=()``).

Seeded samples: with ``seeds.adv_group=plain`` only the plain samples form ``S_g``; a seeded sample's
baseline is then the mean of all of them (it is never in ``S_g``, so nothing is left out), and a plain
sample's the mean of the other plain ones. A statistics sample alone in ``S_g`` has no one to compare
with and gets 0. Rewards equal to their baseline give exactly 0: the sums are taken on rewards shifted by
the group's smallest statistics reward, as :func:`~tsctl.algo.advantages.group_advantages` does.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from tsctl.algo.advantages import ADVANTAGES, GroupIndex, group_ids


@ADVANTAGES.register("rloo")
def rloo_advantages(rewards: Tensor, group_index: GroupIndex, *, stats_mask: Optional[Tensor] = None) -> Tensor:
    """Leave-one-out advantages (the module docstring).

    Args:
        rewards: ``[B]`` rewards.
        group_index: ``[B]`` integer group id of each sample (any ids).
        stats_mask: ``[B]`` bool, samples that enter the baselines (None: all); every group needs one.

    Returns:
        ``[B]`` advantages, ``rewards``' dtype when it is floating.
    """
    ids = group_ids(rewards, group_index)
    num = int(ids.max()) + 1 if ids.numel() else 0
    r = rewards.to(torch.float64)
    stats = torch.ones_like(r, dtype=torch.bool) if stats_mask is None else stats_mask.bool()
    count = torch.bincount(ids[stats], minlength=num).to(torch.float64)
    if bool((count == 0).any()):
        raise ValueError(f"groups {torch.nonzero(count == 0).flatten().tolist()} (in order of their ids) have no sample selected by stats_mask")
    ref = torch.full((num,), float("inf"), dtype=torch.float64, device=r.device).scatter_reduce(0, ids[stats], r[stats], reduce="amin")
    shifted = r - ref[ids]
    total = torch.zeros(num, dtype=torch.float64, device=r.device).index_add(0, ids[stats], shifted[stats])
    others = count[ids] - stats.to(torch.float64)
    baseline = torch.where(others > 0, (total[ids] - torch.where(stats, shifted, 0.0)) / others.clamp(min=1.0), shifted)
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()
    return (shifted - baseline).to(out_dtype)
