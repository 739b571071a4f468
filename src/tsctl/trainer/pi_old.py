"""pi_old: the log-probs each importance ratio is taken against, and the entropies logged with them.

``trainer.old_logprobs`` picks the source:

- ``recompute``: a no-grad forward of the trainer's model over the packed batch before the update
  (the run's :class:`~tsctl.models.forward.Forward`, micro-batched like the update);
- ``engine``: what the rollout engine reported while sampling (the drawn tokens' log-probs, the
  entropy at every generated and prefix token). No extra forward. It equals a recompute up to float
  rounding only when the engine runs the trainer's weights with the same numerics and samples from
  the full tempered distribution: the ``hf`` engine (``reports_token_stats``), ``top_p=1``, float32;
- ``auto``: ``engine`` where that holds, else ``recompute``
  (:func:`tsctl.engines.own_logprobs.uses_engine_logprobs` decides).

Either way prefix tokens take their ratio against the stored pi_b log-probs; :func:`step_pi_old` returns
each token's denominator with pi_old (:mod:`tsctl.trainer.denominators`). Seed shards take pi_b's
log-probs from the same source.

A recomputed pi_old is never trusted silently against the engine's: :func:`logprob_gap` measures, per
step, how far the engine's log-probs of the tokens it generated are from the trainer's (the step
metrics ``logprob_gap/*``). A gap well above bf16 rounding means the engine samples from another
distribution than the one the update assumes (different weights, a nucleus, a numerics bug).
``algo.rollout_correction`` corrects the update for that gap: :class:`PiOld` carries the engine's
log-probs to it (:mod:`tsctl.algo.rollout_correction`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from tsctl.engines.own_logprobs import uses_engine_logprobs
from tsctl.models.batch import RolloutBatch
from tsctl.models.samples import PREFIX, Sample
from tsctl.trainer.context import StepContext
from tsctl.trainer.denominators import ratio_denominators


@dataclass
class PiOld:
    """pi_old of one step's batch.

    Attributes:
        logprobs: [B, T] pi_old's log-probs of the response tokens (0 on prefix tokens when from the engine).
        entropy: [B, T] pi_old's entropy at every response token.
        engine_logprobs: [B, T] the engine's log-probs of the tokens it generated, 0 on prefix tokens and
            padding (:func:`engine_logprobs`; ``logprobs`` itself when both came from the engine): what the rollout
            correction (``algo.rollout_correction``) weighs pi_old against.
        denominators: [B, T] what each ratio is taken against: pi_b on prefix tokens, pi_old elsewhere,
            unknown pi_b resolved (:func:`tsctl.trainer.denominators.ratio_denominators`).
        gap: the ``logprob_gap/*`` metrics of a recompute against the engine's log-probs (empty from the engine).
    """

    logprobs: torch.Tensor
    entropy: torch.Tensor
    engine_logprobs: torch.Tensor
    denominators: torch.Tensor
    gap: dict[str, float] = field(default_factory=dict)


def step_pi_old(ctx: StepContext, samples: Sequence[Sample], batch: RolloutBatch) -> PiOld:
    """pi_old of ``batch`` (packed from ``samples``) in the run ``ctx``, from the source ``trainer.old_logprobs`` picks,
    with the ratio denominators it gives. A recompute runs the run's forward over the ranks' rows
    (:meth:`tsctl.trainer.parallel.Parallel.map_rows`)."""
    cfg, model = ctx.cfg, ctx.parallel.inference
    if uses_engine_logprobs(cfg, ctx.engine, model):
        logprobs, entropy = engine_stats(samples, batch)
        denominators = ratio_denominators(logprobs, batch, cfg, lambda rows: ctx.forward.recompute(model, rows, entropy=False)[0])
        return PiOld(logprobs, entropy, engine_logprobs=logprobs, denominators=denominators)
    sampled = engine_logprobs(samples, batch)
    logprobs, entropy = ctx.parallel.map_rows(lambda rows: ctx.forward.recompute(model, rows), batch)
    denominators = ratio_denominators(logprobs, batch, cfg)
    return PiOld(logprobs, entropy, engine_logprobs=sampled, denominators=denominators, gap=logprob_gap(sampled, logprobs, batch))


def engine_stats(samples: Sequence[Sample], batch: RolloutBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """pi_old log-probs [B, T] and entropies [B, T] of ``batch`` (packed from ``samples``) as the engine reported them.

    Prefix positions get log-prob 0: their ratio is taken against pi_b. Both live on the batch's device.
    """
    entropy = torch.zeros(batch.resp_mask.shape, dtype=torch.float32)
    for row, s in enumerate(samples):
        if len(s.entropies) != len(s.response_ids):
            raise ValueError("the engine reported no entropies for some samples; set trainer.old_logprobs=recompute")
        entropy[row, : len(s.entropies)] = torch.tensor(s.entropies, dtype=torch.float32)
    return engine_logprobs(samples, batch), entropy.to(batch.device)


def engine_logprobs(samples: Sequence[Sample], batch: RolloutBatch) -> torch.Tensor:
    """The engine's log-probs [B, T] of the generated tokens of ``batch`` (packed from ``samples``), 0 on prefix and padding."""
    logprobs = torch.zeros(batch.resp_mask.shape, dtype=torch.float32)
    for row, s in enumerate(samples):
        start = len(s.prefix_ids)
        logprobs[row, start : start + len(s.generated_logprobs)] = torch.tensor(s.generated_logprobs, dtype=torch.float32)
    return logprobs.to(batch.device)


def logprob_gap(engine: torch.Tensor, trainer: torch.Tensor, batch: RolloutBatch) -> dict[str, float]:
    """How far the engine's log-probs are from the trainer's, over the generated (non-prefix) tokens.

    Args:
        engine: [B, T] the engine's log-probs of the tokens it sampled (:func:`engine_logprobs`).
        trainer: [B, T] the trainer's recomputed pi_old log-probs of the same tokens.

    Returns:
        ``logprob_gap/abs_mean`` and ``logprob_gap/abs_max`` of ``engine - trainer``, its signed mean
        ``logprob_gap/mean``, and ``logprob_gap/ratio_mean``, the mean of ``exp(engine - trainer)``
        (1 when they agree); an empty dict when no token was generated.
    """
    generated = batch.resp_mask & (batch.source != PREFIX)
    diff = (engine - trainer)[generated].double()
    if diff.numel() == 0:
        return {}
    return {
        "logprob_gap/abs_mean": float(diff.abs().mean()),
        "logprob_gap/abs_max": float(diff.abs().max()),
        "logprob_gap/mean": float(diff.mean()),
        "logprob_gap/ratio_mean": float(diff.exp().mean()),
    }
