"""The task registry: ``task.name`` -> a builder of the configured task."""

from __future__ import annotations

from typing import Callable

from tsctl.config.registry import Registry
from tsctl.config.schema import TaskConfig
from tsctl.tasks.base import Task

TASKS: Registry[Callable[[TaskConfig], Task]] = Registry("task")
"""Task builders by ``task.name``."""


@TASKS.register("countdown")
def _countdown(cfg: TaskConfig) -> Task:
    from tsctl.tasks.countdown import CountdownTask

    return CountdownTask(cfg.countdown, cfg.train_size, cfg.heldout_size, cfg.data_seed)


@TASKS.register("arithmetic")
def _arithmetic(cfg: TaskConfig) -> Task:
    from tsctl.tasks.arithmetic import ArithmeticTask

    return ArithmeticTask(cfg.arithmetic, cfg.train_size, cfg.heldout_size, cfg.data_seed)


@TASKS.register("file")
def _file(cfg: TaskConfig) -> Task:
    from tsctl.tasks.file_task import FileTask

    return FileTask(cfg.file, cfg.data_seed, on_bad_row=cfg.file.on_bad_row)


def build_task(cfg: TaskConfig) -> Task:
    """The task named by ``cfg.name`` (``countdown``, ``arithmetic`` or ``file``)."""
    return TASKS.get(cfg.name)(cfg)
