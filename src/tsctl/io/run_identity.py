"""What tsctl checks before it trusts a folder as a run, and where a run folder may be.

A run is three things that must agree: ``config.yaml`` (what it trains), ``manifest.json`` (its status and, from its
start, ``config_sha256``: the digest of the config it started with, :func:`config_digest`) and its records
(``metrics.jsonl``, checkpoints, seeds). Every command that reads a run folder (``tsctl train`` with or without
``resume=true``, ``eval``, ``report``, ``ablate``) refuses one where (:func:`problem`):

- ``manifest.json`` is not a JSON object, or ``config.yaml`` is not a YAML mapping (damaged);
- the manifest records a ``config_sha256`` that the values of ``config.yaml`` do not have (edited since the start;
  a manifest from before the digest was recorded says nothing here: unknown, accepted);
- ``config.yaml`` is gone while the manifest records the run's start (``created``) or ``metrics.jsonl`` is there
  (the config it trained with is lost);
- ``manifest.json`` is gone while ``config.yaml`` and ``metrics.jsonl`` are there.

A folder that ``tsctl train`` (or a point of ``tsctl ablate``) is to write (:func:`place_problem`) must resolve inside
the runs folder (itself possibly a link), and where it exists without ``config.yaml`` it may hold only what a start
leaves (:data:`START_ENTRIES`): another run's records without their config are refused as above, any other file as a
folder that is not a run. A run or sweep folder that ``tsctl eval`` or ``tsctl report`` is named to read
(:func:`write_place_problem`) may lie anywhere (a run copied from another machine, ``docs/results/``) unless it is named
inside the runs folder, where it must resolve inside it as a run ``train`` writes does; what they write into it
(``eval/``, ``plots/``, ``report/``) must resolve inside the folder named, not through a link out of it. Nothing is
written by these checks: each returns the one line of the refusal, or None.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable

import yaml

from tsctl.io.config_diff import PLACE_KEYS
from tsctl.io.run_lock import LOCK_FILE

CONFIG_DIGEST = "config_sha256"
"""The manifest's digest of the config a run started with (:func:`config_digest`)."""

START_ENTRIES = (LOCK_FILE, ".hydra", "manifest.json")
"""What a folder may hold before a run's ``config.yaml`` is written: the lock, a sweep point's overrides, the ``failed``
manifest of a point whose start failed."""

RECORDS = ("metrics.jsonl", "metrics.jsonl.gz", "checkpoints", "seeds", "rollouts", "eval", "plots", "final_eval.json", "wandb")
"""What a run writes besides its config and manifest (``metrics.jsonl.damaged-N`` too)."""

ANEW = "or move the folder aside and train the run anew"
"""How a refusal ends: the fix that is left where nothing can be put back."""


def config_digest(values: dict[str, Any]) -> str:
    """SHA-256 of a config's values (:func:`config_values`) as sorted JSON, the keys that place a run aside."""
    kept = {key: value for key, value in values.items() if key not in PLACE_KEYS}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()


