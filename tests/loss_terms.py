"""The policy term of the objective from its parts, for the tests of policy losses and aggregations: an entry of
``POLICY_LOSSES`` per token, times per-token weights, aggregated by an entry of ``AGGREGATIONS``."""

from __future__ import annotations

import torch

from tsctl.algo.aggregations import AGGREGATIONS, Norms
from tsctl.algo.losses import POLICY_LOSSES


def policy_term(
    aggregation: str, logprobs: torch.Tensor, old: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *, token_norm, seq_norm,
    policy_loss: str = "vanilla", prefix: torch.Tensor | None = None, weights: torch.Tensor | None = None, **arguments,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The 0-d policy term (``policy_loss`` per token, times ``weights``, aggregated by ``aggregation`` with the mini-batch's
    ``token_norm`` and ``seq_norm``) and the entry's per-token metrics; ``arguments``: the keys the entry reads."""
    prefix = torch.zeros_like(mask, dtype=torch.bool) if prefix is None else prefix
    per_token, metrics = POLICY_LOSSES.get(policy_loss)(logprobs, old, advantages, mask, prefix=prefix, **arguments)
    if weights is not None:
        per_token = per_token * weights
    total, norm = AGGREGATIONS.get(aggregation)(per_token, mask, Norms(token_norm, seq_norm))
    return total / norm, metrics
