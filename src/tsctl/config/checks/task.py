"""Checks of the ``task`` section shared by every task (:mod:`tsctl.config.schema.task`); a task's own settings block
(``task.countdown.*``, ``task.arithmetic.*``, ``task.file.*``) is checked by the task's registered ``check``."""

from __future__ import annotations

from tsctl.config.ranges import one_of, positive
from tsctl.config.schema import TsctlConfig

OVERLONG_PROMPTS = ("error", "drop")
HELDOUT_OVERLAP = ("error", "allow")
"""Values of ``task.heldout_overlap`` (:mod:`tsctl.tasks.split_checks`)."""
BAD_ROW = ("error", "skip")
"""Values of ``eval.on_bad_row``."""


def check(cfg: TsctlConfig) -> None:
    """``task.*``: split sizes, what to do with prompts too long for the engine and with held-out prompts among the train prompts."""
    t = cfg.task
    positive("task.heldout_size", t.heldout_size)
    positive("task.train_size", t.train_size)
    one_of("task.overlong_prompts", t.overlong_prompts, OVERLONG_PROMPTS)
    one_of("task.heldout_overlap", t.heldout_overlap, HELDOUT_OVERLAP)