def load_yaml(text: str) -> Any:
    """The YAML ``text`` that tsctl wrote (``OmegaConf.to_yaml``: a run's config, its Hydra overrides), read by libyaml
    where it is built in: the same values as ``OmegaConf.load``, about ten times faster (a report reads hundreds)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def config_values(text: str) -> dict[str, Any]:
    """The values of a config's YAML text (its layout and comments aside; read by libyaml where it is built in: a
    sweep's report reads every run's).

    Raises:
        ValueError, yaml.YAMLError: the text is not a YAML mapping.
    """
    values = load_yaml(text)
    if not isinstance(values, dict) or not values:
        raise ValueError("not a YAML mapping")
    return values


def problem(folder: Path) -> str | None:
    """Why the run folder ``folder`` cannot be trusted (see the module docstring), or None."""
    manifest, config = folder / "manifest.json", folder / "config.yaml"
    data: dict[str, Any] = {}
    if manifest.is_file():
        loaded, why = _read(manifest, _json_object)
        if loaded is None:
            return f"run folder {folder}: manifest.json is damaged ({why}); put it back as the run wrote it, {ANEW}"
        data = loaded
    metrics = (folder / "metrics.jsonl").is_file()
    if not config.is_file():
        started = "created" in data or CONFIG_DIGEST in data
        seen = [name for name, there in (("manifest.json", started), ("metrics.jsonl", metrics)) if there]
        return _config_lost(folder, seen, data if started else None) if seen else None
    values, why = _read(config, config_values)
    if values is None:
        return f"run folder {folder}: config.yaml is damaged ({why}); put it back as the run wrote it, {ANEW}"
    if not manifest.is_file():
        return (f"run folder {folder}: manifest.json is missing, though config.yaml and metrics.jsonl are there, so the run's status "
                f"is lost; put it back as the run wrote it, {ANEW}") if metrics else None
    recorded = data.get(CONFIG_DIGEST)
    if recorded is not None and recorded != config_digest(values):
        return (f"run folder {folder}: config.yaml is not the config the run started with (its values do not have manifest.json's "
                f"{CONFIG_DIGEST}: it was edited since); undo the edit (or write it back: `tsctl train <the run's overrides> --cfg job > "
                f"{config}`), or train the new config as a new run under another name=...")
    return None


def outside_runs(path: Path, runs_dir: Path) -> str | None:
    """Why ``path`` is no place for a run of the runs folder ``runs_dir``: it leads outside it (through a link), or None."""
    try:
        real, runs = path.resolve(), runs_dir.resolve()
    except (OSError, RuntimeError) as err:  # a loop of links
        return f"{path} cannot be resolved ({err}); remove the link, or choose another name=... (or experiment=...)"
    if not real.is_relative_to(runs):
        return (f"{path} leads to {real}, outside the runs folder {runs} (through a link), and runs are written only inside it; "
                "remove the link, or choose another name=... (or experiment=...)")
    return None


def write_place_problem(folder: Path, written: Path, runs_dir: Path) -> str | None:
    """Why a command that reads the run or sweep folder ``folder``, named by the user (``eval.checkpoint``, ``tsctl report``'s
    path), may not write ``written`` inside it (``eval/step-N``, ``plots``, ``report``), or None (module docstring); the
    runs folder ``runs_dir`` may be ``folder`` itself (what ``tsctl eval`` writes of a model that is not a run's)."""
    try:
        real, runs, target = folder.resolve(), runs_dir.resolve(), written.resolve()
    except (OSError, RuntimeError) as err:  # a loop of links
        return f"{written} cannot be resolved ({err}); remove the link"
    if Path(os.path.abspath(folder)).is_relative_to(os.path.abspath(runs_dir)) and not real.is_relative_to(runs):
        return (f"{folder} leads to {real}, outside the runs folder {runs} (through a link), and what is named inside the runs folder "
                f"is written only inside it; remove the link, or name {real} itself")
    if not target.is_relative_to(real):
        return f"{written} leads to {target}, outside {real} (through a link), and would be written there; remove the link"
    return None


def place_problem(path: Path, runs_dir: Path) -> str | None:
    """Why ``tsctl train`` may not write the run folder ``path`` of the runs folder ``runs_dir`` (module docstring), or None."""
    if (found := outside_runs(path, runs_dir)) is not None:
        return found
    if path.is_symlink() and not path.exists():
        return f"run folder {path} is a link to {path.resolve()}, which does not exist; remove the link, or choose another name=..."
    if not path.is_dir():
        return None
    found = problem(path)
    if found is not None or (path / "config.yaml").is_file():
        return found
    other = sorted(p.name for p in path.iterdir() if p.name not in START_ENTRIES and not _temp(p.name))
    records = [name for name in other if name in RECORDS or name.startswith("metrics.jsonl.damaged-")]
    if records:
        return _config_lost(path, records, None)
    if other:
        shown = ", ".join(other[:5]) + (f" and {len(other) - 5} more" if len(other) > 5 else "")
        return (f"{path} exists and is not a run folder (it holds {shown}, and no config.yaml), so a run is not written into it; "
                "choose another name=... (or experiment=...), or move those files away")
    return None


def _config_lost(folder: Path, seen: list[str], manifest: dict[str, Any] | None) -> str:
    """The refusal of a run folder whose ``config.yaml`` is gone while ``seen`` are there; ``manifest``: the one that records
    the run's start, where the folder has it (with it the config can be written back)."""
    head = (f"run folder {folder}: config.yaml is missing, though {', '.join(seen)} {'is' if len(seen) == 1 else 'are'} there, so the "
            "config it trained with is lost")
    if manifest is None:
        return f"{head}; move the folder aside and train the run anew, or choose another name=..."
    checked = f", checked against manifest.json's {CONFIG_DIGEST}" if CONFIG_DIGEST in manifest else ""
    return f"{head}; write it back (`tsctl train <the run's overrides> --cfg job > {folder / 'config.yaml'}`{checked}), {ANEW}"


def _json_object(text: str) -> dict[str, Any]:
    """A manifest's text as its JSON object.

    Raises:
        ValueError: the text is not a JSON object.
    """
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def _read(path: Path, parse: Callable[[str], dict[str, Any]]) -> tuple[dict[str, Any] | None, str]:
    """``parse`` of the file's text, or None with why it could not be read (the error's first line)."""
    try:
        return parse(path.read_text()), ""
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as err:
        return None, (str(err).strip().splitlines() or [type(err).__name__])[0]


def _temp(name: str) -> bool:
    """A temp file or staged folder a killed writer left (``.*.tmp``, removed by the next lock holder)."""
    return name.startswith(".") and name.endswith(".tmp")
