"""The policy loss: a registry of per-token objectives, a registry of aggregations, and the k3 KL penalty.

``algo.policy_loss`` names the per-token objective, one whole function of :data:`POLICY_LOSSES`:
``vanilla`` (here) is :func:`clipped_objective`; another is one new module of :mod:`tsctl.algo`
registering itself (``gspo``: :mod:`tsctl.algo.gspo`). Each declares ``prefix_clip``: whether it
bounds seed-prefix tokens by their own dual clip (``clip_c`` per token, :func:`dual_clip_bounds`).
``algo.loss`` names how the per-token losses of the objective become one number:
``dapo`` averages over every loss token of the mini-batch (token-mean), ``grpo`` over each sequence's
tokens, then over sequences (seq-mean). :func:`get_policy_loss` returns the loss of that name, a
function of the signature of :data:`PolicyLossFn` returning ``(loss, metrics)``.

Importance ratio. ``old_logprobs`` holds, per token, the stored log-prob of the policy the ratio is
taken against: ``pi_b`` for a seed-prefix token, ``pi_old`` for a suffix or plain token. The loss
does not care which; it computes ``r_t = exp(logprobs - old_logprobs)`` (log-ratio clamped to
[-20, 20] against overflow, as verl does).

Normalisers. A mini-batch may be split into micro-batches whose losses are summed by gradient
accumulation. Each loss therefore divides by a normaliser of the whole *mini-batch*, passed in:
``token_norm`` (its number of loss tokens) and ``seq_norm`` (its number of sequences with at least
one loss token); :func:`loss_norms` computes both from the mini-batch's mask. With them, the sum of
the micro-batch losses equals the unsplit loss exactly, and so does the gradient.

Metrics. ``metrics`` maps a name to a detached float ``[B, T]`` tensor of per-token values, to be
reduced over the loss mask by the caller (sum and count, or by position and source with
:mod:`tsctl.algo.position_metrics`). Per-token values aggregate across micro-batches and steps
without bias, unlike per-micro-batch means. Names:

- ``pg_loss``: the clipped per-token loss before aggregation (and before any per-token ``weights``).
- ``ratio``: ``r_t``.
- ``clip_low``: 1 where the lower clip is active: ``A < 0`` and ``r_t < 1 - clip_low``.
- ``clip_high``: 1 where the upper clip is active: ``A > 0`` and ``r_t > 1 + clip_high``.
- ``clip_dual``: 1 where the dual clip is active: ``A < 0`` and ``r_t > clip_c`` (0 when off).
- ``clipped``: ``clip_low + clip_high + clip_dual`` (disjoint): the token's gradient is zero.
- ``kl_k3``: ``r_t - 1 - log r_t``, the k3 estimate of ``KL(pi_ref || pi_theta)`` where ``pi_ref``
  is the policy of ``old_logprobs`` (the tokens were sampled from it); >= 0.

The masked token-mean of ``clip_low + clip_high`` is verl's ``pg_clipfrac`` (tokens where the clipped
term wins: ``-A * clip(r) > -A * r``); that of ``clip_dual`` is verl's ``pg_clipfrac_lower``.

Dual clip per token. ``clip_c`` may be a ``[B, T]`` tensor of per-token constants (``inf`` where the
dual clip is off): :func:`dual_clip_bounds` gives seed-prefix tokens their own bound
(``algo.prefix_clip_c``). A prefix token's ratio is taken against a behaviour policy up to a whole
refresh window stale, so ``pi_theta >> pi_b`` is common there; with ``A < 0`` the unclipped ``-A r``
would grow without bound, the dual clip caps it at ``-A c`` (zero gradient beyond ``r = c``).
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Union

import torch
from torch import Tensor

from tsctl.config.registry import Registry

Norm = Union[float, Tensor]
DualClip = Union[float, Tensor, None]
"""A dual-clip constant: one float for every token, a ``[B, T]`` tensor of per-token constants, or None (off)."""
PolicyLossFn = Callable[..., tuple[Tensor, dict[str, Tensor]]]
"""``fn(logprobs, old_logprobs, advantages, mask, *, policy_loss, prefix, clip_low, clip_high, clip_c, token_norm, seq_norm, weights)``."""
Objective = Callable[..., tuple[Tensor, dict[str, Tensor]]]
"""An entry of :data:`POLICY_LOSSES`: ``fn(logprobs, old_logprobs, advantages, mask, *, prefix, clip_low, clip_high,
clip_c) -> ([B, T] per-token loss, [B, T] metrics)``; ``prefix`` is ``[B, T]`` bool, True on seed-prefix tokens."""
Aggregation = Callable[[Tensor, Tensor, Norm, Norm], Tensor]
"""``aggregate(values, mask, token_norm, seq_norm) -> 0-d loss`` from ``[B, T]`` per-token values."""

LOG_RATIO_CLAMP = 20.0


def loss_norms(mask: Tensor) -> tuple[Tensor, Tensor]:
    """Normalisers of a whole mini-batch: ``(token_norm, seq_norm)``.

    Args:
        mask: ``[B, T]`` loss mask of the *whole* mini-batch (before any micro-batch split).

    Returns:
        ``token_norm``: 0-d float, number of loss tokens; ``seq_norm``: 0-d float, number of
        sequences with at least one loss token. Each is at least 1, so an empty mini-batch gives
        a zero loss instead of NaN.
    """
    m = mask.bool()
    token_norm = m.sum().clamp(min=1).to(torch.float32)
    seq_norm = m.any(dim=-1).sum().clamp(min=1).to(torch.float32)
    return token_norm, seq_norm


def clipped_objective(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    *,
    clip_low: float,
    clip_high: float,
    clip_c: DualClip = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token PPO loss with clip-higher and optional dual clip (verl's vanilla policy loss).

    ``l_t = max(-A r_t, -A clip(r_t, 1 - clip_low, 1 + clip_high))``; with ``clip_c`` and ``A < 0``,
    ``l_t = min(l_t, -A clip_c)`` (``clip_c`` may differ per token).

    Args:
        logprobs: ``[B, T]`` log-probs of the sampled tokens under ``pi_theta`` (with grad).
        old_logprobs: ``[B, T]`` stored log-probs of the policy the ratio is taken against.
        advantages: ``[B]`` per-sequence (or ``[B, T]`` per-token) advantages.
        clip_low: lower clip range (> 0).
        clip_high: upper clip range (> 0).
        clip_c: dual-clip constant (> 1), a ``[B, T]`` tensor of per-token constants (> 1, ``inf``
            where off; see :func:`dual_clip_bounds`), or None to disable the dual clip.

    Returns:
        ``[B, T]`` per-token loss, and the per-token metrics described in the module docstring.
    """
    log_ratio = (logprobs - old_logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return clipped_terms(log_ratio, advantages, clip_low=clip_low, clip_high=clip_high, clip_c=clip_c)


def clipped_terms(
    log_ratio: Tensor, advantages: Tensor, *, clip_low: float, clip_high: float, clip_c: DualClip = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """:func:`clipped_objective` from the log importance ratios: ``r_t = exp(log_ratio)``, then the clips.

    ``log_ratio``: ``[B, T]`` log-ratios (with grad, clamped), per token or GSPO's per sequence; the other
    arguments and the ``[B, T]`` loss and metrics returned as in :func:`clipped_objective`.
    """
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    ratio = log_ratio.exp()
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    if isinstance(clip_c, Tensor):
        on = torch.isfinite(clip_c)
        bound = -adv * torch.where(on, clip_c, torch.ones_like(clip_c))
        loss = torch.where((adv < 0) & on, torch.minimum(loss, bound), loss)
    elif clip_c is not None:
        loss = torch.where(adv < 0, torch.minimum(loss, -adv * clip_c), loss)

    with torch.no_grad():
        r, a = ratio.detach(), adv.detach().expand_as(ratio)
        low = (a < 0) & (r < 1.0 - clip_low)
        high = (a > 0) & (r > 1.0 + clip_high)
        dual = (a < 0) & (r > clip_c) if clip_c is not None else torch.zeros_like(low)
        metrics = {
            "pg_loss": loss.detach().float(),
            "ratio": r.float(),
            "clip_low": low.float(),
            "clip_high": high.float(),
            "clip_dual": dual.float(),
            "clipped": (low | high | dual).float(),
            "kl_k3": (r - 1.0 - log_ratio.detach()).float(),
        }
    return loss, metrics


def dual_clip_bounds(prefix: Tensor, clip_c: Optional[float], prefix_clip_c: Optional[float]) -> Union[float, Tensor, None]:
    """The ``clip_c`` argument of a policy loss: ``clip_c`` everywhere, tighter on seed-prefix tokens.

    Args:
        prefix: ``[B, T]`` bool, True on seed-prefix tokens (ratio taken against pi_b).
        clip_c: dual-clip constant of every token (``algo.clip_c``), or None.
        prefix_clip_c: dual-clip constant of prefix tokens (``algo.prefix_clip_c``), or None.

    Returns:
        ``clip_c`` itself when ``prefix_clip_c`` is None (the scalar path, as without seeds); else a
        ``[B, T]`` float32 tensor: ``min(clip_c, prefix_clip_c)`` on prefix tokens, ``clip_c`` (or
        ``inf``, off) elsewhere.
    """
    if prefix_clip_c is None:
        return clip_c
    other = math.inf if clip_c is None else clip_c
    return torch.where(prefix.bool(), min(other, prefix_clip_c), other).to(torch.float32)


def aggregate_token_mean(values: Tensor, mask: Tensor, token_norm: Norm) -> Tensor:
    """DAPO aggregation: ``sum(values * mask) / token_norm``.

    Args:
        values: ``[B, T]`` per-token values (finite at masked-out positions).
        mask: ``[B, T]`` loss mask.
        token_norm: loss tokens of the whole mini-batch.

    Returns:
        0-d tensor.
    """
    return (values * mask.to(values.dtype)).sum() / token_norm


def aggregate_sequence_mean(values: Tensor, mask: Tensor, seq_norm: Norm) -> Tensor:
    """GRPO aggregation: per-sequence token-mean, summed over sequences, divided by ``seq_norm``.

    A sequence without loss tokens contributes 0 (and is not counted in ``seq_norm`` by
    :func:`loss_norms`).

    Args:
        values: ``[B, T]`` per-token values (finite at masked-out positions).
        mask: ``[B, T]`` loss mask.
        seq_norm: sequences with at least one loss token in the whole mini-batch.

    Returns:
        0-d tensor.
    """
    m = mask.to(values.dtype)
    per_seq = (values * m).sum(dim=-1) / m.sum(dim=-1).clamp(min=1.0)
    return per_seq.sum() / seq_norm


AGGREGATIONS: Registry[Aggregation] = Registry("loss aggregation")
"""How each ``algo.loss`` aggregates the per-token clipped losses: ``dapo`` token-mean, ``grpo`` seq-mean."""


@AGGREGATIONS.register("dapo")
def _dapo(values: Tensor, mask: Tensor, token_norm: Norm, seq_norm: Norm) -> Tensor:
    """DAPO: ``sum_{i,t} mask_it * l_it / token_norm`` (``seq_norm`` unused)."""
    return aggregate_token_mean(values, mask, token_norm)


@AGGREGATIONS.register("grpo")
def _grpo(values: Tensor, mask: Tensor, token_norm: Norm, seq_norm: Norm) -> Tensor:
    """GRPO: ``sum_i (sum_t mask_it * l_it / sum_t mask_it) / seq_norm`` (``token_norm`` unused)."""
    return aggregate_sequence_mean(values, mask, seq_norm)


POLICY_LOSSES: Registry[Objective] = Registry("policy loss", __package__, prefix_clip=False)
"""The per-token objectives by name (``algo.policy_loss``), from any module of :mod:`tsctl.algo`. Each declares
``prefix_clip``: True if it takes per-token ``clip_c`` bounding seed-prefix tokens by ``algo.prefix_clip_c``."""


@POLICY_LOSSES.register("vanilla", prefix_clip=True)
def _vanilla(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, *,
    prefix: Tensor, clip_low: float, clip_high: float, clip_c: DualClip = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """:func:`clipped_objective`: every token's own ratio (a prefix token's against pi_b), its own dual clip."""
    return clipped_objective(logprobs, old_logprobs, advantages, clip_low=clip_low, clip_high=clip_high, clip_c=clip_c)


def get_policy_loss(name: str) -> PolicyLossFn:
    """The policy loss ``algo.loss=name``: an objective of :data:`POLICY_LOSSES` per token, then the aggregation ``name``.

    The returned function takes ``(logprobs, old_logprobs, advantages, mask, *, policy_loss="vanilla",
    prefix=None, clip_low, clip_high, clip_c=None, token_norm, seq_norm, weights=None)``:

    - ``logprobs``: ``[B, T]`` ``pi_theta`` log-probs (with grad);
    - ``old_logprobs``: ``[B, T]`` stored log-probs the ratio is taken against;
    - ``advantages``: ``[B]`` (or ``[B, T]``);
    - ``mask``: ``[B, T]`` response tokens that enter the loss;
    - ``policy_loss``: the objective's name (``algo.policy_loss``); ``prefix``: ``[B, T]`` bool seed-prefix
      tokens (None: none);
    - ``clip_low``, ``clip_high``, ``clip_c``: see :func:`clipped_objective`;
    - ``token_norm``, ``seq_norm``: loss tokens and sequences of the whole mini-batch (:func:`loss_norms`);
    - ``weights``: ``[B, T]`` detached per-token multipliers of the clipped terms before aggregation
      (the rollout correction, :mod:`tsctl.algo.rollout_correction`), or None: no multiplication;

    and returns the 0-d loss and the per-token ``[B, T]`` metrics. An unknown name raises ValueError
    listing the valid ones.
    """
    aggregate = AGGREGATIONS.get(name)

    def loss(
        logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, *, policy_loss: str = "vanilla",
        prefix: Optional[Tensor] = None, clip_low: float, clip_high: float, clip_c: DualClip = None, token_norm: Norm,
        seq_norm: Norm, weights: Optional[Tensor] = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        per_token, metrics = POLICY_LOSSES.get(policy_loss)(
            logprobs, old_logprobs, advantages, mask, prefix=torch.zeros_like(mask, dtype=torch.bool) if prefix is None else prefix,
            clip_low=clip_low, clip_high=clip_high, clip_c=clip_c,
        )
        if weights is not None:
            per_token = per_token * weights
        return aggregate(per_token, mask, token_norm, seq_norm), metrics

    return loss


def kl_penalty_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token k3 estimate of ``KL(pi || pi_ref)`` for tokens sampled from ``pi``.

    ``k3 = exp(d) - d - 1`` with ``d = ref_logprobs - logprobs`` clamped to [-20, 20]; the result is
    clamped to at most 10 (verl's ``low_var_kl``), so one wild token cannot dominate the penalty.

    Args:
        logprobs: ``[B, T]`` log-probs under ``pi`` (the policy being trained, with grad).
        ref_logprobs: ``[B, T]`` log-probs under the reference policy.

    Returns:
        ``[B, T]`` non-negative per-token penalties.
    """
    d = (ref_logprobs - logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return (d.exp() - d - 1.0).clamp(max=10.0)
