"""The learner's update called as the step calls it, on a learner holding only what the update reads (no engine,
task, data or reference): for the tests of the update itself."""

from __future__ import annotations

from dataclasses import replace

import torch

from tsctl.algo.position_metrics import MetricSums
from tsctl.config.schema import TsctlConfig
from tsctl.models.batch import RolloutBatch
from tsctl.trainer.learner import Learner
from tsctl.trainer.parallel import Parallel
from tsctl.trainer.update import loss_mask


def update_context(cfg: TsctlConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler, parallel: Parallel | None = None) -> Learner:
    """The learner of ``model`` under ``cfg`` with the given optimiser and schedule; no engine, task or data."""
    learner = Learner(cfg, parallel or Parallel(model))
    learner.optimizer, learner.scheduler = optimizer, scheduler
    return learner


def update(
    learner: Learner, batch: RolloutBatch, old: torch.Tensor, ref: torch.Tensor | None = None, engine: torch.Tensor | None = None, step: int = 0,
) -> MetricSums:
    """:meth:`Learner.update` of ``batch`` at ``step``, scored with the ratio denominators ``old`` [B, T], the reference's
    log-probs ``ref`` and the engine's ``engine`` (``old`` when None: no gap to correct), and the run's loss mask."""
    scored = replace(
        batch, old_logprobs=old, old_entropy=torch.zeros_like(old), denominators=old, engine_logprobs=engine if engine is not None else old,
        ref_logprobs=ref, loss_mask=loss_mask(batch, learner.cfg),
    )
    return learner.update(scored, step)
