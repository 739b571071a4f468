"""Sequence-level masked importance sampling, a mode of ``algo.rollout_correction``: ``seq_mis``.

The rollout engine samples from pi_engine, not from pi_old as the trainer computes it
(:mod:`tsctl.algo.rollout_correction`). Token-level ``mis`` masks each token whose ratio leaves ``[1/c, c]``; the
sequence-level variant takes the ratio of the whole sampled sequence,

    rho_i = prod_t pi_old(o_t) / pi_engine(o_t) = exp( sum_t log pi_old(o_t) - log pi_engine(o_t) ),

and weighs every corrected token of sequence ``i`` by ``rho_i`` where ``1/c <= rho_i <= c`` and by 0 otherwise
(``c`` is ``algo.rollout_correction_cap``): a sequence the engine drew far from pi_old leaves the policy term as a
whole, its tokens still counting in the normaliser. This is verl's ``rollout_is`` at level ``sequence`` with the
mask mode (verl: ``compute_rollout_correction_weights``, the product of the token ratios, ``exp`` of the masked sum
of the log-ratios; Yao et al., "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training", 2025).

Seed-prefix tokens: the engine did not sample them (their ratio's denominator is the stored pi_b and no engine
log-prob of them is kept), so they are neither in the product nor weighed: their weight stays 1. The product runs
over the sequence's suffix and plain tokens of the loss mask only.

Metrics (as every mode): ``rollout_correction/weight_mean`` (the mean weight of the corrected tokens) and
``rollout_correction/corrected_share`` (the share of corrected tokens in masked sequences).
"""

from __future__ import annotations

from torch import Tensor

from tsctl.algo.rollout_correction import CORRECTIONS


@CORRECTIONS.register("seq_mis", sequence=True)
def seq_mis(ratio: Tensor, cap: float) -> Tensor:
    """``[B, T]`` weights: each token's sequence ratio ``rho`` (``[B, T]``, the same along a row) inside ``[1/cap, cap]``,
    0 outside, as ``mis`` masks a token's ratio."""
    return CORRECTIONS.get("mis")(ratio, cap)
