"""The task registry: ``task.name`` -> a builder of the configured task, its own settings block and their check."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from tsctl.config.registry import Registry
from tsctl.config.schema import TaskConfig
from tsctl.tasks.base import Task


def _no_check(cfg: TaskConfig, **arguments: Any) -> None:
    """A task that refuses no setting."""


def _generated(cfg: TaskConfig, **arguments: Any) -> dict[str, Any]:
    """A generated task's content: the settings it generates its problems from (its sizes, data seed and settings block)."""
    block = arguments.get("settings")
    return {"name": cfg.name, "train_size": cfg.train_size, "heldout_size": cfg.heldout_size, "data_seed": cfg.data_seed,
            "settings": dataclasses.asdict(block) if block is not None else None}


TASKS: Registry[Callable[..., Task]] = Registry("task", __package__, key="task.name", check=_no_check, instruction=None,
                                                content=_generated, data_files=False)
"""Task builders by ``task.name``, from any module of :mod:`tsctl.tasks` (``countdown``, ``arithmetic``, ``file``
register themselves in theirs): ``fn(cfg: TaskConfig, **arguments) -> Task``, given ``settings=`` its own block when it
declares ``settings`` (a dataclass beside it, keys ``task.<name>.*``). Each may declare ``check``,
``fn(cfg, **arguments)`` refusing its own settings (raising ConfigError) before anything is built,
``instruction``, the key of the text its prompts use to ask for the final answer (named when no response states one),
``content``, ``fn(cfg, **arguments) -> dict``: what its problems are made of, which keys the built-in model's warm-up
cache (by default the settings a generated task draws its problems from; a task reading data declares their
digests, :mod:`tsctl.tasks.digests`), and ``data_files``, whether its problems come from data the user gives, read and
checked before any model is built (:mod:`tsctl.trainer.data_checks`)."""


def build_task(cfg: TaskConfig) -> Task:
    """The task named by ``cfg.name`` (one of :data:`TASKS`), given its settings block."""
    return TASKS.get(cfg.name)(cfg, **TASKS.arguments(cfg.name, cfg))


def task_content(cfg: TaskConfig) -> dict[str, Any]:
    """What the named task's problems are made of (its declared ``content``): the same dict for the same problems."""
    return TASKS.needs(cfg.name).content(cfg, **TASKS.arguments(cfg.name, cfg))


def check_task_settings(cfg: TaskConfig) -> None:
    """The named task's own check of its settings (:data:`TASKS`' ``check``)."""
    TASKS.needs(cfg.name).check(cfg, **TASKS.arguments(cfg.name, cfg))


def answer_hint(name: str) -> str:
    """What makes a model that states no final answer on task ``name`` state one (the task's declared ``instruction`` key)."""
    key = TASKS.needs(name).instruction
    if key is None:
        return "warm the model up on the task's worked solutions first (model.path=builtin is), which end with its answer line"
    return f"make the prompts ask for it in a form this model follows: {key}=<text> (docs/usage.md: Your own model and data)"
