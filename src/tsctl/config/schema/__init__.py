"""Structured configs: every knob of tsctl, documented where it is declared.

Hydra composes the YAML groups under ``conf/`` onto these dataclasses (registered in the
ConfigStore by :mod:`tsctl.config.store`), so an unknown key or a value of the wrong type is
rejected by OmegaConf; value ranges are checked by :func:`tsctl.config.validate.validate`, names
of registered implementations by :mod:`tsctl.runconfig`, which also adds the settings block each registered entry
keeps beside it (``algo.cispo.*``, ``engine.vllm.*``, ``task.countdown.*``: :mod:`tsctl.config.blocks`). One module per group of keys
(``model``, ``task``, ``rl``: engine, algo and seeds, ``trainer``, ``outputs``: eval, shards, logger
and report); the root config is here.

The three sweep knobs of Thinking Seeds are top-level keys: ``ratio``, ``truncation``, ``refresh``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from tsctl.config.schema.model import LoraConfig, ModelConfig, TinyModelConfig, WarmupConfig
from tsctl.config.schema.outputs import EvalConfig, LoggerConfig, ReportConfig, ShardsConfig
from tsctl.config.schema.rl import AlgoConfig, EngineConfig, SeedsConfig
from tsctl.config.schema.task import TaskConfig
from tsctl.config.schema.trainer import TrainerConfig

__all__ = [
    "AlgoConfig", "EngineConfig", "EvalConfig", "LoggerConfig", "LoraConfig", "ModelConfig", "ReportConfig", "SeedsConfig", "ShardsConfig",
    "TaskConfig", "TinyModelConfig", "TrainerConfig", "TsctlConfig", "WarmupConfig",
]


@dataclass
class TsctlConfig:
    """Root config of every tsctl command."""

    ratio: float = 0.0
    """Share (%) of each group's samples that continue a behaviour-policy prefix; 0 = plain DAPO. It must be exact at
    ``trainer.n`` (a whole number of samples: ``ratio=30`` with ``n=8`` is refused, 2 of 8 being ratio 25)."""
    seeded_per_group: Optional[int] = None
    """Seeded samples per group, ``round(trainer.n * ratio / 100)``: derived from ``ratio`` and ``trainer.n`` and written
    into every run's config and manifest; leave it unset (a value given must equal it). Once ``seeded``, the name a
    sample's flag keeps (``Sample.seeded``: it continues a seed)."""
    truncation: str = "uniform"
    """Truncation strategy for seeds: fixed, uniform, boundary, entropy or schedule."""
    refresh: int = 10
    """Steps between behaviour-policy refreshes (T): the steps of one refresh window, whose seeds the weights at its first
    step write. 0 = one window, the whole run: the initial model writes every step's seeds and is never refreshed
    (:func:`tsctl.config.knobs.window_length`); ``seeds.selector`` choosing among older snapshots and
    ``truncation=target_pass`` need ``refresh > 0``."""
    seed: int = 0
    """Seed of sampling, initialisation and data order."""
    experiment: str = "default"
    """Run folder is ``<runs_dir>/<experiment>/<name>``; a relative path without ``..``."""
    name: Optional[str] = None
    """Run name, one folder name (no ``/``, not ``..``); null derives one from the overrides (``ratio25-refresh10-seed0``)."""
    runs_dir: str = "runs"
    """Root folder of run outputs and the model cache."""
    resume: bool = False
    """Continue an existing run from its newest complete checkpoint (with the config it was started
    with; ``runs_dir``, ``experiment`` and ``name`` may differ, for a moved folder). An error when there is no such run."""
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    seeds: SeedsConfig = field(default_factory=SeedsConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    shards: ShardsConfig = field(default_factory=ShardsConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
