"""CISPO, a policy loss of ``algo.policy_loss``: the clip moved from the loss to the importance weight (MiniMax-M1, 2025).

    l_t = - sg(w_t) * A * log pi_theta(o_t),    w_t = min(r_t, 1 + eps_high)

with ``r_t = exp(log pi_theta(o_t) - log pi_ref(o_t))`` (the log-ratio clamped to [-20, 20]) and ``sg`` the
stop-gradient: the loss's gradient is ``-w_t A grad log pi_theta(o_t)``, the REINFORCE term weighted by the
truncated importance weight. PPO's clip zeroes the gradient of a token whose ratio left the range (and
``vanilla`` drops it); CISPO keeps every token's gradient and only bounds its weight. As in the paper there is no
lower bound (its ``eps_low`` is set large). verl's ``compute_policy_loss_cispo`` is this with ``clip_ratio_low >= 1``.

Its own setting, ``algo.cispo.eps_high`` (:class:`CispoSettings`), replaces the clip range: it reads none of
``algo.clip_low``, ``algo.clip_high``, ``algo.clip_c``, and the idle check refuses them with ``cispo`` (and
``algo.cispo.*`` with another policy loss).

Seed-prefix tokens: their ratio is taken against pi_b, up to a refresh window stale; the truncation bounds their
weight at ``1 + eps_high`` as it bounds every token's, so a stale prefix never weighs more than a fresh token, and a
prefix token keeps its gradient where ``vanilla`` would clip it to zero. No dual clip is needed (the gradient's
weight is bounded whatever the advantage's sign): the entry declares no ``prefix_clip``, and ``algo.prefix_clip_c``
is idle with it.

Metrics (:mod:`tsctl.algo.losses`): ``ratio`` is ``r_t``; ``clip_high`` and ``clipped`` mark the tokens whose weight
was truncated (``r_t > 1 + eps_high``, either sign of the advantage; their gradient is kept); ``clip_low`` and
``clip_dual`` are 0; ``pg_loss`` is ``l_t``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tsctl.algo.losses import POLICY_LOSSES, token_log_ratio
from tsctl.config.ranges import positive


@dataclass
class CispoSettings:
    """``algo.cispo.*``: the settings of the ``cispo`` policy loss."""

    eps_high: float = 0.28
    """The importance weight is truncated at ``1 + eps_high`` (the paper's ``eps_high^IS``; > 0)."""

    def __post_init__(self) -> None:
        positive("algo.cispo.eps_high", self.eps_high)


@POLICY_LOSSES.register("cispo", settings=CispoSettings)
def cispo(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, *, prefix: Tensor, settings: CispoSettings,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token CISPO loss (the module docstring).

    Args:
        logprobs: ``[B, T]`` ``pi_theta`` log-probs (with grad).
        old_logprobs: ``[B, T]`` stored log-probs (pi_b on prefix tokens, pi_old elsewhere).
        advantages: ``[B]`` per-sequence (or ``[B, T]`` per-token) advantages.
        mask: ``[B, T]`` loss mask (unused: every token's loss is its own).
        prefix: ``[B, T]`` bool seed-prefix tokens (unused: they are truncated as every token is).
        settings: ``algo.cispo``.

    Returns:
        ``[B, T]`` per-token loss and the metrics of :mod:`tsctl.algo.losses`.
    """
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    log_ratio = token_log_ratio(logprobs, old_logprobs)
    with torch.no_grad():
        ratio = log_ratio.exp()
        weight = ratio.clamp(max=1.0 + settings.eps_high)
        truncated = (ratio > 1.0 + settings.eps_high).float()
    loss = -weight * adv * logprobs
    zeros = torch.zeros_like(truncated)
    metrics = {
        "pg_loss": loss.detach().float(),
        "ratio": ratio.float(),
        "clip_low": zeros,
        "clip_high": truncated,
        "clip_dual": zeros,
        "clipped": truncated,
        "kl_k3": (ratio - 1.0 - log_ratio.detach()).float(),
    }
    return loss, metrics
