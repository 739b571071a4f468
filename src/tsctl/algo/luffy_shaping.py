"""LUFFY's policy shaping of trace tokens (``seeds.trace_logprobs=shaping``, ``seeds.shaping_gamma``).

Yan, Li, Hu, Wang, Cui, Qu, Cheng, Zhang, "Learning to Reason under Off-Policy Guidance" (LUFFY, arXiv 2504.14945).
Off-policy traces written by another model, whose probabilities are unknown, are trained with Mixed-Policy GRPO
plus *policy shaping via regularized importance sampling*:

    J_Mixed(theta) = 1/Z * ( sum_j sum_t f(pi_theta(tau_j,t | q, tau_j,<t)) * A_j
                           + sum_i sum_t CLIP(r_i,t(theta), A_i, eps) ),      f(x) = x / (x + gamma),  gamma = 0.1,

``j`` over the off-policy traces, ``i`` over the on-policy rollouts, ``Z`` their tokens in all. The off-policy
importance ratio ``pi_theta / pi_phi`` is taken with ``pi_phi = 1`` (the traces' probabilities are unknown), so the
trace token's weight is ``f(pi_theta)``, and that term is not clipped. Its gradient,

    d f / d pi = gamma / (pi + gamma)^2,    d f / d log pi = pi * gamma / (pi + gamma)^2,

is largest, relative to the plain ``pi`` of ``pi_theta / 1``, on low-probability tokens: the trace's tokens the policy
would not have chosen are the ones it learns from, rather than the ones it already imitates. The authors' code
(github.com/ElliottYan/LUFFY, ``luffy/verl/verl/mix_src/mix_core_alg.py``, ``off_policy_reshape="p_div_p_0.1"``)
computes the same: ``off_ratio = exp(log_prob); off_ratio / (off_ratio + 0.1)``, ``-advantages * off_ratio``, no clip.

Here (followed): ``f(pi_theta)`` in place of the ratio of every trace token (a seed-prefix token of unknown pi_b,
:func:`tsctl.trainer.denominators.unknown_pi_b`), ``gamma = seeds.shaping_gamma`` (0.1), no clip and no dual clip on
those tokens, ``pi_b := 1`` (their ratio denominator is ``log 1 = 0``), and they count in the aggregation's
normaliser (``Z``: every loss token with ``algo.aggregation=dapo``). Where it differs: LUFFY's off-policy samples are whole
traces, while a Thinking Seeds sample is a trace's prefix continued by pi_old; the continuation (and every plain
sample) keeps the run's policy loss ``algo.policy_loss`` against pi_old, with its clip (the authors' training script
also switches off the on-policy clip and the token mean; here the other tokens keep ``algo.policy_loss`` and
``algo.aggregation`` as configured), and the advantage is the whole seeded sample's. As on every seed-prefix token, the KL
term and the rollout correction leave them out; ``algo.stale_mask`` is refused with shaping (no ratio to bound).
This is an option of ``seeds.trace_logprobs`` rather than a registry entry: it applies only to tokens of unknown
pi_b, which only trace seeds have, and it replaces what ``exclude``/``cap`` decide for exactly those tokens.

Metrics: ``shaped``, the share of loss tokens shaped, overall and by segment (``shaped_by_source/prefix``,
``/suffix``, ``/plain``: 1, 0, 0 in a traces run). On shaped tokens the common metrics of :mod:`tsctl.algo.losses`
read: ``pg_loss`` ``-A f(pi_theta)``; ``ratio`` ``pi_theta`` (the ratio against ``pi_b := 1``); ``clip_*`` and
``clipped`` 0 (never clipped); ``kl_k3`` 0 (no sampling policy to take it against); a policy loss's own metrics 0.
"""

from __future__ import annotations

import torch
from torch import Tensor


def luffy_shaping(logprobs: Tensor, advantages: Tensor, gamma: float) -> tuple[Tensor, dict[str, Tensor]]:
    """LUFFY's shaped per-token loss ``-A * pi / (pi + gamma)`` with ``pi = exp(logprobs)``, unclipped.

    Args:
        logprobs: ``[B, T]`` ``log pi_theta`` of the tokens (with grad).
        advantages: ``[B]`` per-sequence (or ``[B, T]`` per-token) advantages.
        gamma: the shaping constant (> 0).

    Returns:
        ``[B, T]`` per-token loss (with grad), and ``[B, T]`` float32 metrics (detached) named as
        :data:`tsctl.algo.losses.METRICS`: ``pg_loss``, ``ratio`` (``pi``), the clip flags and ``kl_k3`` (0).
    """
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    prob = logprobs.exp()
    loss = -adv * (prob / (prob + gamma))
    with torch.no_grad():
        zero = torch.zeros_like(loss, dtype=torch.float32)
        metrics = {"pg_loss": loss.detach().float(), "ratio": prob.detach().float()}
        metrics.update({name: zero for name in ("clip_low", "clip_high", "clip_dual", "clipped", "kl_k3")})
    return loss, metrics


def shape_trace_tokens(
    per_token: Tensor, metrics: dict[str, Tensor], logprobs: Tensor, advantages: Tensor, shaped: Tensor, gamma: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """A policy loss's output with :func:`luffy_shaping` in place on the ``shaped`` tokens, and the ``shaped`` metric.

    Args:
        per_token: ``[B, T]`` the policy loss's per-token loss (with grad).
        metrics: its ``[B, T]`` per-token metrics.
        logprobs: ``[B, T]`` ``log pi_theta`` (with grad).
        advantages: ``[B]`` (or ``[B, T]``) advantages.
        shaped: ``[B, T]`` bool, the trace tokens (seed-prefix tokens of unknown pi_b).
        gamma: ``seeds.shaping_gamma``.

    Returns:
        ``[B, T]`` per-token loss, LUFFY's on ``shaped`` tokens (no gradient from the policy loss there), and the
        metrics, LUFFY's on ``shaped`` tokens (0 for a metric it does not give), with ``shaped`` (1 on those tokens).
    """
    loss, own = luffy_shaping(logprobs, advantages, gamma)
    merged = {name: torch.where(shaped, own.get(name, torch.zeros_like(value)), value) for name, value in metrics.items()}
    merged["shaped"] = shaped.float()
    return torch.where(shaped, loss, per_token), merged
