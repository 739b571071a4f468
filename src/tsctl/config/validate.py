"""Range checks that types alone cannot express.

OmegaConf already rejects unknown keys and wrong types while composing; :func:`validate` checks what
is left (ranges, fixed choices, knobs that must agree), one module of :mod:`tsctl.config.checks` per
schema module, and raises :class:`ConfigError` naming the key and what is allowed; first, every number in the
range of the library that receives it (:mod:`tsctl.config.checks.numbers`). Names that must
exist in a registry of a higher layer (``algo.aggregation``, ``truncation``, ``task.name``, ``engine.name``,
``seeds.selector``, ``seeds.source``, ...), what those entries declare they need (a task's own
settings, a seed source's path) and checks that need a package's own logic (how many samples
``ratio`` seeds) are checked by the command's composition step, :mod:`tsctl.runconfig`.
"""

from __future__ import annotations

from pathlib import Path

from tsctl.config.checks import model, numbers, outputs, rl, task, trainer
from tsctl.config.errors import ConfigError
from tsctl.config.schema import TsctlConfig


def _run_place(cfg: TsctlConfig) -> None:
    """``name`` is one folder name and ``experiment`` a relative path without ``..``: a run stays inside ``runs_dir``."""
    if cfg.name is not None and (not cfg.name or cfg.name in (".", "..") or any(c in cfg.name for c in "/\\\0")):
        raise ConfigError("name", f"{cfg.name!r} is not a plain folder name (no '/', no '..'), so the run would land outside <runs_dir>/<experiment>/; e.g. name=lr-2e-5")
    parts = Path(cfg.experiment).parts
    if not parts or Path(cfg.experiment).is_absolute() or ".." in parts or "\0" in cfg.experiment:
        raise ConfigError("experiment", f"{cfg.experiment!r} must be a relative folder path without '..' (it would write outside runs_dir=); e.g. experiment=countdown/lr-sweep")


def validate(cfg: TsctlConfig) -> TsctlConfig:
    """Check every knob of ``cfg``; return it unchanged or raise :class:`ConfigError`."""
    _run_place(cfg)
    numbers.check(cfg)
    for section in (model, task, rl, trainer, outputs):
        section.check(cfg)
    return cfg
