"""Rollout correction: per-token weights for the gap between the rollout engine's numerics and the trainer's.

The rollout engine (vLLM on GPUs) samples with other numerics than the trainer (bf16 kernels, its own
sampler), so the distribution a token was drawn from, ``pi_engine``, differs from pi_old as the trainer
computes it. ``algo.rollout_correction`` multiplies each corrected token's clipped policy-gradient term by
a weight of the ratio ``r_t = pi_old(o_t) / pi_engine(o_t)``, taken from the log-probs (log-ratio clamped
to [-20, 20]) without gradient; ``c`` is ``algo.rollout_correction_cap`` (>= 1):

- ``tis`` (truncated importance sampling): ``w_t = min(r_t, c)``;
- ``mis`` (masked importance sampling): ``w_t = r_t`` where ``1/c <= r_t <= c``, else 0. A masked
  token's term is zeroed, not removed: it still counts in the loss's normaliser (the DAPO token-mean
  divides by every loss token, masked ones included; the GRPO sequence-mean by its sequence's tokens),
  as verl's first ``rollout_is`` mask mode did by zeroing the weight (its later one takes the token out
  of the response mask, and so out of the denominator).

``none`` (the default) computes no weight: the update is exactly the one without a correction.
Each mode is one function of ``(ratio, cap)`` registered in :data:`CORRECTIONS` (a new one: one new module of
:mod:`tsctl.algo` registering itself). A mode that declares ``sequence=True`` (``seq_mis``, :mod:`tsctl.algo.seq_mis`)
is given each corrected token's *sequence* ratio instead, the product of the ratios of its sequence's corrected
tokens, ``exp(sum of their log-ratios)`` (the sum clamped to [-20, 20]), as verl's ``rollout_is`` at level
``sequence``.

Which tokens: the caller names them (``correctable``); the update weighs the suffix and plain tokens,
which the engine sampled from pi_old, and leaves seed-prefix tokens at 1 (their ratio is taken against
the stored pi_b, and no engine log-prob of them is kept). Where the engine's log-probs are pi_old
itself (``trainer.old_logprobs`` picking the engine) every ratio, and so every weight, is exactly 1.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from tsctl.algo.losses import LOG_RATIO_CLAMP
from tsctl.algo.position_metrics import Pair
from tsctl.config.registry import Registry

CorrectionFn = Callable[[Tensor, float], Tensor]
"""``fn(ratio, cap) -> weights``: each corrected token's weight from its ratio ``pi_old / pi_engine`` (same shape)."""

CORRECTIONS: Registry[CorrectionFn] = Registry("rollout correction", __package__, key="algo.rollout_correction", sequence=False)
"""The modes of ``algo.rollout_correction`` other than ``none``, from any module of :mod:`tsctl.algo`; ``sequence``: the
mode weighs each token by its sequence's ratio."""


@CORRECTIONS.register("tis")
def _truncated(ratio: Tensor, cap: float) -> Tensor:
    """Truncated importance sampling: ``min(r, cap)``."""
    return ratio.clamp(max=cap)


@CORRECTIONS.register("mis")
def _masked(ratio: Tensor, cap: float) -> Tensor:
    """Masked importance sampling: ``r`` inside ``[1/cap, cap]``, 0 outside."""
    return torch.where((ratio <= cap) & (ratio >= 1.0 / cap), ratio, torch.zeros_like(ratio))


def correction_weights(
    mode: str, old_logprobs: Tensor, engine_logprobs: Tensor, mask: Tensor, correctable: Tensor, cap: float,
) -> tuple[Tensor, dict[str, Pair]]:
    """The weight of every token's policy-gradient term under the correction ``mode``, and its metrics.

    Args:
        mode: a name in :data:`CORRECTIONS` (``tis``, ``mis``, ``seq_mis``).
        old_logprobs: ``[B, T]`` pi_old's log-probs as the trainer computes them (read on corrected tokens only).
        engine_logprobs: ``[B, T]`` the engine's log-probs of the tokens it sampled (read on corrected tokens only).
        mask: ``[B, T]`` bool, the loss mask.
        correctable: ``[B, T]`` bool, the tokens the engine sampled from pi_old (suffix and plain tokens).
        cap: the bound ``c`` (>= 1).

    Returns:
        ``weights``: ``[B, T]`` float32 without gradient, the mode's weight on the corrected tokens
        (``mask & correctable``) and 1 elsewhere; where both log-probs agree the ratio, and so a
        ``tis`` or ``mis`` weight, is exactly 1. ``metrics``: ``(sum, count)`` pairs over the corrected
        tokens: ``weight_mean`` (their weights) and ``corrected_share`` (1 where the weight differs
        from the raw ratio, the token's or with ``sequence`` its sequence's: capped by ``tis``, masked by ``mis``).
        An unknown ``mode`` raises ValueError.
    """
    weigh = CORRECTIONS.get(mode)
    with torch.no_grad():
        on = mask.bool() & correctable.bool()
        log_ratio = torch.where(on, old_logprobs.float() - engine_logprobs.float(), torch.zeros_like(old_logprobs, dtype=torch.float32))
        if CORRECTIONS.needs(mode).sequence:
            log_ratio = log_ratio.sum(-1, keepdim=True).expand_as(log_ratio)
        ratio = log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp()
        raw = weigh(ratio, cap)
        weights = torch.where(on, raw, torch.ones_like(raw))
        count = on.sum()
        metrics = {
            "weight_mean": (torch.where(on, raw, torch.zeros_like(raw)).double().sum(), count),
            "corrected_share": (((raw != ratio) & on).sum(), count),
        }
    return weights, metrics
