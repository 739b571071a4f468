"""Outcome advantages: the registry of estimators, group-normalised rewards (GRPO / Dr. GRPO), DAPO's overlong penalty.

Every sample of a prompt group gets one scalar advantage, broadcast over its tokens by the loss.
``algo.adv_estimator`` names the estimator, one function of :data:`ADVANTAGES`: ``grpo`` (here,
:func:`group_advantages`) or another module of :mod:`tsctl.algo` registering itself (``rloo``:
:mod:`tsctl.algo.rloo`; ``reinforce_pp_baseline``: :mod:`tsctl.algo.reinforce_pp`). An estimator is
``fn(rewards [B], group_index [B], *, stats_mask, **arguments) -> [B]`` and declares ``reads``: the ``algo.*``
keys it takes as keyword arguments of the same name (and ``lengths``: it also takes ``lengths [B]``; ``settings``:
its own block, a dataclass beside it with keys ``algo.<name>.*``, taken as ``settings=``).
Thinking Seeds may compute the group statistics over the plain samples only
(``seeds.adv_group=plain``): ``stats_mask`` selects the samples that enter the mean and std, while
every sample, seeded or not, is still centred and scaled by them. Where the selected samples all
share one reward (or there is only one), their std is 0 and the scale falls back to the std of the
whole group, so the other samples (seeded ones with a different reward) are scaled like those of
every other group, not left unscaled.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import torch
from torch import Tensor

from tsctl.config.registry import Registry

GroupIndex = Union[Tensor, Sequence[int]]
Estimator = Callable[..., Tensor]
"""``fn(rewards, group_index, *, stats_mask, **arguments) -> advantages``, all ``[B]`` (``stats_mask``: bool or None)."""


def _no_check(cfg: object, settings: object, stats: int) -> None:
    """An estimator that declares no ``check`` refuses nothing at composition."""


ADVANTAGES: Registry[Estimator] = Registry("advantage estimator", __package__, key="algo.adv_estimator", reads=(), lengths=False, check=_no_check)
"""The estimators by name (``algo.adv_estimator``), from any module of :mod:`tsctl.algo`; each declares ``reads``,
``lengths`` when it takes each sample's response tokens as ``lengths`` ``[B]``, ``settings``, and ``check``:
``fn(cfg, settings, stats)``, which raises a ``ConfigError`` for a config it cannot run, given its block and the samples
of each group its statistics are taken over (``stats``: ``trainer.n``, or its plain samples with ``seeds.adv_group=plain``)."""


def group_ids(rewards: Tensor, group_index: GroupIndex) -> Tensor:
    """``[B]`` int64 ids ``0..G-1`` of each sample's group, from any ``[B]`` ids (``rewards`` is ``[B]``)."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards with group_index must be [B]; got shape {tuple(rewards.shape)}")
    ids = torch.as_tensor(group_index, device=rewards.device)
    if ids.shape != rewards.shape:
        raise ValueError(f"group_index shape {tuple(ids.shape)} != rewards shape {tuple(rewards.shape)}")
    return torch.unique(ids, return_inverse=True)[1]


@ADVANTAGES.register("grpo", reads=("norm_adv_by_std", "adv_eps"))
def _grpo(rewards: Tensor, group_index: GroupIndex, *, stats_mask: Optional[Tensor], norm_adv_by_std: bool, adv_eps: float) -> Tensor:
    """GRPO (Dr. GRPO without ``norm_adv_by_std``): :func:`group_advantages`; seeded samples as ``stats_mask`` says."""
    return group_advantages(rewards, group_index, norm_by_std=norm_adv_by_std, eps=adv_eps, stats_mask=stats_mask)


