"""A sweep's plan: its points, the folder of each, and the sweep folder, checked before anything is written.

The points are Hydra's basic sweeper's expansion of the overrides; a point's folder is Hydra's
``override_dirname`` of its swept keys (:func:`point_folder`), which is where ``hydra.sweep.subdir`` puts it.
Refused here, in one line each: a location key swept, Seeds-only keys swept where no point seeds, a setting
idle at every point (:mod:`tsctl.runconfig.idle`), and two points that compose to the same run (:func:`same_runs`):
the same values, or values that differ only in settings that cannot take effect at them (``ratio=0,25
refresh=5,20``: at ``ratio=0`` both refresh values are one plain DAPO run).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from hydra._internal.config_loader_impl import get_overrides_dirname
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from tsctl.analysis.points import POINT_SEP
from tsctl.config.compose import Composed
from tsctl.config.errors import ConfigError
from tsctl.config.knobs import uses_seeds
from tsctl.config.overrides import is_hydra, key_of
from tsctl.io.config_diff import PLACE_KEYS, flatten
from tsctl.runconfig import compose_config, idle_settings
from tsctl.runconfig.registries import schema

LOCATION_KEYS = ("runs_dir", "experiment", "name", "resume")
"""Keys that place a sweep rather than define a point: never swept, not part of the sweep's identity."""

LONE_POINT = "point"
"""Folder name of the only point of a sweep that sweeps no key."""


@dataclass
class Sweep:
    """A planned sweep: where it lives, its points, and the overrides Hydra gets.

    Attributes:
        path: the sweep folder.
        points: each point's overrides (``KEY=VALUE``).
        swept: the swept keys.
        task_overrides: the user's overrides of the tsctl config (Hydra's own left out).
        hydra_overrides: the user's overrides of Hydra (its launcher).
        folders: each point's folder name in ``path``, in the order of ``points``.
        nodes: each point's composed config, in the order of ``points`` (what its run would save as ``config.yaml``,
            less the location keys).
        named: whether ``name=`` chose the folder (else it is ``sweep-<hash of the points>``).
    """

    path: Path
    points: list[list[str]]
    swept: list[str]
    task_overrides: list[str]
    hydra_overrides: list[str]
    folders: list[str]
    nodes: list[DictConfig]
    named: bool


def is_report_override(override: str) -> bool:
    """``report.*`` overrides shape the final report only: they are neither swept nor part of a point."""
    return key_of(override).startswith("report.")


def expand(overrides: list[str]) -> tuple[list[list[str]], list[str]]:
    """The sweep's points (each a list of ``KEY=VALUE``) and the swept keys, as Hydra's basic sweeper sees them.

    Raises:
        ConfigError: an override does not parse, or a location key is swept.
    """
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    try:
        parsed = OverridesParser.create().parse_overrides([o for o in overrides if not is_hydra(o)])
        points = BasicSweeper.split_arguments(parsed, max_batch_size=None)[0]
    except HydraException as err:
        raise ConfigError("overrides", str(err).splitlines()[0]) from None
    swept = [o.key_or_group for o in parsed if o.is_sweep_override()]
    for key in swept:
        if key in LOCATION_KEYS:
            raise ConfigError(key, "cannot be swept; it places the whole sweep (the folder is <runs_dir>/<experiment>/<name>)")
    return points, swept


def first_point(overrides: list[str]) -> list[str]:
    """Overrides of the sweep's first point, with the report's (unchanged when they do not parse, so composing reports why)."""
    report = [o for o in overrides if is_report_override(o)]
    try:
        return expand([o for o in overrides if not is_report_override(o)])[0][0] + report
    except ConfigError:
        return [o for o in overrides if not is_hydra(o)]


def sweep_name(points: list[list[str]]) -> str:
    """``sweep-<hash>`` of the set of points (order-free), location keys left out."""
    keep = sorted(sorted(o for o in p if key_of(o) not in LOCATION_KEYS) for p in points)
    return "sweep-" + hashlib.sha1(json.dumps(keep).encode()).hexdigest()[:8]


