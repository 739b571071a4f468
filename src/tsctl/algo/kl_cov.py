"""KL-Cov, a policy loss of ``algo.policy_loss``: a KL penalty on the tokens of highest covariance (Cui et al.,
"The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models", arXiv 2505.22617).

The paper's second answer to entropy collapse (beside :mod:`tsctl.algo.clip_cov`): rank the batch's tokens by the
covariance of their log-probability and advantage (:func:`~tsctl.algo.token_selection.centred_covariance`),

    Cov(y_i) = (log pi_theta(y_i) - 1/N sum_j log pi_theta(y_j)) * (A(y_i) - 1/N sum_j A(y_j))
    I_KL     = {i | Rank(Cov(y_i)) <= k N}

and penalise the distance of the top ``k`` share from the policy that sampled them:

    L_KL-Cov(theta) = E_t[ r_t(theta) A_t ]                                       t not in I_KL
                    = E_t[ r_t(theta) A_t - beta |log pi_theta(y_t) - log pi_old(y_t)| ]   t in I_KL

``k`` is ``algo.kl_cov.k_ratio`` (paper: 2e-3 for its 7B model, 2e-4 for 32B), ``beta`` is ``algo.kl_cov.kl_coef``
(paper: 1). Here the objective is PPO's clipped loss (``vanilla``'s ``l_t``, reading ``algo.clip_low``,
``algo.clip_high``, ``algo.clip_c``) plus the penalty on ``I_KL``:

    l_t = max(-A_t r_t, -A_t clip(r_t, 1 - clip_low, 1 + clip_high)) + [t in I_KL] kl_coef |log r_t|

The paper's formula and code leave the ratio unclipped; the clip is kept here so that ``kl_cov`` differs from
``vanilla`` by the penalty alone. ``N`` is the loss tokens of the batch the loss is given (one micro-batch of the
update, as in verl's ``compute_policy_loss_kl_cov``); the covariance's means are over them and detached; at least one
token is penalised (``max(floor(k N), 1)``, as verl); ties at the k-th covariance are broken by ``torch.topk``.

Seed-prefix tokens: their ratio is taken against pi_b, and pi_b, not the current policy, sampled them; the covariance
is the paper's estimate over the current policy's own samples, and the penalty holds a token near the policy that
sampled it, which for a prefix token is a behaviour policy up to a refresh window stale. So prefix tokens are left
out of the covariance's means and of ``N``, and are never penalised; they keep the ``vanilla`` loss with their dual clip
(``algo.prefix_clip_c``, the entry declares ``prefix_clip``).

Metrics: those of :mod:`tsctl.algo.losses` (``pg_loss`` includes the penalty), and ``penalised``: 1 on the tokens of
``I_KL``, logged overall and by source (``penalised_by_source/prefix`` is 0 by construction).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tsctl.algo.token_selection import Clipped, centred_covariance, selecting, share_count
from tsctl.config.ranges import in_range, positive


@dataclass
class KlCovSettings:
    """``algo.kl_cov.*``: the settings of the ``kl_cov`` policy loss."""

    k_ratio: float = 2e-3
    """Share of the loss tokens, those of highest covariance, that take the penalty (0 < k <= 1)."""
    kl_coef: float = 1.0
    """The penalty's coefficient ``beta`` on ``|log pi_theta - log pi_old|`` (> 0)."""

    def __post_init__(self) -> None:
        positive("algo.kl_cov.k_ratio", self.k_ratio)
        in_range("algo.kl_cov.k_ratio", self.k_ratio, 0.0, 1.0)
        positive("algo.kl_cov.kl_coef", self.kl_coef)


def top_covariance(cov: Tensor, tokens: Tensor, count: int) -> Tensor:
    """``[B, T]`` bool: the ``count`` entries of ``tokens`` with the largest ``cov`` (both ``[B, T]``)."""
    ranked = cov.masked_fill(~tokens.bool(), -torch.inf).flatten()
    top = torch.zeros(ranked.numel(), dtype=torch.bool, device=cov.device)
    top[torch.topk(ranked, count).indices] = True
    return top.view_as(cov)


@selecting("kl_cov", KlCovSettings)
def kl_cov(batch: Clipped, settings: KlCovSettings) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token KL-Cov loss (the module docstring), called as every token-selecting entry
    (:func:`~tsctl.algo.token_selection.selecting`).

    Args:
        batch: the clipped loss of the batch; its seed-prefix tokens are never penalised.
        settings: ``algo.kl_cov``.

    Returns:
        ``[B, T]`` per-token loss, the metrics of :mod:`tsctl.algo.losses` and ``penalised`` (``[B, T]`` 0/1).
    """
    sampled = batch.sampled
    penalised = top_covariance(centred_covariance(batch.logprobs, batch.advantages, sampled), sampled, share_count(settings.k_ratio, sampled))
    loss = batch.loss + settings.kl_coef * batch.log_ratio.abs() * penalised
    batch.metrics["pg_loss"] = loss.detach().float()
    batch.metrics["penalised"] = penalised.float()
    return loss, batch.metrics
