"""The objective of the update, built once per run from ``algo``: per-token terms combined by one aggregation.

    loss = agg(w * l_pg) + kl_coef * agg(D * [not prefix]) - entropy_coef * agg(H)

- ``l_pg``: the policy loss ``algo.policy_loss`` per token (:mod:`tsctl.algo.losses`), given the ``algo.*`` keys it
  reads and its own settings block; seed-prefix tokens bounded by ``algo.prefix_clip_c`` when it declares
  ``prefix_clip`` in a Thinking Seeds run; ``pi_theta``'s entropies (detached) when it declares ``entropies``, the
  update's random stream when it declares ``draws``. With ``seeds.trace_logprobs=shaping`` the trace tokens (seed-prefix
  tokens of unknown pi_b) take LUFFY's unclipped ``-A pi_theta / (pi_theta + gamma)`` instead
  (:mod:`tsctl.algo.luffy_shaping`).
- ``w``: the rollout-correction weight of each suffix and plain token (``algo.rollout_correction``,
  :mod:`tsctl.algo.rollout_correction`; 1 on seed-prefix tokens; none computed with ``none``). It weighs the policy
  term only, not the KL or entropy terms, nor the normalisers. A stale-token mask (``algo.stale_mask``,
  :mod:`tsctl.algo.stale_masks`; ``m2po``) multiplies it by 0 on the seed-prefix tokens it masks.
- ``D``: the per-token divergence ``algo.kl_type`` (:mod:`tsctl.algo.divergences`; ``k3``, the k3 estimate of
  ``KL(pi_theta || pi_ref)``, by default) against the frozen reference (``algo.kl_coef > 0``), 0 on
  seed-prefix tokens: it estimates the KL from tokens the current policy sampled, and pi_b sampled those.
- ``H``: the entropy of each token's sampling distribution (``algo.entropy_coef > 0``).
- ``agg``: the aggregation ``algo.aggregation`` (:mod:`tsctl.algo.aggregations`) over the loss mask with the whole
  mini-batch's normalisers, the same for every term (as verl's ``agg_loss`` with one ``loss_agg_mode``): each token's
  KL and entropy weigh exactly as much as its policy term, under the token-mean (``dapo``) and the sequence-mean
  (``grpo``) alike. Aggregations are linear, so this is the aggregation of the per-token sum of the terms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from tsctl.algo.aggregations import AGGREGATIONS, Norm, Norms
from tsctl.algo.divergences import DIVERGENCES
from tsctl.algo.losses import POLICY_LOSSES, dual_clip_bounds
from tsctl.algo.luffy_shaping import shape_trace_tokens
from tsctl.algo.position_metrics import Pair
from tsctl.algo.rollout_correction import correction_weights
from tsctl.algo.stale_masks import STALE_MASKS, stale_keep
from tsctl.config.schema import AlgoConfig


@dataclass(frozen=True)
class Tokens:
    """One micro-batch's inputs of the objective, each ``[B, T]`` (``advantages``: ``[B]``).

    Attributes:
        logprobs: ``pi_theta``'s log-probs of the sampled tokens (with grad).
        old: what each ratio is taken against: pi_b on seed-prefix tokens, pi_old elsewhere.
        advantages: per-sequence advantages.
        mask: bool, the loss tokens.
        prefix: bool, the seed-prefix tokens.
        entropy: ``pi_theta``'s entropy at each token (with grad), when the objective has an entropy term.
        ref: the frozen reference's log-probs, when it has a KL term.
        engine: the engine's log-probs of the tokens it sampled, when it corrects for the rollout engine.
        generator: the update's random stream, for a policy loss that declares ``draws``.
        shaped: bool, the trace tokens LUFFY's shaping replaces the policy loss on, when the objective shapes them.
    """

    logprobs: Tensor
    old: Tensor
    advantages: Tensor
    mask: Tensor
    prefix: Tensor
    entropy: Optional[Tensor] = None
    ref: Optional[Tensor] = None
    engine: Optional[Tensor] = None
    generator: Optional[torch.Generator] = None
    shaped: Optional[Tensor] = None


@dataclass
class Loss:
    """The objective of one micro-batch.

    Attributes:
        value: the 0-d loss (with grad), a share of the mini-batch's (its normalisers are the mini-batch's).
        tokens: the policy loss's per-token metrics, ``[B, T]`` detached (:mod:`tsctl.algo.losses`).
        mask: ``[B, T]`` bool, the loss tokens they count on.
        kl: the per-token divergence ``[B, T]`` (detached) and the tokens it counts on (``[B, T]`` bool), when there is a KL term.
        correction: the rollout correction's ``(sum, count)`` metrics, when it weighs the tokens.
        stale: the stale-token mask's ``(sum, count)`` metrics, when one is chosen.
    """

    value: Tensor
    tokens: dict[str, Tensor]
    mask: Tensor
    kl: Optional[tuple[Tensor, Tensor]] = None
    correction: Optional[dict[str, Pair]] = None
    stale: Optional[dict[str, Pair]] = None


class Objective:
    """The loss of the update (the module docstring), built once from ``algo``.

    Args:
        algo: the ``algo`` config (with its entries' settings blocks, or their defaults).
        seeded: whether the run is a Thinking Seeds run: its prefix tokens get ``algo.prefix_clip_c`` (when the
            policy loss declares ``prefix_clip``).
        shaping_gamma: ``seeds.shaping_gamma`` when trace tokens take LUFFY's shaped weight
            (:func:`tsctl.trainer.denominators.shaping_gamma`), else None.
    """

    def __init__(self, algo: AlgoConfig, seeded: bool, shaping_gamma: Optional[float] = None) -> None:
        needs = POLICY_LOSSES.needs(algo.policy_loss)
        self.policy_loss = POLICY_LOSSES.get(algo.policy_loss)
        self.arguments = POLICY_LOSSES.arguments(algo.policy_loss, algo)
        self.prefix_clip = bool(needs.prefix_clip)
        self.policy_entropies, self.draws = bool(needs.entropies), bool(needs.draws)
        self.prefix_clip_c = algo.prefix_clip_c if seeded and self.prefix_clip else None
        self.aggregate = AGGREGATIONS.get(algo.aggregation)
        self.aggregate_arguments = AGGREGATIONS.arguments(algo.aggregation, algo)
        self.kl_coef, self.entropy_coef = algo.kl_coef, algo.entropy_coef
        self.divergence = DIVERGENCES.get(algo.kl_type)
        self.correction, self.correction_cap = algo.rollout_correction, algo.rollout_correction_cap
        self.stale_mask = algo.stale_mask
        self.stale_settings = None if algo.stale_mask == "none" else STALE_MASKS.settings(algo.stale_mask, algo)
        self.shaping_gamma = shaping_gamma

    @property
    def entropy(self) -> bool:
        """Whether the forward must give entropies (with grad): for the entropy term, or for a policy loss that declares
        ``entropies``."""
        return self.entropy_coef > 0 or self.policy_entropies

    @property
    def reference(self) -> bool:
        """Whether the loss has a KL term (the frozen reference's log-probs are needed)."""
        return self.kl_coef > 0

    @property
    def corrects(self) -> bool:
        """Whether the policy term is weighted by the rollout correction (the engine's log-probs are needed)."""
        return self.correction != "none"

    @property
    def dual_clip(self) -> bool:
        """Whether some token has a dual clip in this run (``algo.clip_c`` read and set, or the prefix tokens' own)."""
        return self.arguments.get("clip_c") is not None or self.prefix_clip_c is not None

    def _agg(self, values: Tensor, mask: Tensor, norms: Norms) -> tuple[Tensor, Norm]:
        """The aggregation's total of ``values`` and the normaliser it is divided by."""
        return self.aggregate(values, mask, norms, **self.aggregate_arguments)

    def loss(self, t: Tokens, norms: Norms) -> Loss:
        """The loss of the micro-batch ``t`` with the whole mini-batch's ``norms``, its per-token metrics, its KL and
        correction metrics. Raises ValueError when an input a term needs is missing."""
        needed = (("entropy", self.entropy), ("ref", self.reference), ("engine", self.corrects), ("generator", self.draws),
                  ("shaped", self.shaping_gamma is not None))
        missing = [name for name, need in needed if need and getattr(t, name) is None]
        if missing:
            raise ValueError(f"the objective needs {', '.join(missing)} (algo.entropy_coef, algo.kl_coef, algo.rollout_correction, algo.policy_loss, seeds.trace_logprobs)")
        weights, correction = None, None
        if self.corrects:
            weights, correction = correction_weights(self.correction, t.old, t.engine, t.mask, ~t.prefix, self.correction_cap)
        stale = None
        if self.stale_mask != "none":
            keep, stale = stale_keep(self.stale_mask, self.stale_settings, t.logprobs, t.old, t.mask & t.prefix)
            weights = keep if weights is None else weights * keep
        arguments = dict(self.arguments)
        if self.prefix_clip:
            arguments["clip_c"] = dual_clip_bounds(t.prefix, self.arguments.get("clip_c"), self.prefix_clip_c)
        if self.policy_entropies:
            arguments["entropy"] = t.entropy.detach()
        if self.draws:
            arguments["generator"] = t.generator
        per_token, metrics = self.policy_loss(t.logprobs, t.old, t.advantages, t.mask, prefix=t.prefix, **arguments)
        if self.shaping_gamma is not None:
            per_token, metrics = shape_trace_tokens(per_token, metrics, t.logprobs, t.advantages, t.shaped, self.shaping_gamma)
        if weights is not None:
            per_token = per_token * weights
        total, norm = self._agg(per_token, t.mask, norms)
        value = total / norm
        kl = None
        if self.reference:
            kl_tokens = t.mask & ~t.prefix
            penalty = self.divergence(t.logprobs, t.ref)
            total, norm = self._agg(penalty * kl_tokens, t.mask, norms)
            value = value + self.kl_coef * total / norm
            kl = (penalty.detach(), kl_tokens)
        if self.entropy_coef > 0:
            total, norm = self._agg(t.entropy, t.mask, norms)
            value = value - self.entropy_coef * total / norm
        return Loss(value, metrics, t.mask, kl, correction, stale)

