"""Which checkpoints ``tsctl eval`` scores (and ``tsctl seed``/``rollout`` run), and where eval results go.

A checkpoint setting (``eval.checkpoint``, ``shards.checkpoint``) is one of:

- a run folder (it holds ``checkpoints/`` or ``manifest.json``): its complete checkpoints chosen by
  the step setting (``last``, ``all`` or a step number); results go to ``<run>/eval/step-N/``. A run whose
  config, manifest and records disagree or are missing or damaged is refused (:mod:`tsctl.io.run_identity`);
- one checkpoint of a run (``<run>/checkpoints/step-N``): results go to ``<run>/eval/step-N/``;
- any other HF model folder: results go to ``<runs_dir>/<experiment>/eval/<folder name>/``;
- null: ``model.path``, as the caller's ``base_model`` resolves it (the warm-up stage's builds and
  warms up the built-in model first when missing); a hub id there is stored as
  ``<runs_dir>/<experiment>/eval/<org>--<name>/``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tsctl.config.errors import ConfigError
from tsctl.config.schema import TsctlConfig
from tsctl.io.checkpoints import list_checkpoints, step_of
from tsctl.io.runs import RunError, check_run


@dataclass(frozen=True)
class Target:
    """One model to score.

    Attributes:
        label: short name in tables (``step-N``, or the model folder's name).
        path: the model folder or hub id given to the loader.
        step: training step of a run checkpoint; None for any other model.
        out_dir: folder of its ``<benchmark>.json`` and ``<benchmark>.parquet`` files.
        key: the setting that named it (quoted in load errors).
    """

    label: str
    path: str
    step: int | None
    out_dir: Path
    key: str = "model.path"


BaseModel = Callable[[TsctlConfig], str]
"""``base_model(cfg) -> model folder or hub id`` of ``model.path`` (called only when no checkpoint is named)."""


def resolve_targets(cfg: TsctlConfig, base_model: BaseModel) -> list[Target]:
    """The models ``eval.checkpoint`` and ``eval.step`` name, oldest step first (see the module docstring)."""
    return resolve_models(cfg, cfg.eval.checkpoint, cfg.eval.step, "eval", base_model)


def resolve_model(cfg: TsctlConfig, checkpoint: str | None, step: str, key: str, base_model: BaseModel) -> Target:
    """The one model ``<key>.checkpoint`` and ``<key>.step`` name (``step=all`` is refused)."""
    if step == "all":
        raise ConfigError(f"{key}.step", "'all' names several checkpoints; use last or a step number")
    return resolve_models(cfg, checkpoint, step, key, base_model)[0]


def resolve_models(cfg: TsctlConfig, checkpoint: str | None, step: str, key: str, base_model: BaseModel) -> list[Target]:
    """The models a ``checkpoint`` and ``step`` pair names (see the module docstring); errors name ``<key>.*``.

    Raises:
        ConfigError: a missing checkpoint path, or an invalid or unknown step.
        RunError: a run folder without any complete checkpoint, or one whose config, manifest and records disagree or
            are missing or damaged (:func:`tsctl.io.runs.check_run`; also for one checkpoint of a run).
    """
    if checkpoint is None:
        return [_model_target(base_model(cfg), cfg)]
    path = Path(checkpoint).expanduser()
    if not path.exists():
        raise ConfigError(
            f"{key}.checkpoint", f"{checkpoint} does not exist; pass a run folder (with checkpoints/) or a model folder (with config.json)"
        )
    if (path / "checkpoints").is_dir() or (path / "manifest.json").is_file():
        check_run(path)
        return _run_targets(path, step, key)
    if step != "last":
        raise ConfigError(f"{key}.step", f"{step!r} needs a run folder (with checkpoints/), but {checkpoint} is a model folder")
    return [dataclasses.replace(_model_target(str(path), cfg), key=f"{key}.checkpoint")]


def _run_targets(run: Path, step: str, key: str) -> list[Target]:
    """The run's complete checkpoints selected by ``step``: ``last``, ``all`` or a step number."""
    found = list_checkpoints(run / "checkpoints")
    if not found:
        raise RunError(
            f"{key}.checkpoint={run} is a run with no complete checkpoint yet (checkpoints/step-N with config.json and "
            f"trainer_state.pt); continue its training with `tsctl train ... resume=true`, or pass {key}.checkpoint=<model folder>"
        )
    if step == "last":
        found = found[-1:]
    elif step.isdigit():
        steps = ", ".join(str(n) for n, _ in found)
        found = [(n, p) for n, p in found if n == int(step)]
        if not found:
            raise ConfigError(f"{key}.step", f"{run} has no complete checkpoint step-{step}; available steps: {steps}")
    elif step != "all":
        raise ConfigError(f"{key}.step", f"unknown value {step!r}; use last, all or a step number")
    return [Target(f"step-{n}", str(p), n, run / "eval" / f"step-{n}", f"{key}.checkpoint") for n, p in found]


def _model_target(path: str, cfg: TsctlConfig) -> Target:
    """A single model folder or hub id; a run's ``checkpoints/step-N`` keeps its results in the run."""
    folder = Path(path)
    step = step_of(folder)
    if step is not None and folder.parent.name == "checkpoints":
        check_run(folder.parent.parent)
        return Target(folder.name, path, step, folder.parent.parent / "eval" / folder.name)
    label = folder.name if folder.is_dir() else path.replace("/", "--")
    return Target(label, path, None, Path(cfg.runs_dir) / cfg.experiment / "eval" / label)
