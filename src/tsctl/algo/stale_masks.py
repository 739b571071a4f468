"""Masks of stale tokens (``algo.stale_mask``): which seed-prefix tokens leave the policy term of the objective.

A seed-prefix token's ratio is taken against pi_b, a behaviour snapshot up to a refresh window stale, so its
importance ratio can be far from 1. An entry of :data:`STALE_MASKS` is called
``fn(log_ratio, candidates, *, settings) -> keep`` with

- ``log_ratio``: ``[B, T]`` ``log pi_theta - log pi_b`` (detached; read on candidates only);
- ``candidates``: ``[B, T]`` bool, the stale tokens it may mask (the seed-prefix tokens of the loss mask);
- ``settings``: its own block ``algo.<name>.*``;

and returns ``keep``, ``[B, T]`` bool, False on the tokens it masks (True on every other token). The objective
(:mod:`tsctl.algo.objective`) multiplies the per-token policy loss by ``keep`` before aggregating it, so it works
with every policy loss; a masked token's policy term is zeroed, not removed: it still counts in the aggregation's
normaliser, as a ``mis``-masked token does. The KL and entropy terms are not masked. ``none`` (the default) masks
nothing and computes nothing. Each step logs ``<name>/masked``, the share of candidate tokens masked, and
``<name>/m2``, the candidates' mean squared log-ratio before masking.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import Tensor

from tsctl.algo.position_metrics import Pair
from tsctl.config.registry import Registry

StaleMask = Callable[..., Tensor]
"""``fn(log_ratio, candidates, *, settings) -> keep``, each ``[B, T]`` (the module docstring)."""

STALE_MASKS: Registry[StaleMask] = Registry("stale-token mask", __package__, key="algo.stale_mask", reads=())
"""The masks of ``algo.stale_mask`` other than ``none``, from any module of :mod:`tsctl.algo`."""


def stale_keep(name: str, settings: Optional[Any], logprobs: Tensor, old: Tensor, candidates: Tensor) -> tuple[Tensor, dict[str, Pair]]:
    """The mask ``name``'s ``keep`` over the micro-batch and its metrics.

    Args:
        name: an entry of :data:`STALE_MASKS`.
        settings: its block.
        logprobs: ``[B, T]`` pi_theta's log-probs (detached here).
        old: ``[B, T]`` what each ratio is taken against (pi_b on prefix tokens).
        candidates: ``[B, T]`` bool, the stale tokens of the loss mask.

    Returns:
        ``keep``: ``[B, T]`` float32 without gradient, 0 on masked tokens and 1 elsewhere; ``(sum, count)`` pairs over
        the candidates: ``masked`` (1 where masked) and ``m2`` (the squared log-ratio).
    """
    with torch.no_grad():
        log_ratio = torch.where(candidates, logprobs.detach().float() - old.float(), torch.zeros_like(old, dtype=torch.float32))
        keep = STALE_MASKS.get(name)(log_ratio, candidates, settings=settings)
        count = candidates.sum()
        metrics = {"masked": ((~keep & candidates).sum(), count), "m2": (log_ratio.double().square().sum(), count)}
    return keep.float(), metrics
