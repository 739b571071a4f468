"""``policy_update`` called as the step calls it, on a run context holding only what the update reads (no engine, task
or data): for the tests of the update itself."""

from __future__ import annotations

import torch

from tsctl.algo.position_metrics import MetricSums
from tsctl.config.schema import TsctlConfig
from tsctl.models.batch import RolloutBatch
from tsctl.trainer.context import StepContext
from tsctl.trainer.parallel import Parallel
from tsctl.trainer.pi_old import PiOld
from tsctl.trainer.update import policy_update


def update_context(cfg: TsctlConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler, parallel: Parallel | None = None) -> StepContext:
    """The run context of ``model`` under ``cfg`` with its optimiser and schedule; no engine, task or data."""
    return StepContext(cfg, model, None, None, None, [], optimizer, scheduler, parallel=parallel)


def update(
    ctx: StepContext, batch: RolloutBatch, old: torch.Tensor, ref: torch.Tensor | None = None, engine: torch.Tensor | None = None, step: int = 0,
) -> MetricSums:
    """:func:`policy_update` of ``batch`` at ``step`` with the ratio denominators ``old`` [B, T], the reference's log-probs
    ``ref`` and the engine's ``engine`` (``old`` when None: no gap to correct)."""
    pi_old = PiOld(old, torch.zeros_like(old), engine if engine is not None else old, old)
    return policy_update(ctx, batch, pi_old, ref, step)
