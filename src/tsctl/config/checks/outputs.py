"""Checks of the ``eval``, ``report`` and ``logger`` sections (:mod:`tsctl.config.schema.outputs`)."""

from __future__ import annotations

from tsctl.config.checks.task import BAD_ROW
from tsctl.config.errors import ConfigError
from tsctl.config.ranges import non_negative, one_of, positive
from tsctl.config.schema import TsctlConfig

LOGGERS = ("console", "wandb")
WANDB_MODES = ("offline", "online", "disabled")


def check(cfg: TsctlConfig) -> None:
    """``eval.*``, ``shards.*``, ``report.*`` and ``logger.*``."""
    ev = cfg.eval
    positive("eval.k", ev.k)
    if any(k < 1 or k > ev.k for k in ev.pass_k):
        raise ConfigError("eval.pass_k", f"{list(ev.pass_k)}: every k must be in 1..eval.k={ev.k}")
    if ev.limit is not None:
        positive("eval.limit", ev.limit)
    one_of("eval.on_bad_row", ev.on_bad_row, BAD_ROW)
    non_negative("shards.data_step", cfg.shards.data_step)
    positive("shards.steps", cfg.shards.steps)

    rep = cfg.report
    if not 0 < rep.level < 1:
        raise ConfigError("report.level", f"{rep.level} is out of range; allowed: 0 < report.level < 1 (e.g. 0.95)")
    if rep.baseline is not None and (not rep.baseline.split() or any("=" not in part[1:] for part in rep.baseline.split())):
        raise ConfigError("report.baseline", f"{rep.baseline!r}: write it as key=value, e.g. report.baseline=ratio=0")
    if rep.equivalence_margin is not None and not 0 < rep.equivalence_margin < 1:
        raise ConfigError("report.equivalence_margin", f"{rep.equivalence_margin} is out of range; allowed: null or 0 < margin < 1 "
                          "(a fraction of problems, e.g. 0.02)")

    one_of("logger.name", cfg.logger.name, LOGGERS)
    one_of("logger.wandb_mode", cfg.logger.wandb_mode, WANDB_MODES)
