"""A run's checkpoints are scored on its held-out split under the task it trained on, never another's.

A run's ``eval/step-N/heldout.json`` holds the held-out scores of the run's own task; scoring it
under another ``task`` would file another task's scores there (and then refuse the right ones as
existing). Other benchmarks do not depend on the task and are scored under any.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import OmegaConf

from tsctl.config.errors import ConfigError
from tsctl.config.schema import TsctlConfig
from tsctl.evaluation.suites import HELDOUT, Suite
from tsctl.evaluation.targets import Target


def run_task(run: Path) -> str | None:
    """The ``task.name`` a run folder's ``config.yaml`` records; None without one."""
    saved = run / "config.yaml"
    if not saved.is_file():
        return None
    name = OmegaConf.select(OmegaConf.load(saved), "task.name")
    return None if name is None else str(name)


def refuse_other_task(targets: Sequence[Target], suites: Sequence[Suite], cfg: TsctlConfig) -> None:
    """Raise :class:`ConfigError` when a run checkpoint in ``targets`` would be scored on ``heldout`` under another task than its run's."""
    if not any(s.name == HELDOUT for s in suites):
        return
    for target in targets:
        if target.step is None:
            continue
        run = target.out_dir.parent.parent
        trained = run_task(run)
        if trained is not None and trained != cfg.task.name:
            raise ConfigError(
                "task", f"{run} trained on task={trained}, so its held-out scores are {trained}'s, but this evaluation has "
                f"task={cfg.task.name}; rerun with task={trained} (or leave heldout out of eval.benchmarks)"
            )
