"""Reading run folders and grouping them into sweep points.

A *sweep folder* holds one run folder per point and seed (``tsctl ablate`` writes
``<runs_dir>/<experiment>/<sweep>/<point>/``); any folder whose subfolders are run folders works.
Runs are grouped into points by the settings that differ between them, ``seed`` and ``model.warmup.seed``
excepted (a point averages over its training seeds and the warm-up models they start from, ``Run.warmup``): the
overrides Hydra saved in ``.hydra/overrides.yaml`` when every run has them, else the resolved
``config.yaml``.

What "final" means per run (:func:`final_values`):

- held-out greedy accuracy and pass@k: ``final_eval.json`` (written by ``tsctl ablate`` with the
  final checkpoint), else the last held-out evaluation in ``metrics.jsonl`` (pass@1 only);
- entropy by token source: the mean over the last 10% of training steps;
- clip fraction by token source: the mean over all training steps.
"""

from __future__ import annotations

import functools
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from tsctl.algo.position_metrics import SOURCE_NAMES
from tsctl.io.rounding import label as arithmetic_label
from tsctl.io.run_lock import is_held
from tsctl.io.run_identity import load_yaml
from tsctl.io.runs import RunDir, check_run

FINAL_EVAL = "final_eval.json"
"""File in a run folder with the final checkpoint's held-out greedy accuracy and pass@k."""

POINT_SEP = "-"
"""What joins a sweep point's ``key=value`` pairs in its folder's name (``ratio=25-seed=1``; no commas: wandb run ids
reject them)."""

WARMUP_SEED = "model.warmup.seed"
"""The seed of the built-in model's warm-up: a sweep over it draws warm-up models, a random unit like ``seed``."""

IGNORED_KEYS = ("seed", WARMUP_SEED, "name", "experiment", "runs_dir", "resume")
"""Settings that never tell points apart (``seed`` and the warm-up model it starts from are what a point averages over)."""

SOURCES = SOURCE_NAMES
"""Token sources: unseeded samples, behaviour-policy prefixes, the current policy's continuations."""

TAIL = 0.1
"""Share of training steps over which "final" entropy (the end) and the entropy plot's start and end are averaged."""


@dataclass
class Run:
    """One run folder, read once.

    Attributes:
        seed: the run's ``seed`` (what pairs runs of two points), None when its config has none.
        final: the contents of ``final_eval.json`` (empty without one).
        revision: the git revision of the code that ran it (its manifest's ``git_revision``), None when unknown.
        dirty: whether that code had uncommitted changes to tracked files (its manifest's ``git_dirty``), None
            when not recorded.
        base_weights: the digest of the built-in model's weights it started from (its manifest's
            ``base_model.weights_sha256``), None for another model or when unknown.
        arithmetic: what decided its rounding (its manifest's ``arithmetic``, :func:`tsctl.io.rounding.label`),
            None when not recorded.
        warmup: which warm-up model it started from, as a sweep over ``model.warmup.seed`` names them: that seed in its
            ``config.yaml``, None when the config has none (every such run counts as one model); the weights that
            warm-up gave are ``base_weights``.
    """

    path: Path
    status: str
    error: Optional[str]
    settings: dict[str, str]
    records: list[dict[str, Any]]
    final: dict[str, Any]
    seed: Optional[str] = None
    revision: Optional[str] = None
    base_weights: Optional[str] = None
    arithmetic: Optional[str] = None
    dirty: Optional[bool] = None
    warmup: Optional[str] = None

    @functools.cached_property
    def train_records(self) -> list[dict[str, Any]]:
        """Records of training steps (step 0 holds the evaluation before training), picked out once."""
        return [r for r in self.records if r.get("step", 0) >= 1 and "entropy" in r]


