"""Refusals of what the chosen entries need: each entry's own check (a task's settings, an engine's rules, an advantage estimator's), what one
entry needs of another (a selector's pool, a truncation's entropies, a seed source's path), and the checks that need
a package's logic (how many samples ``ratio`` seeds, where pi_old may come from)."""

from __future__ import annotations

from pathlib import Path

from tsctl.algo.advantages import ADVANTAGES
from tsctl.config.errors import ConfigError
from tsctl.config.knobs import inexact_ratio, refreshes, seeded_count
from tsctl.config.schema import TsctlConfig
from tsctl.engines.own_logprobs import check_old_logprobs
from tsctl.engines.registry import ENGINES
from tsctl.seeds.selectors import SELECTORS
from tsctl.seeds.sources import SOURCES
from tsctl.seeds.truncation import STRATEGIES
from tsctl.tasks.registry import check_task_settings


def check_needs(cfg: TsctlConfig) -> None:
    """Raise :class:`ConfigError` at the first need of ``cfg``'s entries that it does not meet."""
    check_task_settings(cfg.task)
    ENGINES.needs(cfg.engine.name).check(cfg, ENGINES.settings(cfg.engine.name, cfg.engine))
    check_old_logprobs(cfg)
    _ratio(cfg)
    _estimator(cfg)
    _seeds(cfg)


def _ratio(cfg: TsctlConfig) -> None:
    """``ratio`` seeds a whole number of samples per group, at least one (the one check of it, before any model is built),
    ``seeded_per_group`` (derived) agrees, ``adv_group=plain`` keeps plain samples."""
    if (inexact := inexact_ratio(cfg)) is not None:
        raise ConfigError("ratio", inexact)
    given = cfg.seeded_per_group
    if given is not None and given != seeded_count(cfg):
        raise ConfigError("seeded_per_group", f"{given} is derived from ratio and trainer.n (round({cfg.trainer.n} x {cfg.ratio:g} / 100) = "
                          f"{seeded_count(cfg)}) and tsctl records it itself; drop it, or set the ratio that seeds {given}")
    if cfg.seeds.adv_group == "plain" and seeded_count(cfg) >= cfg.trainer.n:
        raise ConfigError("seeds.adv_group", f"'plain' needs plain samples in every group, but ratio={cfg.ratio:g} seeds all n={cfg.trainer.n}; lower ratio or use seeds.adv_group=all")


def _estimator(cfg: TsctlConfig) -> None:
    """The advantage estimator's own ``check``, given the samples of each group its statistics are taken over."""
    name = cfg.algo.adv_estimator
    stats = cfg.trainer.n - (seeded_count(cfg) if cfg.seeds.adv_group == "plain" else 0)
    ADVANTAGES.needs(name).check(cfg, ADVANTAGES.settings(name, cfg.algo), stats)


def _seeds(cfg: TsctlConfig) -> None:
    """What the seed source, the selector and the truncation need of each other."""
    s = cfg.seeds
    source = SOURCES.needs(s.source)
    if source.path is not None and not s.source_path:
        raise ConfigError("seeds.source_path", f"seeds.source={s.source} needs {source.path}: seeds.source_path=<path>")
    if source.path_is_file and Path(s.source_path).is_dir():
        raise ConfigError("seeds.source_path", f"{s.source_path} is a folder; seeds.source={s.source} reads {source.path}: point seeds.source_path at that file")
    if source.path_is_file and not Path(s.source_path).is_file():
        raise ConfigError("seeds.source_path", f"{s.source_path} does not exist or is not a file (seeds.source={s.source} reads {source.path})")
    if SELECTORS.needs(s.selector).pool:
        if not source.own:
            raise ConfigError("seeds.selector", f"{s.selector!r} chooses among the run's own snapshots, but seeds.source={s.source}; use seeds.selector=latest")
        if s.pool_size < 2:
            raise ConfigError("seeds.pool_size", f"seeds.selector={s.selector} needs a pool of 2 or more snapshots to choose from (got {s.pool_size}); e.g. seeds.pool_size=4")
        if not refreshes(cfg):
            raise ConfigError("seeds.selector", f"{s.selector!r} needs snapshots from several refresh windows, but refresh=0 keeps only the initial model; set refresh > 0")
    if STRATEGIES.needs(cfg.truncation).controller and not refreshes(cfg):
        raise ConfigError("truncation", f"{cfg.truncation!r} places seeds from what earlier refresh windows measured, but refresh=0 makes the whole run one window "
                          "(it would cut as 'uniform' throughout); set refresh > 0 (e.g. refresh=10) or truncation=uniform")
    if not source.entropies and STRATEGIES.needs(cfg.truncation).entropies:
        raise ConfigError("truncation", f"{cfg.truncation!r} needs the behaviour policy's entropies, which seeds.source={s.source} does not give; choose another truncation")
