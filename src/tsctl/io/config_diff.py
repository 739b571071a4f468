"""What differs between a run's saved config and the one a command composes now.

A resume (:func:`tsctl.io.runs.locate_run`) and a sweep that finds its points already trained
(:mod:`tsctl.stages.ablate.existing`) go on only when the two are the same run: the same values, less
the keys that place a run (:data:`PLACE_KEYS`). A key a saved config lacks is no change where the
schema's default of it keeps what tsctl did without it, or where tsctl derives it from the others
(:data:`DERIVED_KEYS`); a key a saved config holds at its former place (:data:`~tsctl.config.moved.MOVED_KEYS`) is compared at its
place now.
"""

from __future__ import annotations

import json
from typing import Any

from omegaconf import DictConfig, OmegaConf

from tsctl.config.moved import MOVED_KEYS
from tsctl.config.store import registered_schema

PLACE_KEYS = ("runs_dir", "experiment", "name", "resume")
"""Keys that place a run rather than define it: a run folder moved elsewhere resumes there."""

DERIVED_KEYS = ("seeded_per_group",)
"""Keys tsctl derives from others and writes into a run's config (``seeded_per_group``): one a saved config lacks is no change."""

ABSENT = "(absent)"
"""How a key one config lacks shows in a change."""


def config_changes(before: DictConfig, after: DictConfig, shown: int = 6, ignored: tuple[str, ...] = ()) -> str:
    """The keys whose values differ between two configs (:func:`changed_keys`), as ``key old -> new``; empty if none."""
    keys = changed_keys(before, after, ignored)
    text = ", ".join(f"{k} {old} -> {new}" for k, old, new in keys[:shown])
    return text + (f" and {len(keys) - shown} more" if len(keys) > shown else "")


def changed_keys(before: DictConfig, after: DictConfig, ignored: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    """``(key, old, new)`` for each key whose value differs between two configs, values as JSON (:data:`PLACE_KEYS` and
    ``ignored`` left out; see the module docstring for a key ``before`` lacks)."""
    old, new = (flatten(OmegaConf.to_container(c, resolve=True)) for c in (before, after))
    old = {MOVED_KEYS.get(k, k): v for k, v in old.items()}
    defaults = flatten(OmegaConf.to_container(OmegaConf.structured(registered_schema()), resolve=True))
    return [
        (k, old.get(k, ABSENT), new.get(k, ABSENT)) for k in sorted(set(old) | set(new))
        if k not in PLACE_KEYS and k not in ignored and old.get(k, ABSENT) != new.get(k, ABSENT)
        and not (k not in old and (new.get(k) == defaults.get(k) or k in DERIVED_KEYS))
    ]


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    """Nested dicts as ``{"a.b": value as JSON}``."""
    if not isinstance(data, dict):
        return {prefix: json.dumps(data)}
    out: dict[str, str] = {}
    for key, value in data.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out