def group_advantages(
    rewards: Tensor,
    group_index: Optional[GroupIndex] = None,
    *,
    norm_by_std: bool = True,
    eps: float = 1e-6,
    stats_mask: Optional[Tensor] = None,
) -> Tensor:
    """Centre (and optionally scale) each reward by the statistics of its prompt group.

    ``A_i = (r_i - mean_g) / (std_g + eps)`` with ``norm_by_std`` (GRPO), ``A_i = r_i - mean_g``
    without (Dr. GRPO). ``mean_g`` and ``std_g`` are taken over the samples of group ``g`` selected
    by ``stats_mask``; ``std_g`` is the unbiased (Bessel-corrected) standard deviation, as in
    ``torch.std``, and is 0 for a group with one statistics sample.

    A group whose statistics samples all share one reward has ``std_g = 0``: the scale is then the
    std of *all* the group's samples (plus ``eps``), and 1 when that is 0 too (the whole group
    shares one reward and every advantage is 0). Either way every sample with the statistics'
    reward gets exactly 0 (never NaN, never ``x / eps``). Exactness holds for any float reward
    because the statistics are computed on rewards shifted by the group's minimum, which makes
    equal rewards cancel without rounding. Without ``stats_mask`` both stds are the same.

    Args:
        rewards: ``[B]`` with ``group_index``, or ``[G, n]`` (one row per group) without it.
        group_index: ``[B]`` integer group id of each sample (any ids, not necessarily contiguous).
        norm_by_std: divide by the group std (GRPO); False keeps only the centring (Dr. GRPO).
        eps: added to a non-zero std before dividing.
        stats_mask: bool, same shape as ``rewards``; True for samples that enter the group mean and
            std. None means all samples. Every group needs at least one such sample.

    Returns:
        Advantages with the shape of ``rewards`` (float; ``rewards``' dtype when it is floating).
    """
    if group_index is None:
        if rewards.dim() != 2:
            raise ValueError(f"rewards without group_index must be [G, n]; got shape {tuple(rewards.shape)}")
        num_groups, n = rewards.shape
        ids = torch.arange(num_groups, device=rewards.device).repeat_interleave(n)
    else:
        ids = group_ids(rewards, group_index)

    r = rewards.reshape(-1).to(torch.float64)
    stats = torch.ones_like(r, dtype=torch.bool) if stats_mask is None else stats_mask.reshape(-1).bool()
    if stats.shape != r.shape:
        raise ValueError(f"stats_mask shape {tuple(stats_mask.shape)} != rewards shape {tuple(rewards.shape)}")

    num = int(ids.max()) + 1 if ids.numel() else 0
    s_ids, s_r = ids[stats], r[stats]
    count = torch.bincount(s_ids, minlength=num).to(torch.float64)
    if bool((count == 0).any()):
        empty = torch.nonzero(count == 0).flatten().tolist()
        raise ValueError(f"groups {empty} (in order of their ids) have no sample selected by stats_mask")

    ref = torch.full((num,), float("inf"), dtype=torch.float64, device=r.device)
    ref = ref.scatter_reduce(0, s_ids, s_r, reduce="amin")
    shifted = r - ref[ids]
    mean = torch.zeros_like(ref).index_add(0, s_ids, shifted[stats]) / count
    centred = shifted - mean[ids]

    if norm_by_std:
        std = _group_std(centred[stats], s_ids, count)
        fallback = torch.ones_like(std)
        if stats_mask is not None:
            count_all = torch.bincount(ids, minlength=num).to(torch.float64)
            mean_all = torch.zeros_like(ref).index_add(0, ids, shifted) / count_all
            std_all = _group_std(shifted - mean_all[ids], ids, count_all)
            fallback = torch.where(std_all > 0, std_all + eps, fallback)
        scale = torch.where(std > 0, std + eps, fallback)
        centred = centred / scale[ids]

    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()
    return centred.to(out_dtype).reshape(rewards.shape)


def _group_std(deviations: Tensor, ids: Tensor, count: Tensor) -> Tensor:
    """Unbiased std per group from each sample's deviation from its group mean [N] and group id [N]; 0 for one sample."""
    sq = torch.zeros_like(count).index_add(0, ids, deviations**2)
    return torch.where(count > 1, sq / (count - 1).clamp(min=1), torch.zeros_like(sq)).sqrt()


def overlong_penalty(lengths: Tensor, max_len: int, buffer: int, penalty: float) -> Tensor:
    """DAPO's soft overlong punishment, added to the reward.

    0 for ``length <= max_len - buffer``, then linear down to ``-penalty`` at ``length = max_len``
    (and ``-penalty`` beyond). With ``buffer = 0`` only lengths above ``max_len`` are punished.

    Args:
        lengths: ``[B]`` response lengths in tokens.
        max_len: the longest allowed response (``engine.max_new_tokens``).
        buffer: width of the linear ramp in tokens (``algo.overlong_buffer``), ``0 <= buffer <= max_len``.
        penalty: the largest penalty (``algo.overlong_penalty``), >= 0.

    Returns:
        ``[B]`` float penalties, each in ``[-penalty, 0]``.
    """
    if not 0 <= buffer <= max_len:
        raise ValueError(f"overlong buffer must be in [0, max_len={max_len}]; got {buffer}")
    lengths = lengths.to(torch.get_default_dtype())
    if buffer == 0:
        frac = (lengths > max_len).to(lengths.dtype)
    else:
        frac = ((lengths - (max_len - buffer)) / buffer).clamp(0.0, 1.0)
    return -penalty * frac