@dataclass
class Point:
    """The runs of one sweep point (one per seed) and those its statistics use."""

    label: str
    settings: dict[str, str]
    runs: list[Run]
    used: list[Run] = field(default_factory=list)

    @property
    def failures(self) -> list[Run]:
        """Runs that are not completed (failed, or still running / interrupted)."""
        return [r for r in self.runs if r.status != "completed"]


def is_run_folder(path: Path) -> bool:
    """A run folder has a manifest or a metrics file."""
    return (path / "manifest.json").is_file() or (path / "metrics.jsonl").is_file()


def _flatten(data: Any, prefix: str = "") -> dict[str, str]:
    """Nested dicts as ``{"a.b": "value"}`` with values as text."""
    if not isinstance(data, dict):
        return {prefix: json.dumps(data) if isinstance(data, (list, dict)) else str(data)}
    out: dict[str, str] = {}
    for key, value in data.items():
        out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _overrides(path: Path) -> Optional[dict[str, str]]:
    """The Hydra overrides saved in ``.hydra/overrides.yaml`` as ``{key: value}``, or None."""
    saved = path / ".hydra" / "overrides.yaml"
    if not saved.is_file():
        return None
    pairs = (str(line).split("=", 1) for line in load_yaml(saved.read_text()))
    return {key.lstrip("+~"): value for key, value in pairs}


def load_run(path: Path) -> Run:
    """Read a run folder's status, settings, metrics and final evaluation.

    Raises:
        RunError: its config, manifest and records disagree or are missing or damaged (:func:`tsctl.io.runs.check_run`).
    """
    check_run(path)
    run = RunDir(path)
    manifest = run.manifest()
    config = path / "config.yaml"
    settings = _flatten(load_yaml(config.read_text())) if config.is_file() else {}
    final = json.loads((path / FINAL_EVAL).read_text()) if (path / FINAL_EVAL).is_file() else {}
    return Run(path, run_status(path, manifest), manifest.get("error"), settings, run.read_metrics(), final, settings.get("seed"),
               manifest.get("git_revision"), base_weights(manifest), arithmetic_label(manifest["arithmetic"]) if manifest.get("arithmetic") else None,
               manifest.get("git_dirty"), settings.get(WARMUP_SEED))


def is_done(run: RunDir) -> bool:
    """Training completed and the final evaluation written."""
    return run.manifest().get("status") == "completed" and (run.path / FINAL_EVAL).is_file()


def base_weights(manifest: dict[str, Any]) -> Optional[str]:
    """The digest of the built-in weights a run started from (``base_model.weights_sha256``), None when not recorded."""
    return (manifest.get("base_model") or {}).get("weights_sha256")


def run_status(path: Path, manifest: dict[str, Any]) -> str:
    """The manifest's status, except that a ``running`` run whose process is gone (nobody holds its lock) is ``interrupted``."""
    status = manifest.get("status", "unknown")
    return "interrupted" if status == "running" and is_held(path) is False else status


def find_runs(path: Path) -> list[Run]:
    """The run at ``path``, or the runs in its subfolders (a sweep folder).

    Raises:
        FileNotFoundError: ``path`` is neither a run folder nor a folder of run folders.
    """
    if is_run_folder(path):
        return [load_run(path)]
    children = sorted(p for p in path.iterdir() if p.is_dir() and is_run_folder(p)) if path.is_dir() else []
    if not children:
        raise FileNotFoundError(f"{path} is neither a run folder nor a sweep folder of runs (no manifest.json or metrics.jsonl found)")
    runs = [load_run(p) for p in children]
    overrides = [_overrides(p) for p in children]
    if all(o is not None for o in overrides):
        for run, saved in zip(runs, overrides):
            run.settings = saved
    return runs


def sort_key(value: str) -> tuple[float, str]:
    """Numbers in numeric order, before text."""
    try:
        return float(value), ""
    except ValueError:
        return math.inf, value


