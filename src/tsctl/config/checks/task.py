"""Checks of the ``task`` section shared by every task (:mod:`tsctl.config.schema.task`); a task's own settings block
(``task.countdown.*``, ``task.arithmetic.*``, ``task.file.*``) is checked by the task's registered ``check``."""

from __future__ import annotations

from tsctl.config.errors import ConfigError
from tsctl.config.ranges import one_of, positive
from tsctl.config.schema import TsctlConfig

OVERLONG_PROMPTS = ("error", "drop")
HELDOUT_OVERLAP = ("error", "allow")
"""Values of ``task.heldout_overlap`` (:mod:`tsctl.tasks.split_checks`)."""
BAD_ROW = ("error", "skip")
REWARDS = ("correct", "random", "format")
"""Values of ``task.reward`` (:mod:`tsctl.tasks.reward_controls`)."""
"""Values of ``eval.on_bad_row``."""


def check(cfg: TsctlConfig) -> None:
    """``task.*``: split sizes, what to do with prompts too long for the engine and with held-out prompts among the train
    prompts, the training reward's control."""
    t = cfg.task
    positive("task.heldout_size", t.heldout_size)
    positive("task.train_size", t.train_size)
    one_of("task.overlong_prompts", t.overlong_prompts, OVERLONG_PROMPTS)
    one_of("task.heldout_overlap", t.heldout_overlap, HELDOUT_OVERLAP)
    one_of("task.reward", t.reward, REWARDS)
    if not 0 < t.reward_p < 1:
        raise ConfigError("task.reward_p", f"{t.reward_p} is out of range; allowed: 0 < task.reward_p < 1 (at 0 or 1 every reward is the same and nothing is learned)")
