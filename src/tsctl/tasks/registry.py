"""The task registry: ``task.name`` -> a builder of the configured task."""

from __future__ import annotations

from typing import Callable

from tsctl.config.errors import ConfigError
from tsctl.config.registry import Registry
from tsctl.config.schema import TaskConfig
from tsctl.tasks.base import Task

def _no_check(cfg: TaskConfig) -> None:
    """A task whose settings are all range-checked by :mod:`tsctl.config.validate`."""


TASKS: Registry[Callable[[TaskConfig], Task]] = Registry("task", __package__, check=_no_check)
"""Task builders by ``task.name``, from any module of :mod:`tsctl.tasks`; each may declare ``check``, the
settings of its ``task`` config it refuses (raising ConfigError)."""


@TASKS.register("countdown")
def _countdown(cfg: TaskConfig) -> Task:
    from tsctl.tasks.countdown import CountdownTask

    return CountdownTask(cfg.countdown, cfg.train_size, cfg.heldout_size, cfg.data_seed)


@TASKS.register("arithmetic")
def _arithmetic(cfg: TaskConfig) -> Task:
    from tsctl.tasks.arithmetic import ArithmeticTask

    return ArithmeticTask(cfg.arithmetic, cfg.train_size, cfg.heldout_size, cfg.data_seed)


def _check_file(cfg: TaskConfig) -> None:
    if not cfg.file.train_path:
        raise ConfigError("task.file.train_path", "task.name=file needs a JSONL or Parquet file: task.file.train_path=data/train.jsonl")


@TASKS.register("file", check=_check_file)
def _file(cfg: TaskConfig) -> Task:
    from tsctl.tasks.file_task import FileTask

    return FileTask(cfg.file, cfg.data_seed, on_bad_row=cfg.file.on_bad_row)


def build_task(cfg: TaskConfig) -> Task:
    """The task named by ``cfg.name`` (one of :data:`TASKS`)."""
    return TASKS.get(cfg.name)(cfg)