def fixed_keys(task_overrides: list[str], swept: list[str]) -> list[str]:
    """The keys set on the command line but not swept: left out of the points' folder names."""
    return sorted({key_of(o) for o in task_overrides} - set(swept))


def point_folder(point: list[str], fixed: list[str], swept: list[str]) -> str:
    """The folder name Hydra gives ``point``: its swept ``key=value`` pairs, sorted, joined by :data:`~tsctl.analysis.points.POINT_SEP`."""
    if not swept:
        return LONE_POINT
    return get_overrides_dirname(OverridesParser.create().parse_overrides(point), exclude_keys=fixed, item_sep=POINT_SEP, kv_sep="=")


def plan(overrides: list[str]) -> Sweep:
    """Expand and validate every point of the sweep and choose its folder.

    Raises:
        ConfigError: an override is invalid for some point, or two points are the same run.
    """
    points, swept = expand(overrides)
    composed = [compose_config(point) for point in points]
    configs = [c.cfg for c in composed]
    idle = [key for key in swept if key in ("truncation", "refresh") or key.split(".")[0] == "seeds"]
    if idle and not any(uses_seeds(c) for c in configs):
        raise ConfigError(
            idle[0], "is read by Thinking Seeds runs only (ratio > 0) and every point of this sweep has ratio=0, so its points "
            "would all be the same plain DAPO run; add ratio=25 (or sweep ratio as well)"
        )
    idle_everywhere = set.intersection(*({e.key for e in idle_settings(c)} for c in configs))
    if idle_everywhere:  # a setting idle at some points only (ratio=0,25 refresh=5) changes the others
        raise next(e for e in idle_settings(configs[0]) if e.key in idle_everywhere)
    task = [o for o in overrides if not is_hydra(o)]
    fixed = fixed_keys(task, swept)
    folders = [point_folder(point, fixed, swept) for point in points]
    same_runs(composed, folders)
    cfg = configs[0]
    path = Path(cfg.runs_dir).absolute() / cfg.experiment / (cfg.name or sweep_name(points))
    nodes = [c.node for c in composed]
    return Sweep(path, points, swept, task, [o for o in overrides if is_hydra(o)], folders, nodes, cfg.name is not None)


def same_runs(composed: list[Composed], folders: list[str]) -> None:
    """Refuse two points whose configs are equal once the location keys are left out and each setting that cannot take
    effect at a point is taken at its default there: they would train the same run twice and be reported as two points.

    Raises:
        ConfigError: naming both points, and the idle setting that makes them one run where there is one.
    """
    defaults = flatten(OmegaConf.to_container(OmegaConf.structured(schema()), resolve=True))
    seen: dict[str, int] = {}
    idle: list[dict[str, ConfigError]] = []
    given: list[dict[str, str]] = []
    for index, c in enumerate(composed):
        idle.append({e.key: e for e in idle_settings(c.cfg)})
        given.append(flatten(OmegaConf.to_container(c.node, resolve=True)))
        values = {**given[index], **{key: defaults[key] for key in idle[index] if key in defaults}}
        key = json.dumps({k: v for k, v in values.items() if k not in PLACE_KEYS}, sort_keys=True)
        first = seen.setdefault(key, index)
        if first == index:
            continue
        both = f"points {folders[first]} and {folders[index]} of this sweep compose to the same run"
        why = {**idle[first], **idle[index]}
        if not why:
            raise ConfigError("overrides", f"{both} (one value written twice); list each value once")
        name, error = next(((k, e) for k, e in why.items() if given[first].get(k) != given[index].get(k)), next(iter(why.items())))
        value, reason = error.problem.split(" cannot take effect: ", 1)
        raise ConfigError(name, f"{both}: {name}={value.strip(chr(39))} cannot take effect there ({reason.split('; ')[0]}); "
                          f"sweep {name} only over points where it takes effect, and run the others as a sweep of their own")
