"""Policy losses: the registry of per-token objectives (``algo.policy_loss``), PPO's clip, and the prefix dual clip.

An entry of :data:`POLICY_LOSSES` is one whole per-token objective, registered where it is defined: ``vanilla``
(here), ``gspo`` (:mod:`tsctl.algo.gspo`), ``cispo`` (:mod:`tsctl.algo.cispo`), ``clip_cov`` (:mod:`tsctl.algo.clip_cov`),
``kl_cov`` (:mod:`tsctl.algo.kl_cov`), ``forking_tokens`` (:mod:`tsctl.algo.forking_tokens`); a new one is one new module of
:mod:`tsctl.algo`. It is called ``fn(logprobs, old_logprobs, advantages, mask, *, prefix, **arguments)`` with

- ``logprobs``: ``[B, T]`` ``pi_theta`` log-probs of the sampled tokens (with grad);
- ``old_logprobs``: ``[B, T]`` the stored log-prob each ratio is taken against: ``pi_b`` on a seed-prefix token,
  ``pi_old`` on a suffix or plain token (the loss does not care which);
- ``advantages``: ``[B]`` per-sequence (or ``[B, T]`` per-token) advantages;
- ``mask``: ``[B, T]`` bool, the loss tokens; ``prefix``: ``[B, T]`` bool, the seed-prefix tokens;
- the ``algo.*`` keys it declares it ``reads`` (``clip_low=0.2``...), and ``settings=`` its own block when it
  declares ``settings`` (a dataclass defined beside it, keys ``algo.<name>.*``: :mod:`tsctl.config.blocks`);
- with ``prefix_clip=True``, ``clip_c`` as a ``[B, T]`` tensor of per-token dual-clip constants: seed-prefix tokens
  bounded by ``algo.prefix_clip_c`` (:func:`dual_clip_bounds`), the entry's answer to a prefix ratio taken
  against a behaviour policy up to a refresh window stale;
- with ``entropies=True``, ``entropy``: ``[B, T]`` ``pi_theta``'s entropy at each token, detached;
- with ``draws=True``, ``generator``: the step's ``torch.Generator`` for the entry's random choices.

It returns the ``[B, T]`` per-token loss (before aggregation, :mod:`tsctl.algo.aggregations`) and per-token
metrics, detached float ``[B, T]`` tensors reduced over the loss mask by the caller (sum and count, or by
position and source with :mod:`tsctl.algo.position_metrics`; per-token values aggregate across micro-batches and
steps without bias). Every entry gives these names:

- ``pg_loss``: the per-token loss before aggregation (and before any rollout-correction weight).
- ``ratio``: ``r_t`` (the entry's importance ratio of the token).
- ``clip_low``: 1 where the lower clip is active: ``A < 0`` and ``r_t < 1 - clip_low``.
- ``clip_high``: 1 where the upper clip is active: ``A > 0`` and ``r_t > 1 + clip_high``.
- ``clip_dual``: 1 where the dual clip is active: ``A < 0`` and ``r_t > clip_c`` (0 when off).
- ``clipped``: ``clip_low + clip_high + clip_dual`` (disjoint): the token's gradient is zero.
- ``kl_k3``: ``r_t - 1 - log r_t``, the k3 estimate of ``KL(pi_ref || pi_theta)`` where ``pi_ref``
  is the policy of ``old_logprobs`` (the tokens were sampled from it); >= 0.

An entry may give per-token metrics of its own besides (:data:`METRICS` lists the common ones), such as a 0/1
``masked`` (``clip_cov``, ``forking_tokens``) or ``penalised`` (``kl_cov``): the update logs each as its mean over the
loss tokens and by token source (``<name>_by_source/plain``, ``/prefix``, ``/suffix``).

The masked token-mean of ``clip_low + clip_high`` is verl's ``pg_clipfrac`` (tokens where the clipped
term wins: ``-A * clip(r) > -A * r``); that of ``clip_dual`` is verl's ``pg_clipfrac_lower``.

Importance ratio. ``r_t = exp(logprobs - old_logprobs)``, the log-ratio clamped to [-20, 20] against overflow (as
verl does).
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Union

import torch
from torch import Tensor

from tsctl.config.registry import Registry

DualClip = Union[float, Tensor, None]
"""A dual-clip constant: one float for every token, a ``[B, T]`` tensor of per-token constants, or None (off)."""
PolicyLoss = Callable[..., tuple[Tensor, dict[str, Tensor]]]
"""An entry of :data:`POLICY_LOSSES` (the module docstring): ``fn(logprobs, old_logprobs, advantages, mask, *, prefix,
**arguments) -> ([B, T] per-token loss, [B, T] metrics)``."""

LOG_RATIO_CLAMP = 20.0

POLICY_LOSSES: Registry[PolicyLoss] = Registry(
    "policy loss", __package__, key="algo.policy_loss", reads=(), prefix_clip=False, entropies=False, draws=False,
)
"""The per-token objectives by name (``algo.policy_loss``), from any module of :mod:`tsctl.algo`. Each declares ``reads``
(the ``algo.*`` keys it takes as keyword arguments), ``settings`` (its own block), ``prefix_clip`` (it takes
``clip_c`` per token, seed-prefix tokens bounded by ``algo.prefix_clip_c``; such an entry reads ``clip_c``),
``entropies`` (it takes ``entropy``, ``pi_theta``'s ``[B, T]`` per-token entropies, detached: the forward computes them
for it) and ``draws`` (it takes ``generator``, a ``torch.Generator`` of the step's :attr:`~tsctl.config.rng.Stream.POLICY_LOSS`
stream, so a resumed run redraws the same choices)."""

METRICS: tuple[str, ...] = ("pg_loss", "ratio", "clip_low", "clip_high", "clip_dual", "clipped", "kl_k3")
"""The per-token metrics every entry gives (the module docstring); any other name an entry gives is its own."""


def ppo_clip(
    log_ratio: Tensor, advantages: Tensor, *, clip_low: float, clip_high: float, clip_c: DualClip = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO's clipped per-token loss with clip-higher and an optional dual clip (verl's vanilla policy loss).

    ``l_t = max(-A r_t, -A clip(r_t, 1 - clip_low, 1 + clip_high))`` with ``r_t = exp(log_ratio)``; with ``clip_c``
    and ``A < 0``, ``l_t = min(l_t, -A clip_c)`` (``clip_c`` may differ per token).

    Args:
        log_ratio: ``[B, T]`` log importance ratios (with grad, clamped), per token or GSPO's per sequence.
        advantages: ``[B]`` per-sequence (or ``[B, T]`` per-token) advantages.
        clip_low: lower clip range (> 0).
        clip_high: upper clip range (> 0).
        clip_c: dual-clip constant (> 1), a ``[B, T]`` tensor of per-token constants (> 1, ``inf``
            where off; see :func:`dual_clip_bounds`), or None to disable the dual clip.

    Returns:
        ``[B, T]`` per-token loss, and the per-token metrics of the module docstring.
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
    """The ``clip_c`` argument of a policy loss that declares ``prefix_clip``: ``clip_c`` everywhere, tighter on seed-prefix tokens.

    A prefix token's ratio is taken against a behaviour policy up to a whole refresh window stale, so
    ``pi_theta >> pi_b`` is common there; with ``A < 0`` the unclipped ``-A r`` would grow without bound, and the
    dual clip caps it at ``-A c`` (zero gradient beyond ``r = c``).

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


def token_log_ratio(logprobs: Tensor, old_logprobs: Tensor) -> Tensor:
    """``[B, T]`` per-token log importance ratios ``logprobs - old_logprobs``, clamped to [-20, 20] (with grad)."""
    return (logprobs - old_logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


@POLICY_LOSSES.register("vanilla", reads=("clip_low", "clip_high", "clip_c"), prefix_clip=True)
def vanilla(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, *,
    prefix: Tensor, clip_low: float, clip_high: float, clip_c: DualClip = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """:func:`ppo_clip` of every token's own ratio (a prefix token's against pi_b), with its own dual clip."""
    return ppo_clip(token_log_ratio(logprobs, old_logprobs), advantages, clip_low=clip_low, clip_high=clip_high, clip_c=clip_c)
