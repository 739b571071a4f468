"""Every registry a config key names, and the schema with the settings blocks their entries declare.

:mod:`tsctl.config` sits below every package, so it cannot know which policy losses, aggregations, advantage
estimators, rollout corrections, truncation strategies, tasks, engines, selectors or seed sources exist, nor the
settings each keeps beside it; the command's composition, above them all, asks each registry here.
"""

from __future__ import annotations

from tsctl.algo.advantages import ADVANTAGES
from tsctl.algo.aggregations import AGGREGATIONS
from tsctl.algo.divergences import DIVERGENCES
from tsctl.algo.losses import POLICY_LOSSES
from tsctl.algo.rollout_correction import CORRECTIONS
from tsctl.algo.stale_masks import STALE_MASKS
from tsctl.config.blocks import with_blocks
from tsctl.config.registry import Registry
from tsctl.config.schema import TsctlConfig
from tsctl.engines.registry import ENGINES
from tsctl.seeds.selectors import SELECTORS
from tsctl.seeds.sources import SOURCES
from tsctl.seeds.truncation import STRATEGIES
from tsctl.tasks.registry import TASKS

REGISTRIES: tuple[Registry, ...] = (AGGREGATIONS, POLICY_LOSSES, ADVANTAGES, CORRECTIONS, DIVERGENCES, STALE_MASKS, STRATEGIES, TASKS, ENGINES, SELECTORS, SOURCES)
"""The registry of every config key that names an implementation (each registry's ``key``)."""

NONE_ALLOWED = (CORRECTIONS, STALE_MASKS)
"""Registries whose key also takes ``none`` (no entry: ``algo.rollout_correction=none``, ``algo.stale_mask=none``)."""


def schema() -> type:
    """:class:`~tsctl.config.schema.TsctlConfig` with every settings block the registries' entries declare
    (:func:`tsctl.config.blocks.with_blocks`)."""
    return with_blocks(TsctlConfig, REGISTRIES)


def value(cfg: object, key: str) -> object:
    """The value of the dotted ``key`` in ``cfg``."""
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg
