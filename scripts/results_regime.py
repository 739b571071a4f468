"""The hard regime of ``scripts/results.py``: score the warm-up model of each candidate declared in
``scripts/results_spec.py`` (:data:`results_spec.HARD_CANDIDATES`) and pick one by the declared rule
(:data:`results_spec.HARD_RULE`), from the committed records alone.

A candidate's records are the warm-up records of :mod:`results_scoring` (``docs/results/warmup/<task>-<digest>/seed=<s>/``,
one per sampling seed); a record belongs to a candidate when its ``config.yaml`` holds the candidate's overrides and one
of the declared warm-up seeds, so the page needs no list of digests: it finds them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from tsctl.io.run_identity import load_yaml
from tsctl.io.run_records import is_record
from tsctl.models.builtin import builtin_dir, weights_digest
from tsctl.runconfig import compose_config

from results_scoring import score_warmup
from results_spec import HARD_CANDIDATES, HARD_MIN_PASS_AT_1, HARD_PASS_AT_8, HARD_RULE, HARD_SCORING, Regime

EXPECTED = len(HARD_SCORING["warmup_seeds"]) * len(HARD_SCORING["sampling_seeds"])
"""Records of a fully scored candidate: one per warm-up model and sampling seed."""
SCORES = ("pass@1", "pass@8", "greedy_accuracy")
"""The warm-up scores a candidate's row shows, each the mean over its records."""


@dataclass(frozen=True)
class Scored:
    """A candidate with the scores of its warm-up records.

    Attributes:
        regime: the candidate.
        records: how many warm-up records (warm-up model x sampling seed) it has.
        warmups: the warm-up seeds those records come from.
        means: each of :data:`SCORES` -> its mean over the records (absent without records).
    """

    regime: Regime
    records: int
    warmups: list[int]
    means: dict[str, float]

    def qualifies(self) -> bool:
        """Whether the declared rule admits it: pass@8 at most :data:`HARD_PASS_AT_8`, pass@1 above :data:`HARD_MIN_PASS_AT_1`."""
        return bool(self.means) and self.means["pass@8"] <= HARD_PASS_AT_8 and self.means["pass@1"] > HARD_MIN_PASS_AT_1


def warmup_seed_overrides(regime: Regime, warmup_seed: int, runs_dir: str) -> list[str]:
    """The overrides that warm up (and score) ``regime``'s built-in model of warm-up seed ``warmup_seed``."""
    return [*regime.overrides, f"model.warmup.seed={warmup_seed}", f"runs_dir={runs_dir}"]


def score_candidates(figures: Path, runs_dir: str) -> list[Path]:
    """Warm up (``tsctl warmup``, cached) and score every declared candidate's warm-up models where no record is kept yet.
    Returns the records written."""
    written = []
    for regime in HARD_CANDIDATES:
        for warmup_seed in HARD_SCORING["warmup_seeds"]:
            overrides = warmup_seed_overrides(regime, warmup_seed, runs_dir)
            subprocess.run([sys.executable, "-m", "tsctl", "warmup", *overrides], check=True)
            model = builtin_dir(compose_config(overrides).cfg)
            written += score_warmup(figures, overrides, model, weights_digest(model), len(HARD_SCORING["sampling_seeds"]))
    return written


def _holds(config: dict[str, Any], override: str) -> bool:
    """Whether the config ``config`` (a record's ``config.yaml``) has ``override``'s value at its key (``a.b=c``), or, for a
    group (``task=countdown``), names it."""
    key, value = override.split("=", 1)
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return str(node["name"] if isinstance(node, dict) else node) == value  # a group (``task=countdown``) by its name


def scored(regime: Regime, figures: Path) -> Scored:
    """``regime``'s warm-up records under ``figures / "warmup"``, and their mean scores."""
    rows, warmups = [], set()
    for record in sorted((figures / "warmup").glob("*/seed=*")):
        if not is_record(record):
            continue
        config = load_yaml((record / "config.yaml").read_text())
        warmup_seed = config.get("model", {}).get("warmup", {}).get("seed")
        if warmup_seed not in HARD_SCORING["warmup_seeds"] or not all(_holds(config, o) for o in regime.overrides):
            continue
        rows.append(json.loads((record / "final_eval.json").read_text()))
        warmups.add(warmup_seed)
    means = {score: float(np.mean([row[score] for row in rows])) for score in SCORES} if rows else {}
    return Scored(regime, len(rows), sorted(warmups), means)


def chosen(candidates: list[Scored]) -> Optional[Scored]:
    """The candidate :data:`HARD_RULE` picks: the highest pass@8 among those that qualify; None when none does, or while a
    candidate has fewer than :data:`EXPECTED` records."""
    if any(c.records < EXPECTED for c in candidates):
        return None
    admitted = [c for c in candidates if c.qualifies()]
    return max(admitted, key=lambda c: c.means["pass@8"]) if admitted else None


def regime_lines(figures: Path) -> list[str]:
    """The page's section on the hard regime: each candidate's warm-up scores and the one the declared rule picks."""
    candidates = [scored(regime, figures) for regime in HARD_CANDIDATES]
    pick = chosen(candidates)
    lines = ["## A hard regime: candidates scored by their warm-up models", "",
             "Countdown settings under which the warm-up model rarely solves a held-out problem, so that a method for exploration "
             f"has room. Declared in `scripts/results_spec.py` before any was scored, with the rule: {HARD_RULE}. Each row is "
             "the warm-up model's final evaluation (held-out, as a run's final evaluation scores it), the mean over its records "
             "in `docs/results/warmup/`.", "",
             "| candidate | overrides | records | " + " | ".join(SCORES) + " | rule |", "|" + "---|" * (4 + len(SCORES))]
    for c in candidates:
        scores = [f"{c.means[s]:.3f}" for s in SCORES] if c.means else ["not scored"] * len(SCORES)
        verdict = "chosen" if c is pick else "incomplete" if c.records < EXPECTED else ("admitted" if c.qualifies() else ("not scored" if not c.means else "too easy" if c.means["pass@8"] > HARD_PASS_AT_8 else "no pass@1"))
        lines.append(f"| {c.regime.label} | `{' '.join(c.regime.overrides[1:])}` | {c.records} | " + " | ".join(scores) + f" | {verdict} |")
    said = (f"The rule picks **{pick.regime.label}**." if pick is not None else
            f"No choice until every candidate has its {EXPECTED} records." if any(c.records < EXPECTED for c in candidates) else
            "No candidate qualifies: more candidates are declared next, the bar stays.")
    return lines + ["", said, ""]
