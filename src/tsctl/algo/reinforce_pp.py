"""REINFORCE++ with a group baseline, an advantage estimator of ``algo.adv_estimator``.

Each reward is centred by the mean of its prompt group, then every advantage is whitened over the whole
batch, weighing each sample by its number of response tokens (Hu et al., 2025; verl's
``reinforce_plus_plus_baseline`` and OpenRLHF's ``reinforce_baseline``, where every token of a
response carries its sample's return and the batch statistics are taken over tokens)::

    c_i = r_i - mean_{j in S_g} r_j
    m = sum_i L_i c_i / N,   v = sum_i L_i (c_i - m)^2 / (N - 1),   N = sum_i L_i
    A_i = (c_i - m) / sqrt(v + 1e-8)

with ``L_i`` the sample's response tokens (prefix and continuation: the tokens that carry its return,
as in the references, whatever the loss mask then drops). ``algo.norm_adv_by_std`` and
``algo.adv_eps`` are not read (the entry declares ``reads=()``): the scale is the batch's, not a group's.

Seeded samples: with ``seeds.adv_group=plain`` only the plain samples form ``S_g``, the group mean;
every sample, seeded or not, is centred by it and enters the batch whitening. A batch of one token has
no spread to whiten by: its advantages are only shifted by the token mean.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from tsctl.algo.advantages import ADVANTAGES, GroupIndex, group_advantages

WHITEN_EPS = 1e-8
"""Added to the batch variance before its square root (as verl's ``masked_whiten``)."""


@ADVANTAGES.register("reinforce_pp_baseline", lengths=True)
def reinforce_pp_advantages(rewards: Tensor, group_index: GroupIndex, *, stats_mask: Optional[Tensor] = None, lengths: Tensor) -> Tensor:
    """Group-centred, token-weighted batch-whitened advantages (the module docstring).

    Args:
        rewards: ``[B]`` rewards.
        group_index: ``[B]`` integer group id of each sample (any ids).
        stats_mask: ``[B]`` bool, samples that enter the group means (None: all); every group needs one.
        lengths: ``[B]`` response tokens of each sample, the weights of the batch statistics.

    Returns:
        ``[B]`` advantages, ``rewards``' dtype when it is floating.
    """
    centred = group_advantages(rewards.to(torch.float64), group_index, norm_by_std=False, stats_mask=stats_mask)
    weights = lengths.to(torch.float64)
    tokens = weights.sum()
    mean = (weights * centred).sum() / tokens.clamp(min=1.0)
    deviation = centred - mean
    if tokens > 1:
        variance = (weights * deviation**2).sum() / (tokens - 1)
        deviation = deviation * torch.rsqrt(variance + WHITEN_EPS)
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()
    return deviation.to(out_dtype)
