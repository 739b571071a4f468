"""Build the configured task."""

from __future__ import annotations

from tsctl.config.schema import TaskConfig
from tsctl.tasks.base import Task


def build_task(cfg: TaskConfig) -> Task:
    """The task named by ``cfg.name`` (``countdown``, ``arithmetic`` or ``file``)."""
    if cfg.name == "countdown":
        from tsctl.tasks.countdown import CountdownTask

        return CountdownTask(cfg.countdown, cfg.train_size, cfg.heldout_size, cfg.data_seed)
    if cfg.name == "arithmetic":
        from tsctl.tasks.arithmetic import ArithmeticTask

        return ArithmeticTask(cfg.arithmetic, cfg.train_size, cfg.heldout_size, cfg.data_seed)
    if cfg.name == "file":
        from tsctl.tasks.file_task import FileTask

        return FileTask(cfg.file, cfg.data_seed, on_bad_row=cfg.file.on_bad_row)
    raise ValueError(f"unknown task {cfg.name!r}; choose countdown, arithmetic or file")
