"""Forking tokens, a policy loss of ``algo.policy_loss``: the policy gradient on the highest-entropy tokens only (Wang
et al., "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective RL for LLM Reasoning", arXiv 2506.01939).

The paper finds that a minority of tokens, those where the policy's entropy is high ("forking tokens", where the
reasoning branches), carry the gains of RL, and trains on them alone: DAPO's objective with each token's term kept
only when its entropy is in the batch's top ``rho`` share,

    J(theta) = E[ 1/sum_i |o_i| sum_i sum_t 1[H_t >= tau_rho^B] min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t) ]

with ``H_t`` the entropy of ``pi_theta``'s distribution at token ``t`` and ``tau_rho^B`` the entropy above which lie
the top ``rho`` (paper: 0.2) of the tokens of the batch ``B``. Here ``rho`` is ``algo.forking_tokens.top_share``,
``B`` the loss tokens of the batch the loss is given (one micro-batch of the update), ``tau`` the
``ceil(rho N)``-th largest of their ``N`` entropies (a token tied with it is kept, as the paper's ``>=`` keeps it), and
the clipped term is ``vanilla``'s (:func:`~tsctl.algo.losses.ppo_clip`, with ``algo.clip_low``, ``algo.clip_high``,
``algo.clip_c``). A token below ``tau`` has loss 0 (the paper's indicator) and so no policy gradient, but it stays in
the aggregation's normaliser (the paper's ``1/sum_i |o_i|``). The entropies are ``pi_theta``'s of the update's
forward, detached (the entry declares ``entropies``: the forward computes them for it); ``top_share=1`` keeps every
token, the ``vanilla`` loss.

Seed-prefix tokens: a token's entropy is ``pi_theta``'s at the token's context, whoever wrote the token, so a fork in a
seed's prefix is a fork of the current policy; prefix tokens are ranked with the others. A kept prefix token has the
``vanilla`` loss of its own ratio (against pi_b) with its dual clip (``algo.prefix_clip_c``, the entry declares
``prefix_clip``).

Metrics: those of :mod:`tsctl.algo.losses` (``pg_loss`` is 0 on a token held out), and ``masked``: 1 on the loss tokens
below ``tau`` (no policy gradient), logged overall (about ``1 - top_share``) and by source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from tsctl.algo.token_selection import Clipped, selecting
from tsctl.config.ranges import in_range, positive


@dataclass
class ForkingTokensSettings:
    """``algo.forking_tokens.*``: the settings of the ``forking_tokens`` policy loss."""

    top_share: float = 0.2
    """Share of the loss tokens, those of highest entropy, that keep their policy gradient (0 < rho <= 1)."""

    def __post_init__(self) -> None:
        positive("algo.forking_tokens.top_share", self.top_share)
        in_range("algo.forking_tokens.top_share", self.top_share, 0.0, 1.0)


def high_entropy(entropy: Tensor, tokens: Tensor, share: float) -> Tensor:
    """``[B, T]`` bool: the entries of ``tokens`` whose ``entropy`` is at least the ``ceil(share * n)``-th largest of
    the ``n`` entries' entropies (both ``[B, T]``); none when ``tokens`` has none."""
    on = tokens.bool()
    values = entropy.detach()[on]
    if not values.numel():
        return torch.zeros_like(on)
    tau = torch.topk(values, math.ceil(share * values.numel())).values[-1]
    return on & (entropy.detach() >= tau)


@selecting("forking_tokens", ForkingTokensSettings, entropies=True)
def forking_tokens(batch: Clipped, settings: ForkingTokensSettings, *, entropy: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token loss of the forking tokens (the module docstring), called as every token-selecting entry
    (:func:`~tsctl.algo.token_selection.selecting`).

    Args:
        batch: the clipped loss of the batch; its seed-prefix tokens are ranked with the others.
        settings: ``algo.forking_tokens``.
        entropy: ``[B, T]`` ``pi_theta``'s entropy at each token (detached).

    Returns:
        ``[B, T]`` per-token loss, the metrics of :mod:`tsctl.algo.losses` and ``masked`` (``[B, T]`` 0/1).
    """
    kept = high_entropy(entropy, batch.mask, settings.top_share)
    loss = batch.loss * kept
    batch.metrics["pg_loss"] = loss.detach().float()
    batch.metrics["masked"] = (batch.mask & ~kept).float()
    return loss, batch.metrics
