"""The benchmarks of ``eval.benchmarks``, loaded (and their data checked) before any model is."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from tsctl.config.errors import ConfigError
from tsctl.config.schema import TsctlConfig
from tsctl.engines.base import Demand
from tsctl.models.prompt_fit import PromptRoom, fitting, needed_context
from tsctl.models.prompts import PromptFormatter
from tsctl.tasks.base import Problem, Task
from tsctl.tasks.benchmarks import BenchmarkTask, load_benchmark, load_benchmark_config
from tsctl.tasks.records import DataError
from tsctl.tasks.registry import build_task
from tsctl.tasks.split_checks import check_task

HELDOUT = "heldout"
"""The benchmark name that stands for the configured task's held-out split."""


@dataclass(frozen=True)
class Suite:
    """One benchmark ready to score.

    Attributes:
        name: its name in file names and tables (``heldout`` or the benchmark config's name).
        task: grades responses to its problems.
        problems: the problems scored (the first ``eval.limit`` of them).
        skipped: malformed rows left out while loading (``eval.on_bad_row=skip``).
        too_long: problems left out because their prompts do not fit the engine (``task.overlong_prompts=drop``).
    """

    name: str
    task: Task
    problems: Sequence[Problem]
    skipped: int
    too_long: int = 0


def load_suites(cfg: TsctlConfig) -> list[Suite]:
    """Every benchmark of ``cfg.eval.benchmarks``, in order.

    Raises:
        ConfigError: an invalid benchmark config, or two benchmarks with the same name.
        DataError: a missing data file, a malformed row or a missing field (``on_bad_row=error``),
            or a benchmark left without problems.
    """
    suites = [_heldout(cfg) if name == HELDOUT else _benchmark(name, cfg) for name in cfg.eval.benchmarks]
    names = [suite.name for suite in suites]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ConfigError("eval.benchmarks", f"benchmark name(s) {', '.join(twice)} listed more than once")
    for suite in suites:
        if not suite.problems:
            raise DataError(f"benchmark {suite.name} has no problems to score ({suite.skipped} malformed rows skipped)")
    return suites


def _heldout(cfg: TsctlConfig) -> Suite:
    """The configured task's held-out split (a file task skips bad rows by ``task.file.on_bad_row``)."""
    task = build_task(cfg.task)
    check_task(task, cfg, scored=0)  # an empty split is refused below, as any benchmark without problems
    problems = list(task.problems("heldout"))[: cfg.eval.limit]
    return Suite(HELDOUT, task, problems, getattr(task, "skipped", 0))


def _benchmark(name: str, cfg: TsctlConfig) -> Suite:
    """A benchmark config by name (``conf/benchmark/<name>.yaml``) or YAML path."""
    try:
        bench_cfg = load_benchmark_config(name)
    except ValueError as error:
        raise ConfigError("eval.benchmarks", str(error)) from None
    problems, skipped = load_benchmark(bench_cfg, cfg.eval.limit, cfg.eval.on_bad_row)
    return Suite(bench_cfg.name, BenchmarkTask(bench_cfg, problems, skipped), problems, skipped)


def fit_suites(suites: Sequence[Suite], formatter: PromptFormatter, room: PromptRoom) -> list[Suite]:
    """Each suite with only the problems whose prompts fit ``room`` (:func:`~tsctl.models.prompt_fit.fitting`:
    an error unless ``task.overlong_prompts=drop``); ``too_long`` counts the ones left out. ``eval.limit`` was
    applied when the suites were loaded, so a suite may keep fewer problems than the limit."""
    fitted = []
    for suite in suites:
        kept = fitting(suite.problems, formatter, room, suite.name)
        fitted.append(replace(suite, problems=kept, too_long=len(suite.problems) - len(kept)))
    return fitted


def suites_demand(suites: Sequence[Suite], formatter: PromptFormatter, cfg: TsctlConfig) -> Demand:
    """What scoring ``suites`` asks of an engine: room for their longest prompt; at most one suite's problems x
    ``eval.k`` requests at once (its sampled responses; the greedy ones are one per problem)."""
    problems = [p for suite in suites for p in suite.problems]
    context = needed_context(problems, formatter, cfg.engine.max_new_tokens, seeded=False)
    return Demand(context=context, requests=max(len(suite.problems) for suite in suites) * cfg.eval.k)
