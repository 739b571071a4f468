"""Refusals of a name: every key that names an implementation names a registered one, every fixed choice of a
higher layer is one of its values, every benchmark exists. Checked before the ranges, so a misspelt name is reported
as such whatever else it would trip."""

from __future__ import annotations

from pathlib import Path

from tsctl.config.errors import ConfigError
from tsctl.config.ranges import one_of
from tsctl.config.schema import TsctlConfig
from tsctl.runconfig.registries import NONE_ALLOWED, REGISTRIES, value
from tsctl.seeds.selectors import BANDITS
from tsctl.seeds.truncation import CUT_SCHEDULES
from tsctl.tasks.benchmarks import available_benchmarks
from tsctl.trainer.denominators import TRACE_LOGPROBS


def check_names(cfg: TsctlConfig) -> None:
    """Raise :class:`ConfigError` at the first key of ``cfg`` that names nothing registered or allowed."""
    for registry in REGISTRIES:
        names = ("none", *registry.names()) if registry in NONE_ALLOWED else registry.names()
        one_of(registry.key, value(cfg, registry.key), names)
    s = cfg.seeds
    one_of("seeds.schedule", s.schedule, CUT_SCHEDULES)
    one_of("seeds.bandit", s.bandit, BANDITS)
    one_of("seeds.trace_logprobs", s.trace_logprobs, TRACE_LOGPROBS)
    for name in cfg.eval.benchmarks:
        if name != "heldout" and name not in available_benchmarks() and Path(name).is_dir():
            raise ConfigError("eval.benchmarks", f"{name} is a folder; a benchmark is heldout, a name ({', '.join(available_benchmarks())}) "
                              "or the path of its YAML file: point eval.benchmarks at that file")
        if name != "heldout" and name not in available_benchmarks() and not Path(name).is_file():
            raise ConfigError("eval.benchmarks", f"unknown benchmark {name!r}; choose heldout, {', '.join(available_benchmarks())} or a YAML path")
