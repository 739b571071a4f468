"""What a sweep folder already holds, against what this command would run there.

A point's folder must be one that ``tsctl train`` would train that point in (:func:`tsctl.io.run_identity.place_problem`:
inside the runs folder; a run whose config, manifest and records agree, or a folder holding only what a start leaves),
else the sweep is refused before any point starts, in that point's one line.

A point whose folder has a ``config.yaml`` ran (or runs) that config. It is skipped when completed, or
resumed, only when that config equals the one this command composes for it, less the keys that place a
run, the paths that do not change what it computes (:data:`IGNORED`) and the settings of engines it does not run. Otherwise the sweep is refused
before any point starts, in one line naming the changed keys of each such point and the fixes: rerun with
the values they ran with, or train the new settings into a new sweep folder (another ``name=``; without
``name=``, setting the changed keys on the command line names a new ``sweep-<hash>`` folder). Nothing of
a point's folder is written by the refusal.
"""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf

from tsctl.engines.factory import unread_keys
from tsctl.io.config_diff import ABSENT, changed_keys
from tsctl.io.run_identity import place_problem
from tsctl.io.runs import RunError
from tsctl.stages.ablate.plan import Sweep

IGNORED = ("model.cache_dir",)
"""Paths a point's config holds that do not change what it computes (the location keys are left out anyway)."""

MULTIRUN_FILE = "multirun.yaml"
"""Hydra's record of a sweep, in its folder: what tells a sweep folder from other folders of an experiment."""


def refuse_changed(sweep: Sweep) -> None:
    """Refuse the sweep when a point its folder holds ran another config than this command composes for it.

    Raises:
        RunError: a point's folder may not hold its run (module docstring), or naming each point that ran another config
            with its changed keys (``key old -> new``) and the fixes.
    """
    changed: dict[str, list[str]] = {}
    explicit: dict[str, str] = {}
    first: Path | None = None
    for folder, node in zip(sweep.folders, sweep.nodes):
        if (found := place_problem(sweep.path / folder, Path(node.runs_dir))) is not None:
            raise RunError(f"sweep {sweep.path}: {found}")
        saved = sweep.path / folder / "config.yaml"
        if not saved.is_file():
            continue
        keys = changed_keys(OmegaConf.load(saved), node, IGNORED + tuple(unread_keys(node.engine.name)))
        if keys:
            changed.setdefault(", ".join(f"{k} {old} -> {new}" for k, old, new in keys), []).append(folder)
            explicit.update({k: _override_value(new) for k, _, new in keys})
            first = first or saved
    if not changed:
        return
    points = "; ".join(f"{', '.join(folders)}: {text}" for text, folders in changed.items())
    anew = ("choose another name=... to train them into a new sweep folder" if sweep.named else
            f"set the changed keys on the command line ({' '.join(f'{k}={v}' for k, v in explicit.items())}), which names a new sweep folder")
    raise RunError(f"sweep {sweep.path} holds point(s) that ran another config than this command would run ({points}); "
                   f"rerun with the values they ran with (see {first}), or {anew}")


def _override_value(value: str) -> str:
    """A config value (JSON, as :func:`tsctl.io.config_diff.changed_keys` gives it) as Hydra reads it on the command line."""
    loaded = json.loads(value) if value != ABSENT else None
    if loaded is None:
        return "null"
    if isinstance(loaded, bool):
        return str(loaded).lower()
    if isinstance(loaded, str):
        return loaded
    return json.dumps(loaded).replace(" ", "")


def announce(sweep: Sweep, fresh: bool) -> str:
    """The one line that says where the sweep goes: a named folder, the folder of these points again, or (``fresh``) a
    new ``sweep-<hash>`` folder, with how to add the points to an existing sweep instead (``name=<its folder>``)."""
    head = f"sweep: {len(sweep.points)} point(s) into"
    if sweep.named:
        return f"{head} {sweep.path}"
    if not fresh:
        return f"{head} {sweep.path} (the folder of these points: completed points are skipped)"
    others = sorted(sweep.path.parent.glob(f"*/{MULTIRUN_FILE}"), key=lambda p: p.stat().st_mtime, reverse=True)
    example = f", e.g. name={others[0].parent.name}" if others else ""
    return (f"{head} a new folder {sweep.path} (named by a hash of the points); to add them to an existing sweep "
            f"instead, rerun with name=<that sweep's folder>{example}")
