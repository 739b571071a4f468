"""GSPO, a policy loss of ``algo.policy_loss``: one importance ratio per sequence (Zheng et al., 2025).

A sequence's ratio is the geometric mean of its tokens' ratios,
``s_i = exp(mean_{t in S_i} log r_it)`` with ``r_it = pi_theta / pi_old`` (each log clamped to [-20, 20])
and ``S_i`` its loss tokens that are not seed-prefix tokens (suffix and plain tokens). Every token of
``S_i`` takes PPO's clip (:func:`~tsctl.algo.losses.ppo_clip`) with the ratio
``s_it = sg(s_i) * pi_theta(t) / sg(pi_theta(t))`` (``sg``: stop-gradient): its value is ``s_i`` and its
gradient ``s_i * grad log pi_theta(t)``, so the clip acts on the whole sequence while each token keeps its
own gradient. ``algo.clip_c``, when set, dual-clips ``s_i`` as it would a token ratio.

Seed-prefix tokens: their ratio is taken against pi_b, a behaviour policy up to a refresh window stale,
so they stay out of ``s_i`` (one stale prefix would move the whole sequence's ratio) and keep the
per-token objective of ``vanilla``, their own ratio with their dual clip (``algo.prefix_clip_c``): the
entry declares ``prefix_clip``. Without seeds GSPO is the paper's; its sequence-mean aggregation is
``algo.aggregation=grpo`` (``dapo`` averages the same terms over tokens). A row with no suffix or plain loss
token has ``s_i = 1`` (no term of it enters the loss but its prefix tokens').
"""

from __future__ import annotations

import torch
from torch import Tensor

from tsctl.algo.losses import POLICY_LOSSES, DualClip, ppo_clip, token_log_ratio


def sequence_log_ratio(logprobs: Tensor, old_logprobs: Tensor, tokens: Tensor) -> Tensor:
    """``log s_i``: the mean over ``tokens`` of each row's clamped per-token log-ratios, 0 for a row without one.

    Args:
        logprobs: ``[B, T]`` ``pi_theta`` log-probs.
        old_logprobs: ``[B, T]`` pi_old log-probs.
        tokens: ``[B, T]`` bool, the tokens of the sequence ratio.

    Returns:
        ``[B]`` log sequence ratios, without gradient.
    """
    with torch.no_grad():
        m = tokens.to(logprobs.dtype)
        token = token_log_ratio(logprobs, old_logprobs)
        return (token * m).sum(dim=-1) / m.sum(dim=-1).clamp(min=1.0)


@POLICY_LOSSES.register("gspo", reads=("clip_low", "clip_high", "clip_c"), prefix_clip=True)
def gspo(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, *,
    prefix: Tensor, clip_low: float, clip_high: float, clip_c: DualClip = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token GSPO loss (the module docstring): sequence ratio on suffix and plain tokens, token ratio on prefix ones.

    Args:
        logprobs: ``[B, T]`` ``pi_theta`` log-probs (with grad).
        old_logprobs: ``[B, T]`` stored log-probs (pi_b on prefix tokens, pi_old elsewhere).
        advantages: ``[B]`` per-sequence advantages.
        mask: ``[B, T]`` loss mask.
        prefix: ``[B, T]`` bool, True on seed-prefix tokens.
        clip_low, clip_high, clip_c: as in :func:`~tsctl.algo.losses.ppo_clip`.

    Returns:
        ``[B, T]`` per-token loss and the metrics of :mod:`tsctl.algo.losses` (``ratio``: ``s_i`` on suffix and plain tokens).
    """
    seq = sequence_log_ratio(logprobs, old_logprobs, mask.bool() & ~prefix.bool())
    log_ratio = torch.where(prefix.bool(), token_log_ratio(logprobs, old_logprobs), logprobs - logprobs.detach() + seq.unsqueeze(-1))
    return ppo_clip(log_ratio, advantages, clip_low=clip_low, clip_high=clip_high, clip_c=clip_c)
