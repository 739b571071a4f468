"""Clip-Cov, a policy loss of ``algo.policy_loss``: no gradient for a few tokens of high covariance (Cui et al.,
"The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models", arXiv 2505.22617).

The paper traces the collapse of the policy's entropy to the covariance of a token's log-probability and its
advantage: a likely token with a high advantage lowers the entropy. Per token of the batch (its eq. for ``Cov``),

    Cov(y_i) = (log pi_theta(y_i) - 1/N sum_j log pi_theta(y_j)) * (A(y_i) - 1/N sum_j A(y_j))
    I_clip   = Idx ~ U(i | Cov(y_i) in [omega_low, omega_high], r * N)

and the tokens of ``I_clip`` are detached from the policy gradient:

    L_Clip-Cov(theta) = E_t[ r_t(theta) A_t ]   t not in I_clip;    0 (detached)   t in I_clip

with ``r_t = pi_theta / pi_old``. The paper writes the objective without PPO's clip; its code (and verl's) keeps it,
and so does this entry: a token outside ``I_clip`` has ``vanilla``'s loss
``l_t = max(-A_t r_t, -A_t clip(r_t, 1 - clip_low, 1 + clip_high))``, a token of ``I_clip`` the same value under a
stop-gradient (``sg(l_t)``: the gradient of the paper's 0). Here ``N`` is the loss tokens of the batch the loss is
given (one micro-batch of the update, as in verl's ``compute_policy_loss_clip_cov``), the means are taken over them
(detached), ``r`` (a share, not the ratio ``r_t``) is ``algo.clip_cov.clip_ratio`` (paper: 2e-4) and ``[omega_low, omega_high]`` is
``[algo.clip_cov.cov_lb, algo.clip_cov.cov_ub]`` (paper: [1, 5]). As in verl, the number drawn is
``max(floor(r N), 1)`` (the paper's ``r N`` rounds to none in a batch under ``1/r`` tokens), and tokens PPO's clip
already holds (``clipped``: their gradient is zero) are not in the window. A detached token keeps its loss value and
its place in the aggregation's normaliser; only its gradient goes.

Random choice: drawn from the update's :attr:`~tsctl.config.rng.Stream.POLICY_LOSS` stream of the step (the entry
declares ``draws``), so a resumed run draws the same tokens as the run it resumes.

Seed-prefix tokens: their ratio is taken against pi_b, and pi_b, not the current policy, sampled them; the covariance
is the paper's estimate over the current policy's own samples, so prefix tokens are left out of its means and of
``N``, and are never drawn (as the reference's KL term leaves them out, :mod:`tsctl.algo.objective`). They keep the ``vanilla``
loss: their own ratio with their dual clip (``algo.prefix_clip_c``, the entry declares ``prefix_clip``).

Metrics: those of :mod:`tsctl.algo.losses` (of the PPO clip), and ``masked``: 1 on the tokens drawn (their gradient
dropped), logged overall and by source (``masked_by_source/prefix`` is 0 by construction).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tsctl.algo.token_selection import Clipped, centred_covariance, selecting, share_count
from tsctl.config.errors import ConfigError
from tsctl.config.ranges import in_range, positive


@dataclass
class ClipCovSettings:
    """``algo.clip_cov.*``: the settings of the ``clip_cov`` policy loss."""

    clip_ratio: float = 2e-4
    """Share of the loss tokens whose gradient is dropped, drawn among those in the covariance window (0 < r <= 1)."""
    cov_lb: float = 1.0
    """Lower end of the covariance window (> 0: a token of covariance <= 0 does not lower the entropy)."""
    cov_ub: float = 5.0
    """Upper end of the covariance window (> ``cov_lb``)."""

    def __post_init__(self) -> None:
        positive("algo.clip_cov.clip_ratio", self.clip_ratio)
        in_range("algo.clip_cov.clip_ratio", self.clip_ratio, 0.0, 1.0)
        positive("algo.clip_cov.cov_lb", self.cov_lb)
        if not self.cov_ub > self.cov_lb:
            raise ConfigError("algo.clip_cov.cov_ub", f"{self.cov_ub} must be > algo.clip_cov.cov_lb={self.cov_lb} (an empty window drops no token)")


def _draw(window: Tensor, count: int, generator: torch.Generator) -> Tensor:
    """``[B, T]`` bool: ``count`` of the True entries of ``window`` (all when fewer), drawn uniformly by ``generator``."""
    where = window.flatten().nonzero().squeeze(1)
    order = torch.randperm(len(where), generator=generator)[:count].to(where.device)
    picked = torch.zeros(window.numel(), dtype=torch.bool, device=window.device)
    picked[where[order]] = True
    return picked.view_as(window)


@selecting("clip_cov", ClipCovSettings, draws=True)
def clip_cov(batch: Clipped, settings: ClipCovSettings, *, generator: torch.Generator) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token Clip-Cov loss (the module docstring), called as every token-selecting entry
    (:func:`~tsctl.algo.token_selection.selecting`).

    Args:
        batch: the clipped loss of the batch; its seed-prefix tokens are never drawn.
        settings: ``algo.clip_cov``.
        generator: the update's random stream (the tokens drawn).

    Returns:
        ``[B, T]`` per-token loss, the metrics of :mod:`tsctl.algo.losses` and ``masked`` (``[B, T]`` 0/1).
    """
    cov = centred_covariance(batch.logprobs, batch.advantages, batch.sampled)
    window = batch.sampled & (batch.metrics["clipped"] == 0) & (cov >= settings.cov_lb) & (cov <= settings.cov_ub)
    dropped = _draw(window, share_count(settings.clip_ratio, batch.sampled), generator)
    batch.metrics["masked"] = dropped.float()
    return torch.where(dropped, batch.loss.detach(), batch.loss), batch.metrics
