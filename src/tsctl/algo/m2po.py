"""M2PO, a mask of ``algo.stale_mask``: the second moment of the stale tokens' log-ratios held under a threshold.

Zheng et al., "Prosperity before Collapse: How Far Can Off-Policy RL Reach with Stale Data on LLMs?" (arXiv
2510.01161): with data many updates stale, PPO's clip lets a few tokens of extreme importance weight dominate the
gradient. M2PO bounds the second moment of the log-ratio over the batch's tokens,

    M2 = 1/N sum_i (log r_i)^2 = 1/N sum_i (log pi_theta(a_i|s_i) - log pi_behav(a_i|s_i))^2  <=  tau,

by masking the tokens with the largest ``(log r_i)^2`` until the mean over the remaining ones is at most ``tau``
(``algo.m2po.threshold``, the paper's 0.04), and optimises

    J = 1 / sum_i |o_i| * sum_i sum_t M_{i,t} * (the token's clipped policy term),

the mask ``M`` inside, the normaliser over every token (as AReaL's documentation writes the objective; AReaL's
``grpo_loss_fn`` hands the narrowed mask to a loss that divides by the kept tokens). Here a masked token keeps its
place in the normaliser (:mod:`tsctl.algo.stale_masks`), so masking never scales up the other tokens' gradients.

Seed-prefix tokens: they are the stale tokens here (their ratio is against pi_b, up to a refresh window old), so the
candidates are the seed-prefix tokens of the loss mask and the moment is theirs; suffix and plain tokens (ratio
against pi_old, fresh) are never masked. ``log r`` is ``log pi_theta - log pi_b`` at the micro-batch's forward (the
current policy, as the paper's ``r``; pi_old on the first mini-batch), taken over the micro-batch's candidates as
AReaL takes it over each micro-batch. Where even the smallest ``(log r)^2`` exceeds ``tau`` every candidate is
masked (AReaL keeps one). Refused at ``ratio=0``, with ``seeds.train_prefix=false``, and with ``seeds.source=traces``
unless ``seeds.trace_logprobs=cap`` (no candidate with a ratio against pi_b).

Metrics: ``m2po/masked`` (the share of prefix tokens masked per step) and ``m2po/m2`` (their ``M2`` before masking).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tsctl.algo.stale_masks import STALE_MASKS
from tsctl.config.ranges import positive


@dataclass
class M2poSettings:
    """``algo.m2po.*``: the settings of the ``m2po`` mask."""

    threshold: float = 0.04
    """``tau``: the largest mean squared log-ratio of the kept stale tokens (> 0; the paper's 0.04)."""

    def __post_init__(self) -> None:
        positive("algo.m2po.threshold", self.threshold)


@STALE_MASKS.register("m2po", settings=M2poSettings)
def m2po(log_ratio: Tensor, candidates: Tensor, *, settings: M2poSettings) -> Tensor:
    """Keep the candidates of smallest ``(log r)^2`` whose mean is at most ``settings.threshold``.

    Args:
        log_ratio: ``[B, T]`` ``log pi_theta - log pi_b`` (read on candidates only).
        candidates: ``[B, T]`` bool, the tokens that may be masked.
        settings: ``algo.m2po``.

    Returns:
        ``[B, T]`` bool: False on the masked candidates, True elsewhere.
    """
    m2 = log_ratio[candidates].double().square()
    largest_first, order = m2.sort(descending=True)
    n = m2.numel()
    rest = largest_first.flip(0).cumsum(0).flip(0) / torch.arange(n, 0, -1, dtype=m2.dtype, device=m2.device)  # mean of the k-th and smaller
    within = torch.nonzero(rest <= settings.threshold)
    masked = int(within[0]) if len(within) else n  # the fewest largest tokens whose removal meets the bound
    kept = torch.empty(n, dtype=torch.bool, device=m2.device)
    kept[order] = torch.arange(n, device=m2.device) >= masked
    keep = torch.ones_like(candidates)
    keep[candidates] = kept
    return keep
