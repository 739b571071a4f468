"""Checks of the ``task`` section shared by every task (:mod:`tsctl.config.schema.task`); a task's own settings
(``task.countdown.*``, ``task.arithmetic.*``, ``task.file.*``) are checked by the task's registered ``check``."""

from __future__ import annotations

from tsctl.config.ranges import one_of, positive
from tsctl.config.schema import TsctlConfig

OVERLONG_PROMPTS = ("error", "drop")
HELDOUT_OVERLAP = ("error", "allow")
"""Values of ``task.heldout_overlap`` (:mod:`tsctl.tasks.split_checks`)."""
BAD_ROW = ("error", "skip")
"""Values of ``task.file.on_bad_row`` and ``eval.on_bad_row``."""


def check(cfg: TsctlConfig) -> None:
    """``task.*``: split sizes, what to do with prompts too long for the engine and with malformed rows."""
    t = cfg.task
    positive("task.heldout_size", t.heldout_size)
    positive("task.train_size", t.train_size)
    one_of("task.overlong_prompts", t.overlong_prompts, OVERLONG_PROMPTS)
    one_of("task.heldout_overlap", t.heldout_overlap, HELDOUT_OVERLAP)
    one_of("task.file.on_bad_row", t.file.on_bad_row, BAD_ROW)