def group_points(runs: list[Run], single: bool = False) -> list[Point]:
    """Group ``runs`` by the settings that differ between them (``IGNORED_KEYS`` aside).

    A point's statistics use its completed runs, or every run when ``single`` (a one-run report).
    """
    keys: list[str] = []
    for run in runs:
        keys += [k for k in run.settings if k not in keys and k not in IGNORED_KEYS]
    varying = [k for k in keys if len({run.settings.get(k) for run in runs}) > 1]
    groups: dict[tuple, list[Run]] = {}
    for run in runs:
        groups.setdefault(tuple(run.settings.get(k, "") for k in varying), []).append(run)
    points = []
    for values in sorted(groups, key=lambda vs: [sort_key(v) for v in vs]):
        settings = dict(zip(varying, values))
        label = " ".join(f"{k}={v}" for k, v in settings.items()) or (runs[0].path.name if single else "all runs")
        members = groups[values]
        used = members if single else [r for r in members if r.status == "completed"]
        points.append(Point(label, settings, members, used))
    return points


def _listed(counts: Counter[str]) -> str:
    """``"a (2 runs), b (1 run)"``."""
    return ", ".join(f"{k} ({n} run{'s' if n > 1 else ''})" for k, n in sorted(counts.items()))


def _mixed(counts: Counter[str], what: str, advice: str) -> list[str]:
    """``"<what with n>: a (2 runs), b (1 run) <advice>"`` when ``counts`` has more than one kind; none otherwise."""
    if len(counts) <= 1:
        return []
    return [f"{what.format(n=len(counts))}: {_listed(counts)} {advice}"]


def revision_warnings(points: list[Point]) -> list[str]:
    """A line when the points' completed runs ran more than one revision of the code (a difference
    between points may then come from the code, not the setting); none otherwise."""
    counts = Counter(run.revision[:7] if run.revision else "unknown" for p in points for run in p.used)
    return _mixed(counts, "the runs ran {n} revisions of the code", "(manifest.json, git_revision); a difference between points "
                  "may come from the code rather than the setting: rerun the odd ones at one revision")


def base_model_warnings(points: list[Point]) -> list[str]:
    """A line when the points' completed runs of one warm-up model (:attr:`Run.warmup`: one warm-up seed) started from
    built-in models with different weights (warmed up on different machines, whose arithmetic differed); runs whose
    manifest has no digest are left aside. A sweep over ``model.warmup.seed`` gets none for its warm-up models' own
    weights: its comparisons pair runs by warm-up model and seed."""
    counts = Counter(run.base_weights for p in points for run in p.used if run.base_weights)
    by_warmup: dict[Optional[str], set[str]] = {}
    for run in (run for p in points for run in p.used if run.base_weights):
        by_warmup.setdefault(run.warmup, set()).add(run.base_weights)
    if all(len(weights) == 1 for weights in by_warmup.values()):
        return []
    return _mixed(counts, "the runs started from {n} different built-in models", "(manifest.json, base_model.weights_sha256); "
                  "a difference between points may come from the starting weights: train every point from one warmed-up "
                  "model per warm-up seed (copy its _models folder, or model.cache_dir, to the other machines)")


def arithmetic_warnings(points: list[Point]) -> list[str]:
    """A line when the points' completed runs ran with different arithmetic (device, CPU instruction set or torch
    threads: the same config then gives other runs); runs whose manifest does not record it are left aside."""
    counts = Counter(run.arithmetic for p in points for run in p.used if run.arithmetic)
    return _mixed(counts, "the runs ran with {n} different arithmetics", "(manifest.json, arithmetic); the same config rounds "
                  "differently under each and its runs drift apart, so a difference between points may come from it: rerun "
                  "the odd ones on one kind of machine with one thread count (OMP_NUM_THREADS, TSCTL_THREADS_PER_JOB)")


def tail(records: list[dict[str, Any]], share: float = TAIL, last: bool = True) -> list[dict[str, Any]]:
    """The last (or first) ``share`` of ``records``, at least one."""
    count = max(1, round(len(records) * share))
    return records[-count:] if last else records[:count]


