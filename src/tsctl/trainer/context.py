"""What one training step works with: the run's config, sampler, seed bank, learner and rollouts folder, in one typed object."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tsctl.config.schema import TsctlConfig
from tsctl.seeds.bank import SeedBank
from tsctl.trainer.learner import Learner
from tsctl.trainer.rollout import Sampler


@dataclass
class StepContext:
    """Everything :func:`tsctl.trainer.step.train_step` reads, built once per run (:func:`tsctl.trainer.step.setup`).

    Attributes:
        cfg: the run's config.
        sampler: the rollout side: the engine, the prompt formatter, the task's verifier and its train split (the
            problems the prompt schedule, :mod:`tsctl.tasks.schedule`, indexes).
        learner: the policy side: the model and its ranks, optimiser, objective and KL reference
            (:class:`~tsctl.trainer.learner.Learner`).
        seeds: the run's seed bank (Thinking Seeds runs only), else None.
        rollouts_dir: where each step's samples are written (``trainer.save_rollouts``), else None.
    """

    cfg: TsctlConfig
    sampler: Sampler
    learner: Learner
    seeds: SeedBank | None = None
    rollouts_dir: Path | None = None
