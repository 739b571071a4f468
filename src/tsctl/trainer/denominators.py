"""The importance-ratio denominators: what each token's ratio is taken against, in one place.

A seed-prefix token's ratio is taken against its stored pi_b log-prob, every other token's against
pi_old (:func:`tsctl.models.batch.pi_b_on_prefix`); :func:`tsctl.trainer.pi_old.step_pi_old` returns them
with pi_old (:attr:`~tsctl.trainer.pi_old.PiOld.denominators`).

A trace file gives the tokens of a behaviour response but not the probabilities of the policy that
wrote it, so its seed shard stores NaN log-probs. ``seeds.trace_logprobs`` chooses the treatment:

- ``exclude`` (default): those prefix tokens leave the loss and its token normaliser (as
  ``seeds.train_prefix=false`` does for every prefix); the trace still steers the continuation,
  and the suffix and the reward credit it through the advantage.
- ``cap``: pi_b is taken as pi_old's log-prob of the token at this step (the weights that sampled
  the continuation, fixed for the whole update), so ``r_t = pi_theta / pi_old`` is 1 on the first
  mini-batch and moves only as pi_theta drifts within the step; as a prefix token its loss is
  clipped to ``[1 - clip_low, 1 + clip_high]`` and, for a negative advantage, capped by the prefix
  dual clip (``algo.prefix_clip_c``). The gradient is the on-policy one of a token the policy did
  not choose: it raises (A > 0) or lowers (A < 0) the policy's probability of the trace's tokens,
  bounded per step by the clip range.
- ``shaping``: LUFFY's policy shaping (:mod:`tsctl.algo.luffy_shaping`): pi_b := 1 (denominator
  ``log 1 = 0``), and the objective gives those tokens the unclipped loss ``-A f(pi_theta)``,
  ``f(pi) = pi / (pi + seeds.shaping_gamma)``, whose gradient is largest on the trace tokens the
  policy finds least likely.

Prefix tokens with a known pi_b are untouched; without trace seeds the denominators are pi_b on
prefix tokens and pi_old elsewhere.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from tsctl.config.knobs import uses_seeds
from tsctl.config.schema import TsctlConfig
from tsctl.models.batch import RolloutBatch, pi_b_on_prefix
from tsctl.models.samples import PREFIX

TRACE_LOGPROBS = ("exclude", "cap", "shaping")
"""Values of ``seeds.trace_logprobs``."""


def unknown_pi_b(batch: RolloutBatch) -> torch.Tensor:
    """Seed-prefix tokens whose pi_b is unknown (NaN ``behaviour_logprobs``: trace seeds), [B, T] bool.

    With ``seeds.trace_logprobs=exclude`` they leave the loss mask (:func:`tsctl.trainer.update.loss_mask`).
    """
    return (batch.source == PREFIX) & torch.isnan(batch.behaviour_logprobs)


def ratio_denominators(
    old: torch.Tensor, batch: RolloutBatch, cfg: TsctlConfig, recompute: Optional[Callable[[RolloutBatch], torch.Tensor]] = None,
) -> torch.Tensor:
    """The log-probs each ratio is taken against [B, T]: pi_b on prefix tokens, pi_old elsewhere, unknown pi_b resolved.

    Args:
        old: pi_old's log-probs [B, T]: a teacher-forced forward of every response token, or (with ``recompute``) as
            the engine reported them, 0 on prefix tokens.
        batch: the step's samples; ``behaviour_logprobs`` is NaN on prefix tokens of unknown pi_b.
        recompute: pi_old's teacher-forced log-probs [b, T] of some rows, for the prefix tokens ``cap`` needs when
            ``old`` is the engine's; None when ``old`` is a teacher-forced forward already.

    Prefix tokens of unknown pi_b get 0 under ``exclude`` (they are out of the loss mask) and ``shaping`` (pi_b := 1,
    LUFFY's), and pi_old's log-prob under ``cap``.
    """
    denominators = pi_b_on_prefix(old, batch)
    unknown = unknown_pi_b(batch)
    if not bool(unknown.any()):
        return denominators
    if cfg.seeds.trace_logprobs in ("exclude", "shaping"):
        return torch.where(unknown, torch.zeros_like(denominators), denominators)
    current = old
    if recompute is not None:
        rows = unknown.any(1).nonzero().squeeze(1)
        recomputed = recompute(batch.rows(rows))
        current = old.clone()
        current[rows, : recomputed.shape[1]] = recomputed
    return torch.where(unknown, current, denominators)


def shaping_gamma(cfg: TsctlConfig) -> Optional[float]:
    """``seeds.shaping_gamma`` when the objective shapes trace tokens (``seeds.trace_logprobs=shaping`` in a Thinking
    Seeds run), else None."""
    return cfg.seeds.shaping_gamma if uses_seeds(cfg) and cfg.seeds.trace_logprobs == "shaping" else None
