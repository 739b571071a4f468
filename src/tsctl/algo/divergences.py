"""The divergence of the KL term (``algo.kl_type``): per-token penalties against the frozen reference ``pi_ref``.

DPH-RL (Li, Zhou, Hao, Liu, Miao, Pang, Tan, Chu, Wang, Pan, Qu, Qi, "The Choice of Divergence: A Neglected Key to
Mitigating Diversity Collapse in Reinforcement Learning with Verifiable Reward", arXiv 2509.07430) replaces the
mode-seeking reverse KL with mass-covering f-divergences, ``D_f(P || Q) = E_Q[f(P / Q)]``: the forward KL
``KL(pi_ref || pi_theta)`` (``f(u) = u log u``) and the Jensen-Shannon divergence
``JS = 1/2 KL(pi_ref || M) + 1/2 KL(pi_theta || M)``, ``M = (pi_ref + pi_theta) / 2``, so that the policy keeps mass
on every answer the initial model could give (pass@k). Each entry here is a pure per-token function
``fn(logprobs, ref_logprobs) -> [B, T]`` registered by name in :data:`DIVERGENCES`; the objective (``algo/objective.py``)
multiplies its aggregate by ``algo.kl_coef``.

The estimators. Only the sampled token's log-probs are known, ``log pi_theta(o_t)`` (with grad) and
``log pi_ref(o_t)``, and the tokens were sampled by the rollout policy (pi_old, which pi_theta equals on the first
mini-batch), so every divergence is the f-divergence form over pi_theta's own samples with ``r = pi_ref / pi_theta``
(log-ratio clamped to [-20, 20], as k3's):

    D_f(pi_ref || pi_theta) = E_{o ~ pi_theta}[ f(r) ],   with f(1) = 0, f convex (each sample's f(r) >= 0).

A penalty is a loss, so what acts is its gradient, and differentiating ``f(r)`` through ``r`` alone misses the
sampling distribution's share: the gradient of ``E_{pi_theta}[f(r)]`` at a state is ``E[(f(r) - r f'(r)) grad log
pi_theta(o_t)]``. Each entry therefore returns a tensor whose value is ``f(r)`` (clamped to at most 10, as k3's, for
the log and the loss value) and whose gradient with respect to ``logprobs`` is the one-sample estimate
``g(r) = f(r) - r f'(r)`` of the divergence's own gradient (:func:`f_divergence` builds such an entry from the pair
``f(r)``, ``g(r)``; ``k3`` alone is differentiated as it stands):

- ``k3`` (the default; unchanged): ``r - 1 - log r``, Schulman's k3 estimate of the reverse ``KL(pi_theta || pi_ref)``,
  differentiated as it stands (``d/dlog pi_theta = 1 - r``), clamped to at most 10 (zero gradient past it). Note:
  ``E_{pi_theta}[(1 - r) grad log pi_theta] = -sum pi_ref grad log pi_theta`` is the gradient of the *forward*
  KL, not of the reverse KL its value estimates (on-policy, k3 used as a loss is mass-covering in its gradient).
- ``reverse``: the same k3 value, with the reverse KL's own gradient ``g = log(pi_theta / pi_ref) = -log r``
  (``f(u) = -log u``): mode-seeking, the comparison DPH-RL argues against.
- ``forward``: ``f(r) = r log r - (r - 1)`` (``u log u``, with the zero-mean control variate ``-(r - 1)``, so each
  sample is >= 0), the importance-weighted estimate of ``KL(pi_ref || pi_theta)``; ``g = 1 - min(r, 10)``. The same
  gradient as k3's in expectation where neither bound acts; unlike k3 it keeps pulling up (at the strength of
  ``r = 10``) a token pi_theta has nearly abandoned (``r > 13.6``, where k3 reaches its cap and gives no gradient),
  the tokens pass@k needs.
- ``js``: ``f(r) = 1/2 [r log r - (r + 1) log((r + 1) / 2)]`` (JS's generator; JS <= log 2),
  ``g = 1/2 log(2 / (1 + r)) = 1/2 log(pi_theta / M)``, bounded by the log-ratio clamp.

Where this follows and differs from DPH-RL: its generators are these (its ``js_low_var`` is ``u log u - (u + 1)
log((u + 1) / 2)``, twice this ``js``; here JS has its usual 1/2 scale). DPH-RL evaluates the divergence on responses
pre-sampled from the initial policy (its near-perfect set, ``u = pi_theta / pi_ref`` under pi_ref's samples), so it
needs no reference forward; here no pi_ref sample exists and the divergence is taken over the rollout's own tokens
with the reference's log-probs, as the reverse KL of DAPO/GRPO is. DPH-RL also applies the divergence to the
near-perfect prompts only; here it covers every loss token as the k3 term does.

Seed-prefix tokens are left out of the term (the objective masks them): pi_b sampled them, not pi_theta, and every
estimator above assumes pi_theta's samples. Metric: ``kl_ref``, the mean of the chosen divergence's per-token value
over the tokens it counts on (``kl_ref/max`` its largest).
"""

