"""Reward controls (``task.reward``): what a training sample is rewarded for, whatever the task.

The controls of Shao, Li, Xin, Geng et al., "Spurious Rewards: Rethinking Training Signals in RLVR" (arXiv 2506.10947),
which trains on rewards with little or no relation to the answer to tell what RL teaches from what it only amplifies:

- ``correct`` (the default): the task's grade, :meth:`~tsctl.tasks.base.Task.reward`.
- ``random``: ``r ~ Bernoulli(p)``, independent of the response, ``p = task.reward_p`` (0.5 by default, the paper's
  random reward; the warm-up model's accuracy is not the default, since only the built-in model has one). Each draw
  comes from the run's
  ``seed``, the step and the sample (its group number and place in the group) on the stream
  :attr:`~tsctl.config.rng.Stream.REWARD`, so a resumed run, a ``torchrun`` job of any size and ``tsctl rollout`` of the
  same step redraw the same rewards.
- ``format``: 1 when the response states a final answer the task's grader can read, right or wrong
  (:func:`~tsctl.tasks.grading.answer_found`: the last ``\\boxed{}``, ``####`` or the task's answer marker; the paper's
  format reward is a non-empty ``\\boxed{}``), else 0.

Only the training reward changes: held-out evaluation, ``tsctl eval``, the behaviour responses the seed controller
grades and the warm-up score still grade correctness. Seeded samples are rewarded as plain ones (the control applies
to the whole response, prefix included). Under a control the step's ``reward/*``, ``accuracy`` and
``seeds/solve_rate_*`` metrics are of the training reward; ``reward/answer_found`` and the ``eval/*`` metrics are not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tsctl.config.rng import Stream, step_seed
from tsctl.config.schema.task import TaskConfig

@dataclass(frozen=True)
class TrainingReward:
    """``task.reward`` of one step: ``control`` (``task.reward``: ``correct``, ``random`` or ``format``), ``p``
    (``task.reward_p``) and the step's reward stream ``seed``."""

    control: str = "correct"
    p: float = 0.5
    seed: int = 0

    def __call__(self, grade: float, answer_found: bool, group: int, index: int) -> float:
        """The training reward of sample ``index`` of group ``group``, whose task grade is ``grade`` and whose response
        states a readable final answer when ``answer_found``."""
        if self.control == "random":
            return float(np.random.default_rng([self.seed, group, index]).random() < self.p)
        if self.control == "format":
            return float(answer_found)
        return grade


def training_reward(cfg: TaskConfig, seed: int, step: int) -> TrainingReward:
    """``cfg.reward`` at ``step`` (0-based) of a run with ``seed``."""
    return TrainingReward(cfg.reward, cfg.reward_p, step_seed(seed, step, Stream.REWARD))
