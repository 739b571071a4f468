"""Token-selecting policy losses: ``vanilla``'s clipped loss, changed on the tokens an entry selects.

Clip-Cov and KL-Cov (:mod:`tsctl.algo.clip_cov`, :mod:`tsctl.algo.kl_cov`) and forking tokens
(:mod:`tsctl.algo.forking_tokens`) each take PPO's clipped loss of every token's own ratio (``vanilla``'s: a prefix
token's ratio against pi_b, with its dual clip ``algo.prefix_clip_c``) and change it on a set of tokens they select:
the gradient dropped, a penalty added, the term held out. What they share lives here:

- :func:`selecting` registers such an entry as a policy loss called as ``vanilla`` is (it reads ``algo.clip_low``,
  ``algo.clip_high``, ``algo.clip_c`` and declares ``prefix_clip``) and hands it the batch's clipped loss as a
  :class:`Clipped`;
- :func:`centred_covariance`, the covariance of log-probability and advantage the two Cov entries rank tokens by;
- :func:`share_count`, how many tokens a share of them is (at least one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor

from tsctl.algo.losses import POLICY_LOSSES, DualClip, PolicyLoss, ppo_clip, token_log_ratio

Selection = Callable[..., tuple[Tensor, dict[str, Tensor]]]
"""``fn(batch: Clipped, settings, **given) -> ([B, T] per-token loss, [B, T] metrics)``: a token-selecting entry;
``given`` is ``generator`` when it declares ``draws``, ``entropy`` when it declares ``entropies``."""


@dataclass(frozen=True)
class Clipped:
    """PPO's clipped loss of a batch (:func:`~tsctl.algo.losses.ppo_clip` of each token's own ratio), as an entry selects from it.

    Attributes:
        logprobs: ``[B, T]`` ``pi_theta`` log-probs (with grad).
        advantages: ``[B]`` per-sequence (or ``[B, T]`` per-token) advantages.
        mask: ``[B, T]`` bool loss mask.
        prefix: ``[B, T]`` bool seed-prefix tokens.
        log_ratio: ``[B, T]`` ``log pi_theta`` less the stored log-prob (pi_b on prefix tokens, pi_old elsewhere),
            clamped to [-20, 20] (with grad).
        loss: ``[B, T]`` the clipped per-token loss (with grad).
        metrics: the ``[B, T]`` per-token metrics of :mod:`tsctl.algo.losses`; the entry adds its own.
    """

    logprobs: Tensor
    advantages: Tensor
    mask: Tensor
    prefix: Tensor
    log_ratio: Tensor
    loss: Tensor
    metrics: dict[str, Tensor]

    @property
    def sampled(self) -> Tensor:
        """``[B, T]`` bool: the loss tokens the current policy sampled (the loss mask less the seed-prefix tokens)."""
        return self.mask & ~self.prefix


def selecting(name: str, block: type, **needs: bool) -> Callable[[Selection], PolicyLoss]:
    """Decorator registering a :data:`Selection` as the policy loss ``name``, its settings block the dataclass ``block``
    (``algo.<name>.*``) and ``needs`` the registry's other declarations (``draws=True``, ``entropies=True``).

    The registered policy loss is called as every entry of :data:`~tsctl.algo.losses.POLICY_LOSSES` is:
    ``fn(logprobs, old_logprobs, advantages, mask, *, prefix, clip_low, clip_high, settings, clip_c=None, **given)``
    with ``logprobs`` ``[B, T]`` (with grad), ``old_logprobs`` ``[B, T]`` (pi_b on prefix tokens, pi_old elsewhere),
    ``advantages`` ``[B]`` (or ``[B, T]``), ``mask`` and ``prefix`` ``[B, T]`` bool, ``clip_*`` as in
    :func:`~tsctl.algo.losses.ppo_clip`. It returns what the selection returns; the decorator returns the registered loss.
    """

    def register(select: Selection) -> PolicyLoss:
        def policy_loss(
            logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, *,
            prefix: Tensor, clip_low: float, clip_high: float, settings: Any, clip_c: DualClip = None, **given: Any,
        ) -> tuple[Tensor, dict[str, Tensor]]:
            log_ratio = token_log_ratio(logprobs, old_logprobs)
            loss, metrics = ppo_clip(log_ratio, advantages, clip_low=clip_low, clip_high=clip_high, clip_c=clip_c)
            return select(Clipped(logprobs, advantages, mask.bool(), prefix.bool(), log_ratio, loss, metrics), settings, **given)

        policy_loss.__name__ = policy_loss.__qualname__ = select.__name__
        policy_loss.__module__, policy_loss.__doc__ = select.__module__, select.__doc__
        reads = ("clip_low", "clip_high", "clip_c")
        return POLICY_LOSSES.register(name, reads=reads, prefix_clip=True, settings=block, **needs)(policy_loss)

    return register


def centred_covariance(logprobs: Tensor, advantages: Tensor, tokens: Tensor) -> Tensor:
    """Each token's ``(log pi(o_t) - mean log pi) * (A_t - mean A)``, the means over ``tokens``; 0 elsewhere.

    Args:
        logprobs: ``[B, T]`` ``pi_theta`` log-probs (read detached).
        advantages: ``[B]`` per-sequence (or ``[B, T]`` per-token) advantages.
        tokens: ``[B, T]`` bool, the tokens the means are taken over.

    Returns:
        ``[B, T]`` float32 covariances, without gradient.
    """
    with torch.no_grad():
        lp = logprobs.detach().float()
        adv = (advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages).float().expand_as(lp)
        on = tokens.bool()
        n = on.sum().clamp(min=1)
        cov = (lp - lp[on].sum() / n) * (adv - adv[on].sum() / n)
        return torch.where(on, cov, torch.zeros_like(cov))


def share_count(share: float, tokens: Tensor) -> int:
    """``max(floor(share * n), 1)`` of the ``n`` True entries of ``tokens`` ``[B, T]``; 0 when there are none."""
    n = int(tokens.sum())
    return max(int(share * n), 1) if n else 0
