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
each token's denominator with pi_old (:mod:`tsctl.trainer.denominators`), and
:meth:`tsctl.trainer.learner.Learner.score` writes them as columns of the batch. Seed shards take pi_b's
log-probs from the same source.

A recomputed pi_old is never trusted silently against the engine's: :func:`logprob_gap` measures, per
step, how far the engine's log-probs of the tokens it generated (the batch's ``engine_logprobs``, as
:func:`tsctl.models.batch.collate` packs them) are from the trainer's (the step metrics ``logprob_gap/*``).
A gap well above bf16 rounding means the engine samples from another distribution than the one the update
assumes (different weights, a nucleus, a numerics bug). ``algo.rollout_correction`` corrects the update
for that gap with the same engine log-probs (:mod:`tsctl.algo.rollout_correction`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from tsctl.config.schema import TsctlConfig
from tsctl.models.batch import RolloutBatch
from tsctl.models.forward import Forward
from tsctl.models.samples import PREFIX
from tsctl.trainer.denominators import ratio_denominators
from tsctl.trainer.parallel import Parallel


@dataclass
class PiOld:
    """pi_old of one step's batch.

    Attributes:
        logprobs: [B, T] pi_old's log-probs of the response tokens (0 on prefix tokens when from the engine).
        entropy: [B, T] pi_old's entropy at every response token.
        denominators: [B, T] what each ratio is taken against: pi_b on prefix tokens, pi_old elsewhere,
            unknown pi_b resolved (:func:`tsctl.trainer.denominators.ratio_denominators`).
        gap: the ``logprob_gap/*`` metrics of a recompute against the engine's log-probs (empty from the engine).
    """

    logprobs: torch.Tensor
    entropy: torch.Tensor
    denominators: torch.Tensor
    gap: dict[str, float] = field(default_factory=dict)


def step_pi_old(cfg: TsctlConfig, batch: RolloutBatch, parallel: Parallel, forward: Forward, from_engine: bool) -> PiOld:
    """pi_old of ``batch`` with the ratio denominators it gives: the engine's own (``from_engine``, the rule of
    :func:`tsctl.engines.own_logprobs.uses_engine_logprobs`) or a recompute with ``forward`` on ``parallel``'s
    no-grad copy over the ranks' rows (:meth:`tsctl.trainer.parallel.Parallel.map_rows`)."""
    model = parallel.inference
    if from_engine:
        if batch.engine_entropy is None:
            raise ValueError("the engine reported no entropies for some samples; set trainer.old_logprobs=recompute")
        logprobs = batch.engine_logprobs
        denominators = ratio_denominators(logprobs, batch, cfg, lambda rows: forward.recompute(model, rows, entropy=False)[0])
        return PiOld(logprobs, batch.engine_entropy, denominators)
    logprobs, entropy = parallel.map_rows(lambda rows: forward.recompute(model, rows), batch)
    denominators = ratio_denominators(logprobs, batch, cfg)
    return PiOld(logprobs, entropy, denominators, gap=logprob_gap(batch.engine_logprobs, logprobs, batch))


def logprob_gap(engine: torch.Tensor, trainer: torch.Tensor, batch: RolloutBatch) -> dict[str, float]:
    """How far the engine's log-probs are from the trainer's, over the generated (non-prefix) tokens.

    Args:
        engine: [B, T] the engine's log-probs of the tokens it sampled (the batch's ``engine_logprobs``).
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
