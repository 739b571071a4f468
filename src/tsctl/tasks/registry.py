"""The task registry: ``task.name`` -> a builder of the configured task, and its own settings' check."""

from __future__ import annotations

from typing import Callable

from tsctl.config.registry import Registry
from tsctl.config.schema import TaskConfig
from tsctl.tasks.base import Task

TASKS: Registry[Callable[[TaskConfig], Task]] = Registry("task", __package__, check=lambda cfg: None)
"""Task builders by ``task.name``, from any module of :mod:`tsctl.tasks` (``countdown``, ``arithmetic``, ``file``
register themselves in theirs); each may declare ``check``, a function of the ``task`` config that refuses
its own settings (raising ConfigError) before anything is built."""


def build_task(cfg: TaskConfig) -> Task:
    """The task named by ``cfg.name`` (one of :data:`TASKS`)."""
    return TASKS.get(cfg.name)(cfg)