def mean_of(records: Iterable[dict[str, Any]], key: str) -> Optional[float]:
    """Mean of ``key`` over the records that have it, or None."""
    values = [r[key] for r in records if key in r]
    return sum(values) / len(values) if values else None


def final_values(run: Run) -> dict[str, float]:
    """The summary metrics of one run, absent ones left out (see the module docstring for their windows).

    Keys: ``greedy_accuracy`` and ``pass@<k>`` (fractions), ``entropy/<source>`` (nats/token),
    ``clipped_pct/<source>`` (% of the source's tokens).
    """
    out: dict[str, float] = {}
    evals = [r for r in run.records if "eval/greedy_accuracy" in r]
    if run.final:
        out["greedy_accuracy"] = run.final["greedy_accuracy"]
        out.update({k: v for k, v in run.final.items() if k.startswith("pass@")})
    elif evals:
        out["greedy_accuracy"] = evals[-1]["eval/greedy_accuracy"]
        out["pass@1"] = evals[-1]["eval/pass@1"]
    for source in SOURCES:
        entropy = mean_of(tail(run.train_records), f"entropy_by_source/{source}")
        clipped = mean_of(run.train_records, f"clipped_by_source/{source}")
        if entropy is not None:
            out[f"entropy/{source}"] = entropy
        if clipped is not None:
            out[f"clipped_pct/{source}"] = 100 * clipped
    return out


TRAINING = ("zero_variance_groups", "tokens_per_useful_sample")
"""What :func:`training_values` gives: metrics of the whole training, not of its end."""


def training_values(run: Run) -> dict[str, float]:
    """Over all of the run's training steps (absent when no step logged them): ``zero_variance_groups``, the mean
    share of groups whose rewards were all equal (they teach nothing), and ``tokens_per_useful_sample``, the tokens
    the rollout policy generated (plain and suffix; prefixes are the behaviour policy's) per sample of a group with
    a non-zero advantage."""
    records = [r for r in run.train_records if "zero_variance_groups" in r]
    if not records:
        return {}
    out = {"zero_variance_groups": float(sum(r["zero_variance_groups"] for r in records) / len(records))}
    generated = [r["samples"] * r["response_length/mean"] * (r.get("tokens_by_source/plain", 0.0) + r.get("tokens_by_source/suffix", 0.0))
                 for r in records if "samples" in r and "response_length/mean" in r]
    useful = sum(r["samples"] * (1 - r["zero_variance_groups"]) for r in records if "samples" in r)
    if generated and useful:
        out["tokens_per_useful_sample"] = float(sum(generated) / useful)
    return out


def metric_order(key: str) -> tuple[int, int]:
    """Columns: greedy accuracy, pass@k by k, entropy by source, clip by source."""
    if key == "greedy_accuracy":
        return 0, 0
    if key.startswith("pass@"):
        return 1, int(key[5:])
    if key in TRAINING:
        return 4, TRAINING.index(key)
    family, _, source = key.partition("/")
    return (2 if family == "entropy" else 3), SOURCES.index(source)


def header(key: str) -> str:
    """Column title of a summary metric, with its unit."""
    if key == "zero_variance_groups":
        return "groups without reward variance (share, over training)"
    if key == "tokens_per_useful_sample":
        return "generated tokens per sample of a group with advantage (over training)"
    family, _, source = key.partition("/")
    if family == "entropy":
        return f"entropy {source} (nats/token)"
    if family == "clipped_pct":
        return f"clipped {source} (% tokens)"
    return "held-out greedy acc." if key == "greedy_accuracy" else f"held-out {key}"


def higher_is_better(key: str) -> Optional[bool]:
    """True for solve rates; None for entropy and clip shares, which have no preferred direction."""
    return True if key == "greedy_accuracy" or key.startswith("pass@") else None
