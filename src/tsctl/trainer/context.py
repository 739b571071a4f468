"""What one training step works with: the run's config, models, sampler, data and optimiser, in one typed object."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
from transformers import PreTrainedModel

from tsctl.algo.objective import Objective
from tsctl.config.schema import TsctlConfig
from tsctl.engines.base import Engine
from tsctl.models.compiled import CompiledLayers
from tsctl.models.forward import Forward
from tsctl.models.prompts import PromptFormatter
from tsctl.seeds.bank import SeedBank
from tsctl.seeds.base import uses_seeds
from tsctl.tasks.base import Problem, Task
from tsctl.trainer.denominators import shaping_gamma
from tsctl.trainer.nonfinite import NonFiniteGuard
from tsctl.trainer.parallel import Parallel


@dataclass
class StepContext:
    """Everything :func:`tsctl.trainer.step.train_step` reads, built once per run (:func:`tsctl.trainer.step.setup`).

    Attributes:
        cfg: the run's config.
        model: the policy being trained (float32 parameters on ``model.device``).
        engine: the rollout engine sampling from it.
        formatter: prompt encoding and decoding, the end and pad tokens.
        task: the task's verifier.
        problems: the train split, indexed by the prompt schedule (:mod:`tsctl.tasks.schedule`).
        optimizer: AdamW over the model's parameters.
        scheduler: its learning-rate schedule (one step per optimiser step).
        seeds: the run's seed bank (Thinking Seeds runs only), else None.
        ref_model: the frozen KL reference (``algo.kl_coef > 0``; with ``model.lora`` the policy itself, its adapter
            switched off for the reference's forward), else None.
        guard: the run's non-finite guard (its skip count persists across steps); None: a fresh one per
            step, per ``trainer.nonfinite``.
        rollouts_dir: where each step's samples are written (``trainer.save_rollouts``), else None.
        parallel: how the step spreads over the ranks of a ``torchrun`` job; None: one process
            (:class:`~tsctl.trainer.parallel.Parallel` over ``model``).
        objective: the update's loss, built once from ``algo`` (None: built from ``cfg``).
        forward: the trainer's forward settings, built once from ``trainer`` and ``model`` (None: built from ``cfg``).
        compiled: the policy's decoder layers compiled for the update (``trainer.compile``), else None.
    """

    cfg: TsctlConfig
    model: PreTrainedModel
    engine: Engine
    formatter: PromptFormatter
    task: Task
    problems: Sequence[Problem]
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    seeds: SeedBank | None = None
    ref_model: PreTrainedModel | None = None
    guard: NonFiniteGuard | None = None
    rollouts_dir: Path | None = None
    parallel: Parallel | None = None
    objective: Objective | None = None
    forward: Forward | None = None
    compiled: CompiledLayers | None = None

    def __post_init__(self) -> None:
        if self.parallel is None:
            self.parallel = Parallel(self.model)
        if self.objective is None:
            self.objective = Objective(self.cfg.algo, seeded=uses_seeds(self.cfg), shaping_gamma=shaping_gamma(self.cfg))
        if self.forward is None:
            self.forward = Forward.of(self.cfg)
