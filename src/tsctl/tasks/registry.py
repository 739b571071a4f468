"""The task registry: ``task.name`` -> a builder of the configured task, and its own settings' check."""

from __future__ import annotations

from typing import Callable

from tsctl.config.registry import Registry
from tsctl.config.schema import TaskConfig
from tsctl.tasks.base import Task

TASKS: Registry[Callable[[TaskConfig], Task]] = Registry("task", __package__, check=lambda cfg: None, instruction=None)
"""Task builders by ``task.name``, from any module of :mod:`tsctl.tasks` (``countdown``, ``arithmetic``, ``file``
register themselves in theirs); each may declare ``check``, a function of the ``task`` config that refuses
its own settings (raising ConfigError) before anything is built, and ``instruction``, the key of the text its
prompts use to ask for the final answer (named when no response states one)."""


def build_task(cfg: TaskConfig) -> Task:
    """The task named by ``cfg.name`` (one of :data:`TASKS`)."""
    return TASKS.get(cfg.name)(cfg)


def answer_hint(name: str) -> str:
    """What makes a model that states no final answer on task ``name`` state one (the task's declared ``instruction`` key)."""
    key = TASKS.needs(name).instruction
    if key is None:
        return "warm the model up on the task's worked solutions first (model.path=builtin is), which end with its answer line"
    return f"make the prompts ask for it in a form this model follows: {key}=<text> (docs/usage.md: Your own model and data)"
