"""Every command's config: composed and range-checked by :mod:`tsctl.config`, then checked against
the names the packages register and the checks that need a package's own logic.

:mod:`tsctl.config` sits below every package, so it cannot know which policy losses, truncation
strategies, tasks, engines, selectors or seed sources exist; this step, above them all, asks each
registry. A name is checked before the ranges, so a misspelt name is reported as such whatever
else it would trip. Every error is a one-line :class:`~tsctl.config.errors.ConfigError`.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from tsctl.algo.advantages import ADVANTAGES
from tsctl.algo.losses import AGGREGATIONS, POLICY_LOSSES
from tsctl.algo.rollout_correction import CORRECTIONS
from tsctl.config.compose import Composed, compose_node
from tsctl.config.errors import ConfigError
from tsctl.config.idle import idle_settings as settings_idle
from tsctl.config.schema import TsctlConfig
from tsctl.config.ranges import one_of
from tsctl.config.validate import validate
from tsctl.engines.factory import ENGINES
from tsctl.seeds.base import inexact_ratio, seeded_count
from tsctl.seeds.selectors import BANDITS, SELECTORS
from tsctl.seeds.sources import SOURCES
from tsctl.seeds.truncation import CUT_SCHEDULES, STRATEGIES
from tsctl.tasks.benchmarks import available_benchmarks
from tsctl.tasks.registry import TASKS
from tsctl.trainer.denominators import TRACE_LOGPROBS


def compose_config(overrides: list[str] | None = None, idle: bool = False, command: str | None = None) -> Composed:
    """Compose ``conf/config.yaml`` with ``overrides`` (Hydra syntax) and check it (:func:`checked`; ``idle``
    also refuses settings that cannot take effect, ``command`` overrides that command would ignore).

    Raises:
        ConfigError: unknown key, wrong type, unknown option or name, a value out of range, or an override ignored.
    """
    composed = compose_node(overrides, command)
    return checked(composed.node, composed.cfg, idle)


def checked(node: DictConfig, cfg: TsctlConfig, idle: bool = False) -> Composed:
    """``cfg`` checked (:func:`check`), with the derived ``seeded`` (samples per group that continue a seed) set in it
    and in ``node``, which a run saves as its config."""
    cfg = check(cfg, idle)
    cfg.seeded = node.seeded = seeded_count(cfg)
    return Composed(node=node, cfg=cfg)


def check(cfg: TsctlConfig, idle: bool = False) -> TsctlConfig:
    """Check the registered names of ``cfg``, then its ranges (:func:`~tsctl.config.validate.validate`),
    then what needs a package's logic, then (with ``idle``, as a command's own config is) that no
    setting is one that cannot take effect: :mod:`tsctl.config.idle` lists every key whose effect
    depends on another key and what is refused (a sweep's points are checked together instead, by
    :func:`tsctl.stages.ablate.plan.plan`); return ``cfg`` unchanged or raise :class:`ConfigError`."""
    check_names(cfg)
    validate(cfg)
    check_needs(cfg)
    if (inexact := inexact_ratio(cfg)) is not None:
        raise ConfigError("ratio", inexact)
    if cfg.seeded is not None and cfg.seeded != seeded_count(cfg):
        raise ConfigError("seeded", f"{cfg.seeded} is derived from ratio and trainer.n (round({cfg.trainer.n} x {cfg.ratio:g} / 100) = "
                          f"{seeded_count(cfg)}) and tsctl records it itself; drop it, or set the ratio that seeds {cfg.seeded}")
    if cfg.seeds.adv_group == "plain" and seeded_count(cfg) >= cfg.trainer.n:
        raise ConfigError("seeds.adv_group", f"'plain' needs plain samples in every group, but ratio={cfg.ratio:g} seeds all n={cfg.trainer.n}; lower ratio or use seeds.adv_group=all")
    if idle and (errors := idle_settings(cfg)):
        raise errors[0]
    return cfg


def idle_settings(cfg: TsctlConfig) -> list[ConfigError]:
    """:func:`tsctl.config.idle.idle_settings` with the truncation strategies, selectors, seed sources and advantage
    estimators, which declare what they read and need."""
    return settings_idle(cfg, {"truncation": STRATEGIES, "seeds.selector": SELECTORS, "seeds.source": SOURCES, "algo.adv_estimator": ADVANTAGES})


def check_needs(cfg: TsctlConfig) -> None:
    """What the named task, engine, truncation and selector declare: their own checks and what they need of the others."""
    TASKS.needs(cfg.task.name).check(cfg.task)
    e, s, tr = cfg.engine, cfg.seeds, cfg.trainer
    ENGINES.needs(e.name).check(cfg)
    if tr.old_logprobs == "engine" and (not ENGINES.needs(e.name).own_logprobs or e.top_p != 1):
        raise ConfigError(
            "trainer.old_logprobs",
            f"'engine' needs engine=hf with engine.top_p=1 (got engine={e.name}, top_p={e.top_p:g}): other engines' "
            "numerics differ from the trainer's and a nucleus changes the distribution; use auto or recompute",
        )
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
        if cfg.refresh == 0:
            raise ConfigError("seeds.selector", f"{s.selector!r} needs snapshots from several refresh windows, but refresh=0 keeps only the initial model; set refresh > 0")
    if not source.entropies and STRATEGIES.needs(cfg.truncation).entropies:
        raise ConfigError("truncation", f"{cfg.truncation!r} needs the behaviour policy's entropies, which seeds.source={s.source} does not give; choose another truncation")


def check_names(cfg: TsctlConfig) -> None:
    """Every key that names an implementation names a registered one."""
    one_of("truncation", cfg.truncation, STRATEGIES.names())
    one_of("task.name", cfg.task.name, TASKS.names())
    one_of("engine.name", cfg.engine.name, ENGINES.names())
    one_of("algo.loss", cfg.algo.loss, AGGREGATIONS.names())
    one_of("algo.policy_loss", cfg.algo.policy_loss, POLICY_LOSSES.names())
    one_of("algo.adv_estimator", cfg.algo.adv_estimator, ADVANTAGES.names())
    one_of("algo.rollout_correction", cfg.algo.rollout_correction, ("none", *CORRECTIONS.names()))
    s = cfg.seeds
    one_of("seeds.schedule", s.schedule, CUT_SCHEDULES)
    one_of("seeds.selector", s.selector, SELECTORS.names())
    one_of("seeds.bandit", s.bandit, BANDITS)
    one_of("seeds.source", s.source, SOURCES.names())
    one_of("seeds.trace_logprobs", s.trace_logprobs, TRACE_LOGPROBS)
    for name in cfg.eval.benchmarks:
        if name != "heldout" and name not in available_benchmarks() and Path(name).is_dir():
            raise ConfigError("eval.benchmarks", f"{name} is a folder; a benchmark is heldout, a name ({', '.join(available_benchmarks())}) "
                              "or the path of its YAML file: point eval.benchmarks at that file")
        if name != "heldout" and name not in available_benchmarks() and not Path(name).is_file():
            raise ConfigError("eval.benchmarks", f"unknown benchmark {name!r}; choose heldout, {', '.join(available_benchmarks())} or a YAML path")