from __future__ import annotations

import math
from typing import Callable

from torch import Tensor
from torch.nn.functional import softplus

from tsctl.algo.losses import LOG_RATIO_CLAMP
from tsctl.config.registry import Registry

Divergence = Callable[[Tensor, Tensor], Tensor]
"""``fn(logprobs, ref_logprobs) -> penalty``, each ``[B, T]``: the per-token divergence (with grad through ``logprobs``)."""

DIVERGENCES: Registry[Divergence] = Registry("divergence", __package__, key="algo.kl_type")
"""The divergences of the KL term by name (``algo.kl_type``), from any module of :mod:`tsctl.algo`."""

VALUE_CAP = 10.0
"""Each per-token value is clamped to at most this (verl's ``low_var_kl`` clamp of k3)."""

RATIO_CAP = 10.0
"""``forward``: the largest ``r = pi_ref / pi_theta`` its gradient uses."""


def _log_ratio(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """``log r = log pi_ref - log pi_theta`` clamped to [-20, 20], ``[B, T]`` (with grad)."""
    return (ref_logprobs - logprobs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


Estimate = Callable[[Tensor], tuple[Tensor, Tensor]]
"""``fn(d) -> (value, gradient)`` of ``d = log r`` (``[B, T]``, clamped, detached): a divergence's per-token value
``f(r)`` and the derivative ``g(r)`` its penalty takes with respect to each token's ``log pi_theta``, each ``[B, T]``."""


def f_divergence(name: str) -> Callable[[Estimate], Divergence]:
    """Decorator registering an :data:`Estimate` as the divergence ``name``: a :data:`Divergence` ``fn(logprobs,
    ref_logprobs)`` (``[B, T]`` each, ``logprobs`` with grad) whose ``[B, T]`` value is the estimate's ``value``
    clamped to at most :data:`VALUE_CAP` and whose derivative with respect to each token's ``logprobs`` is its
    ``gradient`` (both taken as constants). The decorator returns the registered divergence."""

    def register(estimate: Estimate) -> Divergence:
        def divergence(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
            value, gradient = estimate(_log_ratio(logprobs, ref_logprobs).detach())
            return value.detach().clamp(max=VALUE_CAP) + gradient.detach() * (logprobs - logprobs.detach())

        divergence.__name__ = divergence.__qualname__ = estimate.__name__
        divergence.__module__, divergence.__doc__ = estimate.__module__, estimate.__doc__
        return DIVERGENCES.register(name)(divergence)

    return register


@DIVERGENCES.register("k3")
def kl_penalty_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token k3 ``r - 1 - log r``, ``r = pi_ref / pi_theta``, clamped to at most 10, differentiated as it stands.

    Args:
        logprobs: ``[B, T]`` log-probs under ``pi_theta`` (with grad).
        ref_logprobs: ``[B, T]`` log-probs under the reference policy.

    Returns:
        ``[B, T]`` non-negative per-token penalties; derivative ``1 - r`` below the clamp, 0 past it.
    """
    d = _log_ratio(logprobs, ref_logprobs)
    return (d.exp() - d - 1.0).clamp(max=VALUE_CAP)


@f_divergence("reverse")
def reverse_kl(d: Tensor) -> tuple[Tensor, Tensor]:
    """``KL(pi_theta || pi_ref)``: value k3 ``r - 1 - log r``, derivative ``log(pi_theta / pi_ref) = -log r``."""
    return d.exp() - d - 1.0, -d


@f_divergence("forward")
def forward_kl(d: Tensor) -> tuple[Tensor, Tensor]:
    """``KL(pi_ref || pi_theta)``: value ``r log r - (r - 1)``, derivative ``1 - min(r, 10)``."""
    r = d.exp()
    return r * d - (r - 1.0), 1.0 - r.clamp(max=RATIO_CAP)


@f_divergence("js")
def jensen_shannon(d: Tensor) -> tuple[Tensor, Tensor]:
    """``JS(pi_ref, pi_theta)``: value ``1/2 [r log r - (r + 1) log((r + 1) / 2)]``, derivative ``1/2 log(2 / (1 + r))``."""
    log_half_sum = softplus(d) - math.log(2.0)  # log((1 + r) / 2), stable for large |d|
    value = 0.5 * (d.exp() * d - (d.exp() + 1.0) * log_half_sum)
    return value.clamp(min=0.0), -0.5 * log_half_sum
